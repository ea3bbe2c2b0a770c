"""metal-linux without building anything: where the backend is offered, what its build is configured with,
what invalidates its evidence, and the clear error when the Objective-C toolchain is not built. Its run on
the real pin is tests/test_integration_metal_linux.py."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest
from helpers import reuse_objc_toolchain

from builder.compile import backends as backendmod
from builder.compile import cmakebuild
from builder.compile import objc_toolchain as ot
from builder.compile.cmakebuild import BuildSpec
from builder.compile.toolchain import find_tool
from builder.errors import InputError
from builder.prove.backends_here import available_backends
from builder.series.model import BACKENDS

ROOT = Path(__file__).resolve().parents[1]


def _fake_built(cache: Path) -> Path:
    """A cache in which the toolchain counts as built (its manifest is what find_built looks for)."""
    d = ot.toolchain_dir(cache, ot.load_recipe())
    d.mkdir(parents=True)
    (d / ot.MANIFEST).write_text("{}")
    return d


def _args(tmp_path: Path) -> list[str]:
    spec = BuildSpec(tmp_path / "tree", tmp_path / "build", "metal-linux", "minimal", ("test-backend-ops",))
    return cmakebuild.cmake_args(spec, find_tool("ninja"), None, llama=(), llama_common="all")


@pytest.mark.skipif(sys.platform != "linux" or shutil.which("clang") is None, reason="metal-linux: Linux and clang")
def test_metal_linux_is_offered_only_where_the_toolchain_is_built(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATCHSET_CACHE", str(tmp_path / "cache"))
    assert "metal-linux" not in available_backends()
    _fake_built(tmp_path / "cache")
    assert "metal-linux" in available_backends()
    assert "metal-linux" in BACKENDS  # a patch may declare it


@pytest.mark.skipif(shutil.which("clang") is None, reason="metal-linux compiles with clang")
def test_the_build_names_the_toolchain_and_clang_or_says_how_to_build_it(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATCHSET_CACHE", str(tmp_path / "cache"))
    with pytest.raises(InputError, match=r"patchset toolchain objc --mirror DIR"):
        _args(tmp_path)
    prefix = _fake_built(tmp_path / "cache")
    args = _args(tmp_path)
    assert "-DPATCHSET_METAL_LINUX=ON" in args
    assert f"-DPATCHSET_OBJC_TOOLCHAIN={prefix}" in args
    assert f"-DCMAKE_OBJC_COMPILER={shutil.which('clang')}" in args


def test_the_evidence_depends_on_the_standin_and_the_shared_models() -> None:
    prof = backendmod.profile("metal-linux")
    names = {p.relative_to(ROOT).as_posix() for p in prof.harness}
    assert {"builder/metal_linux/metal.m", "builder/metal_linux/dispatch.m", "builder/metal_linux/glue.cpp",
            "builder/replay/cpp/replay-kernels.cpp", "builder/replay/cpp/replay-abi.cpp"} <= names
    assert prof.device == "MTL0"  # the tree's own device name: its own registration runs
    assert "not on Apple hardware" in prof.note
    assert prof.programs == ("test-backend-ops",)


def test_the_suite_takes_the_toolchain_ci_built_and_never_builds_it(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    # tests/conftest.py objc_toolchain with PATCHSET_TEST_OBJC_CACHE (.ci/run's cache): the session's cache names
    # the toolchain built there, so the build and verify of metal-linux on that cache find it
    ci_cache, session = tmp_path / "ci-cache", tmp_path / "session"
    assert reuse_objc_toolchain(session, ci_cache) is None
    assert not session.exists()  # nothing built, nothing made
    built = _fake_built(ci_cache)
    found = reuse_objc_toolchain(session, ci_cache)
    assert found == ot.toolchain_dir(session, ot.load_recipe()) and found.resolve() == built.resolve()
    assert ot.find_built(session) == found
    monkeypatch.setenv("PATCHSET_CACHE", str(session))
    assert ot.require_built() == found
    assert reuse_objc_toolchain(session, ci_cache) == found  # a second session on a kept cache
    assert reuse_objc_toolchain(ci_cache, ci_cache) == built  # one cache for both (linux-cpu.yml)

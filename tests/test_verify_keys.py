"""What a verdict depends on is in its key: a `needs X` verdict is not reused once X is here, and the
time limit, the environment a test reads and the Objective-C side of metal-linux each make another key."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from test_verify import CALC_C, CALC_H, GGML_CMAKE, commit_files, init_upstream, program_source, trailers, write_project

from builder.compile import objc_toolchain
from builder.orchestrate import phases
from builder.project import Project, default_cache_dir, load_project
from builder.prove import evidence, proofkeys
from builder.prove.verify import verify
from builder.series.apply import apply
from builder.series.model import Patch, PatchMeta, TestSpec
from builder.words import PROVEN


def _project(base: Path, backends: str) -> Project:
    src = init_upstream(base, {"ggml/CMakeLists.txt": GGML_CMAKE, "ggml/include/calc.h": CALC_H,
                               "ggml/src/calc.c": CALC_C})
    commit_files(src, {"ggml/src/calc.c": CALC_C.replace("return a - b;", "return a + b;"),
                       "tests/test-add.cpp": program_source("add", "calc_add(2, 3)", 5)},
                 "calc : add adds" + trailers(backends, "test-add"))
    project = load_project(root=write_project(base, src), cache_dir=base / "cache")
    apply(project)
    return project


def _fake_tools(folder: Path, *names: str) -> str:
    """A PATH with `names` as programs that do nothing (what available_backends looks for)."""
    folder.mkdir()
    for name in names:
        (folder / name).write_text("#!/bin/sh\nexit 0\n")
        (folder / name).chmod(0o755)
    return f"{folder}{os.pathsep}{os.environ['PATH']}"


def test_a_needs_verdict_is_not_reused_once_the_backend_is_here(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 43: `needs cuda`, then the backend appears (nvcc and nvidia-smi on PATH: the condition
    available_backends reads; the mini-upstream's ggml ignores GGML_CUDA, so its build is real), and
    the same command proves the patch instead of repeating `needs cuda` from the evidence."""
    project = _project(tmp_path, "cuda")
    first = verify(project, backends=["cuda"]).verdicts[0]
    assert first.outcome == "needs cuda", first.reason
    monkeypatch.setenv("PATH", _fake_tools(tmp_path / "bin", "nvcc", "nvidia-smi"))
    second = verify(project, backends=["cuda"]).verdicts[0]
    assert second.outcome == PROVEN and not second.reused, second.reason
    assert json.loads(second.evidence_json.read_text())["conditions"]["missing"] == []
    assert verify(project, backends=["cuda"]).verdicts[0].reused  # and the proof itself is reused


def test_the_objc_toolchain_appearing_changes_a_metal_linux_verdict(tmp_path: Path) -> None:
    """Issue 43's own case: `needs metal-linux` before `patchset toolchain objc`; once the toolchain's
    manifest is there (what find_built reads), the verdict is made again, not read from the evidence."""
    project = _project(tmp_path, "metal-linux")
    first = verify(project, backends=["metal-linux"]).verdicts[0]
    assert first.outcome == "needs metal-linux", first.reason
    data = json.loads(first.evidence_json.read_text())
    built = objc_toolchain.toolchain_dir(default_cache_dir(), objc_toolchain.load_recipe())
    built.mkdir(parents=True)
    (built / objc_toolchain.MANIFEST).write_text("{}\n")
    second = verify(project, backends=["metal-linux"]).verdicts[0]
    assert not second.reused, second.reason
    # (a folder with only a manifest is no toolchain: the build says so; a real one proves, as
    # tests/test_integration_metal_linux.py shows)
    assert second.outcome != "needs metal-linux", second.reason
    assert data["conditions"]["missing"] == ["metal-linux"]
    assert data["conditions"]["objc"]["toolchain"] == "none"


def test_the_time_limit_and_the_environment_are_in_the_key(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 47 point 8: a verdict made under one `--timeout`, or without a variable a test reads, is
    not reused under another or once the variable is set (or changes)."""
    project = _project(tmp_path, "cpu")
    monkeypatch.delenv("LLAMA_CPP_TEST_OPT_MODEL", raising=False)
    assert not verify(project, backends=["cpu"], timeout=60).verdicts[0].reused
    assert verify(project, backends=["cpu"], timeout=60).verdicts[0].reused
    assert not verify(project, backends=["cpu"], timeout=61).verdicts[0].reused
    monkeypatch.setenv("LLAMA_CPP_TEST_OPT_MODEL", "/models/a.gguf")
    again = verify(project, backends=["cpu"], timeout=61).verdicts[0]
    assert not again.reused
    recorded = evidence.load(project.evidence_dir, again.patch, "cpu")
    assert recorded is not None and "/models" not in json.dumps(recorded.conditions)  # the value's hash only
    assert set(recorded.conditions["env"]) == {"LLAMA_CPP_TEST_OPT_MODEL"}
    monkeypatch.setenv("LLAMA_CPP_TEST_OPT_MODEL", "/models/b.gguf")
    assert not verify(project, backends=["cpu"], timeout=61).verdicts[0].reused



def test_the_number_of_confirming_runs_is_in_the_key(tmp_path: Path) -> None:
    """A verdict of one run (`--confirm 1`) is not reused where three runs must confirm it (issue 47 point 2)."""
    project = _project(tmp_path, "cpu")
    assert not verify(project, backends=["cpu"], confirm=1).verdicts[0].reused
    assert verify(project, backends=["cpu"], confirm=1).verdicts[0].reused
    third = verify(project, backends=["cpu"], confirm=3).verdicts[0]
    assert not third.reused and third.outcome == PROVEN, third.reason
    recorded = evidence.load(project.evidence_dir, third.patch, "cpu")
    assert recorded is not None and recorded.conditions["confirm"] == 3

def _conditions(backend: str, test: TestSpec) -> dict:
    meta = PatchMeta(backends=(backend,), tests=(test,))
    patch = Patch(1, "0001-x.patch", Path("0001-x.patch"), "x", "", "", "", (), meta)
    keys = proofkeys.ProofKeys(None, None, {}, here=lambda: [backend], timeout=60)  # type: ignore[arg-type]
    return keys.conditions(patch, backend, [test])


def test_the_python_of_python_tests_is_in_the_key(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 47 point 8: a Python test's verdict depends on the interpreter and its packages."""
    test = TestSpec("python", ("tests/test_x.py",))
    real = _conditions("cpu", test)["python"]
    assert real["version"] != "unknown" and real["packages"]
    other = tmp_path / "python"
    other.write_text("#!/bin/sh\necho 3.99.0; echo 'numpy==9.9'\n")
    other.chmod(0o755)
    monkeypatch.setenv("PATCHSET_PYTHON", str(other))
    assert _conditions("cpu", test)["python"] == {"interpreter": str(other), "version": "3.99.0",
                                                  "packages": proofkeys.python_info()["packages"]}
    assert _conditions("cpu", test)["python"]["packages"] != real["packages"]
    assert "python" not in _conditions("cpu", TestSpec("test-add"))


def test_the_objc_compiler_of_metal_linux_is_in_the_key(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 47 point 8: a metal-linux verdict depends on the clang that compiled the tree's Objective-C."""
    monkeypatch.setenv("PATH", _fake_tools(tmp_path / "bin"))
    (tmp_path / "bin" / "clang").write_text("#!/bin/sh\necho 'clang version 99.0.0'\n")
    (tmp_path / "bin" / "clang").chmod(0o755)
    assert _conditions("metal-linux", TestSpec("test-backend-ops"))["objc"]["clang"] == "clang version 99.0.0"
    assert "objc" not in _conditions("cpu", TestSpec("test-backend-ops"))


def test_the_reused_tests_of_all_are_keyed_on_the_environment_too(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """`patchset all` reuses the passed tests of an unchanged build: not once a GGML_/LLAMA_ variable the
    programs read is set or changes."""
    monkeypatch.delenv("GGML_SCHED_MAX_COPIES", raising=False)
    record = tmp_path / "all-cpu.json"
    key = phases.tests_key("cpu", tmp_path / "bin", "c", "t", [], 60, None)
    phases.record_tests(record, key, {"programs": ["test-opt"], "failed": 0})
    assert phases.reusable_tests(record, phases.tests_key("cpu", tmp_path / "bin", "c", "t", [], 60, None)) is not None
    monkeypatch.setenv("GGML_SCHED_MAX_COPIES", "1")
    assert phases.reusable_tests(record, phases.tests_key("cpu", tmp_path / "bin", "c", "t", [], 60, None)) is None


def test_verify_removes_an_evidence_file_a_kill_left_half_written(tmp_path: Path) -> None:
    """A lane killed while another lane was writing its evidence leaves `.cpu.json.XXXX.tmp` (a CI rehearsal of
    the two-lane kill scenario found one after the rerun); the next verify removes it under its lock, and
    nothing else of the folder."""
    project = _project(tmp_path, "cpu")
    (v,) = verify(project, backends=["cpu"]).verdicts
    folder = v.evidence_json.parent
    half = folder / ".cpu.json.k1ll3d_x.tmp"
    half.write_text('{"format": ')
    mine = folder / "notes.tmp"  # not a name atomic_write makes
    mine.write_text("mine\n")
    again = verify(project, backends=["cpu"]).verdicts[0]
    assert again.reused and not half.exists() and mine.read_text() == "mine\n"

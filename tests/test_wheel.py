"""patchset wheel without compiling: staging, provenance, version label, refusals, incremental sync.

A synthetic upstream with an `include/llama.h` and a small sdist shaped like llama-cpp-python's
(pyproject, `llama_cpp/` with a version and ctypes bindings, `vendor/llama.cpp`) stand in for the
real ones; `prepare` is the same code `patchset wheel` runs before it hands over to scikit-build-core.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import Proj, commit, git, make_project, make_sdist, make_upstream, sha256
from packaging.version import Version

from builder.cli import main
from builder.compile.toolchain import find_ccache
from builder.deliver.provenance import PatchRecord, local_label, patch_records, series_hash, wheel_version
from builder.deliver.wheel import MODULE_TEMPLATE, WheelOptions, prepare, resolve_sdist, sync_tree
from builder.errors import DriftError, InputError, SourceError, WorkTreeError
from builder.series.load import load_series
from builder.upstream.pin import Pin, load_pin

LLAMA_H = """\
#pragma once
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif
    typedef int32_t llama_token;
    typedef struct ggml_opt_dataset * ggml_opt_dataset_t;
    struct llama_context;

    LLAMA_API void llama_opt_epoch(
            struct llama_context * lctx,
            ggml_opt_dataset_t     dataset,
            int64_t                idata_split);

    LLAMA_API int32_t llama_n_threads(struct llama_context * ctx);
#ifdef __cplusplus
}
#endif
"""

BINDINGS = """\
import ctypes

llama_context_p_ctypes = ctypes.c_void_p


def ctypes_function(name, argtypes, restype):
    return lambda f: f


@ctypes_function("llama_opt_epoch", [llama_context_p_ctypes, ctypes.c_void_p, ctypes.c_int64], None)
def llama_opt_epoch(lctx, dataset, idata_split, /): ...


@ctypes_function("llama_n_threads", [llama_context_p_ctypes], ctypes.c_int32)
def llama_n_threads(ctx, /): ...
"""

PYPROJECT = """\
[build-system]
requires = ["scikit-build-core>=0.9.2"]
build-backend = "scikit_build_core.build"

[project]
name = "llama_cpp_python"
dynamic = ["version"]
readme = "README.md"
"""

SDIST_TOP = {
    "pyproject.toml": PYPROJECT,
    "README.md": "# bindings\n\nthe upstream README\n",
    "CMakeLists.txt": "cmake_minimum_required(VERSION 3.21)\n",
    "llama_cpp/__init__.py": 'from .llama_cpp import *\n\n__version__ = "1.2.3"\n',
    "llama_cpp/llama_cpp.py": BINDINGS,
}

STATUS_MSG = """\
llama : llama_opt_epoch returns a status

Patchset-Status: pending
Patchset-Backends: cpu
Patchset-Test: test-x
"""
RENAME_MSG = """\
llama : name the context lctx

Patchset-Status: submitted https://github.com/ggml-org/llama.cpp/pull/2
Patchset-Backends: cpu
Patchset-Test: test-x
"""
A_C_MSG = """\
a: a third fix

Patchset-Status: fork-only
Patchset-Backends: cpu
Patchset-Test: test-x
"""
STATUS_H = LLAMA_H.replace("LLAMA_API void llama_opt_epoch(", "LLAMA_API enum ggml_status llama_opt_epoch(")
RENAME_H = STATUS_H.replace("llama_n_threads(struct llama_context * ctx)",
                            "llama_n_threads(struct llama_context * lctx)")


def _project(tmp_path: Path, cache_dir: Path, patches: list | None = None,
             package_files: dict[str, str] | None = None) -> tuple[Proj, Path]:
    up = make_upstream(tmp_path)
    up.commit = up.advance({"include/llama.h": LLAMA_H}, "llama.h\n")
    up.tree = up.tree_of(up.commit)
    archive = make_sdist(tmp_path / "dl" / "llama_cpp_python-1.2.3.tar.gz", {"include/llama.h": LLAMA_H},
                         top="llama_cpp_python-1.2.3", subdir="vendor/llama.cpp",
                         package_files=SDIST_TOP if package_files is None else package_files)
    sources = [{"kind": "git", "url": up.url},
               {"kind": "sdist", "url": archive.as_uri(), "sha256": sha256(archive), "subdir": "vendor/llama.cpp"}]
    series = patches if patches is not None else [
        ({"include/llama.h": STATUS_H}, STATUS_MSG),
        ({"include/llama.h": RENAME_H}, RENAME_MSG),
    ]
    return make_project(tmp_path, up, cache_dir, patches=series, sources=sources), archive


@pytest.fixture
def wproj(tmp_path: Path, cache_dir: Path) -> tuple[Proj, Path]:
    return _project(tmp_path, cache_dir)


def test_prepare_stages_the_patched_tree_with_provenance_and_version(wproj: tuple[Proj, Path]) -> None:
    p, archive = wproj
    before = p.snapshot()
    prep = prepare(p.project, WheelOptions())
    src = prep.source_dir
    patched = git(p.work, "rev-parse", "patched")

    # vendor/llama.cpp is the committed patched tree, nothing else (the sdist's own copy is gone)
    assert git(p.work, "rev-parse", "patched^{tree}") == prep.provenance["vendored"]["tree"]
    assert (src / "vendor/llama.cpp/include/llama.h").read_text() == RENAME_H
    assert not (src / "vendor/llama.cpp/.git").exists()
    assert (src / "CMakeLists.txt").is_file() and (src / "PKG-INFO").is_file()

    # provenance equals the pin and the series, in order
    data = json.loads((src / "llama_cpp/patchset.json").read_text())
    pin = load_pin(p.project.pin_file)
    assert data["upstream"]["commit"] == pin.commit and data["upstream"]["tree"] == pin.tree
    assert data["vendored"]["commit"] == patched
    names = p.series()
    assert [x["file"] for x in data["series"]["patches"]] == names
    assert [x["sha256"] for x in data["series"]["patches"]] == [sha256(p.patches / n) for n in names]
    assert [x["status"] for x in data["series"]["patches"]] == ["not-sent", "sent"]  # Patchset-Upstream's words
    assert data["series"]["patches"][1]["status_ref"] == "https://github.com/ggml-org/llama.cpp/pull/2"
    assert data["bindings"] == {"name": "llama_cpp_python", "version": "1.2.3", "sdist": archive.name,
                                "sdist_sha256": sha256(archive), "source": data["bindings"]["source"]}
    assert data["backend"] == "cpu" and "-DGGML_NATIVE=OFF" in data["cmake_args"]
    # a release wheel leaves nothing of the sdist's build out; --no-common and --no-mtmd are named in the record,
    # and the file that turns llama-common off is a tool argument of this machine, not a recorded option
    assert data["left_out"] == [] and not any("PROJECT_llama.cpp_INCLUDE" in a for a in prep.cmake_args)
    lean = prepare(p.project, WheelOptions(no_mtmd=True, no_common=True))
    assert lean.provenance["left_out"] == ["mtmd", "llama-common"]
    assert "-DLLAVA_BUILD=OFF" in lean.provenance["cmake_args"]
    assert not any("INCLUDE" in a for a in lean.provenance["cmake_args"])
    assert any(a.startswith("-DCMAKE_PROJECT_llama.cpp_INCLUDE=") and a.endswith("no_common.cmake")
               for a in lean.cmake_args)

    # the version: bindings version + tag build number, patch count, series hash
    listing = "".join(f"{sha256(p.patches / n)}  {n}\n" for n in names)
    h = hashlib.sha256(listing.encode()).hexdigest()
    assert prep.version == data["version"] == f"1.2.3+1.2.g{h[:8]}"
    assert data["series"]["hash"] == h
    assert f'__version__ = "{prep.version}"' in (src / "llama_cpp/__init__.py").read_text()

    # the description starts with the provenance section, the upstream README follows
    readme = (src / "README.md").read_text()
    assert readme.startswith("## This build: llama.cpp with a patch series")
    assert readme.endswith(SDIST_TOP["README.md"]) and names[0] in readme and pin.commit in readme
    assert (src / "llama_cpp/patchset.py").read_bytes() == MODULE_TEMPLATE.read_bytes()

    # drift: the series changed llama_opt_epoch's return type; the parameter rename is not drift
    assert [d.function for d in prep.drift] == ["llama_opt_epoch"]
    assert "enum ggml_status" in prep.drift[0].problem and "None" in prep.drift[0].problem
    assert data["binding_drift"] == [d.as_dict() for d in prep.drift]

    # nothing was written into the work tree or patches/
    assert git(p.work, "status", "--porcelain") == ""
    assert p.snapshot() == before
    assert src.is_relative_to(p.project.state_dir)


def test_the_installed_module_reads_the_provenance(wproj: tuple[Proj, Path], tmp_path: Path) -> None:
    p, _ = wproj
    prep = prepare(p.project, WheelOptions())
    pkg = tmp_path / "site" / "llama_cpp"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    for name in ("patchset.py", "patchset.json"):
        (pkg / name).write_bytes((prep.source_dir / "llama_cpp" / name).read_bytes())
    env = {**os.environ, "PYTHONPATH": str(tmp_path / "site")}
    out = subprocess.run([sys.executable, "-m", "llama_cpp.patchset", "--json"], capture_output=True, text=True,
                         env=env, cwd=tmp_path, check=True).stdout
    assert json.loads(out) == prep.provenance
    text = subprocess.run([sys.executable, "-m", "llama_cpp.patchset"], capture_output=True, text=True,
                          env=env, cwd=tmp_path, check=True).stdout
    assert prep.version in text and "binding drift: llama_opt_epoch" in text
    assert "left out" not in text
    for patch in prep.provenance["series"]["patches"]:
        assert patch["file"] in text and patch["sha256"] in text


def test_a_series_change_rewrites_only_what_changed(wproj: tuple[Proj, Path]) -> None:
    p, _ = wproj
    first = prepare(p.project, WheelOptions())
    assert first.written > 0
    again = prepare(p.project, WheelOptions())
    assert (again.written, again.removed) == (0, 0)
    assert again.provenance == first.provenance

    src = first.source_dir
    untouched = src / "vendor/llama.cpp/src/b.c"
    old = untouched.stat().st_mtime_ns
    # one more patch: the vendored a.c changes, and with it the provenance, version and README
    new_a = (src / "vendor/llama.cpp/src/a.c").read_text().replace("return v * 2;", "return v + v;")
    p.commits.append(commit(p.scratch, {"src/a.c": new_a}, A_C_MSG))
    p.set_series(p.commits)
    third = prepare(p.project, WheelOptions())
    assert third.written == 4  # a.c, and the version in __init__.py, patchset.json and README.md
    assert (src / "vendor/llama.cpp/src/a.c").read_text() == new_a
    assert untouched.stat().st_mtime_ns == old
    assert third.provenance["series"]["count"] == 3 and third.version != first.version


def test_refuses_a_dirty_work_tree_and_unsaved_commits(wproj: tuple[Proj, Path]) -> None:
    p, _ = wproj
    prepare(p.project, WheelOptions())
    (p.work / "src" / "a.c").write_text("/* an edit in progress */\n")
    with pytest.raises(WorkTreeError, match=r"uncommitted changes \(src/a.c\).*committed branch 'patched'"):
        prepare(p.project, WheelOptions())
    assert (p.work / "src" / "a.c").read_text() == "/* an edit in progress */\n"
    p.wgit("commit", "--quiet", "-am", "wip")
    with pytest.raises(WorkTreeError, match=r"1 commit\(s\) not written back to patches/.*`patchset refresh` first"):
        prepare(p.project, WheelOptions())


def test_sdist_is_checked_by_sha256(wproj: tuple[Proj, Path]) -> None:
    p, archive = wproj
    with pytest.raises(InputError, match="needs --sdist-sha256"):
        prepare(p.project, WheelOptions(sdist=str(archive)))
    with pytest.raises(SourceError, match="sha256 mismatch"):
        prepare(p.project, WheelOptions(sdist=str(archive), sdist_sha256="0" * 64))
    prep = prepare(p.project, WheelOptions(sdist=str(archive), sdist_sha256=sha256(archive)))
    assert prep.provenance["bindings"]["source"] == f"--sdist {archive}"
    pin = load_pin(p.project.pin_file)
    bare = Pin(pin.name, pin.repository, pin.commit, pin.tree, sources=pin.sources[:1])
    with pytest.raises(InputError, match="has no sdist source"):
        resolve_sdist(bare, WheelOptions())


def _pin(tag: str) -> Pin:
    return Pin("llama.cpp", "https://example.invalid", "0" * 40, "1" * 40, tag=tag, date="2026-10-01")


def test_version_labels_sort_by_pin_then_patch_count() -> None:
    def records(n: int) -> tuple[PatchRecord, ...]:
        return tuple(PatchRecord(f"{i:04d}-x.patch", "x", "pending", "", f"{i:064x}") for i in range(n))

    ordered = [
        wheel_version("0.3.36", _pin("b9999"), records(10)),
        wheel_version("0.3.36", _pin("b11312"), records(2)),
        wheel_version("0.3.36", _pin("b11312"), records(9)),
        wheel_version("0.3.36", _pin("b11312"), records(10)),
        wheel_version("0.3.37", _pin("b100"), records(0)),
    ]
    assert sorted(ordered, key=Version) == ordered
    # our label is above the bindings' own release, and normal as written
    assert Version(ordered[1]) > Version("0.3.36")
    assert all(str(Version(v)) == v for v in ordered)
    # a tag that is not bN: the pin's date stands in
    assert local_label(_pin("v1"), records(1)).startswith("20261001.1.g")
    with pytest.raises(InputError, match="local label"):
        wheel_version("0.3.36+abc", _pin("b1"), records(1))


def test_series_hash_is_sha256sum_of_the_series() -> None:
    root = Path(__file__).resolve().parent.parent / "patches"
    series = load_series(root)
    names = [p.name for p in series.patches]
    listing = subprocess.run(["sha256sum", *names], cwd=root, capture_output=True, check=True).stdout
    assert series_hash(patch_records(series)) == hashlib.sha256(listing).hexdigest()


def test_sync_tree_removes_stale_files_and_keeps_unchanged_mtimes(tmp_path: Path) -> None:
    stage, dest = tmp_path / "stage", tmp_path / "dest"
    for root in (stage, dest):
        (root / "d").mkdir(parents=True)
        (root / "same.txt").write_text("same\n")
    (stage / "d" / "new.txt").write_text("new\n")
    (dest / "d" / "stale.so").write_text("old library\n")
    (dest / "gone").mkdir()
    (dest / "gone" / "x").write_text("x\n")
    (stage / "run.sh").write_text("#!/bin/sh\n")
    (stage / "run.sh").chmod(0o755)
    (dest / "run.sh").write_text("#!/bin/sh\n")
    os.utime(dest / "same.txt", (1, 1))
    written, removed = sync_tree(stage, dest)
    assert (written, removed) == (2, 2)  # new.txt, run.sh (its mode); stale.so, gone/x
    assert sorted(q.relative_to(dest).as_posix() for q in dest.rglob("*")) == ["d", "d/new.txt", "run.sh",
                                                                                 "same.txt"]
    assert (dest / "same.txt").stat().st_mtime == 1
    assert os.access(dest / "run.sh", os.X_OK)


def test_strict_makes_drift_fail_before_anything_is_built(wproj: tuple[Proj, Path],
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    p, _ = wproj
    with pytest.raises(DriftError, match="llama_opt_epoch: returns enum ggml_status"):
        prepare(p.project, WheelOptions(strict=True))
    assert not (p.project.state_dir / "wheel" / "cpu" / "src").exists()
    assert main(["--project", str(p.root), "wheel", "--strict"]) == 1
    assert "binding drift (--strict): llama_opt_epoch" in capsys.readouterr().err


def test_ccache_beside_the_interpreter_is_found_without_path(monkeypatch: pytest.MonkeyPatch) -> None:
    beside = Path(sys.executable).parent / "ccache"
    if not beside.exists():
        pytest.skip("no ccache installed beside this interpreter (the project's [ccache] extra)")
    monkeypatch.setenv("PATH", "/nonexistent")
    assert find_ccache() == str(beside)

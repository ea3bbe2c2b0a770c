"""verify's `python` test kind: a bindings patch proven by its pytest file, before and after, against one built library.

A synthetic llama.cpp (tests/test_wheel.py's) whose series makes `llama_opt_epoch` return a status, and
a bindings-like second series: a tiny ctypes package (`llama_cpp/llama_cpp.py` loading `lib/libtiny.so`)
whose patch declares the status and adds a pytest file. The library is what `patchset wheel` leaves in
its staged project: `prepare` stages it (with the provenance naming the main series' tree) and the tiny
C library is compiled into `llama_cpp/lib`, where the bindings' CMake installs the real one.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
from helpers import Proj, json_document
from test_second_series import B1_MSG, _add_bindings_series
from test_wheel import PYPROJECT, STATUS_H, STATUS_MSG, _project

from builder.cli import main
from builder.deliver.wheel import WheelOptions, prepare

pytestmark = pytest.mark.skipif(not shutil.which("cc"), reason="needs a C compiler")

TINY_BINDINGS = """\
import ctypes
import pathlib

_lib = ctypes.CDLL(str(pathlib.Path(__file__).parent / "lib" / "libtiny.so"))
llama_context_p_ctypes = ctypes.c_void_p


def ctypes_function(name, argtypes, restype):
    def decorator(f):
        func = getattr(_lib, name)
        func.argtypes, func.restype = argtypes, restype
        return func

    return decorator


@ctypes_function("llama_opt_epoch", [llama_context_p_ctypes, ctypes.c_void_p, ctypes.c_int64], None)
def llama_opt_epoch(lctx, dataset, idata_split, /): ...


@ctypes_function("llama_n_threads", [llama_context_p_ctypes], ctypes.c_int32)
def llama_n_threads(ctx, /): ...
"""
TINY_C = """\
#include <stdint.h>
int llama_opt_epoch(void * lctx, void * dataset, int64_t idata_split) { return 1; } /* GGML_STATUS_ABORTED */
int32_t llama_n_threads(void * ctx) { return 2; }
"""
PACKAGE = {
    "pyproject.toml": PYPROJECT,
    "README.md": "# bindings\n",
    "CMakeLists.txt": "cmake_minimum_required(VERSION 3.21)\n",
    "llama_cpp/__init__.py": 'from .llama_cpp import *\n\n__version__ = "1.2.3"\n',
    "llama_cpp/llama_cpp.py": TINY_BINDINGS,
}
FIXED = TINY_BINDINGS.replace(
    "ctypes.c_int64], None)\ndef llama_opt_epoch(lctx, dataset, idata_split, /): ...",
    "ctypes.c_int64], ctypes.c_int)\ndef llama_opt_epoch(lctx, dataset, idata_split, /) -> int: ...",
).replace("llama_context_p_ctypes = ctypes.c_void_p\n",
          "llama_context_p_ctypes = ctypes.c_void_p\nGGML_STATUS_SUCCESS = 0\nGGML_STATUS_ABORTED = 1\n")
# fails without the fix on behaviour: the epoch's status is lost (None)
BEHAVIOUR_TEST = """\
import llama_cpp


def test_llama_opt_epoch_returns_its_status():
    status = llama_cpp.llama_opt_epoch(None, None, 0)
    assert isinstance(status, int), f"llama_opt_epoch returned {status!r}, not a ggml_status"
    assert status == 1


def test_llama_n_threads():
    assert llama_cpp.llama_n_threads(None) == 2
"""
# fails without the fix only because a name the fix adds is missing
NAME_TEST = """\
import llama_cpp


def test_llama_opt_epoch_returns_aborted():
    assert llama_cpp.llama_opt_epoch(None, None, 0) == llama_cpp.GGML_STATUS_ABORTED
"""
# test_second_series' B1 with a title of llama-cpp-python's `<tag>: <title>` form
MSG = B1_MSG.replace("llama_cpp: llama_opt_epoch returns the epoch's ggml_status",
                     "fix: return the ggml_status of llama_opt_epoch")


def _two(tmp_path: Path, cache_dir: Path, test: str) -> Proj:
    p, archive = _project(tmp_path, cache_dir, patches=[({"include/llama.h": STATUS_H}, STATUS_MSG)],
                          package_files=PACKAGE)
    _add_bindings_series(p, archive, [({"llama_cpp/llama_cpp.py": FIXED, "tests/test_opt.py": test}, MSG)],
                         package_files=PACKAGE)
    return p


def _build_library(p: Proj) -> Path:
    """The staged wheel project (`prepare`, as `patchset wheel` runs it) and the library its build installs."""
    prepared = prepare(p.project, WheelOptions())
    lib = prepared.source_dir / "llama_cpp" / "lib"
    lib.mkdir(parents=True, exist_ok=True)
    (p.root.parent / "tiny.c").write_text(TINY_C)
    subprocess.run(["cc", "-shared", "-fPIC", "-o", str(lib / "libtiny.so"), str(p.root.parent / "tiny.c")],
                   check=True)
    return lib


def _verify(p: Proj, capsys: pytest.CaptureFixture[str]) -> tuple[int, dict, str]:
    """`patchset --series bindings verify --backend cpu --json`: exit code, document, stderr."""
    capsys.readouterr()
    rc = main(["--project", str(p.root), "--series", "bindings", "verify", "--backend", "cpu", "--json"])
    out, err = capsys.readouterr()
    return rc, json_document(out) if out.strip() else {}, err


def _evidence(p: Proj) -> dict:
    files = list((p.root / ".patchset" / "evidence-bindings").rglob("*.json"))
    assert len(files) == 1, files
    return json.loads(files[0].read_text())


def test_a_bindings_patch_is_proven_by_its_python_test_against_one_built_library(
        tmp_path: Path, cache_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    p = _two(tmp_path, cache_dir, BEHAVIOUR_TEST)
    # no library yet: one line saying which command makes it, nothing proven
    rc, _, err = _verify(p, capsys)
    assert rc == 2
    assert "no library built for the cpu backend" in err and "`patchset wheel --backend cpu`" in err
    lib = _build_library(p)

    rc, got, _ = _verify(p, capsys)
    assert rc == 0, got
    [verdict] = got["verdicts"]
    assert verdict["outcome"] == "proven", verdict
    assert "test_llama_opt_epoch_returns_its_status" in verdict["reason"]
    evidence = _evidence(p)
    steps = {s["tree"]: s for s in evidence["steps"]}
    assert (steps["before"]["verdict"], steps["after"]["verdict"]) == ("fails", "passes")
    for s in steps.values():
        # nothing compiled for either tree: both ran against the one library
        assert s["build_command"].startswith("nothing to build: the library ") and str(lib) in s["build_command"]
    before = steps["before"]["tests"][0]
    assert before["command"] == "python tests/test_opt.py"
    assert (before["passed"], before["failed"]) == (1, 1)
    assert any("returned None, not a ggml_status" in line or "test_llama_opt_epoch_returns_its_status" in line
               for line in before["failing"])
    roles = {c["case"]: c["role"] for c in evidence["cases"]}
    assert roles["test_llama_opt_epoch_returns_its_status()"] == "proof"
    assert roles["test_llama_n_threads()"] == "guard case"
    # no CMake build of the bindings' trees, and the user's work tree of the series stays clean
    assert not (p.root / ".patchset" / "build" / "bindings").exists()
    bwork = p.root / ".patchset" / "work" / "bindings"
    assert subprocess.run(["git", "-C", str(bwork), "status", "--porcelain"], capture_output=True, text=True,
                          check=True).stdout == ""

    # the evidence holds while the trees and the library do; a library built from another tree is refused
    rc, got, _ = _verify(p, capsys)
    assert rc == 0 and got["verdicts"][0]["reused"]
    (lib.parent / "patchset.json").write_text(json.dumps({"vendored": {"tree": "0" * 40}, "version": "x"}))
    rc, _, err = _verify(p, capsys)
    assert rc == 2
    assert "but the main series' 'patched' is" in err


def test_a_python_test_that_fails_only_on_a_missing_name_is_no_proof(
        tmp_path: Path, cache_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    p = _two(tmp_path, cache_dir, NAME_TEST)
    _build_library(p)
    rc, got, _ = _verify(p, capsys)
    [verdict] = got["verdicts"]
    assert verdict["outcome"] == "build failed", verdict
    assert "without the fix the test does not load" in verdict["reason"]
    assert "AttributeError" in verdict["reason"] and "GGML_STATUS_ABORTED" in verdict["reason"]
    assert rc == 1
    steps = {s["tree"]: s for s in _evidence(p)["steps"]}
    assert steps["before"]["verdict"] == "build-fails" and steps["after"]["verdict"] == "passes"


def test_a_test_module_that_does_not_import_does_not_load_and_a_crash_is_in_its_test(tmp_path: Path) -> None:
    """What one run says, read from the plugin's record: an ImportError at collection (pytest wraps it in
    its CollectError) is `does not load`, not a failing case; an interpreter that dies is a crash in
    the test it was in."""
    from builder.compile import testrun  # noqa: PLC0415
    from builder.prove import pytests  # noqa: PLC0415

    tree = tmp_path / "tree"
    (tree / "tests").mkdir(parents=True)
    (tree / "pkg").mkdir()
    (tree / "pkg" / "__init__.py").write_text("X = 1\n")
    (tree / "tests" / "test_imp.py").write_text("from pkg import Y\n\n\ndef test_a():\n    assert Y\n")
    (tree / "tests" / "test_crash.py").write_text(
        "import os\n\n\ndef test_b():\n    assert 1\n\n\ndef test_c():\n    os.abort()\n")
    lib = pytests.Library(tmp_path / "lib", "pkg", "0" * 40, "1.0")

    def run(test: str) -> testrun.ProgramResult:
        return pytests.run(tree, lib, testrun.Invocation("python", (test,)), tmp_path / "logs" / f"{test[6:]}.log", 120)

    imp = run("tests/test_imp.py")
    assert [(c.name, c.status) for c in imp.cases] == [("tests/test_imp.py", testrun.SKIP)]
    assert pytests.does_not_load([imp]) == [
        f"tests/test_imp.py: does not load: ImportError: cannot import name 'Y' from 'pkg' ({tree}/pkg/__init__.py)"]
    crash = run("tests/test_crash.py")
    assert crash.signal_name == "SIGABRT" and crash.verdict == testrun.CRASHED
    assert [(c.name, c.status) for c in crash.cases] == [("test_b", testrun.PASS), ("test_c", testrun.CRASH)]
    assert pytests.does_not_load([crash]) == []

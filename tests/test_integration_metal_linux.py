"""metal-linux: the tree's own Metal host code, Objective-C included, on patchset's Metal stand-in
(builder/metal_linux, docs/backends.md). The Objective-C toolchain is the one .ci/run built before the
tests ($PATCHSET_TEST_OBJC_CACHE), else built from the mirror folder (`../shared/third_party`, or
$PATCHSET_OBJC_MIRROR) into the session's cache of the real pin (tests/conftest.py, objc_toolchain).
Then the stand-in's documented behaviour is checked by a program of ours, and `verify --backend
metal-linux` proves patch 1 on the real pin and series: the tree's `ggml-metal-context.m` runs,
crashes before the fix, passes after it, and the mutation is caught."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest

from builder import proc
from builder.compile import objc_toolchain as ot
from builder.project import Project
from builder.prove.verify import verify
from builder.series.load import load_series
from builder.words import PROVEN

ROOT = Path(__file__).resolve().parents[1]
DATA = Path(__file__).resolve().parent / "data" / "metal_linux"
STANDIN = ROOT / "builder" / "metal_linux"

pytestmark = [pytest.mark.integration,
              pytest.mark.skipif(sys.platform != "linux" or shutil.which("clang") is None,
                                 reason="metal-linux needs Linux and clang")]


@pytest.fixture(scope="module")
def toolchain(real_project: Project, objc_toolchain: Path) -> Path:
    # the CLI's cache is the project's: the build finds the toolchain there
    assert ot.find_built(real_project.cache_dir) == objc_toolchain
    return objc_toolchain


def test_the_standin_behaves_as_documented(toolchain: Path, tmp_path: Path) -> None:
    # the stand-in (metal.m, dispatch.m) with a one-kernel model of ours instead of ggml's
    flags = ["-fobjc-runtime=gnustep-2.0", "-fblocks", "-fconstant-string-class=NSConstantString", "-fexceptions",
             "-fobjc-exceptions", "-DGNUSTEP", "-DGNUSTEP_BASE_LIBRARY=1", "-DGNUSTEP_RUNTIME=1", "-D_NONFRAGILE_ABI=1",
             "-D_NATIVE_OBJC_EXCEPTIONS", "-pthread", f"-I{toolchain / 'include'}",
             f"-I{ROOT / 'builder' / 'metal_sdk'}", f"-I{ROOT / 'builder' / 'replay' / 'cpp'}"]
    objs = []
    for src in (STANDIN / "metal.m", STANDIN / "dispatch.m", DATA / "standin_test.m"):
        objs.append(tmp_path / f"{src.stem}.o")
        proc.run(["clang", *flags, "-c", str(src), "-o", str(objs[-1])], timeout=300)
    objs.append(tmp_path / "stub.o")
    proc.run(["clang", "-pthread", f"-I{ROOT / 'builder' / 'replay' / 'cpp'}", "-c", str(DATA / "standin_abi_stub.c"),
              "-o", str(objs[-1])], timeout=120)
    exe = tmp_path / "standin_test"
    proc.run(["clang", *map(str, objs), f"-L{toolchain / 'lib'}", f"-Wl,-rpath,{toolchain / 'lib'}",
              "-lgnustep-base", "-lobjc", "-pthread", "-o", str(exe)], timeout=120)
    r = proc.run([str(exe)], timeout=60, check=False)
    lines = r.stdout.splitlines()
    assert r.returncode == 0 and lines[-1] == "PASSED", r.stdout + r.stderr
    for name in ("no_model_no_pipeline", "handlers_in_order_after_final_status", "nil_access_page_fault",
                 "enqueue_order", "queue_released_while_running", "residency_set_ignores_nil", "dispatch_apply"):
        assert f"ok {name}" in lines


def test_verify_proves_patch_1_on_the_trees_objective_c(real_project: Project, toolchain: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    assert shutil.which("clang")
    # the CLI's cache is the project's: the build finds the toolchain there
    monkeypatch.setenv("PATCHSET_CACHE", str(real_project.cache_dir))
    (patch,) = [p for p in load_series(real_project.patches_dir).patches if p.name.startswith("0001-metal-assert")]
    assert "metal-linux" in patch.meta.backends
    report = verify(real_project, [patch.name], ["metal-linux"], jobs=2)
    (v,) = report.verdicts
    assert v.outcome == PROVEN, v.reason
    assert "`ADD(buffer=none)`, `ADD(buffer=cpu)`" in v.reason
    assert "the mutation" in v.reason and "is caught" in v.reason
    data = json.loads(v.evidence_json.read_text())
    assert "not on Apple hardware" in json.dumps(data)

"""The real pin end to end: apply the real series, build the CPU minimal target set, run the tests, sweep
against the pin and verify patch 3 (its confirmation and its hunks); the whole series' verify on the CPU is
tests/test_integration_verify_cpu.py, run beside this module. Slow (a cold ggml build on 2 cores): marked
integration."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from helpers import compiled_sources

from builder.compile.cmakebuild import BuildResult
from builder.compile.testrun import PASSED, series_ops
from builder.compile.toolchain import find_tool
from builder.gitrepo import GitRepo
from builder.project import Project
from builder.prove.pipeline import declared_tests, run_build, run_tests
from builder.prove.sweep import SweepOptions, sweep
from builder.prove.sweep_compare import ONLY_PATCHED, sweep_dict
from builder.prove.verify import verify
from builder.series.load import load_series
from builder.words import PROVEN

pytestmark = pytest.mark.integration



@pytest.fixture(scope="module")
def project(real_project: Project) -> Project:
    """The session's copy of the real project (conftest.py): the replay module builds the same trees."""
    return real_project


@pytest.fixture(scope="module")
def built(project: Project, real_cpu_build: BuildResult) -> BuildResult:
    result = real_cpu_build
    assert result.ok, f"build failed: {result.first_error} (log {result.log})"
    return result


def test_minimal_build_has_the_test_programs(built) -> None:
    for program in ("test-opt", "test-backend-ops", "test-llama-archs"):
        assert (built.bin_dir / program).is_file()
    # libllama is built for patch 2's test-llama-archs, the one program that includes llama's headers,
    # and linked into it alone
    assert list(built.build_dir.rglob("libllama.*"))
    ninja = find_tool("ninja").path

    def inputs(program: str) -> list[str]:
        out = subprocess.run([ninja, "-C", str(built.build_dir), "-t", "inputs", program],
                             capture_output=True, text=True, check=True).stdout
        return out.splitlines()

    assert any(Path(name).name.startswith("libllama.") for name in inputs("test-llama-archs"))
    for program in ("test-opt", "test-backend-ops"):
        assert not any(Path(name).name.startswith(("libllama.", "libllama-common.")) for name in inputs(program)), \
            program
    # of llama-common, the sources its headers lead test-llama-archs to (common.cpp, log.cpp, sampling.cpp, ...),
    # not the chat templates and argument parsing it never calls, and no second build with all of them
    objects = [line for line in inputs("common/libllama-common.so") if line.endswith(".o")]
    assert any("llama-common.dir/Unity/" in o for o in objects), objects  # the suite's batches are on
    common = compiled_sources([built.build_dir / o for o in objects])
    assert {"common.cpp", "log.cpp", "sampling.cpp"} <= common, common
    assert not {"chat.cpp", "arg.cpp"} & common, common


def test_rebuild_is_a_noop(project: Project, built) -> None:
    again = run_build(project, "cpu", "minimal")
    assert again.ok and again.noop and not again.configured


def test_series_tests_pass_on_the_cpu(project: Project, built) -> None:
    series = load_series(project.patches_dir)
    report = run_tests(project, "cpu")
    by_program = {p.program: p for p in report.programs}
    opt, ops = by_program["test-opt"], by_program["test-backend-ops"]
    assert opt.verdict == PASSED and opt.failed == 0
    assert opt.passed >= 164  # the pin's own 118 + 46, plus the series' new cases
    assert ops.verdict == PASSED and ops.failed == 0
    # the tests the series declares for the CPU (patches 1 and 6 test Metal's buffer lookup on Metal only)
    declared = series_ops(declared_tests(series, "cpu"))
    assert set(declared) >= {"ACC", "SET"}
    seen = {c.name for c in ops.cases if c.status == "pass"}
    assert set(declared) <= seen, f"ops without a passing case: {set(declared) - seen}"
    # the series' 4096-wide cases are there; grad mode checks those within upstream's default grad_nmax() (10000
    # gradients: the 4096x2 ACC case with a 1024-wide update) and skips the larger ones as large tensors
    wide = [c for c in ops.cases if "4096" in c.params and c.name in ("ACC", "SET")]
    assert any(c.status == "pass" for c in wide), wide
    assert all(c.status in ("pass", "skip") for c in wide), wide
    assert not report.failed


def test_patch_3s_proof_cases_are_the_same_in_ten_runs(project: Project, built) -> None:
    """Issue 43 point 3: no case of patch 3's tests rests on freed memory, so its before tree fails the same
    cases in each of ten runs (confirmed by verify's own runs: a case that flips is `flaky`, never proof)."""
    (v,) = verify(project, ["3"], backends=["cpu"], confirm=10, reuse=False).verdicts
    assert v.outcome == PROVEN, v.reason
    data = json.loads(v.evidence_json.read_text())
    assert data["conditions"]["confirm"] == 10
    proof = [c for c in data["cases"] if c["role"] == "proof"]
    assert proof and not [c for c in data["cases"] if c["role"].startswith("flaky")], data["cases"]
    before = next(s for s in data["steps"] if s["tree"] == "before")
    assert all(len(t.get("runs", ())) == 9 for t in before["tests"] if t["verdict"] != "passed"), before["tests"]


def test_sweep_against_the_pin_on_the_cpu(project: Project, built) -> None:
    r = sweep(project, SweepOptions(backend="cpu", mode="grad", ops=("ACC", "SET")))
    assert r.regressions == [], [(c.case, c.before, c.after) for c in r.regressions]
    assert r.compared > 20
    # the pin's tree was built in its own worktree and folder; the patched one reused `built`
    assert r.other.tree_id == GitRepo(project.work_repo).tree_of("upstream")
    # built with the head's one line of comment in ggml-backend.h, which every object of ggml includes: those
    # objects come from the patched build's, in the compiler cache
    assert "ggml/include/ggml-backend.h" in r.other.reference_comments
    assert r.patched.build_dir == built.build_dir
    # patch 2 changes test-llama-archs (its --opt mode): the series' own program runs on the patched tree
    # alone, and the pin's build makes neither it nor libllama
    assert "test-llama-archs" in {p.program for p in r.patched.programs}
    assert {p.program for p in r.other.programs} == {"test-opt", "test-backend-ops"}
    assert not list(r.other.build_dir.rglob("libllama.*"))
    # patch 5 adds 4096-wide ACC and SET cases: new in the patched tree, and passing there
    new = r.of(ONLY_PATCHED)
    wide = [c for c in new if "4096" in c.case]
    # grad mode checks the smallest wide case and skips the larger ones as large tensors; none may fail
    assert any(c.after == "pass" for c in wide) and all(c.after in ("pass", "skip") for c in wide), \
        [(c.case, c.after) for c in wide]
    d = sweep_dict(r)
    assert d["regressions"] == 0 and d["trees"]["other"]["commit"] == r.other.commit


def test_verify_hunks_of_patch_3(project: Project, built) -> None:
    """Every hunk of patch 3, the CPU fix whose units are all in ggml, is caught, not built or exempt (runs
    after the ten-run verify of patch 3, whose build folder it reuses: each reverted tree recompiles one file's
    units).

    Patch 2 is left to the synthetic trees of test_verify_hunks.py: its hunks go through the same steps
    (a header's pre-check, a source's build, a program killed at the reverted trees' time limit, a range
    rule's parts), and each of its trees here would relink libllama and run test-llama-archs; `patchset
    verify --hunks 2 3` made its table in docs/evidence/cpu."""
    report = verify(project, ["3"], backends=["cpu"], hunks=True)
    (v,) = report.verdicts
    assert v.outcome == PROVEN, v.reason
    outcomes = [h["outcome"] for h in v.hunks]
    assert outcomes and "unguarded" not in outcomes, v.hunks
    assert "caught" in outcomes
    for h in v.hunks:
        if h["outcome"] == "caught":
            # a test that crashed or hung names no failing case; its reason says how it ended
            assert h["failing"] or "killed" in h["reason"], h
        if h["outcome"] == "not built":
            assert h["errors"], h

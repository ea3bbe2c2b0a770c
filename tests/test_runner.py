"""The one tree runner (builder.prove.runner): verify, the fixed-upstream check and canary judge a tree by
one rule. Each test here is a point where the three once disagreed, on the calc tree of test_bump."""

from __future__ import annotations

import contextlib
import json
import os
import sys
from pathlib import Path

import pytest
from helpers import Proj, Upstream

from builder.compile import backends as backendmod
from builder.gitrepo import GitRepo
from builder.project import load_project
from builder.prove import cases, fixed_upstream
from builder.prove import hunks as hk
from builder.prove.canary_check import checker as canary_checker
from builder.prove.runner import gated, invocation
from builder.prove.verify import verify
from builder.series.apply import apply
from builder.series.canary import KIND_BUILD
from builder.series.load import load_series
from builder.series.model import Patch, TestSpec
from builder.series.rebase import dry_run_rebase
from builder.words import CANNOT_TELL, NOT_PROVEN, PROVEN
from tests.test_bump import SUB_FIX, make_mini, trailers
from tests.test_canary_build import HEADER
from tests.test_verify import GGML_CMAKE, commit_files, init_upstream, mutation, write_project
from tests.test_verify_cases import CALC_C as CASES_CALC_C
from tests.test_verify_cases import CALC_H as CASES_CALC_H
from tests.test_verify_cases import meta

# exits as the dynamic loader does when it cannot start a program (127, nothing printed) when calc_one()
# says so; else a one-case test of calc_sub
LOADER_LIKE = """\
#include "calc.h"
#include <cstdio>
int main() {
    if (calc_one() == 7) return 127;
    printf("Backend 1/1: CPU\\n");
    bool ok = calc_sub(5, 3) == 2;
    printf("  SUB(want=2): %s\\n", ok ? "OK" : "FAIL");
    printf("  %d/1 tests passed\\n", ok ? 1 : 0);
    return ok ? 0 : 1;
}
"""


def _patch(proj: Proj) -> Patch:
    (patch,) = load_series(proj.project.patches_dir).patches
    return patch


def test_canary_a_program_that_did_not_load_is_a_tree_that_did_not_build(tmp_path: Path, up: Upstream,
                                                                           cache_dir: Path) -> None:
    """canary --test read a program that did not load as a failing test (KIND_TEST); verify reads it as a
    tree that did not build: so does canary now."""
    fixed = SUB_FIX.replace("int calc_one(void) { return 1; }", "int calc_one(void) { return 7; }")
    proj = make_mini(tmp_path, up, cache_dir, patches=[
        ({"ggml/src/calc.c": fixed, "tests/test-sub.cpp": LOADER_LIKE}, "calc : sub subtracts" + trailers("test-sub"))])
    git = GitRepo(proj.project.work_repo)
    kind, why = canary_checker(proj.project, "cpu", test=True, jobs=2)(git, _patch(proj), git.tree_of("HEAD"))
    assert kind == KIND_BUILD and "did not load" in why, (kind, why)


def test_fixed_upstream_a_program_that_did_not_load_is_a_tree_that_did_not_build(tmp_path: Path, up: Upstream,
                                                                                   cache_dir: Path) -> None:
    """The fixed-upstream check read a program that did not load on the new upstream as "the tests check
    nothing"; by verify's rule the tree did not build."""
    proj = make_mini(tmp_path, up, cache_dir, patches=[
        ({"ggml/src/calc.c": SUB_FIX, "tests/test-sub.cpp": LOADER_LIKE}, "calc : sub" + trailers("test-sub"))])
    text = (up.src / "ggml" / "src" / "calc.c").read_text()
    new = up.advance({"ggml/src/calc.c": text.replace("return 1;", "return 7;")}, "calc: one is seven\n")
    (report,) = dry_run_rebase(proj.project, new, fixed_upstream.checker(proj.project, "cpu", jobs=2)).patches
    assert report.fix is not None
    assert report.fix.verdict == CANNOT_TELL and "does not build" in report.fix.evidence, report.fix
    assert "did not load" in report.fix.evidence


TWICE_TEST = """\
#include "calc.h"
#include <cstdio>
int main() {
    printf("Backend 1/1: CPU\\n");
    bool ok = calc_twice(2) == 4;
    printf("  TWICE(want=4): %s\\n", ok ? "OK" : "FAIL");
    printf("  %d/1 tests passed\\n", ok ? 1 : 0);
    return ok ? 0 : 1;
}
#include "late.h"
"""


def test_fixed_upstream_reads_every_compiler_error_not_the_first(tmp_path: Path, up: Upstream,
                                                                   cache_dir: Path) -> None:
    """A `Patchset-Before: build-fails` patch whose test part, on the new upstream, fails to compile in its test
    file (the API the patch adds) and in a header of upstream's that the test includes: the check read only the
    first error and said `not fixed upstream` (the test part still fails to compile); verify reads every error,
    and an error outside the test paths means the tree does not build: `cannot tell`."""
    up.advance({"ggml/include/late.h": "/* nothing yet */\n"}, "calc: a header included last\n")
    proj = make_mini(tmp_path, up, cache_dir, patches=[
        ({"ggml/src/calc.c": SUB_FIX + "int calc_twice(int a) { return 2 * a; }\n",
          "ggml/include/calc.h": HEADER.replace("int calc_one(void);\n", "int calc_one(void);\nint calc_twice(int);\n"),
          "tests/test-twice.cpp": TWICE_TEST},
         "calc : twice" + trailers("test-twice") + "Patchset-Before: build-fails\n")])
    new = up.advance({"ggml/include/late.h": "static int late_broken = no_such_name;\n"}, "calc: late.h breaks\n")
    (report,) = dry_run_rebase(proj.project, new, fixed_upstream.checker(proj.project, "cpu", jobs=2)).patches
    assert report.fix is not None
    assert report.fix.verdict == CANNOT_TELL and "does not build" in report.fix.evidence, report.fix
    assert "ggml/include/late.h" in report.fix.evidence


# test-backend-ops' way of selecting cases: `-p REGEX`, searched in each case's parameters (std::regex)
FILTERED = """\
#include "calc.h"
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <regex>
#include <string>
static const char * filter = nullptr;
static bool selected(const char * params) {
    return !filter || std::regex_search(std::string(params), std::regex(filter));
}
int main(int argc, char ** argv) {
    for (int i = 1; i + 1 < argc; i++) if (strcmp(argv[i], "-p") == 0) filter = argv[i + 1];
    printf("Backend 1/1: CPU\\n");
    int n = 0, good = 0;
    auto check = [&](const char * params, bool ok) {
        n++; good += ok; printf("  ADD(%s): %s\\n", params, ok ? "OK" : "FAIL");
    };
    if (selected("a=0")) check("a=0", calc_add(0, 0) == 0);
    if (selected("a=1")) check("a=1", calc_add(1, 1) == 2);
    if (selected("a=2")) {
        printf("  ADD(a=2): "); fflush(stdout);
        if (calc_add(2, 2) != 4) abort();
        n++; good++; printf("OK\\n");
    }
    if (selected("a=3")) check("a=3", calc_add(3, 3) == 6);
    printf("  %d/%d tests passed\\n", good, n);
    return good == n ? 0 : 1;
}
"""


def add_adds_proven(tmp_path: Path, program: str) -> dict:
    """The evidence of `calc : add adds` (calc_add subtracted), its test `program` as test-backend-ops, proven
    on the CPU."""
    src = init_upstream(tmp_path, {"ggml/CMakeLists.txt": GGML_CMAKE, "ggml/include/calc.h": CASES_CALC_H,
                                   "ggml/src/calc.c": CASES_CALC_C})
    commit_files(src, {"ggml/src/calc.c": CASES_CALC_C.replace("return a - b;", "return a + b;"),
                       "tests/test-backend-ops.cpp": program}, "calc : add adds" + meta("test-backend-ops"))
    project = load_project(root=write_project(tmp_path, src), cache_dir=tmp_path / "cache")
    apply(project)
    (v,) = verify(project, backends=["cpu"], timeout=30).verdicts
    assert v.outcome == PROVEN, v.reason
    return json.loads(v.evidence_json.read_text())


def test_a_crash_in_the_middle_of_a_program_leaves_the_cases_after_it_an_outcome(tmp_path: Path) -> None:
    """Without the fix test-backend-ops crashes in ADD(a=2), the third of four cases: it is run again past that
    case (`-p`), so ADD(a=3) after it has an outcome (it fails, and passes with the fix: proof), and the
    crashing case is named as failing (crash), not left `not reached`."""
    data = add_adds_proven(tmp_path, FILTERED)
    rows = {r["case"]: (r["before"], r["role"]) for r in data["cases"]}
    assert rows["ADD(a=2)"] == (cases.CRASH, cases.PROOF), rows
    assert rows["ADD(a=3)"] == (cases.FAIL, cases.PROOF), rows
    (before,) = [s for s in data["steps"] if s["tree"] == "before"]
    (run,) = before["tests"]
    assert run["signal"] == "SIGABRT" and run["resumed"] == ["test-backend-ops -b CPU -p ^(?!(?:a=2)$)"], run


def flipping(name: str, expr: str, want: int) -> str:
    """A one-case test program that, while `expr` is wrong, fails only in every other run (a counter file in its
    folder: runs 1 and 3 fail, run 2 passes): a randomised test seen from outside."""
    return f"""\
#include "calc.h"
#include <cstdio>
static int bump(const char * path) {{
    int n = 0;
    FILE * f = fopen(path, "r");
    if (f) {{ if (fscanf(f, "%d", &n) != 1) n = 0; fclose(f); }}
    f = fopen(path, "w");
    fprintf(f, "%d", ++n);
    fclose(f);
    return n;
}}
int main() {{
    printf("Backend 1/1: CPU\\n");
    bool wrong = ({expr}) != {want};
    bool ok = !(wrong && bump("{name}-count") % 2 == 1);
    printf("  {name}(x=1): %s\\n", ok ? "OK" : "FAIL");
    printf("  %d/1 tests passed\\n", ok ? 1 : 0);
    return ok ? 0 : 1;
}}
"""


def test_a_case_that_flips_between_runs_is_flaky_never_proof_nor_a_catch(tmp_path: Path) -> None:
    """One run of a randomised test is not a proof: without the fix patch 1's case fails in runs 1 and 3 of 3 and
    passes in run 2; patch 2's mutation makes its case fail the same way. Both are `flaky (2 of 3 runs)`: no
    proof, no catch (one run took each as proven)."""
    src = init_upstream(tmp_path, {"ggml/CMakeLists.txt": GGML_CMAKE, "ggml/include/calc.h": CASES_CALC_H,
                                   "ggml/src/calc.c": CASES_CALC_C})
    fixed = CASES_CALC_C.replace("return a - b;", "return a + b;")
    commit_files(src, {"ggml/src/calc.c": fixed, "tests/test-add.cpp": flipping("add", "calc_add(2, 3)", 5)},
                 "calc : add adds" + meta("test-add"))
    both = fixed.replace("calc_sub(int a, int b) { return a + b; }", "calc_sub(int a, int b) { return a - b; }")
    commit_files(src, {"ggml/src/calc.c": both, "tests/test-sub.cpp": flipping("sub", "calc_sub(5, 3)", 2)},
                 "calc : sub subtracts" + meta("test-sub", "Patchset-Mutation: mutations/sub-flips.patch\n"))
    bad = mutation(src, "calc_sub(int a, int b) { return a - b; }", "calc_sub(int a, int b) { return a + b; }")
    project = load_project(root=write_project(tmp_path, src), cache_dir=tmp_path / "cache")
    (project.patches_dir / "mutations" / "sub-flips.patch").write_text(bad)
    apply(project)
    add, sub = verify(project, backends=["cpu"], timeout=30).verdicts
    assert add.outcome == NOT_PROVEN and "flaky (2 of 3 runs)" in add.reason, add.reason
    data = json.loads(add.evidence_json.read_text())
    (row,) = [r for r in data["cases"] if r["case"] == "add(x=1)"]
    assert row["role"] == cases.FLAKY and row["runs"].startswith("flaky (2 of 3 runs)"), row
    (before,) = [s for s in data["steps"] if s["tree"] == "before"]
    assert [r["verdict"] for r in before["tests"][0]["runs"]] == ["passed", "failed"], before
    assert sub.outcome == NOT_PROVEN and "sub-flips" in sub.reason and "flaky (2 of 3 runs)" in sub.reason, sub.reason


# crashes in one case in odd runs and in another in even runs (a counter file in its folder)
WANDERING_CRASH = """\
#include "calc.h"
#include <cstdio>
#include <cstdlib>
int main() {
    int n = 0;
    FILE * f = fopen("crash-count", "r");
    if (f) { if (fscanf(f, "%d", &n) != 1) n = 0; fclose(f); }
    bool wrong = calc_add(2, 3) != 5;
    if (wrong) { f = fopen("crash-count", "w"); fprintf(f, "%d", ++n); fclose(f); }
    printf("Backend 1/1: CPU\\n");
    printf("  one(x=1): "); fflush(stdout);
    if (wrong && n % 2 == 1) abort();
    printf("OK\\n");
    printf("  two(x=2): "); fflush(stdout);
    if (wrong) abort();
    printf("OK\\n");
    printf("  2/2 tests passed\\n");
    return 0;
}
"""


def test_a_declared_crash_must_crash_at_one_site_in_every_run(tmp_path: Path) -> None:
    """`Patchset-Before: crash` accepted any signal anywhere: without the fix this program aborts in one(x=1) in
    one run and in two(x=2) in the next. The crash's site is not the same in every run: not the declared crash,
    and not proven (flaky); each run's site is in the evidence."""
    src = init_upstream(tmp_path, {"ggml/CMakeLists.txt": GGML_CMAKE, "ggml/include/calc.h": CASES_CALC_H,
                                   "ggml/src/calc.c": CASES_CALC_C})
    commit_files(src, {"ggml/src/calc.c": CASES_CALC_C.replace("return a - b;", "return a + b;"),
                       "tests/test-crash.cpp": WANDERING_CRASH},
                 "calc : add adds" + meta("test-crash", "Patchset-Before: crash\n"))
    project = load_project(root=write_project(tmp_path, src), cache_dir=tmp_path / "cache")
    apply(project)
    (v,) = verify(project, backends=["cpu"], timeout=30).verdicts
    assert v.outcome == NOT_PROVEN and "flaky" in v.reason and "crash at one site" in v.reason, v.reason
    (before,) = [s for s in json.loads(v.evidence_json.read_text())["steps"] if s["tree"] == "before"]
    (run,) = before["tests"]
    assert run["crash_site"] == "in one(x=1)" and [r["crash_site"] for r in run["runs"]] == [
        "in two(x=2)", "in one(x=1)"], run


def test_a_reverted_hunk_whose_test_fails_in_some_runs_only_is_not_caught(tmp_path: Path) -> None:
    """`verify --hunks` took any failure of a reverted tree as a catch: without its one hunk the test fails in
    runs 1 and 3 of 3 only. Not caught in every run: unguarded, flaky (2 of 3 runs)."""
    src = init_upstream(tmp_path, {"ggml/CMakeLists.txt": GGML_CMAKE, "ggml/include/calc.h": CASES_CALC_H,
                                   "ggml/src/calc.c": CASES_CALC_C})
    commit_files(src, {"ggml/src/calc.c": CASES_CALC_C.replace("return a - b;", "return a + b;"),
                       "tests/test-add.cpp": flipping("add", "calc_add(2, 3)", 5)},
                 "calc : add adds" + meta("test-add"))
    project = load_project(root=write_project(tmp_path, src), cache_dir=tmp_path / "cache")
    apply(project)
    (v,) = verify(project, backends=["cpu"], timeout=30, hunks=True).verdicts
    (hunk,) = v.hunks
    assert hunk["outcome"] == hk.UNGUARDED and "flaky (2 of 3 runs)" in hunk["reason"], hunk
    assert v.outcome == NOT_PROVEN


# a one-case test whose case names the cores the program sees (std::thread::hardware_concurrency, as
# test-backend-ops sizes its threads)
CORES_NAMED = """\
#include "calc.h"
#include <cstdio>
#include <thread>
int main() {
    printf("Backend 1/1: CPU\\n");
    bool ok = calc_add(2, 3) == 5;
    printf("  ADD(cores=%u): %s\\n", std::thread::hardware_concurrency(), ok ? "OK" : "FAIL");
    printf("  %d/1 tests passed\\n", ok ? 1 : 0);
    return ok ? 0 : 1;
}
"""


@pytest.mark.skipif(sys.platform != "linux", reason="the preload library is built on Linux only")
def test_a_proofs_test_programs_see_the_cores_patchset_shows_whatever_the_machine(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """On a backend that computes on this machine's CPU each run of a proof shows its programs TEST_CORES
    cores (one thread of test-backend-ops, on any machine), says so in the evidence's conditions, and runs
    on its lane's job slot, never behind the gate that keeps a GPU backend's programs one at a time."""
    shown = 3 if os.cpu_count() != 3 else 5  # not this machine's count, so the case name tells them apart
    monkeypatch.setattr(backendmod, "TEST_CORES", shown)
    data = add_adds_proven(tmp_path, CORES_NAMED)
    assert {r["case"] for r in data["cases"]} == {f"ADD(cores={shown})"}, data["cases"]
    assert data["conditions"]["cores"] == shown
    cpu = invocation(TestSpec("test-backend-ops", ()), "cpu")
    cuda = invocation(TestSpec("test-backend-ops", ()), "cuda")
    assert (cpu.cores, cuda.cores) == (shown, None)
    entered = []
    gate = lambda: entered.append(1) or contextlib.nullcontext()  # noqa: E731
    with gated(cpu, gate):
        assert entered == []
    with gated(cuda, gate):
        assert entered == [1]

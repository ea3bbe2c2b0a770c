"""The one tree runner (builder.prove.runner): verify, the fixed-upstream check and canary judge a tree by
one rule. Each test here is a point where the three once disagreed, on the calc tree of test_bump."""

from __future__ import annotations

import json
from pathlib import Path

from helpers import Proj, Upstream

from builder.gitrepo import GitRepo
from builder.project import load_project
from builder.prove import cases, fixed_upstream
from builder.prove.canary_check import checker as canary_checker
from builder.prove.verify import verify
from builder.series.apply import apply
from builder.series.canary import KIND_BUILD
from builder.series.model import Patch, load_series
from builder.series.rebase import dry_run_rebase
from builder.words import CANNOT_TELL, PROVEN
from tests.test_bump import SUB_FIX, make_mini, trailers
from tests.test_canary_build import HEADER
from tests.test_verify import GGML_CMAKE, commit_files, init_upstream, write_project
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


def test_a_crash_in_the_middle_of_a_program_leaves_the_cases_after_it_an_outcome(tmp_path: Path) -> None:
    """Without the fix test-backend-ops crashes in ADD(a=2), the third of four cases: it is run again past that
    case (`-p`), so ADD(a=3) after it has an outcome (it fails, and passes with the fix: proof), and the
    crashing case is named as failing (crash), not left `not reached`."""
    src = init_upstream(tmp_path, {"ggml/CMakeLists.txt": GGML_CMAKE, "ggml/include/calc.h": CASES_CALC_H,
                                   "ggml/src/calc.c": CASES_CALC_C})
    commit_files(src, {"ggml/src/calc.c": CASES_CALC_C.replace("return a - b;", "return a + b;"),
                       "tests/test-backend-ops.cpp": FILTERED}, "calc : add adds" + meta("test-backend-ops"))
    project = load_project(root=write_project(tmp_path, src), cache_dir=tmp_path / "cache")
    apply(project)
    (v,) = verify(project, backends=["cpu"], timeout=30).verdicts
    assert v.outcome == PROVEN, v.reason
    data = json.loads(v.evidence_json.read_text())
    rows = {r["case"]: (r["before"], r["role"]) for r in data["cases"]}
    assert rows["ADD(a=2)"] == (cases.CRASH, cases.PROOF), rows
    assert rows["ADD(a=3)"] == (cases.FAIL, cases.PROOF), rows
    (before,) = [s for s in data["steps"] if s["tree"] == "before"]
    (run,) = before["tests"]
    assert run["signal"] == "SIGABRT" and run["resumed"] == ["test-backend-ops -b CPU -p ^(?!(?:a=2)$)"], run

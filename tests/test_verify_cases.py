"""Case-level known-positive (docs/verify.md): a patch is proven by the test cases that fail without
the fix and pass with it, never by a program that fails as a whole (a time-out, a crash outside the
cases the after tree passes), and an added case that passes without the fix too is a guard case."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_verify import GGML_CMAKE, commit_files, init_upstream, write_project

from builder.compile import testrun
from builder.deliver import evidence_facts
from builder.project import load_project
from builder.prove import cases
from builder.prove.verdicts import OUTCOMES, markdown_table
from builder.prove.verify import verify
from builder.series.apply import apply
from builder.series.load import load_series
from builder.series.trailers import meta_from_trailers
from builder.words import NOT_PROVEN, PROVEN

CALC_H = """\
#pragma once
#ifdef __cplusplus
extern "C" {
#endif
int calc_add(int a, int b);
int calc_sub(int a, int b);
int calc_mul(int a, int b);
int calc_loop(int n);
int calc_feature_a(void);
int calc_feature_b(void);
int calc_feature_c(void);
#ifdef __cplusplus
}
#endif
"""
CALC_C = """\
#include "calc.h"
#include <unistd.h>
int calc_add(int a, int b) { return a - b; }
int calc_sub(int a, int b) { return a + b; }
int calc_mul(int a, int b) { return a * b; }
int calc_loop(int n) { volatile int i = 0; while (i != n) { i = i * 2; usleep(1000); } return i; }
int calc_feature_a(void) { return 0; }
int calc_feature_b(void) { return 0; }
int calc_feature_c(void) { return 0; }
"""


def program(*body: str) -> str:
    """A test program printing in the ggml test programs' format; `check(CASE, GOT, WANT)` is one case."""
    lines = "\n".join(f"    {b}" for b in body)
    return f"""\
#include "calc.h"
#include <cstdio>
#include <cstdlib>
static bool check(const char *name, int got, int want) {{
    printf("  %s: %s\\n", name, got == want ? "OK" : "FAIL");
    return got == want;
}}
int main() {{
    bool ok = true;
    printf("Backend 1/1: CPU\\n");
{lines}
    return ok ? 0 : 1;
}}
"""


def meta(program_name: str, extra: str = "", paths: str = "") -> str:
    return (f"\n\nPatchset-Upstream: not-sent\nPatchset-Backends: cpu\nPatchset-Test: {program_name}\n"
            f"Patchset-Test-Paths: {paths or f'tests/{program_name}.cpp'}\n{extra}")


SUB_CASES = ('ok &= check("sub(a=5,b=3)", calc_sub(5, 3), 2);', 'ok &= check("sub(a=0,b=0)", calc_sub(0, 0), 0);')
MUL_CASE = 'ok &= check("mul(a=2,b=3)", calc_mul(2, 3), 6);'


@pytest.fixture(scope="module")
def verified(tmp_path_factory: pytest.TempPathFactory):
    base = tmp_path_factory.mktemp("cases")
    src = init_upstream(base, {"ggml/CMakeLists.txt": GGML_CMAKE, "ggml/include/calc.h": CALC_H,
                               "ggml/src/calc.c": CALC_C, "tests/test-calc.cpp": program(MUL_CASE)})

    def fix(old: str, new: str) -> str:
        text = (src / "ggml/src/calc.c").read_text()
        assert old in text
        return text.replace(old, new, 1)

    # 1: a new program: add(2,3) fails before (the proof); add(0,0) passes before too (a guard case)
    commit_files(src, {"ggml/src/calc.c": fix("return a - b;", "return a + b;"),
                       "tests/test-add.cpp": program('ok &= check("add(a=2,b=3)", calc_add(2, 3), 5);',
                                                     'ok &= check("add(a=0,b=0)", calc_add(0, 0), 0);')},
                 "calc : add adds" + meta("test-add"))
    # 2: cases added to an existing program; the one that passes before too is declared a guard
    commit_files(src, {"ggml/src/calc.c": fix("int calc_sub(int a, int b) { return a + b; }",
                                              "int calc_sub(int a, int b) { return a - b; }"),
                       "tests/test-calc.cpp": program(MUL_CASE, *SUB_CASES)},
                 "calc : sub subtracts" + meta("test-calc", "Patchset-Guard: test-calc sub(a=0,*): zero operands "
                                                            "give zero with the bug too; kept as a guard\n"))
    # 3: without the fix the test hangs: stopped at its time limit inside loop(n=3)
    commit_files(src, {"ggml/src/calc.c": fix("i = i * 2;", "i = i + 1;"),
                       "tests/test-loop.cpp": program('printf("  loop(n=3): "); fflush(stdout);',
                                                      'ok &= calc_loop(3) == 3; printf("%s\\n", ok ? "OK" : "FAIL");')},
                 "calc : loop ends" + meta("test-loop"))
    def feature(x: str, *body: str, extra: str = "") -> None:
        """A patch that turns calc_feature_X on, with a new program test-fX of `body` after the mul case."""
        commit_files(src, {"ggml/src/calc.c": fix(f"int calc_feature_{x}(void) {{ return 0; }}",
                                                  f"int calc_feature_{x}(void) {{ return 1; }}"),
                           f"tests/test-f{x}.cpp": program(MUL_CASE, *body)},
                     f"calc : feature {x}" + meta(f"test-f{x}", extra))

    # 4: without the fix the test crashes in a case that the after tree skips
    feature("a", 'if (calc_feature_a()) { printf("  fa(x=1): skipping\\n"); }',
            'else { printf("  fa(x=1): "); fflush(stdout); abort(); }')
    # 5: without the fix the only failing case is one the after tree skips
    feature("b", 'if (calc_feature_b()) { printf("  fb(x=1): skipping\\n"); }',
            'else { ok &= check("fb(x=1)", 0, 1); }')
    # 6: without the fix the program aborts between cases, and the patch says so
    feature("c", 'if (!calc_feature_c()) { abort(); }', extra="Patchset-Before: crash\n")
    root = write_project(base, src)
    project = load_project(root=root, cache_dir=tmp_path_factory.mktemp("cache"))
    apply(project)
    report = verify(project, backends=["cpu"], timeout=5)
    verdicts = {v.patch.split("-", 2)[2].removesuffix(".patch"): v for v in report.verdicts}
    return project, verdicts


def _rows(verdict) -> list[dict]:  # type: ignore[no-untyped-def]
    return json.loads(verdict.evidence_json.read_text())["cases"]


def test_added_case_that_passes_before_is_a_guard_case_not_proof(verified) -> None:
    _, verdicts = verified
    v = verdicts["add-adds"]
    assert v.outcome == PROVEN, v.reason
    rows = {r["case"]: r for r in _rows(v)}
    assert rows["add(a=2,b=3)"]["role"] == cases.PROOF and rows["add(a=2,b=3)"]["before"] == cases.FAIL
    assert rows["add(a=0,b=0)"]["role"] == cases.GUARD and rows["add(a=0,b=0)"]["scope"] == cases.ADDED
    assert "guard case" in v.reason and "add(a=0,b=0)" in v.reason
    assert "| `test-add` | CPU | `add(a=0,b=0)` | added | pass | pass | guard case |" in v.evidence_md.read_text()


def test_declared_guard_is_not_reported(verified) -> None:
    project, verdicts = verified
    v = verdicts["sub-subtracts"]
    assert v.outcome == PROVEN, v.reason
    rows = {r["case"]: r for r in _rows(v)}
    # the parent tree's run tells the cases the patch added from the one it had
    assert rows["sub(a=5,b=3)"]["scope"] == cases.ADDED and rows["sub(a=5,b=3)"]["role"] == cases.PROOF
    assert rows["sub(a=0,b=0)"]["role"] == cases.DECLARED_GUARD and "zero operands" in rows["sub(a=0,b=0)"]["guard"]
    assert "mul(a=2,b=3)" not in rows
    assert "guard case" not in v.reason
    # check --strict reads the committed evidence: the undeclared guard of patch 1 is a problem (so are
    # the mul cases of the new programs of patches 4-6), the declared one of patch 2 is not
    docs = project.root / "docs" / "evidence" / "cpu"
    docs.mkdir(parents=True)
    stems = {p.name.removesuffix(".patch"): json.loads((project.evidence_dir / p.name.removesuffix(".patch")
                                                        / "cpu.json").read_text())
             for p in load_series(project.patches_dir).patches}
    (docs / "verify.json").write_text(json.dumps({"format": "patchset-verify-evidence/1", "backend": "cpu",
                                                  "patches": stems}))
    found = evidence_facts.guard_findings(load_series(project.patches_dir), docs.parent)
    by_patch = {f.file.name.split("-", 2)[2]: f.message for f in found}
    assert "sub-subtracts.patch" not in by_patch
    assert "add(a=0,b=0)" in by_patch["add-adds.patch"] and "add(a=2,b=3)" not in by_patch["add-adds.patch"]


def test_before_tree_time_out_does_not_prove(verified) -> None:
    _, verdicts = verified
    v = verdicts["loop-ends"]
    assert v.outcome == NOT_PROVEN
    assert v.reason.startswith("cannot tell") and "time limit" in v.reason and "loop(n=3)" in v.reason
    assert {r["case"]: r["before"] for r in _rows(v)} == {"loop(n=3)": cases.TIMEOUT}


def test_crash_in_a_case_the_after_tree_does_not_pass_does_not_prove(verified) -> None:
    _, verdicts = verified
    v = verdicts["feature-a"]
    assert v.outcome == NOT_PROVEN
    assert "SIGABRT" in v.reason and "fa(x=1)" in v.reason
    rows = {r["case"]: r for r in _rows(v)}
    assert rows["fa(x=1)"]["before"] == cases.CRASH and rows["fa(x=1)"]["after"] == cases.SKIP


def test_failing_before_only_in_cases_the_after_tree_does_not_pass_is_not_proven(verified) -> None:
    _, verdicts = verified
    v = verdicts["feature-b"]
    assert v.outcome == NOT_PROVEN
    assert "no case fails without the fix and passes with it" in v.reason and "fb(x=1)" in v.reason


def test_declared_crash_proves(verified) -> None:
    _, verdicts = verified
    v = verdicts["feature-c"]
    assert v.outcome == PROVEN, v.reason
    assert "SIGABRT" in v.reason and "as the patch declares" in v.reason
    # the crash's site: the last case the program finished before it aborted, the same in each run
    assert "crashes (SIGABRT) after mul(a=2,b=3) in each of 3 runs" in v.reason, v.reason
    (before,) = [s for s in json.loads(v.evidence_json.read_text())["steps"] if s["tree"] == "before"]
    assert before["tests"][0]["crash_site"] == "after mul(a=2,b=3)"


def test_guard_trailer_is_checked(tmp_path: Path) -> None:
    good, found = meta_from_trailers([("Patchset-Guard", "test-backend-ops SET(type=f32,ne=[4096,*],inplace=1): "
                                       "in place, the copy is never made")], "", tmp_path / "x.patch", tmp_path)
    assert not found
    rule = good.guards[0]
    assert rule.matches("test-backend-ops test -o SET -b CPU", "SET(type=f32,ne=[4096,2,1,1],inplace=1)")
    assert not rule.matches("test-backend-ops", "SET(type=f32,ne=[4096,2,1,1],inplace=0)")
    assert not rule.matches("test-opt", "SET(type=f32,ne=[4096,2,1,1],inplace=1)")
    for bad in ("test-backend-ops SET(*)", "test-backend-ops : why", "SET(*): why", "test-backend-ops SET(*):  "):
        _, found = meta_from_trailers([("Patchset-Guard", bad)], f"Patchset-Guard: {bad}", tmp_path / "x.patch",
                                      tmp_path)
        assert len(found) == 1 and "Patchset-Guard" in found[0].message, bad


def test_docs_say_what_proven_means() -> None:
    """docs/verify.md's outcome and case-role tables are the ones verify decides by."""
    text = (Path(__file__).resolve().parent.parent / "docs" / "verify.md").read_text()
    assert markdown_table(OUTCOMES, ("outcome", "meaning")) in text
    assert markdown_table(cases.ROLES, ("role", "meaning")) in text


def test_export_names_the_proof_and_the_undeclared_guard_cases(verified) -> None:
    project, verdicts = verified
    series = load_series(project.patches_dir)
    add, sub = series.patches[0], series.patches[1]
    lines = "\n".join(evidence_facts.case_lines(json.loads(verdicts["add-adds"].evidence_json.read_text()), add))
    assert "cases that fail without the fix and pass with it: 1\n    - `test-add` CPU `add(a=2,b=3)`" in lines
    assert "(guard cases, not part of the proof): 1\n    - `test-add` CPU `add(a=0,b=0)`" in lines
    lines = "\n".join(evidence_facts.case_lines(json.loads(verdicts["sub-subtracts"].evidence_json.read_text()), sub))
    assert "sub(a=5,b=3)" in lines and "guard" not in lines


def _test_opt_crashed_in_adamw() -> tuple[str, str, str]:
    """The pin's test-opt output, that output cut where the adamw group starts with one of its cases failed
    (a run that crashed there, before the group's name), and that case."""
    pin = (Path(__file__).parent / "data" / "test-opt-pin.txt").read_text()
    first = pin.index("  Backend CPU adamw:")
    case = "test_dataset(shuffle=no, ndata_shard=1, ndata_batch=1)"
    crashed = pin[:first].replace(f"{case}: \x1b[1;32mOK\x1b[0m", f"{case}: \x1b[1;31mFAIL\x1b[0m", 1)
    return pin, crashed, case


def result(text: str, signal: str | None) -> testrun.ProgramResult:
    """test-opt's `text` as a run that ended by `signal` (None: exit 0)."""
    found, totals, _ = testrun.parse_console(text, "test-opt")
    return testrun.ProgramResult("test-opt", (), -11 if signal else 0, signal, tuple(found), 0.1, Path("log"), totals)


def test_a_run_stopped_inside_a_group_named_at_its_end_is_matched_to_that_group() -> None:
    """test-opt names its optimizer only after a group's cases (`Backend CPU adamw: OK`): a before run
    that crashed in the adamw group prints those cases without the name. They are the after run's
    adamw cases: the ones that fail before and pass after are the proof (on the H200, patch 3's proof
    was lost this way: every before case read as absent after)."""
    pin, crashed, case = _test_opt_crashed_in_adamw()

    rows = cases.table("test-opt", result(crashed, "SIGSEGV"), result(pin, None), None, (), new_program=False)
    proof = [r for r in rows if r.role == cases.PROOF]
    assert [(r.case, r.backend) for r in proof] == [(case, "CPU adamw")]
    assert not [r for r in rows if r.before != cases.NOT_REACHED and r.after == cases.ABSENT]


def test_confirming_runs_stopped_inside_a_group_named_at_its_end_are_matched_to_that_group() -> None:
    """Patch 3's proof on the real pin: each confirming run of the before tree crashes in test-opt's adamw group
    as the first did, so its cases print without the group's name too. They are matched to the after run's
    group as the first run's are: the case fails in every run and is proof (each read as `not reached`, the
    proof was flaky 1 of 3 runs)."""
    pin, crashed, case = _test_opt_crashed_in_adamw()

    again = result(crashed, "SIGSEGV")
    rows = cases.table("test-opt", again, result(pin, None), None, (), new_program=False,
                       before_more=(again, again), after_more=(result(pin, None), result(pin, None)))
    (row,) = [r for r in rows if r.case == case and r.backend == "CPU adamw"]
    assert row.role == cases.PROOF, row
    assert row.runs == "before: fail fail fail; after: pass pass pass", row

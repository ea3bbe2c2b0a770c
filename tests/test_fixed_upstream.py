"""rebase --fixed-upstream: each patch's own test, without the fix, on the new upstream (issue 23).

A mini-upstream laid out like llama.cpp (ggml/, tests/) with six bugs, one patch per bug, and an
upstream that moves on: it fixes one bug its own way where the patch conflicts, one elsewhere so
that the patch still applies, one with the patch's very diff (then edits the next line), one in
part, none of one, and renames the function the last patch's test calls.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from helpers import (
    B_C,
    STANDARD_NAMES,
    UPSTREAM_FILES,
    Proj,
    Upstream,
    json_document,
    make_project,
    make_sdist,
    make_upstream,
    pin_toml,
    sdist_pin_sources,
)
from test_verify import GGML_CMAKE, commit_files, git, init_upstream

from builder.cli import main
from builder.compile import testrun
from builder.errors import ConflictError
from builder.gitrepo import GitRepo
from builder.project import load_project
from builder.prove.backends_here import available_backends
from builder.prove.fixed_upstream import checker
from builder.prove.runner import tree_path
from builder.prove.verify import verify
from builder.series.apply import apply
from builder.series.dryrun import CANNOT_TELL, FIXED, NOT_FIXED, PARTLY_FIXED, Moved, UpstreamFix
from builder.series.rebase import dry_run_rebase, rebase, skip_rebase
from builder.series.refresh import format_mails, write_series
from tests.test_bump import MINI_H, SERIES, SUB_FIX, TEST_SUB, make_mini

SPACER = "/* - */\n" * 7  # keeps each function's hunk out of its neighbours' context
FUNCS = {
    "add": "int calc_add(int a, int b) { return a - b; }\n",
    "negate": "static int negate(int x) { return x; }\n",
    "sub": "int calc_sub(int a, int b) { return a + negate(b); }\n",
    "mul": "int calc_mul(int a, int b) { return a * b + 1; }\n",
    "clamp": "int calc_clamp(int x) { return x; }\n",
    "neg": "int calc_neg(int a) { return a; }\n",
    "abs": "int calc_abs(int a) { return a; }\n",
}
CALC_H = """\
#pragma once
#ifdef __cplusplus
extern "C" {
#endif
int calc_add(int a, int b);
int calc_sub(int a, int b);
int calc_mul(int a, int b);
int calc_clamp(int x);
int calc_neg(int a);
int calc_abs(int a);
#ifdef __cplusplus
}
#endif
"""


def calc_c(funcs: dict[str, str]) -> str:
    return '#include "calc.h"\n' + "".join(SPACER + f for f in funcs.values())


def program(cases: list[tuple[str, str, int]]) -> str:
    """A test program printing in ggml's format, one case per (name(params), expression, wanted)."""
    body = "".join(f'    ok = ({expr}) == {want}; n += ok; printf("  {case}: %s\\n", ok ? "OK" : "FAIL");\n'
                   for case, expr, want in cases)
    return ('#include "calc.h"\n#include <cstdio>\nint main() {\n    int ok = 0, n = 0;\n'
            '    printf("Backend 1/1: CPU\\n");\n' + body
            + f'    printf("  %d/{len(cases)} tests passed\\n", n);\n    return n == {len(cases)} ? 0 : 1;\n}}\n')


def trailers(program_name: str) -> str:
    return (f"\n\nPatchset-Upstream: not-sent\nPatchset-Backends: cpu\nPatchset-Test: {program_name}\n"
            f"Patchset-Test-Paths: tests/{program_name}.cpp\n")


# (test program, its cases, the fixed function)
PATCHES = {
    "add": ("test-add", [("add(a=2,b=3)", "calc_add(2, 3)", 5)], "int calc_add(int a, int b) { return a + b; }\n"),
    "negate": ("test-sub", [("sub(a=5,b=3)", "calc_sub(5, 3)", 2)], "static int negate(int x) { return -x; }\n"),
    "mul": ("test-mul", [("mul(a=2,b=3)", "calc_mul(2, 3)", 6)], "int calc_mul(int a, int b) { return a * b; }\n"),
    "clamp": ("test-clamp", [("clamp(x=-5)", "calc_clamp(-5)", 0), ("clamp(x=50)", "calc_clamp(50)", 10)],
              "int calc_clamp(int x) { return x < 0 ? 0 : x > 10 ? 10 : x; }\n"),
    "neg": ("test-neg", [("neg(a=2)", "calc_neg(2)", -2)], "int calc_neg(int a) { return -a; }\n"),
    "abs": ("test-abs", [("abs(a=-2)", "calc_abs(-2)", 2)], "int calc_abs(int a) { return a < 0 ? -a : a; }\n"),
}


@pytest.fixture(scope="module")
def moved(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, dict[str, str]]:
    """(project, cache, upstream commits by what they did): the pin, the series on it, and the
    upstream two commits later."""
    base = tmp_path_factory.mktemp("fixed")
    src = init_upstream(base, {"ggml/CMakeLists.txt": GGML_CMAKE, "ggml/include/calc.h": CALC_H,
                               "ggml/src/calc.c": calc_c(FUNCS), "README": "calc\n"})
    pin = git(src, "rev-parse", "HEAD")
    git(src, "tag", "b1")
    # the series, on a branch of its own
    git(src, "checkout", "-q", "-b", "series")
    funcs = dict(FUNCS)
    for key, (prog, cases, fixed) in PATCHES.items():
        funcs[key] = fixed
        commit_files(src, {"ggml/src/calc.c": calc_c(funcs), f"tests/{prog}.cpp": program(cases)},
                     f"calc : fix {key}" + trailers(prog))
    series_commits = git(src, "rev-list", "--reverse", f"{pin}..HEAD").split()
    mul_commit = series_commits[2]
    # upstream: takes the mul patch as it is, then moves on
    git(src, "checkout", "-q", "main")
    git(src, "cherry-pick", mul_commit)
    merged = git(src, "rev-parse", "HEAD")
    up = dict(FUNCS, mul=PATCHES["mul"][2])
    up["add"] = "int calc_add(int a, int b) { return b + a; }\n"  # its own fix: the patch conflicts
    up["sub"] = "int calc_sub(int a, int b) { return a - b; }\n"  # fixed elsewhere: the patch applies
    up["clamp"] = "int calc_clamp(int x) { return x < 0 ? 0 : x; }\n"  # half of it
    up["abs"] = "int calc_absolute(int a) { return a < 0 ? -a : a; }\n"  # renamed: the test no longer builds
    text = calc_c(up).replace(PATCHES["mul"][2], PATCHES["mul"][2] + "/* mul: now exact */\n")
    commit_files(src, {"ggml/src/calc.c": text,
                       "ggml/include/calc.h": CALC_H.replace("calc_abs(", "calc_absolute(")}, "calc : fixes")
    new = git(src, "rev-parse", "HEAD")
    subprocess.run(["git", "-C", str(src), "push", "-q", "--tags", str(base / "remote.git"), "main"], check=True)
    project = base / "project"
    (project / "upstream").mkdir(parents=True)
    (project / "upstream" / "llama.cpp.toml").write_text(
        pin_toml(pin, git(src, "rev-parse", "HEAD~2^{tree}"), [{"kind": "git", "url": (base / "remote.git").as_uri()}],
                 repository=str(base / "remote.git"), tag="b1", date="2026-10-01"))
    write_series(project / "patches", format_mails(GitRepo(src), f"{pin}..series"))
    return project, base / "cache", {"merged": merged, "new": new}


def test_each_patch_gets_the_verdict_of_its_own_test(moved: tuple[Path, Path, dict[str, str]],
                                                     capsys: pytest.CaptureFixture[str],
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    project_dir, cache, commits = moved
    monkeypatch.setenv("PATCHSET_CACHE", str(cache))
    project = load_project(root=project_dir, cache_dir=cache)
    patches_before = {p.name: p.read_bytes() for p in project.patches_dir.iterdir()}

    rc = main(["--project", str(project_dir), "rebase", "--onto", commits["new"], "--dry-run", "--fixed-upstream",
               "--json"])

    captured = capsys.readouterr()
    assert captured.out, captured.err
    data = json_document(captured.out)
    rows = {r["patch"].split("-", 1)[1].removesuffix(".patch"): r for r in data["patches"]}
    got = {k: (r["outcome"], r["fixed_upstream"]["verdict"], r["fixed_upstream"]["still_failing"],
               r["fixed_upstream"]["now_passing"]) for k, r in rows.items()}
    assert got == {
        # upstream's own fix on the patch's line: text says conflict, the test says fixed (the case
        # failed on the old pin, the control, and passes now)
        "calc-fix-add": ("conflict", FIXED, [], ["test-add add(a=2,b=3)"]),
        # fixed in another function: the patch still applies, and is no longer needed
        "calc-fix-negate": ("clean", FIXED, [], ["test-sub sub(a=5,b=3)"]),
        "calc-fix-mul": (got["calc-fix-mul"][0], FIXED, [], ["test-mul mul(a=2,b=3)"]),
        "calc-fix-clamp": ("conflict", PARTLY_FIXED, ["test-clamp clamp(x=50)"], ["test-clamp clamp(x=-5)"]),
        "calc-fix-neg": ("clean", NOT_FIXED, ["test-neg neg(a=2)"], []),
        "calc-fix-abs": ("conflict", CANNOT_TELL, [], []),
    }
    # the mul patch: upstream's commit has its very diff (patch-id), whatever the text now says
    assert rows["calc-fix-mul"]["merged_as"] == commits["merged"]
    assert all("merged_as" not in r for k, r in rows.items() if k != "calc-fix-mul")
    assert "does not build" in rows["calc-fix-abs"]["fixed_upstream"]["evidence"]
    assert "test-abs.cpp" in rows["calc-fix-abs"]["fixed_upstream"]["evidence"]
    assert rc == 3  # some patches would not apply
    assert {p.name: p.read_bytes() for p in project.patches_dir.iterdir()} == patches_before

    # the table in words: the upstream column
    assert main(["--project", str(project_dir), "rebase", "--onto", commits["new"], "--dry-run",
                 "--fixed-upstream"]) == 3
    out = capsys.readouterr().out.replace("\n", " ")
    assert "partly fixed upstream" in out and "merged as " + commits["merged"][:12] in out



def test_the_check_builds_in_verify_s_folders_and_verify_still_holds(
        moved: tuple[Path, Path, dict[str, str]], capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The check switches verify's worktree and build folder to its own trees (the old pin's tree of a
    patch is verify's before tree): exactly its trees, nothing verify left there, and verify afterwards
    checks its own trees out again and says what it said before."""
    project_dir, cache, commits = moved
    monkeypatch.setenv("PATCHSET_CACHE", str(cache))
    project = load_project(root=project_dir, cache_dir=cache)
    first = verify(project, backends=["cpu"])
    src = project.state_dir / "verify" / "src"
    stray = src / "tests" / "test-left-by-verify.cpp"
    stray.write_text("#error not part of any tree the check builds\n")

    report = dry_run_rebase(project, commits["new"], checker(project, "cpu"))

    assert {p.patch.split("-", 1)[1].removesuffix(".patch"): p.fix.verdict if p.fix else None
            for p in report.patches} == {"calc-fix-add": FIXED, "calc-fix-negate": FIXED, "calc-fix-mul": FIXED,
                                         "calc-fix-clamp": PARTLY_FIXED, "calc-fix-neg": NOT_FIXED,
                                         "calc-fix-abs": CANNOT_TELL}
    assert not stray.exists()
    assert not (project.build_root / "upstream-check-cpu-minimal").exists()
    assert GitRepo(src).is_dirty()  # verify's worktree holds the check's last tree now

    again = verify(project, backends=["cpu"], reuse=False)

    assert [(v.patch, v.outcome) for v in again.verdicts] == [(v.patch, v.outcome) for v in first.verdicts]
    assert not GitRepo(src).is_dirty()


def _missing_backend() -> str:
    missing = next((b for b in ("metal", "cuda") if b not in available_backends()), None)
    if missing is None:
        pytest.skip("this machine has every backend")
    return missing


def test_a_backend_not_here_cannot_tell_and_the_rebase_table_carries_it(proj: Proj) -> None:
    """The tiny standard series, moved cleanly, checked on a backend this machine lacks: no build
    at all, `cannot tell` with why, in the table the real rebase writes."""
    missing = _missing_backend()
    apply(proj.project)
    new = proj.upstream.advance({"README": "moved\n"}, "readme\n")

    result = rebase(proj.project, new, checker(proj.project, missing))

    assert result.report_file is not None
    rows = json.loads(result.report_file.read_text())["patches"]
    assert [(r["outcome"], r["fixed_upstream"]["verdict"], r["fixed_upstream"]["evidence"]) for r in rows] == [
        ("clean", CANNOT_TELL, f"backend {missing} is not on this machine")] * 3
    assert not (proj.project.build_root / f"verify-{missing}-minimal").exists()


def test_pins_from_source_archives_have_no_history_to_compare(tmp_path: Path, cache_dir: Path) -> None:
    """Both pins imported from sdists: the cache holds stand-in commits, not upstream's, so there
    is nothing to compare patch-ids with; the check still runs (the backend answer here)."""
    up = make_upstream(tmp_path)
    archive = make_sdist(tmp_path / "dist" / "pkg-1.0.tar.gz", dict(UPSTREAM_FILES))
    proj = make_project(tmp_path, up, cache_dir, sources=sdist_pin_sources(archive, bogus_git_first=False))
    files = {**UPSTREAM_FILES, "README": "moved\n"}
    new = up.advance({"README": "moved\n"}, "readme\n")
    archive2 = make_sdist(tmp_path / "dist2" / "pkg-1.1.tar.gz", files)
    new_pin = tmp_path / "new.toml"
    new_pin.write_text(pin_toml(new, up.tree_of(new), sdist_pin_sources(archive2, bogus_git_first=False)))

    report = dry_run_rebase(proj.project, str(new_pin), checker(proj.project, _missing_backend()))

    assert [(p.outcome, p.merged_as, p.fix.verdict if p.fix else None) for p in report.patches] == [
        ("clean", "", CANNOT_TELL)] * 3


def test_only_a_backend_of_the_proof_is_asked(proj: Proj) -> None:
    """A Metal fix's CPU test passes without the fix (the bug is not on the CPU): asking the CPU
    whether upstream fixed it would say `fixed upstream` for every such patch."""
    first = proj.patches / STANDARD_NAMES[0]
    first.write_text(first.read_text().replace("Patchset-Backends: cpu\n", "Patchset-Backends: metal\n")
                     .replace("Patchset-Test: test-x\n", "Patchset-Test: [cpu,metal] test-x\n"))
    apply(proj.project)
    new = proj.upstream.advance({"README": "moved\n"}, "readme\n")

    report = dry_run_rebase(proj.project, new, checker(proj.project, "cpu"))

    fix = report.patches[0].fix
    assert fix is not None and (fix.verdict, fix.evidence) == (CANNOT_TELL, "the proof runs on metal, not on cpu")


def test_a_rebase_stopped_at_a_conflict_keeps_its_verdicts_for_the_final_table(proj: Proj) -> None:
    missing = _missing_backend()
    apply(proj.project)
    new = proj.upstream.advance({"src/b.c": B_C.replace("int b_len(const char *s) {\n",
                                                        "int b_len(const char *s) {\n    if (!s) return -1;\n")},
                                "b: reject NULL\n")
    with pytest.raises(ConflictError):
        rebase(proj.project, new, checker(proj.project, missing))

    result = skip_rebase(proj.project)

    assert result.report is not None and result.report_file is not None
    assert [(p.outcome, p.fix.verdict if p.fix else None) for p in result.report.patches] == [
        ("clean", CANNOT_TELL), ("skipped", CANNOT_TELL), ("clean", CANNOT_TELL)]
    assert json.loads(result.report_file.read_text()) == result.report.as_json()
    assert not list(proj.project.state_dir.glob("*.checked.json"))


def test_a_compile_error_is_placed_in_the_tree_however_the_compiler_names_the_file(tmp_path: Path) -> None:
    """With CCACHE_BASEDIR set the compiler names files relative to the build folder it runs in: an
    error in the test part must still read as one in the test part (else `cannot tell`)."""
    src, build = tmp_path / "verify" / "src", tmp_path / "build" / "verify-cpu-minimal"
    (src / "tests").mkdir(parents=True)
    build.mkdir(parents=True)
    assert tree_path("../../verify/src/tests/test-opt.cpp", src, build) == "tests/test-opt.cpp"
    assert tree_path(str(src / "tests" / "test-opt.cpp"), src, build) == "tests/test-opt.cpp"
    assert tree_path("tests/test-opt.cpp", src, build) == "tests/test-opt.cpp"


# -- the control (issue 30): on the calc tree of test_bump -------------------------------------------
def _mini(tmp_path: Path, up: Upstream, cache_dir: Path,
          patches: list[tuple[dict[str, str | bytes | None], str]]) -> Proj:
    return make_mini(tmp_path, up, cache_dir, patches=patches)


def _verdicts(proj: Proj, new: str) -> dict[str, UpstreamFix]:
    report = dry_run_rebase(proj.project, new, checker(proj.project, "cpu", jobs=2))
    return {p.patch: p.fix for p in report.patches if p.fix is not None} | {
        f"{p.patch} merged as": p.merged_as for p in report.patches}  # type: ignore[dict-item]


def test_a_patch_merged_as_is_and_one_fixed_another_way_in_part(tmp_path: Path, up: Upstream,
                                                                 cache_dir: Path) -> None:
    """Issue 30's scenario in small: upstream takes patch A (sub) as it is, then fixes patch B's bug
    (mul) its own way, for one case of two: A `fixed upstream` and merged as upstream's commit, B
    `partly fixed upstream` naming the case that still fails, not `not fixed upstream`."""
    mul_fix = SUB_FIX.replace("calc_mul(int a, int b) { return calc_add(a, b); }",
                              "calc_mul(int a, int b) { return a * b; }")
    test_mul = program([("mul(a=3,b=3)", "calc_mul(3, 3)", 9), ("mul(a=0,b=5)", "calc_mul(0, 5)", 0)])
    proj = _mini(tmp_path, up, cache_dir, [
        ({"ggml/src/calc.c": SUB_FIX, "tests/test-sub.cpp": TEST_SUB}, "calc : sub subtracts" + trailers("test-sub")),
        ({"ggml/src/calc.c": mul_fix, "tests/test-mul.cpp": test_mul}, "calc : mul multiplies" + trailers("test-mul"))])
    a, b = proj.series()
    merged = up.advance({"ggml/src/calc.c": SUB_FIX, "tests/test-sub.cpp": TEST_SUB}, "calc: sub subtracts\n")
    new = up.advance({"ggml/src/calc.c": SUB_FIX.replace(
        "calc_mul(int a, int b) { return calc_add(a, b); }",
        "calc_mul(int a, int b) { return a == b ? a * b : calc_add(a, b); }")}, "calc: mul of squares\n")

    got = _verdicts(proj, new)

    fa, fb = got[a], got[b]
    assert (fa.verdict, fa.still_failing, fa.now_passing) == (FIXED, (), ("test-sub SUB(want=2)",))
    assert got[f"{a} merged as"] == merged
    assert (fb.verdict, fb.still_failing, fb.now_passing) == (
        PARTLY_FIXED, ("test-mul mul(a=0,b=5)",), ("test-mul mul(a=3,b=3)",))
    assert "the same cases failing" in fb.evidence



def test_a_case_the_old_pin_never_reached_and_that_still_fails_is_left_of_the_patch(
        tmp_path: Path, up: Upstream, cache_dir: Path) -> None:
    """The real patch 3's shape: on the old pin its test program crashes after its first failing case (test-opt at
    free_while_allocated, before the sgd pass), so its later cases never run there. Upstream fixes the first case
    its own way and not the last: the last one fails on the new upstream, and it is what is left of the patch, not
    a case that fails only there: `partly fixed upstream`, naming it (was `cannot tell`)."""
    mul_fix = SUB_FIX.replace("calc_mul(int a, int b) { return calc_add(a, b); }",
                              "calc_mul(int a, int b) { return a * b; }")
    crash = '    fflush(stdout); if (calc_mul(3, 3) != 9) __builtin_trap();\n'
    test_mul = program([("mul(a=3,b=3)", "calc_mul(3, 3)", 9), ("mul(a=0,b=5)", "calc_mul(0, 5)", 0)])
    test_mul = test_mul.replace('    ok = (calc_mul(0, 5))', crash + '    ok = (calc_mul(0, 5))')
    assert crash in test_mul
    proj = _mini(tmp_path, up, cache_dir, [
        ({"ggml/src/calc.c": mul_fix, "tests/test-mul.cpp": test_mul}, "calc : mul multiplies" + trailers("test-mul"))])
    [name] = proj.series()
    new = up.advance({"ggml/src/calc.c": SUB_FIX.replace(
        "calc_mul(int a, int b) { return calc_add(a, b); }",
        "calc_mul(int a, int b) { return a == b ? a * b : calc_add(a, b); }")}, "calc: mul of squares\n")

    fix = _verdicts(proj, new)[name]

    assert (fix.verdict, fix.still_failing, fix.now_passing) == (
        PARTLY_FIXED, ("test-mul mul(a=0,b=5)",), ("test-mul mul(a=3,b=3)",)), fix
    assert "not reached on the old pin" in fix.evidence and "crashed" in fix.evidence


QUIET = '#include <cstdio>\nint main() { printf("Backend 1/1: CPU\\n"); return 0; }\n'


def test_a_run_where_one_program_checked_nothing_is_nothing_checked_in_the_check_and_in_verify(
        tmp_path: Path, up: Upstream, cache_dir: Path) -> None:
    """test-sub passes on the new upstream and test-quiet checks nothing: verify calls that tree
    `nothing checked` (`tree_verdict`), and so does the check: `cannot tell`, never `fixed upstream`."""
    msg = ("calc : sub subtracts\n\nPatchset-Upstream: not-sent\nPatchset-Backends: cpu\nPatchset-Test: test-sub\n"
           "Patchset-Test: test-quiet\nPatchset-Test-Paths: tests/test-sub.cpp tests/test-quiet.cpp\n")
    proj = _mini(tmp_path, up, cache_dir, [
        ({"ggml/src/calc.c": SUB_FIX, "tests/test-sub.cpp": TEST_SUB, "tests/test-quiet.cpp": QUIET}, msg)])
    [name] = proj.series()
    new = up.advance({"ggml/src/calc.c": SUB_FIX}, "calc: sub subtracts\n")

    fix = _verdicts(proj, new)[name]

    assert fix.verdict == CANNOT_TELL and "the tests check nothing" in fix.evidence, fix
    assert testrun.tree_verdict([testrun.PASSED, testrun.NOTHING]) == testrun.TREE_NOTHING
    assert testrun.tree_verdict([testrun.FAILED, testrun.NOTHING]) == testrun.TREE_FAILS


def test_each_tree_is_checked_out_with_the_series_heads_comments(tmp_path: Path, up: Upstream,
                                                                 cache_dir: Path) -> None:
    """A header the series changes in a comment only is in the series head's version in every tree the check builds
    (the same code: what includes it is found in the compiler cache after `patchset build`), the old pin's as the new
    upstream's; the verdicts are those of the trees' code."""
    note = MINI_H.replace("#pragma once\n", "#pragma once\n// calc: the library of the mini tree\n")
    mini = make_mini(tmp_path, up, cache_dir, [*SERIES, ({"ggml/include/calc.h": note}, "calc : note the header")])
    new = mini.upstream.advance({"README": "calc, moved on\n"}, "readme\n")
    src = mini.project.state_dir / "verify" / "src"
    seen: list[str] = []
    check = checker(mini.project, "cpu")

    def watched(moved: Moved) -> dict[str, UpstreamFix]:
        out = check(moved)
        seen.append((src / "ggml" / "include" / "calc.h").read_text())
        return out

    report = dry_run_rebase(mini.project, new, watched)

    # the last tree built is patch 2's on the old pin (the control), whose header is the pin's but for the comment
    assert seen == [note]
    verdicts = [(p.fix.verdict if p.fix else None) for p in report.patches]
    assert verdicts[:2] == [NOT_FIXED, NOT_FIXED], [p.fix for p in report.patches]

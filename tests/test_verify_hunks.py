"""verify --hunks on a synthetic mini-upstream: one fix whose hunks reach every outcome.

The fix has four hunks: calc.h defines CALC_ZERO (only the compiler guards it: calc.c uses it),
calc_add's fix (the test guards it), calc_clamp's change (no test looks at it), and a reworded
comment (exempt by itself).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_verify import commit_files, git, init_upstream, program_source, trailers, write_project

from builder.cli import main
from builder.gitrepo import GitRepo
from builder.project import load_project
from builder.prove import hunks as hk
from builder.prove.verdicts import report_table
from builder.prove.verifier import hunk_test_limits
from builder.prove.verify import verify
from builder.series.load import load_series
from builder.words import NOT_PROVEN, PROVEN


def filler(name: str) -> str:
    return "".join(f"int calc_{name}{i}(void) {{ return {i}; }}\n" for i in range(8))


CALC_C = f"""\
#include "calc.h"
int calc_add(int a, int b) {{
    return a - b;
}}
{filler("pad")}int calc_clamp(int a) {{
    return a;
}}
{filler("more")}/* multiply two numbers */
int calc_mul(int a, int b) {{ return a * b; }}
"""
CALC_H = """\
#pragma once
#ifdef __cplusplus
extern "C" {
#endif
int calc_add(int a, int b);
int calc_clamp(int a);
int calc_mul(int a, int b);
#ifdef __cplusplus
}
#endif
"""
FIXED_C = (CALC_C.replace("    return a - b;", "    return a + b + CALC_ZERO;")
           .replace("    return a;\n", "    return a < 0 ? 0 : a;\n")
           .replace("/* multiply two numbers */", "/* the product of two numbers */"))
FIXED_H = CALC_H.replace('extern "C" {\n#endif\n', 'extern "C" {\n#endif\n#define CALC_ZERO 0\n')
GGML_CMAKE = "add_library(ggml OBJECT src/calc.c)\ntarget_include_directories(ggml PUBLIC include)\n"
EXEMPT = "Patchset-Hunk: ggml/src/calc.c:calc_clamp() exempt: no caller passes a negative value yet\n"


def make_project(base: Path, extra_trailers: str) -> Path:
    src = init_upstream(base, {"ggml/CMakeLists.txt": GGML_CMAKE, "ggml/include/calc.h": CALC_H,
                               "ggml/src/calc.c": CALC_C})
    commit_files(src, {"ggml/src/calc.c": FIXED_C, "ggml/include/calc.h": FIXED_H,
                       "tests/test-add.cpp": program_source("add", "calc_add(2, 3)", 5)},
                 "calc : add adds" + trailers("cpu", "test-add", extra_trailers))
    return write_project(base, src)


def run(base: Path, extra_trailers: str):
    project = load_project(root=make_project(base, extra_trailers), cache_dir=base / "cache")
    return project, verify(project, backends=["cpu"], hunks=True)


def by_lines(report) -> dict[str, str]:
    (v,) = report.verdicts
    return {f"{h['file'].rsplit('/', 1)[1]}:{h['section'] or h['lines']}": h["outcome"] for h in v.hunks}


@pytest.fixture(scope="module")
def plain(tmp_path_factory: pytest.TempPathFactory):
    return run(tmp_path_factory.mktemp("hunks"), "")


def test_each_hunk_gets_its_outcome(plain) -> None:
    _, report = plain
    (v,) = report.verdicts
    got = {(h["file"], h["lines"]): h["outcome"] for h in v.hunks}
    assert got == {
        ("ggml/include/calc.h", "5"): hk.NOT_BUILT,
        ("ggml/src/calc.c", "3"): hk.CAUGHT,
        ("ggml/src/calc.c", "14"): hk.UNGUARDED,
        ("ggml/src/calc.c", "24"): hk.EXEMPT,
    }
    hunks = {h["lines"]: h for h in v.hunks}
    # caught: the failing case is named; not built: where the compiler stopped
    assert any("add(want=5)" in f for f in hunks["3"]["failing"])
    assert hunks["5"]["errors"][0].startswith("ggml/src/calc.c:3: ") and "CALC_ZERO" in hunks["5"]["errors"][0]
    assert hunks["24"]["reason"] == "changes only comments or whitespace"
    # a header's users all recompile: its pre-check (calc.c with the build's own flags, beside the
    # builds) said it first, and nothing was built for it
    assert hunks["5"]["reason"] == "does not compile" and hunks["5"]["build_duration_s"] == 0
    # the section is the definition the hunk changes
    assert hunks["14"]["section"] == "int calc_clamp(int a) {"
    assert hunks["3"]["section"] == "int calc_add(int a, int b) {"
    # an unguarded hunk: the patch is not proven, and the reason names the hunk
    assert v.outcome == NOT_PROVEN and "ggml/src/calc.c:14" in v.reason
    assert not report.ok and not report.regressed


def test_reverted_trees_differ_from_after_by_one_hunk(plain) -> None:
    project, report = plain
    (v,) = report.verdicts
    work = project.work_repo
    for h in v.hunks:
        if not h["commit"]:
            continue
        diff = git(work, "diff", "--numstat", f"{h['commit']}^", h["commit"])
        (line,) = diff.splitlines()
        added, removed, path = line.split("\t")
        # reverting swaps what the hunk added and removed
        assert (path, int(added), int(removed)) == (h["file"], h["removed"], h["added"])


def test_evidence_and_report_carry_the_hunk_table(plain) -> None:
    project, report = plain
    (v,) = report.verdicts
    data = json.loads(v.evidence_json.read_text())
    assert data["hunks_checked"] and [h["outcome"] for h in data["hunks"]] == [h["outcome"] for h in v.hunks]
    md = v.evidence_md.read_text()
    assert "each hunk of the fix reverted on its own" in md and "| unguarded |" in md
    ((_, cells),) = report_table(project)
    assert cells["cpu"] == f"{NOT_PROVEN} (hunks 1/4 caught, 1 not built, 1 exempt, 1 unguarded)"


def test_cli_exits_4_on_an_unguarded_hunk(plain, monkeypatch: pytest.MonkeyPatch,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    project, _ = plain
    monkeypatch.setenv("PATCHSET_CACHE", str(project.cache_dir))
    assert main(["--project", str(project.root), "verify", "--hunks", "--backend", "cpu"]) == 4
    out = capsys.readouterr().out
    assert "unguarded" in out and "reused" in out
    # a plain run reuses the evidence that has the hunk table, and says the same
    assert main(["--project", str(project.root), "verify", "--report"]) == 0
    assert "1 unguarded" in capsys.readouterr().out


def test_exemption_trailer_makes_it_exempt(tmp_path: Path) -> None:
    _, report = run(tmp_path, EXEMPT)
    (v,) = report.verdicts
    got = {h["lines"]: (h["outcome"], h["reason"]) for h in v.hunks}
    assert got["14"] == (hk.EXEMPT,
                         "no caller passes a negative value yet (Patchset-Hunk ggml/src/calc.c:calc_clamp())")
    assert [got[k][0] for k in ("3", "5", "24")] == [hk.CAUGHT, hk.NOT_BUILT, hk.EXEMPT]
    assert v.outcome == PROVEN and report.ok
    assert "hunks 1/4 caught, 1 not built, 2 exempt" in v.reason


def test_a_range_splits_a_hunk_and_stale_rules_are_errors(tmp_path: Path) -> None:
    """No build here: the units a rule makes, and a rule that names no change."""
    project = load_project(root=make_project(tmp_path, "Patchset-Hunk: ggml/src/calc.c:3-3\n"), cache_dir=tmp_path)
    patch = load_series(project.patches_dir).patches[0]
    src = tmp_path / "src"
    after, parent = git(src, "rev-parse", "HEAD"), git(src, "rev-parse", "HEAD^")
    units = hk.fix_units(GitRepo(src), parent, after, patch)
    assert [(u.file, u.label) for u in units] == [
        ("ggml/include/calc.h", "ggml/include/calc.h:5"), ("ggml/src/calc.c", "ggml/src/calc.c:3"),
        ("ggml/src/calc.c", "ggml/src/calc.c:14"), ("ggml/src/calc.c", "ggml/src/calc.c:24")]
    # a hunk that mixes two changes: the range names one of them, the rest is its own unit
    two = hk.Unit("ggml/src/calc.c", 1, "", "", (hk.Change("-", "x\n", 3), hk.Change("+", "y\n", 3),
                                                 hk.Change("-", "p\n", 5), hk.Change("+", "q\n", 5)))
    rule = patch.meta.hunks[0]
    parts = hk._split(two.file, 1, "", list(two.changes), "M", [rule])
    assert [(p.part, p.label, p.rule) for p in parts] == [("a", "ggml/src/calc.c:3", rule),
                                                          ("b", "ggml/src/calc.c:5", None)]
    # reverting one part leaves the other in place
    text = "l1\nl2\ny\nl4\nq\n"
    assert hk.revert_text(text, parts[0]) == "l1\nl2\nx\nl4\nq\n"
    assert hk.revert_text(text, parts[1]) == "l1\nl2\ny\nl4\np\n"
    stale = hk.HunkRule("ggml/src/calc.c", 40, 41, reason="nothing here")
    assert hk.unused_rules(units, (stale,), lambda f: []) == [stale]


LIB_CPP = f"""\
#include "calc.h"
/* helpers */
{filler("lib")}int lib_twice(int a) {{
    return a + a;
}}
"""
# the fix adds a helper in one hunk and uses it in another, far enough apart to be two hunks
LIB_FIXED = (LIB_CPP.replace("/* helpers */\n", "/* helpers */\nstatic int twice(int a) { return calc_add(a, a); }\n")
             .replace("return a + a;", "return twice(a);"))


def test_llama_side_sources_are_compiled_on_their_own(tmp_path: Path) -> None:
    """A fix that also changes a source the test build does not compile (llama's `src/`): each of
    its hunks is compiled on its own, beside the builds, in a worktree of its own."""
    src = init_upstream(tmp_path, {"ggml/CMakeLists.txt": GGML_CMAKE, "ggml/include/calc.h": CALC_H,
                                   "ggml/src/calc.c": CALC_C, "src/lib.cpp": LIB_CPP})
    commit_files(src, {"ggml/src/calc.c": FIXED_C, "ggml/include/calc.h": FIXED_H, "src/lib.cpp": LIB_FIXED,
                       "tests/test-add.cpp": program_source("add", "calc_add(2, 3)", 5)},
                 "calc : add adds" + trailers("cpu", "test-add", EXEMPT + "Patchset-Hunk: src/lib.cpp:lib_twice() "
                                              "exempt: no test links llama's sources\n"))
    project = load_project(root=write_project(tmp_path, src), cache_dir=tmp_path / "cache")
    (v,) = verify(project, backends=["cpu"], hunks=True).verdicts
    got = {(h["file"], h["lines"]): h for h in v.hunks}
    helper = got[("src/lib.cpp", "3")]
    assert helper["outcome"] == hk.NOT_BUILT and helper["build_duration_s"] == 0
    assert helper["errors"][0].startswith("src/lib.cpp:") and "twice" in helper["errors"][0]
    assert got[("src/lib.cpp", "13")]["outcome"] == hk.EXEMPT
    assert [h["outcome"] for f, h in got.items() if f[0] != "src/lib.cpp"] == [
        hk.NOT_BUILT, hk.CAUGHT, hk.EXEMPT, hk.EXEMPT]
    assert v.outcome == PROVEN
    # the checks ran in a worktree of their own, and wrote nothing into it
    syntax = project.state_dir / "verify" / "syntax"
    assert (syntax / ".git").is_file() and git(syntax, "status", "--porcelain", "--ignored") == ""


def test_a_pre_check_writes_nothing_and_compiles_the_other_checkout(tmp_path: Path) -> None:
    """The build's own command for a file, turned into one that writes no object, no dependency
    file (the build's would be overwritten) and reads the file from the other checkout."""
    build, src, other = tmp_path / "build", tmp_path / "src", tmp_path / "other"
    argv = ("/usr/bin/ccache", "/usr/bin/c++", "-DGGML_BUILD", f"-I{src}/ggml/include", "-O3", "-MD", "-MT",
            "x.o", "-MF", "x.o.d", "-o", "x.o", "-c", f"{src}/ggml/src/calc.c")
    db = hk.CompileDb({"ggml/src/calc.c": (str(build), argv)}, src)
    assert "ggml/src/calc.c" in db and "src/lib.cpp" not in db
    cwd, cmd = db.syntax_command("ggml/src/calc.c", other)
    assert cwd == str(build)
    assert cmd == ["/usr/bin/c++", "-DGGML_BUILD", f"-I{other}/ggml/include", "-O3", f"{other}/ggml/src/calc.c",
                   "-fsyntax-only"]


def test_each_test_command_gets_its_own_limit_on_a_reverted_tree() -> None:
    # a hung test-opt is stopped at 30 s even when a slower program runs beside it
    limits = hunk_test_limits(({"command": "test-opt", "duration_s": 0.1},
                               {"command": "test-llama-archs --opt", "duration_s": 4.5}))
    assert limits == {"test-opt": 30.0, "test-llama-archs --opt": 90.0}


# the loop sleeps: a hang costs the machine no CPU while the test waits for its limit
SPIN = ("#include <unistd.h>\nint calc_spin(int n) {\n    volatile int left = n;\n    while (left > 0) {\n"
        "        usleep(1000);\n    }\n    return left;\n}\n")
SPIN_C = CALC_C + filler("tail") + SPIN
SPIN_FIXED_C = FIXED_C + filler("tail") + SPIN.replace("usleep(1000);\n", "usleep(1000);\n        left = left - 1;\n")
SPIN_H = CALC_H.replace("int calc_mul(int a, int b);\n", "int calc_mul(int a, int b);\nint calc_spin(int n);\n")
SPIN_TEST = """\
#include "calc.h"
#include <cstdio>
int main() {
    printf("Backend 1/1: CPU\\n");
    bool add = calc_add(2, 3) == 5;
    printf("  add(want=5): %s\\n", add ? "OK" : "FAIL");
    if (!add) {
        printf("  0/2 tests passed\\n");
        return 1;
    }
    fflush(stdout);
    bool spin = calc_spin(3) == 0;
    printf("  spin(want=0): %s\\n", spin ? "OK" : "FAIL");
    printf("  %d/2 tests passed\\n", spin ? 2 : 1);
    return spin ? 0 : 1;
}
"""


def test_a_reverted_hunk_that_hangs_the_test_is_caught_at_its_limit(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """Without one hunk of the fix the test program never ends (calc_spin loops): the program is
    killed at the time limit of the reverted trees, and the hunk counts as caught."""
    monkeypatch.setattr("builder.prove.verifier.HUNK_TEST_TIMEOUT_MIN_S", 2.0)
    src = init_upstream(tmp_path, {"ggml/CMakeLists.txt": GGML_CMAKE, "ggml/include/calc.h": SPIN_H,
                                   "ggml/src/calc.c": SPIN_C})
    commit_files(src, {"ggml/src/calc.c": SPIN_FIXED_C, "ggml/include/calc.h": FIXED_H.replace(
        "int calc_mul(int a, int b);\n", "int calc_mul(int a, int b);\nint calc_spin(int n);\n"),
        "tests/test-add.cpp": SPIN_TEST}, "calc : add adds, spin ends" + trailers("cpu", "test-add", EXEMPT))
    project = load_project(root=write_project(tmp_path, src), cache_dir=tmp_path / "cache")
    (v,) = verify(project, backends=["cpu"], hunks=True).verdicts
    (spin,) = [h for h in v.hunks if h["section"].startswith("int calc_spin")]
    assert spin["outcome"] == hk.CAUGHT, spin
    # the program was stopped at the hunk trees' limit, not at verify's: the failing line says so
    (run,) = spin["tests"]
    assert run["returncode"] == -9 and 2.0 <= run["duration_s"] < 30, run
    assert any(line.strip().startswith("timeout(limit=2s)") for line in spin["failing"]), spin
    # a run stopped at its limit has no signal of its own: the reason says it did not finish, not "exit -9"
    assert "did not finish in 2s" in spin["reason"] and "exit -9" not in spin["reason"], spin["reason"]
    assert v.outcome == PROVEN, v.reason


def test_a_reverted_hunk_that_only_the_link_refuses_is_not_built(tmp_path: Path) -> None:
    """A hunk whose reverted tree compiles file by file but does not link (the definition of a function the
    fix calls): its tree did not build, so it has no test results to confirm over runs. Seen crashing
    (`zip()` of no results with one run list per test) before the runs were read after the build's check."""
    fixed = (CALC_C.replace("    return a - b;", "    return a + b + calc_base();")
             + "\n" + filler("gap") + "int calc_base(void) { return 0; }\n")
    header = CALC_H.replace("int calc_mul(int a, int b);\n", "int calc_mul(int a, int b);\nint calc_base(void);\n")
    src = init_upstream(tmp_path, {"ggml/CMakeLists.txt": GGML_CMAKE, "ggml/include/calc.h": CALC_H,
                                   "ggml/src/calc.c": CALC_C})
    commit_files(src, {"ggml/src/calc.c": fixed, "ggml/include/calc.h": header,
                       "tests/test-add.cpp": program_source("add", "calc_add(2, 3)", 5)},
                 "calc : add adds" + trailers("cpu", "test-add"))
    project = load_project(root=write_project(tmp_path, src), cache_dir=tmp_path / "cache")
    (v,) = verify(project, backends=["cpu"], hunks=True, confirm=2).verdicts
    built = [h for h in v.hunks if h["reason"] == "does not build"]
    assert [(h["file"], h["outcome"]) for h in built] == [("ggml/src/calc.c", hk.NOT_BUILT)], v.hunks
    assert any("calc_base" in e for e in built[0]["errors"]), built[0]["errors"]

"""The regression sweep: splitting crashed runs, and the case-by-case comparison of two trees."""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from helpers import Proj, Upstream

from builder.cli import main
from builder.compile.testrun import CRASH, FAIL, PASS, Invocation, ProgramResult, parse_console, run_program
from builder.gitrepo import GitRepo
from builder.progress import NullProgress
from builder.prove.sweep import SweepOptions, _confirm, sweep, tree_invocations
from builder.prove.sweep_compare import (
    FAILING_IN_BOTH,
    FLAKY,
    NEW_FAILING,
    NEWLY_FAILING,
    NEWLY_PASSING,
    NEWLY_SKIPPED,
    ONLY_OTHER,
    ONLY_PATCHED,
    SweepReport,
    TreeRun,
    compare,
    sweep_dict,
    sweep_junit,
)
from builder.prove.sweep_split import TreeRunner, complement, excludable, expand, split_entries
from tests.test_bump import CALC_C, MINI_H, SERIES, make_mini
from tests.test_testrun import compile_c

DATA = Path(__file__).parent / "data"

# A stand-in for test-backend-ops that reads `-o` as the real one does (plain names exactly, anything
# else as an extended regex on the op name) and aborts in the middle of REGLU, like the pin's grad
# mode. Op names come in test-case order, not sorted, as in the real program.
FAKE_TBO = r"""
#include <regex.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char * OPS[] = {"ADD", "ABS", "REGLU", "RELU", "REPEAT", "ROPE", "SET", "ACC", "SOFTCAP", "CPY"};
static const int N_OPS = 10;

static int entry_matches(const char * e, const char * op) {
    if (strcmp(e, op) == 0) return 1;
    int plain = 1;
    for (const char * c = e; *c; c++) {
        if (!((*c >= 'A' && *c <= 'Z') || (*c >= '0' && *c <= '9') || *c == '_')) plain = 0;
    }
    if (plain) return 0;
    regex_t re;
    if (regcomp(&re, e, REG_EXTENDED | REG_NOSUB) != 0) return 0;
    int ok = regexec(&re, op, 0, NULL, 0) == 0;
    regfree(&re);
    return ok;
}

static int selected(const char * filter, const char * op) {
    if (!filter) return 1;
    char buf[4096];
    strncpy(buf, filter, sizeof(buf) - 1);
    buf[sizeof(buf) - 1] = 0;
    for (char * e = strtok(buf, ","); e; e = strtok(NULL, ",")) if (entry_matches(e, op)) return 1;
    return 0;
}

int main(int argc, char ** argv) {
    const char * filter = NULL;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--list-ops") == 0) {
            /* the real list has no fused names such as SOFTCAP: splitting must still reach them */
            printf("GGML operations:\n  ABS\n  ACC\n  ADD\n  CPY\n  REGLU\n  RELU\n  REPEAT\n  ROPE\n  SET\n");
            return 0;
        }
        if (strcmp(argv[i], "-o") == 0 && i + 1 < argc) filter = argv[++i];
    }
    printf("Backend 1/1: CPU\n");
    int n = 0;
    for (int k = 0; k < N_OPS; k++) {
        if (!selected(filter, OPS[k])) continue;
        for (int j = 0; j < 2; j++) {
            printf("  %s(x=%d): ", OPS[k], j);
            /* ROPE dies mid-line; REGLU as the real grad mode does: its line is printed (OK) before
               the backward graph is built, and that aborts */
            if (strcmp(OPS[k], "ROPE") == 0 && j == 1) { fflush(stdout); abort(); }
            if (strcmp(OPS[k], "REGLU") == 0 && j == 1) { printf("OK\n"); fflush(stdout); abort(); }
            printf(strcmp(OPS[k], "CPY") == 0 && j == 0 ? "FAIL\n" : "OK\n");
            n++;
        }
    }
    printf("  %d/%d tests passed\n", n, n);
    return 0;
}
"""


def test_split_covers_the_name_space_level_by_level() -> None:
    known = {"ABS", "ACC", "ADD", "REGLU", "RELU", "REPEAT", "ROPE"}
    assert split_entries(None, known) == [("^A",), ("^R",), ("^[^AR]",)]
    assert split_entries(("^R",), known) == [("^R$",), ("^RE",), ("^RO",), ("^R[^EO]",)]
    assert split_entries(("^REG",), known) == [("^REG$",), ("^REGL",), ("^REG[^L]",)]
    assert split_entries(("^REGLU",), known) == [("^REGLU$",), ("^REGLU.",)]
    # several entries: one run each; an op name, an exact match, or a regex of the user's: no further
    assert split_entries(("ACC", "^S"), known) == [("ACC",), ("^S",)]
    for leaf in (("ACC",), ("^REGLU$",), ("^[A-C]",)):
        assert split_entries(leaf, known) == []


def test_complement_leaves_out_exactly_the_crashed_ops() -> None:
    assert complement("", {"REGLU"}) == ["^[^R]", "^R$", "^R[^E]", "^RE$", "^RE[^G]", "^REG$", "^REG[^L]",
                                         "^REGL$", "^REGL[^U]", "^REGLU."]
    assert complement("S", set()) == ["^S"]
    assert expand(("^S", "ACC", "^REGLU$"), frozenset({"ACC", "REGLU", "SET"})) == (
        "^S$", "^S[^E]", "^SE$", "^SE[^T]", "^SET.")
    # an op name matches an entry exactly as test-backend-ops matches it (a regex search on the name)
    names = ["S", "SET", "SET_ROWS", "SCALE", "SEX", "SE", "SQR", "REGLU", "RELU"]
    entries = expand(("^S", "^R"), frozenset({"SET", "REGLU"}))
    chosen = {n for n in names if any(re.search(e, n) for e in entries)}
    assert chosen == set(names) - {"SET", "REGLU"}
    assert excludable(("^R",), "REGLU") and excludable(("ACC", "SET"), "SET")
    assert not excludable(("^[A-C]",), "ACC")


def test_a_crash_costs_one_more_run_and_every_other_case_still_runs(tmp_path: Path) -> None:
    bin_dir = compile_c(tmp_path, "test-backend-ops", FAKE_TBO)
    runner = TreeRunner(bin_dir, tmp_path / "logs", set(), 60, NullProgress())
    results = runner.run(Invocation("test-backend-ops", ("grad",)))
    cases = {(c.name, c.params): c.status for r in results for c in r.cases}
    # the run of R died in REGLU, then (without REGLU) in ROPE; R less both ran once more, and so
    # did everything after them, including SOFTCAP, which --list-ops does not name
    for op in ("ADD", "ABS", "RELU", "REPEAT", "SET", "ACC", "SOFTCAP"):
        assert cases[(op, "x=0")] == PASS and cases[(op, "x=1")] == PASS, op
    assert cases[("CPY", "x=0")] == FAIL
    assert cases[("REGLU", "x=0")] == PASS and cases[("ROPE", "x=0")] == PASS
    assert cases[("ROPE", "x=1")] == CRASH
    assert cases[("(crashed)", "REGLU")] == CRASH  # its last line said OK: the crash is a case of its own
    assert sum(c.name == "RELU" for r in results for c in r.cases) == 2  # no case twice
    assert runner.crashes == ["REGLU", "ROPE"]
    # A, C, R, S and the names no known op starts with; R again without REGLU, and without ROPE
    assert runner.runs == 7 and runner.split_runs == 2
    assert all(r.args[0] == "grad" for r in results)


def _program(name: str, text: str) -> ProgramResult:
    cases, totals, skipped = parse_console(text, name)
    return ProgramResult(name, (), 0, None, tuple(cases), 0.1, Path("log"), totals, tuple(skipped))


def _tree(label: str, *programs: ProgramResult) -> TreeRun:
    return TreeRun(label, "0" * 40, "1" * 40, Path("b"), 1.0, 1, programs)


def test_compare_sorts_cases_into_categories() -> None:
    pin = (DATA / "backend-ops-grad-acc-pin.txt").read_text()
    broken = (DATA / "backend-ops-grad-acc-broken.txt").read_text()
    # the same cases on both trees: nothing to report
    changes, counts = compare(_tree("upstream", _program("test-backend-ops", pin)),
                              _tree("patched", _program("test-backend-ops", pin)))
    assert changes == [] and counts["compared"] == 12
    # broken on the patched side: the case that fails there is newly failing (its second line: grad
    # mode prints the forward check, then the gradient check under SUM, which the parser names ACC)
    changes, _ = compare(_tree("upstream", _program("test-backend-ops", pin)),
                         _tree("patched", _program("test-backend-ops", broken)))
    assert [(c.category, c.case, c.before, c.after) for c in changes] == [
        (NEWLY_FAILING, "ACC(type=f32,ne_a=[256,17,1,1],ne_b=[256,16,1,1],stride_dim=-1) #2", PASS, FAIL)]
    # the other way round it is a fix
    changes, _ = compare(_tree("upstream", _program("test-backend-ops", broken)),
                         _tree("patched", _program("test-backend-ops", pin)))
    assert [c.category for c in changes] == [NEWLY_PASSING]

    lines = ["Backend 1/1: CPU", "  A(x=1): OK", "  B(x=1): FAIL", "  C(x=1): OK", "  D(x=1): OK"]
    other = _program("p", "\n".join(lines))
    lines2 = ["Backend 1/1: CPU", "  A(x=1): OK", "  B(x=1): FAIL", "  C(x=1): not supported [CPU]",
              "  E(x=1): FAIL", "  F(x=1): OK"]
    changes, counts = compare(_tree("upstream", other), _tree("patched", _program("p", "\n".join(lines2))))
    got = {c.case: c.category for c in changes}
    assert got == {"B(x=1)": FAILING_IN_BOTH, "C(x=1)": NEWLY_SKIPPED, "D(x=1)": ONLY_OTHER,
                   "E(x=1)": NEW_FAILING, "F(x=1)": ONLY_PATCHED}
    assert counts["compared"] == 3


def test_repeated_cases_are_compared_by_occurrence() -> None:
    a = _program("p", "Backend 1/1: CPU\n  A(x=1): OK\n  A(x=1): OK\n")
    b = _program("p", "Backend 1/1: CPU\n  A(x=1): OK\n  A(x=1): FAIL\n")
    changes, _ = compare(_tree("upstream", a), _tree("patched", b))
    assert [(c.category, c.case) for c in changes] == [(NEWLY_FAILING, "A(x=1) #2")]


def test_json_and_junit_name_regressions_and_only_those_fail(tmp_path: Path) -> None:
    a = _program("p", "Backend 1/1: CPU\n  A(x=1): OK\n  B(x=1): FAIL\n  C(x=1): FAIL\n")
    b = _program("p", "Backend 1/1: CPU\n  A(x=1): FAIL\n  B(x=1): FAIL\n  C(x=1): OK\n")
    other, patched = _tree("upstream", a), _tree("patched", b)
    changes, counts = compare(other, patched)
    r = SweepReport("cpu", "grad", None, "upstream", other, patched, tuple(changes), counts)
    d = json.loads(json.dumps(sweep_dict(r)))
    assert d["regressions"] == 1
    assert [c["case"] for c in d["changes"][NEWLY_FAILING]] == ["A(x=1)"]
    assert [c["case"] for c in d["changes"][FAILING_IN_BOTH]] == ["B(x=1)"]
    assert [c["case"] for c in d["changes"][NEWLY_PASSING]] == ["C(x=1)"]
    root = ET.fromstring(sweep_junit(r))
    cases = {tc.get("name"): tc for tc in root.iter("testcase")}
    assert cases["A(x=1)"].find("failure") is not None
    assert cases["B(x=1)"].find("failure") is None and cases["B(x=1)"].find("skipped") is not None
    assert len(list(cases["C(x=1)"])) == 0
    assert root.find("testsuite").get("failures") == "1"


def test_each_tree_runs_only_the_programs_its_backend_can_run() -> None:
    """The replay builds test-backend-ops alone: the sweep asks neither tree for test-opt or the series' own
    programs there (a replay run of `--against upstream -o CPY` stopped at the missing test-opt), and
    traces the replay's dispatches as `patchset test` does; the CPU runs every program it built."""
    declared = [("test-backend-ops", ("-o", "ACC")), ("test-metal-buffer-lookup", ())]
    built = {"test-metal-buffer-lookup"}
    replay = tree_invocations(SweepOptions(backend="metal-replay", ops=("CPY", "DUP")), "test", declared, built)
    assert [i.program for i in replay] == ["test-backend-ops"]
    assert replay[0].args[:5] == ("test", "-o", "CPY,DUP", "-b", "MTL0-REPLAY")
    assert replay[0].trace_env == "GGML_METAL_REPLAY_TRACE"
    cpu = tree_invocations(SweepOptions(backend="cpu", workers=2), "test", declared, built)
    assert [i.program for i in cpu] == ["test-opt", "test-backend-ops", "test-metal-buffer-lookup"]
    assert cpu[1].args[-2:] == ("-j", "2") and cpu[0].trace_env is None


def test_cli_refuses_what_cannot_run_here_before_building(proj: Proj, capsys: pytest.CaptureFixture[str]) -> None:
    root = ["--project", str(proj.root)]
    assert main([*root, "test", "--against", "upstream", "--backend", "metal"]) == 2
    assert "metal tests cannot run on linux" in capsys.readouterr().err
    assert main([*root, "test", "--against", "upstream", "--mode", "grad", "--workers", "4"]) == 2
    assert "test mode only" in capsys.readouterr().err
    assert main([*root, "test", "--against", "no-such-ref", "--all"]) == 2
    assert "--against no-such-ref: no such ref" in capsys.readouterr().err


FLIPPER = r"""
#include <stdio.h>
#include <stdlib.h>
/* F fails every time on PATCHED; G fails every other run (a counter file in the cwd): flaky */
int main(void) {
    int n = 0;
    FILE * f = fopen("runs.txt", "r");
    if (f) { if (fscanf(f, "%d", &n) != 1) n = 0; fclose(f); }
    f = fopen("runs.txt", "w");
    fprintf(f, "%d\n", n + 1);
    fclose(f);
    printf("Backend 1/1: CPU\n");
    printf("  F(x=1): %s\n", PATCHED ? "FAIL" : "OK");
    printf("  G(x=1): %s\n", PATCHED && n % 2 == 0 ? "FAIL" : "OK");
    return 0;
}
"""


def test_confirm_tells_a_steady_regression_from_a_flaky_case(tmp_path: Path) -> None:
    trees = {}
    for label, patched in (("upstream", 0), ("patched", 1)):
        build = tmp_path / label
        build.mkdir()
        bin_dir = compile_c(build, "test-backend-ops", f"#define PATCHED {patched}\n" + FLIPPER)
        r = _first_run(bin_dir, build)
        trees[label] = TreeRun(label, "0" * 40, "1" * 40, build, 1.0, 1, (r,))
    changes, counts = compare(trees["upstream"], trees["patched"])
    assert sorted(c.case for c in changes if c.category == NEWLY_FAILING) == ["F(x=1)", "G(x=1)"]
    inv = Invocation("test-backend-ops", ("grad",))
    got, counts = _confirm(changes, counts, trees, {"upstream": inv, "patched": inv},
                           SweepOptions(confirm=3), tmp_path / "confirm")
    by_case = {c.case: c for c in got}
    assert by_case["F(x=1)"].category == NEWLY_FAILING
    assert by_case["F(x=1)"].reruns == "upstream P P P, patched F F F"
    assert by_case["G(x=1)"].category == FLAKY
    assert counts[NEWLY_FAILING] == 1 and counts[FLAKY] == 1


def _first_run(bin_dir: Path, build: Path) -> ProgramResult:
    return run_program(bin_dir, Invocation("test-backend-ops", ("grad",)), build / "first.log")


def test_the_pin_is_built_with_the_patched_trees_comments(tmp_path: Path, up: Upstream, cache_dir: Path) -> None:
    """`test --against`: a header the series changes in a comment only is checked out on the pin in the patched
    tree's version (the same code: what includes it is found in the compiler cache, not compiled again); the other
    tree's record names it and still carries the pin's own tree id."""
    note = MINI_H.replace("#pragma once\n", "#pragma once\n// calc: the library of the mini tree\n")
    mini = make_mini(tmp_path, up, cache_dir, [*SERIES, ({"ggml/include/calc.h": note}, "calc : note the header")])
    r = sweep(mini.project, SweepOptions(backend="cpu", confirm=0, jobs=2))
    assert r.other.reference_comments == ("ggml/include/calc.h",)
    assert r.patched.reference_comments == ()
    assert r.other.tree_id == GitRepo(mini.project.work_repo).tree_of("upstream")
    src = mini.project.state_dir / "against" / "upstream"
    assert (src / "ggml" / "include" / "calc.h").read_text() == note
    # the code is the pin's: the series' fixes are not in it
    assert (src / "ggml" / "src" / "calc.c").read_text() == CALC_C
    assert sweep_dict(r)["trees"]["other"]["reference_comments"] == ["ggml/include/calc.h"]

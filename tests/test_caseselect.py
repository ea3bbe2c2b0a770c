"""The runs past a crash of test-opt and test-alloc (patch 3 gives both `-p REGEX`), on real programs compiled per
case that print as the real ones do; test-backend-ops' are in tests/test_runner.py."""

from __future__ import annotations

import subprocess
from pathlib import Path

from builder.compile.caseselect import filter_table, run_past_crashes, selecting
from builder.compile.testrun import CRASH, CRASHED, FAIL, PASS, Invocation, ProgramResult

# test-alloc's run() with patch 3's filter: the name first, PASSED when the test returns; a failed check aborts
ALLOC = r"""
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <regex>
static const char * test_filter = nullptr;
static void run(const char * name, void (*f)()) {
    if (test_filter != nullptr && !std::regex_search(name, std::regex(test_filter))) {
        return;
    }
    printf("%s ", name);
    fflush(stdout);
    f();
    printf("PASSED\n");
}
static void good() {}
static void crash() { abort(); }
int main(int argc, char ** argv) {
#ifndef IGNORES_THE_FILTER
    for (int i = 1; i + 1 < argc; i++) {
        if (strcmp(argv[i], "-p") == 0) {
            test_filter = argv[++i];
            printf("filter: %s\n", test_filter);
        }
    }
#endif
    run("test_first", good);
    run("test_merge(32)", crash);
    run("test_merge(64)", good);
    run("test_late", crash);
    run("test_last", good);
    return 0;
}
"""

# test-opt with patch 3's filter: each case's line after its work, the group named at its end; under a filter,
# the name of each test before it runs
OPT = r"""
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <regex>
#include <utility>
static const char * test_filter = nullptr;
static bool test_selected(const char * func) {
    if (test_filter == nullptr) {
        return true;
    }
    if (!std::regex_search(func, std::regex(test_filter))) {
        return false;
    }
    printf("%s:\n", func);
    return true;
}
static std::pair<int, int> test_good(const char * optim) {
    if (!test_selected(__func__)) {
        return std::make_pair(0, 0);
    }
    printf("  %s(x=1): OK\n", __func__);
    printf("  %s(x=2, optimizer=%s): OK\n", __func__, optim);
    return std::make_pair(2, 2);
}
static std::pair<int, int> test_crash(const char * optim) {
    if (!test_selected(__func__)) {
        return std::make_pair(0, 0);
    }
    printf("  %s(subtest=first, optimizer=%s): OK\n", __func__, optim);
    fflush(stdout);
    abort();
}
static std::pair<int, int> test_after(const char * optim) {
    if (!test_selected(__func__)) {
        return std::make_pair(0, 0);
    }
    printf("  %s(subtest=x, optimizer=%s): FAIL\n", __func__, optim);
    printf("  %s(subtest=y, optimizer=%s): OK\n", __func__, optim);
    return std::make_pair(1, 2);
}
int main(int argc, char ** argv) {
#ifndef IGNORES_THE_FILTER
    for (int i = 1; i + 1 < argc; i++) {
        if (strcmp(argv[i], "-p") == 0) {
            test_filter = argv[++i];
            printf("filter: %s\n", test_filter);
        }
    }
#endif
    printf("Testing 1 devices\n\n");
    for (const char * optim : { "adamw", "sgd" }) {
        printf("Backend 1/1: CPU\n  Device description: test\n\n");
        int npass = 0;
        int ntest = 0;
        for (auto f : { test_good, test_crash, test_after }) {
            std::pair<int, int> partial = f(optim);
            npass += partial.first;
            ntest += partial.second;
        }
        printf("  %d/%d tests passed\n", npass, ntest);
        printf("  Backend CPU %s: %s\n\n", optim, npass == ntest ? "OK" : "FAIL");
    }
    return 1;
}
"""


def build(tmp_path: Path, name: str, source: str, *flags: str) -> Path:
    """`source` compiled as `name` into a folder of its own (the folder a run takes as its build's bin)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    (tmp_path / f"{name}.cpp").write_text(source)
    subprocess.run(["c++", "-std=c++17", *flags, "-o", str(bin_dir / name), str(tmp_path / f"{name}.cpp")],
                   check=True)
    return bin_dir


def outcomes(r: ProgramResult) -> dict[str, str]:
    return {f"{c.variant} {c.case_id}".strip(): c.status for c in r.cases}


def test_test_alloc_crashing_in_a_middle_case_is_run_past_it_and_the_cases_after_it_have_outcomes(
        tmp_path: Path) -> None:
    """test-alloc aborts in test_merge(32), the second of five: it is run again without it (`-p`, over the name
    run() prints), then without test_late, which aborts too; each crashing case is CRASH, the others pass."""
    bin_dir = build(tmp_path, "test-alloc", ALLOC)
    r = run_past_crashes(bin_dir, Invocation("test-alloc", ()), tmp_path / "logs" / "test-alloc.log", 30)
    assert outcomes(r) == {"test_first()": PASS, "test_merge(32)": CRASH, "test_merge(64)": PASS,
                           "test_late()": CRASH, "test_last()": PASS}, r.cases
    assert r.resumed == ("test-alloc -p ^(?!(?:test_merge\\(32\\))$)",
                         "test-alloc -p ^(?!(?:test_merge\\(32\\)|test_late)$)"), r.resumed
    assert r.finished and not r.stopped and r.verdict == CRASHED and r.crash_site == "in test_merge(32)"


def test_test_opt_crashing_in_a_middle_test_is_run_past_it_and_the_tests_after_it_have_outcomes(
        tmp_path: Path) -> None:
    """test-opt prints a case after its work, so a crash leaves the test it is in unnamed: a run selecting every
    test (`-p ^`) names it (`test_crash:`), the next one leaves it out; the cases after it, in both optimizer
    groups, have outcomes, and the ones of the group it crashed in are of that group (adamw)."""
    bin_dir = build(tmp_path, "test-opt", OPT)
    r = run_past_crashes(bin_dir, Invocation("test-opt", ()), tmp_path / "logs" / "test-opt.log", 30)
    assert outcomes(r) == {
        "adamw test_good(x=1)": PASS, "adamw test_good(x=2, optimizer=adamw)": PASS,
        "adamw test_crash(subtest=first, optimizer=adamw)": PASS, "adamw test_crash()": CRASH,
        "adamw test_after(subtest=x, optimizer=adamw)": FAIL, "adamw test_after(subtest=y, optimizer=adamw)": PASS,
        "sgd test_good(x=1)": PASS, "sgd test_good(x=2, optimizer=sgd)": PASS,
        "sgd test_after(subtest=x, optimizer=sgd)": FAIL, "sgd test_after(subtest=y, optimizer=sgd)": PASS,
    }, r.cases
    assert r.resumed == ("test-opt -p ^", "test-opt -p ^(?!(?:test_crash)$)"), r.resumed
    assert r.finished and r.verdict == CRASHED and r.crash_site == "in test_crash()"
    # a confirming run of the failing cases selects their tests by name
    inv, only = selecting(Invocation("test-opt", ()), [c for c in r.cases if c.status in (FAIL, CRASH)])
    assert (inv, only) == (Invocation("test-opt", ()), ("test_crash", "test_after"))
    again = run_past_crashes(bin_dir, inv, tmp_path / "logs" / "test-opt-2.log", 30, only)
    assert again.args == ("-p", "^(?:test_crash|test_after)$")
    assert again.resumed == ("test-opt -p ^(?!(?:test_crash)$)(?:test_crash|test_after)$",) and again.finished
    assert {k for k, s in outcomes(again).items() if s in (FAIL, CRASH)} == {k for k, s in outcomes(r).items()
                                                                             if s in (FAIL, CRASH)}


def test_a_program_that_ignores_the_filter_is_never_read_as_run_past_the_crash(tmp_path: Path) -> None:
    """test-opt and test-alloc at the pin take no arguments: run with `-p` they run every case again and crash
    where they did. Without the `filter:` line the run past the crash says nothing: the cases after it stay
    unknown (the program stopped), none of them reads as having run."""
    for name, source, site in (("test-alloc", ALLOC, "in test_merge(32)"), ("test-opt", OPT, "after test_crash(")):
        folder = tmp_path / name
        folder.mkdir()
        bin_dir = build(folder, name, source, "-DIGNORES_THE_FILTER")
        r = run_past_crashes(bin_dir, Invocation(name, ()), folder / "logs" / f"{name}.log", 30)
        assert r.resumed == () and not r.finished and r.stopped, (name, r.resumed)
        assert r.crash_site.startswith(site), r.crash_site
        assert not any(c.name in ("test_last", "test_after") for c in r.cases), r.cases
        assert all(c.variant != "sgd" for c in r.cases), r.cases
        # the run with the filter was made (and its log kept), but not taken
        assert (folder / "logs" / f"{name}-past-1.log").exists()


def test_the_filter_table_of_docs_verify_is_the_one_of_the_code() -> None:
    text = (Path(__file__).resolve().parent.parent / "docs" / "verify.md").read_text(encoding="utf-8")
    assert filter_table() in text, "docs/verify.md: paste builder.compile.caseselect.filter_table() between its markers"

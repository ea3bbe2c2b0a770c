"""The test-output parsers, on outputs captured from the real programs (tests/data/)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from builder.compile.caseselect import _params_regex
from builder.compile.cmakebuild import CORES_LIBRARY, MINIMAL_CMAKE_DIR
from builder.compile.reports import junit_xml, report_dict
from builder.compile.testrun import (
    CRASHED,
    FAIL,
    FAILED,
    LOADER_EXIT,
    NOT_LOADED,
    NOT_MODELLED,
    NOT_MODELLED_EXIT,
    NOTHING,
    PASS,
    PASSED,
    SKIP,
    TREE_NOTHING,
    Invocation,
    ProgramResult,
    TestReport,
    parse_console,
    parse_sql,
    plan,
    run_program,
    series_ops,
    tree_verdict,
)
from builder.errors import TestRunError

DATA = Path(__file__).parent / "data"


def read(name: str) -> str:
    return (DATA / name).read_text()


def program(name: str, text: str, returncode: int = 0, signal_name: str | None = None) -> ProgramResult:
    cases, totals, skipped = parse_console(text, name)
    return ProgramResult(name, (), returncode, signal_name, tuple(cases), 0.1, Path("log"), totals, tuple(skipped))


def test_test_opt_pin_all_pass_with_optimizer_variants() -> None:
    cases, totals, skipped = parse_console(read("test-opt-pin.txt"), "test-opt")
    assert len(cases) == 164
    assert totals == (164, 164)  # the program's own "118/118" and "46/46"
    assert all(c.status == PASS for c in cases)
    assert {c.variant for c in cases} == {"adamw", "sgd"}
    assert sum(c.variant == "adamw" for c in cases) == 118
    assert cases[0].name == "test_dataset" and cases[0].params == "shuffle=no, ndata_shard=1, ndata_batch=1"
    assert skipped == []


def test_backend_ops_grad_pass_and_large_tensor_skips() -> None:
    p = program("test-backend-ops", read("backend-ops-grad-acc-pin.txt"))
    assert (p.passed, p.failed, p.skipped) == (7, 0, 5)
    assert p.verdict == PASSED
    skips = [c for c in p.cases if c.status == SKIP]
    assert all(c.detail.startswith("skipping large tensors") for c in skips)
    assert {c.name for c in p.cases} == {"ACC"}


def test_backend_ops_grad_failure_is_the_op_with_its_error() -> None:
    # captured from a build whose CPU ACC was broken on purpose (half of each row not added)
    p = program("test-backend-ops", read("backend-ops-grad-acc-broken.txt"), returncode=1)
    failing = [c for c in p.cases if c.status == FAIL]
    assert len(failing) == 1  # "[SUM] MAA = ... FAIL" and "compare failed FAIL" are one case
    case = failing[0]
    assert case.name == "ACC"  # printed as SUM (grad mode sums the output); given back to ACC
    assert case.params == "type=f32,ne_a=[256,17,1,1],ne_b=[256,16,1,1],stride_dim=-1"
    assert case.error == pytest.approx(0.500003815)
    assert "compare failed" in case.detail
    assert p.verdict == FAILED
    assert p.totals_line == (20765, 20766)
    # in grad mode the cases the op filter leaves out count as passed and print nothing: the one
    # failure the program counts (20766 - 20765) is the one failing case read
    assert p.totals_mismatch is None
    assert "ACC(type=f32" in p.failing_lines()[0]


@pytest.mark.parametrize("name", ["backend-ops-grad-acc-pin.txt", "backend-ops-grad-acc-broken.txt",
                                  "test-opt-pin.txt", "cuda-grad-acc-set.txt", "metal-replay-test-acc-set-before.txt",
                                  "cuda-test-acc-broken.txt", "cuda-test-acc-set.txt"])
def test_every_captured_output_agrees_with_its_own_totals(name: str) -> None:
    p = program("test-backend-ops", read(name))
    assert p.totals_line is not None
    assert p.totals_mismatch is None, p.totals_mismatch


def test_totals_that_disagree_with_the_cases_read_fail_the_program() -> None:
    # a failing case read, and a totals line that says all passed (a line spliced from another run)
    spliced = read("backend-ops-grad-acc-broken.txt").replace("20765/20766 tests passed", "20766/20766 tests passed")
    p = program("test-backend-ops", spliced, returncode=0)
    assert p.totals_mismatch == ("test-backend-ops says 0 of its 20766 tests failed, but 1 failing cases were read "
                                 "from its output (lines lost or garbled): its result cannot be trusted")
    assert p.verdict == FAILED
    assert p.failing_lines()[-1] == p.totals_mismatch
    # the program counts two failures and one failing line was lost: no case reads FAIL, yet it failed
    lost = read("backend-ops-grad-acc-pin.txt").replace("20766/20766 tests passed", "20764/20766 tests passed")
    p = program("test-backend-ops", lost, returncode=1)
    assert p.failed == 0 and p.verdict == FAILED
    assert "says 2 of its 20766 tests failed, but 0 failing cases" in (p.totals_mismatch or "")
    root = ET.fromstring(junit_xml(TestReport("cpu", "grad", ("ACC",), (p,))))
    assert root.find("testsuite/testcase[@name='totals']/failure").get("message") == p.totals_mismatch
    assert report_dict(TestReport("cpu", "grad", ("ACC",), (p,)))["programs"][0]["totals_mismatch"] == p.totals_mismatch
    # a program that crashed printed only some of its totals: nothing to compare
    crashed = program("test-backend-ops", lost, returncode=-6, signal_name="SIGABRT")
    assert crashed.totals_mismatch is None and crashed.verdict == CRASHED


def test_cpu_only_test_mode_checks_nothing() -> None:
    p = program("test-backend-ops", read("backend-ops-test-cpu-only.txt"))
    assert p.cases == ()
    assert p.skipped_backends == ("CPU: Skipping CPU backend",)
    # the program exits 0 and prints OK, and still checked nothing
    assert p.verdict == NOTHING
    assert parse_sql(read("backend-ops-test-cpu-only.sql")) == []


def test_pin_full_grad_run_aborts_and_is_a_crash() -> None:
    # at the pin, `test-backend-ops grad` aborts in REGLU's backward pass (upstream bug)
    text = read("backend-ops-grad-all-pin-aborts.txt")
    p = program("test-backend-ops", text, returncode=-6, signal_name="SIGABRT")
    assert p.verdict == CRASHED
    assert p.passed > 100
    expm1 = [c for c in p.cases if c.status == FAIL]
    assert expm1 and all(c.name == "EXPM1" for c in expm1)


def test_unfinished_case_line_is_a_crash() -> None:
    text = "Backend 1/1: CPU\n  ACC(type=f32): \x1b[1;32mOK\x1b[0m\n  SET(type=f32,ne=[4096,2,1,1]): "
    cases, _, _ = parse_console(text, "test-backend-ops")
    assert [c.status for c in cases] == [PASS, "crash"]
    assert cases[1].name == "SET"


def test_sql_rows_with_diagnostics_before_them() -> None:
    fields = ("test_time, build_commit, backend_name, op_name, op_params, test_mode, supported, passed, "
              "error_message, time_us, flops, bandwidth_gb_s, memory_kb, n_runs, device_description, backend_reg_name")
    row = ("INSERT INTO test_backend_ops ({f}) VALUES ('t', 'c', 'CUDA0', 'ACC', 'type=f32,ne_a=[4096,2,1,1]', "
           "'test', '{s}', '{p}', '', '0', '0', '0', '0', '0', 'H200', 'CUDA');")
    text = (row.format(f=fields, s=1, p=1) + "\n"
            + "[ACC] NMSE = 0.250000000 > 0.000000100 " + row.format(f=fields, s=1, p=0) + "\n"
            + row.format(f=fields, s=0, p=0) + "\n")
    cases = parse_sql(text)
    assert [c.status for c in cases] == [PASS, FAIL, SKIP]
    assert cases[1].error == pytest.approx(0.25)
    assert cases[0].backend == "CUDA0"


def test_junit_marks_failures_and_nothing_checked() -> None:
    failing = program("test-backend-ops", read("backend-ops-grad-acc-broken.txt"), returncode=1)
    empty = program("test-backend-ops", read("backend-ops-test-cpu-only.txt"))
    report = TestReport("cpu", "grad", ("ACC",), (failing, empty))
    root = ET.fromstring(junit_xml(report))
    suites = root.findall("testsuite")
    assert suites[0].get("failures") == "1"
    assert len(suites[0].findall("testcase/failure")) == 1
    assert suites[1].find("testcase/skipped").get("message").startswith("nothing checked")
    d = report_dict(report)
    assert d["failed"] is True and d["nothing_checked"] == ["test-backend-ops"]


def test_plan_and_default_ops() -> None:
    declared = [("test-backend-ops", ("grad", "-o", "ACC,SET")), ("test-opt", ()),
                ("test-backend-ops", ("test", "-o", "SET,CPY")), ("test-metal-buffer-lookup", ())]
    assert series_ops(declared) == ["ACC", "SET", "CPY"]
    invs = plan("CPU", "cpu", "grad", ["ACC", "SET"], [("test-metal-buffer-lookup", ())])
    assert [(i.program, i.args, i.sql) for i in invs] == [
        ("test-opt", (), False), ("test-backend-ops", ("grad", "-o", "ACC,SET", "-b", "CPU"), False),
        ("test-metal-buffer-lookup", (), False),
    ]
    # test mode reads SQL rows (grad mode prints none)
    cuda = plan("CUDA0", "cuda", "test", ["ACC"], [])
    assert cuda[1].args == ("test", "-o", "ACC", "-b", "CUDA0", "--output", "sql") and cuda[1].sql


# captured on an NVIDIA H200 (CUDA 13.0) from a `patchset slice` of the series, built with plain cmake


def test_cuda_test_mode_passes_with_the_series_wide_cases() -> None:
    p = program("test-backend-ops", read("cuda-test-acc-set.txt"))
    assert p.verdict == PASSED
    assert (p.passed, p.failed) == (23, 0)
    assert p.totals_line == (23, 23)
    assert all(c.backend == "CUDA0" for c in p.cases)
    assert p.skipped_backends == ("CPU: Skipping",)
    wide = [c for c in p.cases if "4096" in c.params or "2048" in c.params]
    assert len(wide) == 8
    assert sum(c.status == PASS for c in wide) == 7  # one strided ACC view is not supported by CUDA
    # the SQL output of the same run carries the same verdicts, case by case
    sql = parse_sql(read("cuda-test-acc-set.sql"))
    assert [(c.case_id, c.status) for c in sql] == [(c.case_id, c.status) for c in p.cases]


def test_cuda_failure_diagnostic_printed_before_the_case_name() -> None:
    # captured from the same build with CUDA's ACC kernel broken on purpose (stale memory past
    # 1024 elements of a row, the shape of the Metal bug that patch 5 fixes)
    p = program("test-backend-ops", read("cuda-test-acc-broken.txt"), returncode=1)
    failing = [c for c in p.cases if c.status == FAIL]
    assert len(failing) == 6 and all(c.name == "ACC" for c in failing)
    assert failing[0].params == "type=f32,ne_a=[256,17,1,1],ne_b=[256,16,1,1],stride_dim=-1"
    assert failing[0].error == pytest.approx(1.705436780)
    assert p.verdict == FAILED
    sql = parse_sql(read("cuda-test-acc-broken.sql"))
    sql_failing = [c for c in sql if c.status == FAIL]
    assert [c.params for c in sql_failing] == [c.params for c in failing]
    assert all(c.error is not None and c.error > 1.0 for c in sql_failing)


CRASHER = r"""
#include <stdio.h>
#include <stdlib.h>
int main(void) {
    printf("Backend 1/1: CPU\n");
    printf("  case_a(x=1): OK\n");
    printf("  case_b(x=2): ");
    fprintf(stderr, "about to crash\n");
    abort();
}
"""


def compile_c(tmp_path: Path, name: str, source: str) -> Path:
    """Build a one-file C program into tmp_path/bin; returns that folder."""
    src = tmp_path / f"{name}.c"
    src.write_text(source)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    subprocess.run(["cc", "-o", str(bin_dir / name), str(src)], check=True)
    return bin_dir


def test_a_crashing_program_keeps_its_last_lines(tmp_path: Path) -> None:
    # into a pipe printf is block-buffered: without stdbuf the crash loses everything it printed
    bin_dir = compile_c(tmp_path, "crasher", CRASHER)
    r = run_program(bin_dir, Invocation("crasher", ()), tmp_path / "crasher.log")
    assert r.signal_name == "SIGABRT"
    assert r.verdict == CRASHED
    assert [(c.name, c.status) for c in r.cases] == [("case_a", PASS), ("case_b", "crash")]
    assert "about to crash" in (tmp_path / "crasher.log").read_text()


SQL_PRINTER = r"""
#include <stdio.h>
int main(void) {
    printf("CREATE TABLE IF NOT EXISTS test_backend_ops (\n  op_name TEXT\n);\n\n");
    printf("INSERT INTO test_backend_ops (backend_name, op_name, op_params, supported, passed, error_message) "
           "VALUES ('CUDA0', 'ACC', 'ne=[4096,2,1,1]', '1', '1', '');\n");
    printf("[SET] ERR = 0.5 > 0.0000001 INSERT INTO test_backend_ops (backend_name, op_name, op_params, supported, "
           "passed, error_message) VALUES ('CUDA0', 'SET', 'ne=[2048,2,1,1]', '1', '0', 'test failed');\n");
    return 1;
}
"""


def test_sql_invocation_reads_rows(tmp_path: Path) -> None:
    bin_dir = compile_c(tmp_path, "sqlprinter", SQL_PRINTER)
    r = run_program(bin_dir, Invocation("sqlprinter", (), sql=True), tmp_path / "sql.log")
    assert [(c.name, c.status) for c in r.cases] == [("ACC", PASS), ("SET", FAIL)]
    assert r.cases[1].error == pytest.approx(0.5)
    assert r.verdict == FAILED
    # a program that prints no rows falls back to its console lines
    empty = run_program(bin_dir, Invocation("sqlprinter", (), sql=False), tmp_path / "console.log")
    assert empty.cases == ()


HANGER = r"""
#include <stdio.h>
#include <unistd.h>
int main(void) {
    printf("Backend 1/1: CPU\n");
    printf("  case_a(x=1): OK\n");
    printf("  case_b(x=2): ");
    fflush(stdout);
    for (;;) pause();
}
"""


def test_a_program_that_never_exits_is_stopped_at_its_limit(tmp_path: Path) -> None:
    bin_dir = compile_c(tmp_path, "hanger", HANGER)
    start = time.monotonic()
    r = run_program(bin_dir, Invocation("hanger", ()), tmp_path / "hanger.log", timeout=1.5)
    assert time.monotonic() - start < 10
    assert r.timed_out
    assert r.verdict == FAILED
    assert r.signal_name is None  # stopped by us, not crashed
    # the case it hung in, and the limit itself, are failed cases
    assert [(c.name, c.status) for c in r.cases] == [("case_a", PASS), ("case_b", "crash"), ("timeout", FAIL)]
    assert "1.5s" in r.cases[-1].detail and "case_b(x=2)" in r.cases[-1].detail
    assert r.last_lines[-1].strip() == "case_b(x=2):"
    report = TestReport("cpu", "test", None, (r,))
    assert report.failed
    d = report_dict(report)["programs"][0]
    assert d["timed_out"] is True and d["last_lines"][-1].strip() == "case_b(x=2):"
    junit = ET.fromstring(junit_xml(report))
    assert junit.find(".//property[@name='timed_out']").get("value") == "true"  # type: ignore[union-attr]


CONSOLE_ONLY = r"""
#include <stdio.h>
int main(void) {
    printf("Testing 2 devices\n\n");
    printf("Backend 1/2: CPU\n  Skipping CPU backend\n");
    printf("Backend 2/2: MTL0\n");
    printf("  ACC(type=f32,ne_a=[256,17,1,1]): not supported [MTL0]\n");
    printf("  1/1 tests passed\n");
    return 0;
}
"""


def test_test_mode_falls_back_to_the_console_lines(tmp_path: Path) -> None:
    # asked for SQL rows (test mode), a program that prints none is read from its console lines
    bin_dir = compile_c(tmp_path, "consoleonly", CONSOLE_ONLY)
    r = run_program(bin_dir, Invocation("consoleonly", (), sql=True), tmp_path / "c.log")
    assert [(c.backend, c.name, c.status) for c in r.cases] == [("MTL0", "ACC", SKIP)]
    assert r.totals_line == (1, 1)
    assert r.skipped_backends == ("CPU: Skipping CPU backend",)
    assert r.verdict == NOTHING


def test_a_garbled_sql_row_counts_as_a_failure_not_an_error() -> None:
    # with test-backend-ops -j N, a diagnostic printed by another worker can land inside a row
    good = ("INSERT INTO test_backend_ops (backend_name, op_name, op_params, supported, passed, error_message) "
            "VALUES ('CUDA0', 'ACC', 'ne=[4096,2,1,1]', '1', '1', '');")
    garbled = ("INSERT INTO test_backend_ops (backend_name, op_name, op_params, supported, passed, error_message) "
               "VALUES ('CUDA0', 'SET', [SET] NMSE = 0.5 > 1e-07 'ne=[2,2,1,1]', '1', '1');")
    cases = parse_sql(good + "\n" + garbled + "\n")
    assert [(c.name, c.status) for c in cases] == [("ACC", PASS), ("(unreadable SQL row)", FAIL)]
    assert "NMSE" in cases[1].detail


LIB_USER = r"""
int from_the_library(void);
int main(void) { return from_the_library() == 42 ? 0 : 1; }
"""


def test_a_program_the_loader_cannot_start_did_not_load_it_did_not_fail(tmp_path: Path) -> None:
    # a program linked to a shared library that is gone: the dynamic loader exits 127 before main
    (tmp_path / "lib.c").write_text("int from_the_library(void) { return 42; }\n")
    subprocess.run(["cc", "-shared", "-fPIC", "-o", str(tmp_path / "libgone.so"), str(tmp_path / "lib.c")], check=True)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (tmp_path / "user.c").write_text(LIB_USER)
    subprocess.run(["cc", "-o", str(bin_dir / "user"), str(tmp_path / "user.c"), f"-L{tmp_path}", "-lgone",
                    f"-Wl,-rpath,{tmp_path}"], check=True)
    assert run_program(bin_dir, Invocation("user", ()), tmp_path / "ok.log").verdict == "nothing checked"
    (tmp_path / "libgone.so").unlink()
    r = run_program(bin_dir, Invocation("user", ()), tmp_path / "user.log")
    assert (r.returncode, r.signal_name, r.cases) == (LOADER_EXIT, None, ())
    assert r.verdict == NOT_LOADED
    assert r.last_lines and "libgone.so" in r.last_lines[-1]
    # `patchset test` fails on it, and a tree of verify's counts it as one that did not build (treebuild.run_tree)
    assert TestReport("cpu", "test", (), (r,)).failed
    assert tree_verdict([r.verdict]) == "nothing checked"


NOT_MODELLED_STOP = r"""
#include <stdio.h>
#include <unistd.h>
int main(void) {
    printf("Backend 1/1: MTL0\n");
    printf("  case_a(x=1): FAIL\n");
    fflush(stdout);
    fprintf(stderr, "patchset metal stand-in: not modelled: an API\n");
    _exit(125);
}
"""


def test_a_stand_in_s_not_modelled_stop_is_never_a_failing_test(tmp_path: Path) -> None:
    """A Metal stand-in stops a program at an API it does not model with its own exit status (not a signal): the
    run checked nothing, whatever it printed before; its tree is `nothing checked`, never `fails`."""
    bin_dir = compile_c(tmp_path, "stopped", NOT_MODELLED_STOP)
    r = run_program(bin_dir, Invocation("stopped", ()), tmp_path / "stopped.log")
    assert r.returncode == NOT_MODELLED_EXIT and r.signal_name is None
    assert r.verdict == NOT_MODELLED
    assert tree_verdict([r.verdict]) == TREE_NOTHING
    assert tree_verdict([PASSED, r.verdict]) == TREE_NOTHING


def test_the_stand_ins_stop_with_the_exit_status_testrun_reads() -> None:
    """The stand-ins' `#define ..._NOT_MODELLED_EXIT` is testrun's NOT_MODELLED_EXIT, in each source that stops."""
    root = Path(__file__).resolve().parent.parent / "builder"
    sources = [root / "metal_linux" / "metal.m", root / "metal_linux" / "dispatch.m",
               root / "replay" / "cpp" / "replay-device.cpp"]
    for src in sources:
        found = re.findall(r"#define \w+_NOT_MODELLED_EXIT (\d+)", src.read_text())
        assert found == [str(NOT_MODELLED_EXIT)], src
        assert "abort()" not in src.read_text().split("not modelled", 1)[1].split("}", 1)[0], src


REGEX_SEARCH = r"""
#include <regex>
#include <string>
int main(int argc, char ** argv) {
    return std::regex_search(std::string(argv[2]), std::regex(argv[1])) ? 0 : 1;
}
"""


def test_the_case_filter_is_a_regex_std_regex_reads_as_the_parameters_themselves(tmp_path: Path) -> None:
    """The runs past a crash and the confirming runs select test-backend-ops' cases by `-p REGEX` (std::regex,
    ECMAScript): each parameter string escaped so that it matches itself and nothing else."""
    src = tmp_path / "search.cpp"
    src.write_text(REGEX_SEARCH)
    subprocess.run(["c++", "-o", str(tmp_path / "search"), str(src)], check=True)
    def matches(regex: str, text: str) -> bool:
        return subprocess.run([str(tmp_path / "search"), regex, text], check=False).returncode == 0

    for params in ("type=f32,ne=[10,5,4,3],nr23=[2,2],v=0", "eps=-0.000010,a.b=(1|2)", "x=1 y=2/3,z={4}+*?^$\\"):
        only, skipping = _params_regex((params,), []), _params_regex(None, [params])
        assert matches(only, params) and not matches(only, params + "0"), only
        assert not matches(skipping, params) and matches(skipping, "v=1"), skipping


def test_test_alloc_cases_are_read_and_an_abort_is_the_case_it_happened_in() -> None:
    # test-alloc's run() prints a case's name, then PASSED when it returns; a failed GGML_ASSERT aborts inside it
    after = program("test-alloc", read("test-alloc-after-pass.txt"))
    assert (after.passed, after.failed, after.verdict) == (15, 0, PASSED)
    assert after.cases[7].case_id == "test_merge_free_block(32)"
    before = program("test-alloc", read("test-alloc-before-abort.txt"), returncode=-6, signal_name="SIGABRT")
    assert [c.status for c in before.cases] == [PASS] * 14 + ["crash"]
    assert before.cases[-1].case_id == "test_sched_graph_not_allocated()"
    assert "GGML_ASSERT(" in before.cases[-1].detail
    assert before.verdict == CRASHED


CORES_SEEN = r"""
#include <cstdio>
#include <thread>
#include <sys/sysinfo.h>
#include <unistd.h>
int main() {
    std::printf("hardware_concurrency=%u get_nprocs=%d sysconf=%ld\n", std::thread::hardware_concurrency(),
                get_nprocs(), sysconf(_SC_NPROCESSORS_ONLN));
    return 0;
}
"""


@pytest.mark.skipif(sys.platform != "linux", reason="the preload library is built on Linux only")
def test_a_program_is_shown_the_cores_it_is_given_through_the_preload_library(tmp_path: Path) -> None:
    # test-backend-ops and test-opt size their threads from hardware_concurrency (get_nprocs in libstdc++)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (tmp_path / "cores.cpp").write_text(CORES_SEEN)
    subprocess.run(["c++", "-o", str(bin_dir / "cores"), str(tmp_path / "cores.cpp")], check=True)
    subprocess.run(["cc", "-shared", "-fPIC", "-o", str(bin_dir / CORES_LIBRARY),
                    str(MINIMAL_CMAKE_DIR / "cores.c"), "-ldl"], check=True)
    shown = run_program(bin_dir, Invocation("cores", (), cores=5), tmp_path / "shown.log")
    assert shown.returncode == 0
    assert "hardware_concurrency=5 get_nprocs=5 sysconf=5" in (tmp_path / "shown.log").read_text().splitlines()
    n = os.cpu_count()
    run_program(bin_dir, Invocation("cores", ()), tmp_path / "own.log")
    assert f"hardware_concurrency={n} get_nprocs={n} sysconf={n}" in (tmp_path / "own.log").read_text().splitlines()
    # a folder without the library: refused before the program runs, never run on the machine's cores
    (bin_dir / CORES_LIBRARY).unlink()
    with pytest.raises(TestRunError, match=f"{CORES_LIBRARY}: not built, so cores cannot be shown 5 cores"):
        run_program(bin_dir, Invocation("cores", (), cores=5), tmp_path / "refused.log")

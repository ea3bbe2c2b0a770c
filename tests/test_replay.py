"""The host-side Metal replay's Python side: its dispatch trace, its backend profile, trailers and evidence.

The trace and console output in tests/data were captured from the replay built against the pin plus patch 5's
tests only (the tree `verify` calls "before"): `test-backend-ops test -b MTL0-REPLAY -o ACC,SET`.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from test_testrun import compile_c

from builder.compile import backends as backendmod
from builder.compile import cmakebuild as buildmod
from builder.compile.replay import read_trace, trace_notes
from builder.compile.testrun import FAIL, FAILED, PASS, Invocation, parse_console, plan, run_program
from builder.errors import InputError, TestRunError
from builder.prove import evidence as ev
from builder.prove.backends_here import available_backends
from builder.series.trailers import meta_from_trailers, parse_trailers

DATA = Path(__file__).parent / "data"
TRACE = DATA / "metal-replay-before-acc-set.trace.jsonl"


def test_before_tree_trace_shows_the_uncovered_tail() -> None:
    dispatches = read_trace(TRACE)
    assert len(dispatches) == 44
    short = [d for d in dispatches if d.short]
    # the three non-inplace wide SET cases and the three wide ACC cases: their copy of src0 into dst
    assert sorted((d.op, d.kernel) for d in short) == [
        ("ACC", "kernel_cpy_f32_f32")] * 3 + [("SET", "kernel_cpy_f32_f32")] * 2 + [("SET", "kernel_cpy_i32_i32")]
    for d in short:
        # one threadgroup of min(max threads, ne00) = 1024 threads per row: the grid has no column blocks
        assert d.threads == (1024, 1, 1) and d.max_threads == 1024
        assert d.grid[0] * d.grid[1] * d.grid[2] * 4096 == d.expect
        assert d.row_len == 4096 and d.cols == (0, 1023)
        assert d.writes == d.expect // 4
    # every other dispatch (the narrow cases, the add of ACC, the src1 copy of SET) covers what it describes
    assert all(d.ran and not d.nil and d.oob == 0 for d in dispatches)
    assert all(d.writes == d.expect for d in dispatches if not d.short and d.expect)


def test_trace_notes_name_the_short_dispatches() -> None:
    notes = trace_notes(TRACE)
    assert notes[0].startswith("metal replay: 44 dispatch(es) of 3 kernel(s)")
    assert "6 wrote fewer elements" in notes[0]
    assert len(notes) == 7
    assert ("ACC 'out' [4096,3,1,1]: kernel_cpy_f32_f32 grid 3x1x1 of 1024x1x1 threads wrote 3072 of 12288 elements "
            "(columns 0..1023 of 4096-wide rows): 9216 left stale") in "\n".join(notes)
    assert trace_notes(TRACE, limit=2)[-1].startswith("... and 4 more")


def test_trace_tells_a_failed_lookup_from_an_access_through_a_nil_buffer(tmp_path: Path) -> None:
    """A dispatch after a failed lookup is not run; one that binds a nil buffer runs (a zero-size buffer's nil buffer
    is bound as Metal binds it) and only its accesses through the nil buffer are the fault."""
    base = json.loads(TRACE.read_text().splitlines()[0])
    lines = [dict(base, nil=True, ran=False), dict(base, nil=True, ran=True), dict(base, nil=False, ran=True)]
    trace = tmp_path / "t.jsonl"
    trace.write_text("".join(json.dumps(d) + "\n" for d in lines))
    failed, accessed, plain = (d.describe() for d in read_trace(trace))
    assert failed.endswith(": a failed buffer lookup is bound (not run)")
    assert accessed.endswith(": read or wrote through a nil buffer (not performed)")
    assert "nil" not in plain


def test_bad_trace_line_names_file_and_line(tmp_path: Path) -> None:
    bad = tmp_path / "t.jsonl"
    bad.write_text(TRACE.read_text().splitlines()[0] + "\n{\"compute\": 1}\n")
    with pytest.raises(TestRunError, match=r"t\.jsonl:2: not a dispatch record"):
        read_trace(bad)


def test_before_tree_fails_exactly_the_wide_cases() -> None:
    cases, totals, _ = parse_console((DATA / "metal-replay-test-acc-set-before.txt").read_text(), "test-backend-ops")
    assert totals == (20, 26)
    failed = {c.case_id for c in cases if c.status == FAIL}
    assert failed == {c.case_id for c in cases if c.name in ("ACC", "SET") and "inplace=1" not in c.params
                      and ("4096" in c.params or "2048" in c.params)}
    assert len(failed) == 6
    assert all(c.backend == "MTL0-REPLAY" for c in cases)
    assert all(c.status == PASS for c in cases if c.case_id not in failed)


def test_plan_runs_only_test_backend_ops_with_a_trace() -> None:
    prof = backendmod.profile("metal-replay")
    invs = plan(prof.device, "metal-replay", "test", ["ACC", "SET", "CPY"], [("test-metal-buffer-lookup", ())],
                prof.programs, prof.trace_env)
    assert [(i.program, i.args, i.trace_env) for i in invs] == [
        ("test-backend-ops", ("test", "-o", "ACC,SET,CPY", "-b", "MTL0-REPLAY", "--output", "sql"),
         "GGML_METAL_REPLAY_TRACE")]


TRACER = r"""
#include <stdio.h>
#include <stdlib.h>
int main(void) {
    const char * path = getenv("GGML_METAL_REPLAY_TRACE");
    FILE * f = path ? fopen(path, "a") : NULL;
    if (f) {
        fputs("LINE\n", f);
        fclose(f);
    }
    printf("  ACC(type=f32,ne_a=[4096,2,1,1]): FAIL\n");
    return 1;
}
"""


def test_run_program_reads_the_trace_it_asked_for(tmp_path: Path) -> None:
    line = TRACE.read_text().splitlines()[0]
    short = next(d for d in TRACE.read_text().splitlines()
                 if '"kernel":"kernel_cpy_f32_f32"' in d and '"writes":2048' in d)
    bin_dir = compile_c(tmp_path, "tracer", TRACER.replace("LINE", (line + "\\n" + short).replace('"', '\\"')))
    r = run_program(bin_dir, Invocation("tracer", (), trace_env="GGML_METAL_REPLAY_TRACE"), tmp_path / "t.log")
    assert r.verdict == FAILED
    assert r.trace == tmp_path / "t.trace.jsonl" and r.trace.exists()
    assert r.notes[0].startswith("metal replay: 2 dispatch(es)") and "left stale" in r.notes[1]
    # without a trace variable nothing is read
    plain = run_program(bin_dir, Invocation("tracer", ()), tmp_path / "p.log")
    assert plain.trace is None and plain.notes == ()


def test_trailers_name_the_replay_backend(tmp_path: Path) -> None:
    message = ("metal : x\n\nbody\n\nPatchset-Backends: metal metal-replay\n"
               "Patchset-Test: [metal-replay] test-backend-ops test -o ACC,SET\n")
    meta, findings = meta_from_trailers(parse_trailers(message), message, tmp_path / "p.patch", tmp_path)
    assert findings == []
    assert meta.backends == ("metal", "metal-replay")
    assert [t.runs_on("metal-replay", meta.backends) for t in meta.tests] == [True]
    assert not meta.tests[0].runs_on("metal", meta.backends)


def test_the_replay_builds_only_the_minimal_target_set(tmp_path: Path) -> None:
    spec = buildmod.BuildSpec(source=tmp_path, build_dir=tmp_path / "b", backend="metal-replay", targets="full")
    with pytest.raises(InputError, match="metal-replay' builds only the target set"):
        buildmod.build(spec)


def test_the_replay_is_a_backend_here_and_hashes_its_sources() -> None:
    if sys.platform in ("linux", "darwin"):
        assert "metal-replay" in available_backends()
    prof = backendmod.profile("metal-replay")
    names = {p.name for p in prof.harness}
    assert {"replay-device.cpp", "replay-context.cpp", "replay-kernels.cpp", "replay.cmake"} <= names
    assert len(backendmod.harness_digest("metal-replay")) == 64
    assert backendmod.harness_digest("cpu") == ""


def test_evidence_says_it_is_a_replay() -> None:
    step = ev.Step("before", "c" * 40, "t" * 40, True, "cmake --build", 1.0, verdict="fails",
                   tests=({"command": "test-backend-ops test -o ACC,SET -b MTL0-REPLAY", "returncode": 1,
                           "signal": None, "verdict": FAILED, "passed": 20, "failed": 6, "skipped": 0,
                           "duration_s": 1.0, "log": "l", "failing": [], "notes": list(trace_notes(TRACE))},))
    e = ev.Evidence("0004-x.patch", "metal : x", "metal-replay", "proven", "why", {}, (step,), "k",
                    note=backendmod.profile("metal-replay").note)
    text = ev.markdown(e)
    assert "> metal-replay: host-side replay, not a run on Apple hardware" in text
    assert "wrote 2048 of 8192 elements (columns 0..1023 of 4096-wide rows): 6144 left stale" in text

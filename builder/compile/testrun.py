"""Run test-opt, test-backend-ops and the series' own test programs, and read what they print.

Both ggml test programs print one line per case, `  NAME(PARAMS): [details] OK|FAIL|...`,
under `Backend i/n: NAME` headers, with `  N/M tests passed` totals. test-backend-ops can also
print SQL rows (`--output sql`), which carry a `passed` field per case; it does so only in
`test` (and perf) mode, so grad mode is read from the console output.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from builder import proc, words
from builder.compile import replay
from builder.compile.cmakebuild import CORES_ENV, CORES_LIBRARY
from builder.errors import TestRunError

ANSI = re.compile(r"\x1b\[[0-9;]*m")
PASS, FAIL, SKIP, CRASH = "pass", "fail", "skip", "crash"
MODES = ("test", "grad")

# verdicts of one program run (the words: builder.words)
PASSED, FAILED, NOTHING, CRASHED = words.PASSED, words.FAILED, words.NOTHING, words.CRASHED
NOT_LOADED = words.NOT_LOADED
LOADER_EXIT = 127
"""The exit status of the dynamic loader when it cannot start a program (a shared library or a symbol it needs
is missing: a link a shared build leaves to the loader). Such a program ran none of its code, printed nothing
of its own, and says nothing of what it tests: it `did not load`, never `failed`."""

NOT_MODELLED = words.NOT_MODELLED
NOT_MODELLED_EXIT = 125
"""The exit status patchset's Metal stand-ins (builder/metal_linux, builder/replay) stop a program with at an API or
kernel they do not model (`#define ..._NOT_MODELLED_EXIT`, a line `...: not modelled: ...` on stderr): the run
checked nothing of the tree. Never a signal: an abort there would read as the test crashing (and, with
`Patchset-Before: crash`, as the proof)."""

# what the programs of one tree say together (verify's steps, the fixed-upstream check, canary)
TREE_FAILS, TREE_PASSES, TREE_NOTHING = words.TREE_FAILS, words.TREE_PASSES, words.TREE_NOTHING


def tree_verdict(verdicts: Iterable[str]) -> str:
    """The verdict of a tree from its programs' verdicts, the one rule verify and the fixed-upstream
    check share: `fails` when any program failed or crashed; `passes` when every one passed; else
    `nothing checked` (a program that checked nothing beside others that passed leaves the tree
    unchecked: its part of the test said nothing)."""
    seen = list(verdicts)
    if any(v in (FAILED, CRASHED) for v in seen):
        return TREE_FAILS
    return TREE_PASSES if seen and all(v == PASSED for v in seen) else TREE_NOTHING


@dataclass(frozen=True)
class CaseResult:
    program: str
    backend: str
    name: str
    params: str
    status: str
    detail: str = ""
    error: float | None = None
    """The error the program measured (ERR, NMSE or MAA), when it printed one."""
    variant: str = ""
    """A second grouping some programs print after the cases (test-opt's optimizer)."""

    @property
    def case_id(self) -> str:
        return f"{self.name}({self.params})"


@dataclass(frozen=True)
class ProgramResult:
    program: str
    args: tuple[str, ...]
    returncode: int
    signal_name: str | None
    cases: tuple[CaseResult, ...]
    duration_s: float
    log: Path
    totals_line: tuple[int, int] | None = None
    """The program's own `N/M tests passed` counts, summed over its sections."""
    skipped_backends: tuple[str, ...] = field(default_factory=tuple)
    timed_out: bool = False
    """Stopped (with its process group) at its time limit; counted as a failed case."""
    last_lines: tuple[str, ...] = ()
    """The last lines it printed, kept for a program that timed out or crashed."""
    notes: tuple[str, ...] = field(default_factory=tuple)
    """What the backend's dispatch trace shows (the Metal replay), when it wrote one."""
    trace: Path | None = None
    resumed: tuple[str, ...] = ()
    """The runs past a crash (run_past_crashes), their command lines: the cases after the crashing one come
    from them."""
    finished: bool = False
    """A crashed program whose runs past each crash reached its end: every case it has printed an outcome."""

    @property
    def stopped(self) -> bool:
        """Stopped early (a signal, its time limit) with no run past it to the end: the cases it never
        printed say nothing."""
        return bool((self.signal_name and not self.finished) or self.timed_out)

    @property
    def passed(self) -> int:
        return sum(c.status == PASS for c in self.cases)

    @property
    def failed(self) -> int:
        return sum(c.status in (FAIL, CRASH) for c in self.cases)

    @property
    def skipped(self) -> int:
        return sum(c.status == SKIP for c in self.cases)

    @property
    def totals_mismatch(self) -> str | None:
        """What disagrees between the program's own `N/M tests passed` and the cases read, or None.

        The failures are compared: M - N must be the number of failing cases read. (Passes are not:
        in grad mode a case that the op filter leaves out counts as passed, and prints no line.) Only
        a program that ran to its end printed every total; a crash or a time limit leaves them short.
        """
        if self.totals_line is None or self.signal_name or self.timed_out:
            return None
        passed, total = self.totals_line
        if total - passed == self.failed:
            return None
        return (f"{self.program} says {total - passed} of its {total} tests failed, but {self.failed} failing "
                "cases were read from its output (lines lost or garbled): its result cannot be trusted")

    @property
    def verdict(self) -> str:
        if self.signal_name:
            return CRASHED
        if self.returncode == LOADER_EXIT and not self.cases and self.totals_line is None:
            return NOT_LOADED
        if self.returncode == NOT_MODELLED_EXIT and not self.timed_out:
            return NOT_MODELLED
        if self.failed or self.returncode != 0 or self.totals_mismatch:
            return FAILED
        if self.passed == 0:
            return NOTHING
        return PASSED

    @property
    def crash_site(self) -> str:
        """Where a program killed by a signal stopped: `in CASE` (the case its output leaves unfinished), `after
        CASE` (the last case it finished), `before its first case`; '' when no signal stopped it."""
        if not self.signal_name:
            return ""
        crash = next((c for c in self.cases if c.status == CRASH), None)
        if crash is not None:
            return f"in {crash.case_id}"
        return f"after {self.cases[-1].case_id}" if self.cases else "before its first case"

    def failing_lines(self) -> list[str]:
        lines = [f"{c.backend} {c.case_id}: {c.detail} {c.status.upper()}".replace("  ", " ")
                 for c in self.cases if c.status in (FAIL, CRASH)]
        return [*lines, self.totals_mismatch] if self.totals_mismatch else lines


_BACKEND = re.compile(r"^Backend (\d+)/(\d+): (.+)$")
_CASE = re.compile(r"^  (?P<name>[A-Za-z_][A-Za-z0-9_]*)\((?P<params>.*?)\): ?(?P<rest>.*)$")
# in test mode the comparison callback prints its verdict ("[ACC] ERR = 1.7 > 1e-07 ") before the
# case's own "  ACC(...): " prefix, on the same line
_PREFIXED_CASE = re.compile(
    r"^(?P<pre>\[[A-Za-z_0-9]+\] .*?)\s*  (?P<name>[A-Za-z_][A-Za-z0-9_]*)\((?P<params>.*?)\): ?(?P<rest>.*)$")
_TOTALS = re.compile(r"^  (\d+)/(\d+) tests passed$")
# test-alloc's run(): the case's name at the start of a line, then "PASSED" when it returns
_RUN_CASE = re.compile(r"^(?P<name>test_[A-Za-z0-9_]*)(?:\((?P<params>.*?)\))? (?P<rest>.*)$")
# test-opt given a case filter (`-p`, patch 3): the name of each test on a line of its own before it runs
_STARTED = re.compile(r"^(?P<name>test_[A-Za-z0-9_]*):$")
_BACKEND_STATUS = re.compile(r"^  Backend (?P<backend>\S+)(?: (?P<variant>\S+))?: (?P<status>OK|FAIL|SKIPPED)$")
_ERRVAL = re.compile(r"\b(?:ERR|NMSE|MAA) = ([0-9.eE+-]+|nan|inf)")


def _status_of(rest: str) -> tuple[str, str] | None:
    """(status, detail) of a case line's tail, or None when the line ends mid-case."""
    rest = rest.rstrip()
    if rest.endswith("OK"):
        return PASS, rest[:-2].strip()
    if rest.endswith("FAIL"):
        return FAIL, rest[:-4].strip()
    if rest.endswith("SKIPPED"):
        return SKIP, rest[:-7].strip()
    if rest.startswith("skipping"):
        return SKIP, rest
    if rest.startswith("not supported"):
        return SKIP, rest
    return None


def parse_console(text: str, program: str) -> tuple[list[CaseResult], tuple[int, int] | None, list[str]]:
    """Cases, summed totals, and backends the program skipped, from console output."""
    cases: list[CaseResult] = []
    backend = ""
    group_start = 0
    totals: tuple[int, int] | None = None
    skipped: list[str] = []
    pending: tuple[str, str, str] | None = None
    # the test the program said it starts (_STARTED), until its section ends: a crash is inside it
    started = ""
    lines = ANSI.sub("", text).splitlines()
    for i, line in enumerate(lines):
        m = _STARTED.match(line)
        if m:
            started = m.group("name")
            continue
        m = _BACKEND.match(line)
        if m:
            started = ""
            backend = m.group(3).strip()
            group_start = len(cases)
            nxt = lines[i + 1] if i + 1 < len(lines) else ""
            if nxt.startswith("  Skipping") or ("skipping" in nxt.lower() and "Device" not in nxt):
                skipped.append(f"{backend}: {nxt.strip()}")
            continue
        m = _TOTALS.match(line)
        if m:
            started = ""
            p, t = int(m.group(1)), int(m.group(2))
            totals = (totals[0] + p, totals[1] + t) if totals else (p, t)
            continue
        m = _BACKEND_STATUS.match(line)
        if m:
            started = ""
            if m.group("variant"):
                variant = m.group("variant")
                cases[group_start:] = [CaseResult(c.program, c.backend, c.name, c.params, c.status, c.detail,
                                                  c.error, variant) for c in cases[group_start:]]
            if m.group("status") == "SKIPPED":
                skipped.append(f"{m.group('backend')} {m.group('variant') or ''}".strip())
            group_start = len(cases)
            continue
        m = _RUN_CASE.match(line)
        if m:
            # a failed check aborts the program inside the case: its line never says PASSED
            pending = None
            if m.group("rest").strip() == "PASSED":
                cases.append(CaseResult(program, backend, m.group("name"), m.group("params") or "", PASS, ""))
            else:
                pending = (m.group("name"), m.group("params") or "", m.group("rest"))
            continue
        m = _CASE.match(line) or _PREFIXED_CASE.match(line)
        if m:
            pending = None
            st = _status_of(m.group("rest"))
            if st is None:
                pending = (m.group("name"), m.group("params"), m.group("rest"))
                continue
            status, detail = st
            if "pre" in m.groupdict() and m.group("pre"):
                detail = f"{m.group('pre').strip()} {detail}".strip()
            name, params = m.group("name"), m.group("params")
            prev = cases[-1] if len(cases) > group_start else None
            # grad mode wraps each op's output in ggml_sum and prints the failure under the name
            # of that SUM node, with the op's own parameters: give it back to the op
            if name == "SUM" and prev is not None and prev.params == params and prev.name != "SUM":
                name = prev.name
            ev = _ERRVAL.search(detail)
            case = CaseResult(program, backend, name, params, status, detail, float(ev.group(1)) if ev else None)
            if (status == FAIL and prev is not None and prev.status == FAIL
                    and (prev.name, prev.params) == (name, params)):
                # one failing case may print several lines ("[SUM] MAA = ... FAIL", "compare failed FAIL")
                cases[-1] = CaseResult(program, backend, name, params, FAIL, f"{prev.detail}; {detail}",
                                       prev.error if prev.error is not None else case.error)
                continue
            cases.append(case)
    if pending is not None:
        # the program died inside this case: its line was never finished
        name, params, rest = pending
        detail = (rest + " (no result: the program stopped)").strip()
        cases.append(CaseResult(program, backend, name, params, CRASH, detail))
    elif started:
        cases.append(CaseResult(program, backend, started, "", CRASH, "(no result: the program stopped inside it)"))
    return cases, totals, skipped


_INSERT = re.compile(r"INSERT INTO test_backend_ops \((?P<fields>[^)]*)\) VALUES \((?P<values>.*)\);\s*$")


def _sql_values(text: str) -> list[str]:
    return re.findall(r"'((?:[^']|'')*)'", text)


def parse_sql(text: str, program: str = "test-backend-ops") -> list[CaseResult]:
    """Cases from `test-backend-ops --output sql`. Diagnostics the program prints on stdout
    (`[ACC] ERR = ...`) precede the INSERT on the same line and become the case's detail."""
    cases = []
    for line in ANSI.sub("", text).splitlines():
        m = _INSERT.search(line)
        values = _sql_values(m.group("values")) if m else []
        fields = [f.strip() for f in m.group("fields").split(",")] if m else []
        if m is None or len(values) != len(fields):
            if "INSERT INTO test_backend_ops" in line:
                # with parallel workers (-j) another thread's diagnostic can land inside a row: never
                # drop it silently; it counts as a failure, with the line to look at
                cases.append(CaseResult(program, "", "(unreadable SQL row)", line[:120], FAIL, line[:300]))
            continue
        row = dict(zip(fields, values, strict=True))
        prefix = line[: m.start()].strip()
        if row.get("supported") in ("0", "false"):
            status, detail = SKIP, f"not supported [{row.get('backend_name', '')}]"
        else:
            status = PASS if row.get("passed") in ("1", "true") else FAIL
            detail = " ".join(x for x in (prefix, row.get("error_message", "")) if x)
        ev = _ERRVAL.search(detail)
        cases.append(CaseResult(program, row.get("backend_name", ""), row.get("op_name", ""), row.get("op_params", ""),
                                status, detail, float(ev.group(1)) if ev else None))
    return cases


@dataclass(frozen=True)
class Invocation:
    """One program run: which binary, with which arguments, and how to read it."""

    program: str
    args: tuple[str, ...]
    sql: bool = False
    trace_env: str | None = None
    """Environment variable through which the program writes a dispatch trace (next to its log)."""
    cores: int | None = None
    """The cores the program is shown (backends.cores_shown, through the build's preload library
    cmakebuild.CORES_LIBRARY); None: the machine's."""

    @property
    def command(self) -> str:
        """The command line as reports and evidence show it."""
        return " ".join([self.program, *self.args])


def _unbuffered() -> list[str]:
    """stdbuf, where there is one, so that stdout reaches us as the program prints it.

    Into a pipe, printf is block-buffered: a program that crashes loses its last lines, and its
    stderr arrives ahead of stdout written earlier, so the case that crashed is misnamed.
    """
    stdbuf = shutil.which("stdbuf")
    return [stdbuf, "-o0", "-e0"] if stdbuf else []


DEFAULT_TIMEOUT_S = 3600.0
"""The time limit of one test program run (`patchset test --timeout`, `verify --timeout`)."""

LAST_LINES = 15


def run_program(bin_dir: Path, inv: Invocation, log: Path, timeout: float | None = DEFAULT_TIMEOUT_S) -> ProgramResult:
    exe = bin_dir / inv.program
    if not exe.exists():
        raise TestRunError(f"{exe}: test program not built (run `patchset build` first)")
    log.parent.mkdir(parents=True, exist_ok=True)
    log.write_text("")
    env: dict[str, str] = {}
    if inv.cores is not None:
        shim = bin_dir / CORES_LIBRARY
        if not shim.is_file():
            raise TestRunError(f"{shim}: not built, so {inv.program} cannot be shown {inv.cores} cores "
                               "(run `patchset build` first)")
        preload = os.environ.get("LD_PRELOAD", "").strip()
        env.update({"LD_PRELOAD": f"{shim} {preload}".strip(), CORES_ENV: str(inv.cores)})
    trace = None
    if inv.trace_env:
        trace = log.with_suffix(".trace.jsonl")
        trace.unlink(missing_ok=True)
        env[inv.trace_env] = str(trace)
    start = time.monotonic()
    r = proc.stream([*_unbuffered(), str(exe), *inv.args], log_file=log, cwd=bin_dir, timeout=timeout, env=env)
    sig = None
    last = tuple(ANSI.sub("", r.stdout).rstrip("\n").splitlines()[-LAST_LINES:])
    if r.timed_out:
        cases, totals, skipped = parse_console(r.stdout, inv.program)
        shown = " | ".join(line.strip() for line in last[-5:] if line.strip()) or "(it printed nothing)"
        cases.append(CaseResult(inv.program, "", "timeout", f"limit={timeout:g}s", FAIL,
                                f"stopped after {timeout:g}s (time limit); last lines: {shown}"))
        return ProgramResult(inv.program, inv.args, r.returncode, None, tuple(cases), time.monotonic() - start, log,
                             totals, tuple(skipped), timed_out=True, last_lines=last)
    if r.returncode < 0:
        try:
            sig = signal.Signals(-r.returncode).name
        except ValueError:
            sig = f"signal {-r.returncode}"
    if inv.sql:
        cases = parse_sql(r.stdout, inv.program)
        totals, skipped = None, list[str]()
        if not cases:
            # no rows: nothing ran, or a program that does not print SQL; its console lines
            # (if any) still say which backends it skipped
            cases, totals, skipped = parse_console(r.stdout, inv.program)
    else:
        cases, totals, skipped = parse_console(r.stdout, inv.program)
    notes: tuple[str, ...] = ()
    if trace is not None and trace.exists():
        notes = replay.trace_notes(trace)
    elif trace is not None:
        trace = None
    return ProgramResult(inv.program, inv.args, r.returncode, sig, tuple(cases), time.monotonic() - start, log,
                         totals, tuple(skipped), last_lines=last if sig or r.returncode else (), notes=notes,
                         trace=trace)


@dataclass(frozen=True)
class TestReport:
    backend: str
    mode: str
    ops: tuple[str, ...] | None
    """The op filter used; None: every op."""

    __test__ = False  # not a pytest test class, whatever its name says
    programs: tuple[ProgramResult, ...]
    source_commit: str = ""
    """The commit the tested build was made from (HEAD of the work tree it built)."""
    source_tree: str = ""
    """The tree id of what was built, uncommitted edits included."""

    @property
    def failed(self) -> bool:
        return any(p.verdict in (FAILED, CRASHED, NOT_LOADED) for p in self.programs)

    @property
    def nothing_checked(self) -> list[str]:
        return [p.program for p in self.programs if p.verdict in (NOTHING, NOT_MODELLED)]


def default_mode(backend: str) -> str:
    """grad on the CPU (test mode compares with the CPU and so skips it), test elsewhere."""
    return "grad" if backend == "cpu" else "test"


def series_ops(tests: list[tuple[str, tuple[str, ...]]]) -> list[str]:
    """The union of `-o` filters of the series' test-backend-ops commands, in order."""
    ops: list[str] = []
    for program, args in tests:
        if program != "test-backend-ops":
            continue
        for i, a in enumerate(args):
            if a == "-o" and i + 1 < len(args):
                for op in args[i + 1].split(","):
                    if op and op not in ops:
                        ops.append(op)
    return ops


def plan(backend_device: str, backend: str, mode: str, ops: list[str] | None,
         extra_programs: list[tuple[str, tuple[str, ...]]], programs: tuple[str, ...] | None = None,
         trace_env: str | None = None) -> list[Invocation]:
    """What `patchset test` runs: test-opt, test-backend-ops in `mode`, then the series' own programs;
    only those in `programs` when the backend names the ones it can run."""
    if mode not in MODES:
        raise TestRunError(f"unknown mode '{mode}' (known: {', '.join(MODES)})")
    args = [mode]
    if ops:
        args += ["-o", ",".join(ops)]
    if not (backend == "cpu" and mode == "test"):
        args += ["-b", backend_device]
    # SQL rows carry a `passed` field per case; test-backend-ops prints them in test mode only
    sql = mode == "test"
    if sql:
        args += ["--output", "sql"]
    invs = [Invocation("test-opt", (), trace_env=trace_env),
            Invocation("test-backend-ops", tuple(args), sql=sql, trace_env=trace_env)]
    for program, pargs in extra_programs:
        if program in ("test-opt", "test-backend-ops"):
            continue
        inv = Invocation(program, pargs, trace_env=trace_env)
        if inv not in invs:
            invs.append(inv)
    return [inv for inv in invs if programs is None or inv.program in programs]


def run_plan(bin_dir: Path, invocations: list[Invocation], log_dir: Path, backend: str, mode: str,
             ops: list[str] | None, *, timeout: float | None = DEFAULT_TIMEOUT_S, source_commit: str = "",
             source_tree: str = "") -> TestReport:
    results = []
    for i, inv in enumerate(invocations, 1):
        results.append(run_program(bin_dir, inv, log_dir / f"{i:02d}-{inv.program}.log", timeout=timeout))
    return TestReport(backend, mode, tuple(ops) if ops else None, tuple(results), source_commit, source_tree)

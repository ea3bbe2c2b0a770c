"""test-backend-ops runs of the sweep, split so that a crash in one op hides none of the other ops' cases.

A test-backend-ops run that crashes (the pin's `grad` mode aborts on REGLU's backward pass)
hides every case after the crash. A run of every op is made one run per first letter of the op
names (`^A`, `^B`, ..., and `^[^AB...]` for names no known op starts with). When a run crashes in
op X, X's cases up to the crash are kept and the same selection less X is run again
(`^R` less REGLU is `^R$,^R[^E],^RE$,^RE[^G],...,^REGLU.`), so one abort costs only X's later
cases and one more run. A crash between cases (no op to name) is split by name prefix instead.
test-backend-ops reads an entry with `^` as a regex matched against the op name; the entries have
no parentheses, which it would read as a full case string.
"""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path

from builder import proc
from builder.compile import testrun
from builder.compile.testrun import CRASH, FAIL, CaseResult, Invocation, ProgramResult
from builder.errors import ProcessError
from builder.progress import ProgressSink

TBO = "test-backend-ops"


# -- splitting a crashed test-backend-ops run ---------------------------------------------------------
_PLAIN = re.compile(r"^[A-Z0-9_]+$")
_PREFIX = re.compile(r"^\^([A-Z0-9_]*)$")


def split_entries(entries: tuple[str, ...] | None, known: set[str]) -> list[tuple[str, ...]]:
    """The `-o` filters that together select exactly what `entries` selects, each smaller.

    Empty when it cannot be split any further (one op name, an exact `^NAME$`, or a regex of the
    user's own).
    """
    if entries is not None and len(entries) > 1:
        return [(e,) for e in entries]
    if entries is None:
        prefix = ""
    else:
        m = _PREFIX.match(entries[0])
        if not m:
            return []
        prefix = m.group(1)
    nxt = sorted({n[len(prefix)] for n in known if n.startswith(prefix) and len(n) > len(prefix)})
    parts: list[tuple[str, ...]] = [(f"^{prefix}$",)] if prefix else []
    parts += [(f"^{prefix}{c}",) for c in nxt]
    parts.append((f"^{prefix}[^{''.join(nxt)}]",) if nxt else (f"^{prefix}.",))
    return parts


def list_ops(bin_dir: Path) -> set[str]:
    """The op names test-backend-ops knows (`--list-ops`); empty when it cannot say."""
    try:
        out = proc.run([str(bin_dir / TBO), "--list-ops"], timeout=120, cwd=bin_dir).stdout
    except ProcessError:
        return set()
    return {m.group(1) for m in re.finditer(r"^  ([A-Z0-9_]+)$", out, re.MULTILINE)}


def _crashed(r: ProgramResult) -> bool:
    return r.signal_name is not None or any(c.status == CRASH for c in r.cases)


def _with_filter(args: tuple[str, ...], entries: tuple[str, ...] | None) -> tuple[str, ...]:
    out: list[str] = []
    skip = False
    for i, a in enumerate(args):
        if skip:
            skip = False
            continue
        if a == "-o" and i + 1 < len(args):
            skip = True
            continue
        out.append(a)
    if entries:
        out[1:1] = ["-o", ",".join(entries)]
    return tuple(out)


def _filter_of(args: tuple[str, ...]) -> tuple[str, ...] | None:
    for i, a in enumerate(args):
        if a == "-o" and i + 1 < len(args):
            return tuple(args[i + 1].split(","))
    return None


def _crash_marker(r: ProgramResult, op: str | None = None) -> ProgramResult:
    """A crashed run whose output ended between cases gets one case that says so, so that the crash
    is compared like any other failing case (keyed by the op that crashed, else the filter run)."""
    if any(c.status == CRASH for c in r.cases):
        return r
    how = r.signal_name or f"exit {r.returncode}"
    marker = CaseResult(r.program, "", "(crashed)", op or " ".join(r.args), CRASH,
                        f"killed by {how} after its last case")
    return replace(r, cases=(*r.cases, marker))


def _exit_marker(r: ProgramResult) -> ProgramResult:
    """A run that exits non-zero with no failing case (e.g. a failed check outside the case list)."""
    if r.returncode == 0 or r.signal_name or r.failed:
        return r
    marker = CaseResult(r.program, "", "(exit status)", " ".join(r.args), FAIL, f"exit {r.returncode}, no case failed")
    return replace(r, cases=(*r.cases, marker))


class TreeRunner:
    """Runs the sweep's invocations on one built tree, splitting crashed test-backend-ops runs."""

    def __init__(self, bin_dir: Path, log_dir: Path, known: set[str], timeout_s: float | None,
                 progress: ProgressSink) -> None:
        self.bin_dir = bin_dir
        self.log_dir = log_dir
        self.known = known
        self.timeout_s = timeout_s
        self.progress = progress
        self.runs = 0
        self.split_runs = 0
        self.crashes: list[str] = []

    def run(self, inv: Invocation) -> list[ProgramResult]:
        if inv.program == TBO and _filter_of(inv.args) is None:
            # every op: one run per first letter from the start, so that a crash costs a re-run of
            # its letter's ops only (grad mode on the CPU crashes in about 24 ops at the pin)
            self.known.update(list_ops(self.bin_dir))
            return [r for part in split_entries(None, self.known) for r in self._run(inv, part, frozenset())]
        if inv.program != TBO:
            return [_exit_marker(self._once(inv))]
        return self._run(inv, _filter_of(inv.args), frozenset())

    def _once(self, inv: Invocation) -> ProgramResult:
        self.runs += 1
        self.progress.begin(f"{inv.program} {' '.join(inv.args)[:60]}", None)
        r = testrun.run_program(self.bin_dir, inv, self.log_dir / f"{self.runs:04d}-{inv.program}.log",
                                timeout=self.timeout_s)
        self.progress.end()
        self.known.update(c.name for c in r.cases if _PLAIN.match(c.name))
        return r

    def _run(self, inv: Invocation, base: tuple[str, ...] | None, excluded: frozenset[str]) -> list[ProgramResult]:
        """Run the ops `base` selects less `excluded`; after a crash in op X, keep X's cases up to the
        crash and run the rest again without X: one more run per crashing op."""
        entries = expand(base, excluded) if base is not None else None
        if entries == ():
            return []
        r = self._once(replace(inv, args=_with_filter(inv.args, entries)))
        if not _crashed(r):
            return [_exit_marker(r)]
        crash = next((c.name for c in r.cases if c.status == CRASH), None)
        if crash is None and r.cases and not inv.sql:
            # grad mode prints a case's line before it builds the backward graph, where the
            # unsupported ops abort: the last line printed is the case that crashed
            crash = r.cases[-1].name
        if crash and base is not None and crash not in excluded and excludable(base, crash):
            self.crashes.append(crash)
            self.split_runs += 1
            mine = _crash_marker(replace(r, cases=tuple(c for c in r.cases if c.name == crash)), crash)
            if len(base) > 1:
                # one entry at a time from here, so that the next crash re-runs only its own entry
                return [mine, *(x for e in base for x in self._run(inv, (e,), excluded | {crash}))]
            return [mine, *self._run(inv, base, excluded | {crash})]
        # the crash named no op (it came between cases): split by name instead
        if not self.known:
            self.known.update(list_ops(self.bin_dir))
        parts = split_entries(entries, self.known) if not excluded else []
        if not parts:
            self.crashes.append(",".join(entries or ("(all)",)))
            return [_crash_marker(r)]
        out: list[ProgramResult] = []
        for part in parts:
            self.split_runs += 1
            out += self._run(inv, part, frozenset())
        return out


def complement(prefix: str, excluded: set[str] | frozenset[str]) -> list[str]:
    """`-o` entries for every op name that starts with `prefix`, except the `excluded` ones.

    Regex classes only (`^RE[^G]`, `^REG$`, ...): test-backend-ops reads an entry with a
    parenthesis as a full case string, so there is no `(?!...)`.
    """
    under = {n for n in excluded if n.startswith(prefix)}
    if not under:
        return [f"^{prefix}"]
    nxt = sorted({n[len(prefix)] for n in under if len(n) > len(prefix)})
    out = [f"^{prefix}$"] if prefix and prefix not in under else []
    out.append(f"^{prefix}[^{''.join(nxt)}]" if nxt else f"^{prefix}.")
    for c in nxt:
        out += complement(prefix + c, under)
    return out


def expand(base: tuple[str, ...], excluded: frozenset[str]) -> tuple[str, ...]:
    """The `-o` entries of `base` less the ops in `excluded`."""
    out: list[str] = []
    for e in base:
        m = _PREFIX.match(e)
        if e in excluded or (e.startswith("^") and e.endswith("$") and e[1:-1] in excluded):
            continue
        out += complement(m.group(1), excluded) if m else [e]
    return tuple(out)


def excludable(base: tuple[str, ...], name: str) -> bool:
    """Whether `expand` can leave op `name` out of `base` (not when only a regex of the user's selects it)."""
    for e in base:
        m = _PREFIX.match(e)
        if e in (name, f"^{name}$") or (m and name.startswith(m.group(1))):
            return True
    return False

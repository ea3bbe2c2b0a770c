"""Which cases of a test program to run: the filters the programs take, and the runs past a crash.

A program that selects cases (CASE_FILTERS) and crashes inside one is run again without it, so that the cases
after the crash have an outcome; the confirming runs of a failing tree are narrowed to its failing cases.
"""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path

from builder.compile.testrun import CRASH, DEFAULT_TIMEOUT_S, CaseResult, Invocation, ProgramResult, run_program

CASE_FILTERS = {"test-backend-ops": "-p"}
"""Programs that select cases by a regular expression over their parameters (test-backend-ops: `-p REGEX`,
searched in each case's parameter string), and the flag."""

OP_FILTER = "-o"
"""test-backend-ops' filter by op name (a comma-separated list)."""


def _without(args: tuple[str, ...], flag: str) -> tuple[str, ...]:
    out: list[str] = []
    skip = False
    for i, a in enumerate(args):
        if skip:
            skip = False
        elif a == flag and i + 1 < len(args):
            skip = True
        else:
            out.append(a)
    return tuple(out)


def selecting(inv: Invocation, cases: list[CaseResult] | tuple[CaseResult, ...]
              ) -> tuple[Invocation, tuple[str, ...] | None]:
    """(`inv` narrowed to the ops of `cases`, their parameters to select) where the program selects cases
    (CASE_FILTERS: test-backend-ops' `-o OPS`, and `-p` over the parameters, which run_past_crashes adds);
    else (`inv`, None): the whole program runs again."""
    flag = CASE_FILTERS.get(inv.program)
    real = [c for c in cases if c.name and not c.name.startswith("(") and not (c.name == "timeout" and not c.backend)]
    if flag is None or flag in inv.args or not real or len(real) != len(cases):
        return inv, None
    ops = ",".join(dict.fromkeys(c.name for c in real))
    args = _without(inv.args, OP_FILTER)
    # the mode stays the first argument (test-backend-ops reads `grad`/`test` positionally)
    lead = args[:1] if args and not args[0].startswith("-") else ()
    return (Invocation(inv.program, (*lead, OP_FILTER, ops, *args[len(lead):]), inv.sql, inv.trace_env),
            tuple(dict.fromkeys(c.params for c in real)))


_ECMA_SYNTAX = re.compile(r"([\^$\\.*+?()\[\]{}|/])")


def ecma_escape(text: str) -> str:
    """`text` as an ECMAScript regex (std::regex) that matches it: only the pattern syntax characters escaped
    (Python's re.escape also escapes `-` and a space, identity escapes that a strict ECMAScript parser refuses)."""
    return _ECMA_SYNTAX.sub(r"\\\1", text)


def _params_regex(only: tuple[str, ...] | None, skipped: list[str]) -> str:
    """An ECMAScript regex (std::regex) of the parameters: any of `only` (every case when None), none of `skipped`."""
    out = "^"
    if skipped:
        out += "(?!(?:" + "|".join(ecma_escape(p) for p in skipped) + ")$)"
    return out + ("(?:" + "|".join(ecma_escape(p) for p in only) + ")$" if only is not None else "")


MAX_RESUMES = 20
"""The most runs past crashes of one program run (each steps past one more crashing case)."""


def run_past_crashes(bin_dir: Path, inv: Invocation, log: Path, timeout: float | None = DEFAULT_TIMEOUT_S,
                     only: tuple[str, ...] | None = None) -> ProgramResult:
    """`inv` run, and when it crashed inside a case, run again past that case (and each later one that
    crashes), so that every case has an outcome: the crashing case is a failing one (CRASH), the cases
    after it are read from the later runs. Only for a program that selects cases (CASE_FILTERS) and is not
    given a filter of that kind already; a crash between cases leaves the cases after it unrun. `only`: the
    parameters of the cases to run (selecting), else every case."""
    flag = CASE_FILTERS.get(inv.program)
    if only is not None and flag is not None and flag not in inv.args:
        inv = Invocation(inv.program, (*inv.args, flag, _params_regex(only, [])), inv.sql, inv.trace_env)
        base = inv.args[:-2]
    else:
        base = inv.args
    first = run_program(bin_dir, inv, log, timeout)
    if flag is None or flag in base or not first.signal_name:
        return first
    last, skipped, runs = first, list[str](), list[ProgramResult]()
    while last.signal_name and len(runs) < MAX_RESUMES:
        crash = next((c for c in last.cases if c.status == CRASH), None)
        if crash is None or crash.params in skipped:
            break
        skipped.append(crash.params)
        # every case (of `only`) but those that crashed
        again = Invocation(inv.program, (*base, flag, _params_regex(only, skipped)), inv.sql, inv.trace_env)
        last = run_program(bin_dir, again, log.with_name(f"{log.stem}-past-{len(runs) + 1}{log.suffix}"), timeout)
        runs.append(last)
    if not runs:
        return first
    seen = {(c.backend, c.case_id) for c in first.cases}
    cases = list(first.cases)
    for r in runs:
        for c in r.cases:
            if (c.backend, c.case_id) not in seen:
                seen.add((c.backend, c.case_id))
                cases.append(c)
    return replace(first, cases=tuple(cases), duration_s=first.duration_s + sum(r.duration_s for r in runs),
                   resumed=tuple(" ".join([r.program, *r.args]) for r in runs),
                   finished=not last.signal_name and not last.timed_out)

"""Which cases of a test program to run: the filters the programs take, and the runs past a crash.

A program that selects cases (CASE_FILTERS: test-backend-ops, and test-opt and test-alloc from the series'
patch 3 on) and crashes inside one is run again without it, so that the cases after the crash have an outcome;
the confirming runs of a failing tree are narrowed to its failing cases.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from pathlib import Path

from builder.compile.testrun import CRASH, DEFAULT_TIMEOUT_S, CaseResult, Invocation, ProgramResult, run_program

PARAMS, NAME, PRINTED = "params", "name", "printed name"
"""What a case filter's regex is searched in: the case's parameters (test-backend-ops), its name (test-opt's
tests, whose cases are its subtests), or its name as printed (test-alloc's run(): `NAME` or `NAME(ARG)`)."""


@dataclass(frozen=True)
class CaseFilter:
    """How a program selects its cases: `flag REGEX`, a std::regex (ECMAScript) searched in each case's key."""

    flag: str
    over: str
    """PARAMS, NAME or PRINTED."""
    echoes: bool = False
    """The program prints `filter: REGEX` when it applies the filter (patch 3's test-opt and test-alloc): a run
    without that line came from a program that ignores the flag (at the pin both take no arguments), and says
    nothing of the cases the filter selects."""
    ops: str | None = None
    """Its filter by op name, a comma-separated list (test-backend-ops' `-o`), which `selecting` narrows too."""

    def key(self, case: CaseResult) -> str:
        """What the regex is searched in, for `case`."""
        if self.over == PARAMS:
            return case.params
        if self.over == PRINTED and case.params:
            return f"{case.name}({case.params})"
        return case.name


CASE_FILTERS = {"test-backend-ops": CaseFilter("-p", PARAMS, ops="-o"),
                "test-opt": CaseFilter("-p", NAME, echoes=True),
                "test-alloc": CaseFilter("-p", PRINTED, echoes=True)}
"""The programs that select cases, and how. test-opt names the test it starts (`NAME:`) only when given a filter:
a crash of a run without one is found by a run with a filter that selects every case."""

OP_FILTER = "-o"
"""test-backend-ops' filter by op name (a comma-separated list)."""

_OVER = {PARAMS: "each case's parameters", NAME: "each test's name (its cases are the test's subtests)",
         PRINTED: "each case's name as printed (`NAME` or `NAME(ARG)`)"}
FILTERS_BEGIN = "<!-- BEGIN generated from builder/compile/caseselect.py CASE_FILTERS: edit there -->"
FILTERS_END = "<!-- END generated from builder/compile/caseselect.py CASE_FILTERS -->"


def filter_table() -> str:
    """The Markdown table of CASE_FILTERS between its markers (docs/verify.md)."""
    applied = {True: "prints `filter: REGEX`; a run without it is not taken",
               False: "upstream's own flag: taken as applied"}
    rows = [f"| {program} | `{sel.flag} REGEX`{f' (and `{sel.ops} OPS`)' if sel.ops else ''} | {_OVER[sel.over]} | "
            f"{applied[sel.echoes]} |" for program, sel in CASE_FILTERS.items()]
    return "\n".join([FILTERS_BEGIN, "| program | selects cases by | the regex is searched in | applied |",
                      "| --- | --- | --- | --- |", *rows, FILTERS_END]) + "\n"


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
    """(`inv` narrowed to the ops of `cases` where it filters by op, their keys to select) where the program
    selects cases (CASE_FILTERS; run_past_crashes adds the filter); else (`inv`, None): the whole program runs
    again. A program that ignores the filter runs every case, which says the same of `cases`."""
    sel = CASE_FILTERS.get(inv.program)
    real = [c for c in cases if c.name and not c.name.startswith("(") and not (c.name == "timeout" and not c.backend)]
    if sel is None or sel.flag in inv.args or not real or len(real) != len(cases):
        return inv, None
    keys = tuple(dict.fromkeys(sel.key(c) for c in real))
    if sel.ops is None:
        return inv, keys
    ops = ",".join(dict.fromkeys(c.name for c in real))
    args = _without(inv.args, sel.ops)
    # the mode stays the first argument (test-backend-ops reads `grad`/`test` positionally)
    lead = args[:1] if args and not args[0].startswith("-") else ()
    return replace(inv, args=(*lead, sel.ops, ops, *args[len(lead):])), keys


_ECMA_SYNTAX = re.compile(r"([\^$\\.*+?()\[\]{}|/])")


def ecma_escape(text: str) -> str:
    """`text` as an ECMAScript regex (std::regex) that matches it: only the pattern syntax characters escaped
    (Python's re.escape also escapes `-` and a space, identity escapes that a strict ECMAScript parser refuses)."""
    return _ECMA_SYNTAX.sub(r"\\\1", text)


def _params_regex(only: tuple[str, ...] | None, skipped: list[str]) -> str:
    """An ECMAScript regex (std::regex) of the case keys (CaseFilter.key): any of `only` (every case when None),
    none of `skipped`."""
    out = "^"
    if skipped:
        out += "(?!(?:" + "|".join(ecma_escape(p) for p in skipped) + ")$)"
    return out + ("(?:" + "|".join(ecma_escape(p) for p in only) + ")$" if only is not None else "")


MAX_RESUMES = 20
"""The most runs past crashes of one program run (each steps past one more crashing case)."""


def _applied(sel: CaseFilter, r: ProgramResult, regex: str) -> bool:
    """Whether run `r` applied the filter `regex` (a program that does not echo it: taken on trust)."""
    if not sel.echoes:
        return True
    return f"filter: {regex}" in r.log.read_text(errors="replace").splitlines()


def run_past_crashes(bin_dir: Path, inv: Invocation, log: Path, timeout: float | None = DEFAULT_TIMEOUT_S,
                     only: tuple[str, ...] | None = None) -> ProgramResult:
    """`inv` run, and when it crashed inside a case, run again past that case (and each later one that
    crashes), so that every case has an outcome: the crashing case is a failing one (CRASH), the cases
    after it are read from the later runs. Only for a program that selects cases (CASE_FILTERS) and is not
    given a filter of that kind already; a crash between cases leaves the cases after it unrun, and so does
    a program that ignores the filter (CaseFilter.echoes). `only`: the keys of the cases to run (selecting),
    else every case."""
    sel = CASE_FILTERS.get(inv.program)
    if only is not None and sel is not None and sel.flag not in inv.args:
        inv = replace(inv, args=(*inv.args, sel.flag, _params_regex(only, [])))
        base = inv.args[:-2]
    else:
        base = inv.args
    first = run_program(bin_dir, inv, log, timeout)
    if sel is None or sel.flag in base or not first.signal_name:
        return first
    filtered = only is not None and _applied(sel, first, inv.args[-1])
    last, skipped, runs = first, list[str](), list[ProgramResult]()
    while last.signal_name and len(runs) < MAX_RESUMES:
        crash = next((c for c in last.cases if c.status == CRASH), None)
        if crash is None:
            # no case named: a program that names the test it starts only under a filter (test-opt) is run
            # with one that selects every case, to find the crash; once filtered, it crashed between cases
            if not sel.echoes or runs or filtered:
                break
        elif sel.key(crash) in skipped:
            break
        else:
            skipped.append(sel.key(crash))
        # every case (of `only`) but those that crashed
        regex = _params_regex(only, skipped)
        again = run_program(bin_dir, replace(inv, args=(*base, sel.flag, regex)),
                            log.with_name(f"{log.stem}-past-{len(runs) + 1}{log.suffix}"), timeout)
        if not _applied(sel, again, regex):
            # it ran every case again, and crashed where it did: it says nothing of the cases after the crash
            break
        last = again
        runs.append(last)
    if not runs:
        return first
    return replace(first, cases=_merged([first, *runs]), duration_s=first.duration_s + sum(r.duration_s for r in runs),
                   resumed=tuple(" ".join([r.program, *r.args]) for r in runs),
                   finished=not last.signal_name and not last.timed_out)


def _merged(runs: list[ProgramResult]) -> tuple[CaseResult, ...]:
    """The cases of a run and of its runs past crashes, each once (from the first run that printed it). A
    program that names a group only at its end (test-opt: `Backend CPU adamw: OK`) leaves the cases of the group
    it crashed in unnamed: they are of the first group of their backend that their run did not finish, as the
    later runs name the groups (the same case is in each group: keyed by the group too)."""
    order: dict[str, list[str]] = {}
    for r in runs:
        for c in r.cases:
            if c.variant and c.variant not in order.setdefault(c.backend, []):
                order[c.backend].append(c.variant)
    seen: set[tuple[str, str, str]] = set()
    out: list[CaseResult] = []
    for r in runs:
        done = {(c.backend, c.variant) for c in r.cases if c.variant}
        for case in r.cases:
            c = case
            if not c.variant:
                group = next((v for v in order.get(c.backend, []) if (c.backend, v) not in done), "")
                c = replace(c, variant=group) if group else c
            if (c.backend, c.variant, c.case_id) not in seen:
                seen.add((c.backend, c.variant, c.case_id))
                out.append(c)
    return tuple(out)

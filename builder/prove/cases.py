"""Case-level known-positive: which test cases prove a patch, and which pass without the fix too.

A patch is proven by the test cases that fail on its before tree and pass on its after tree (the
same test code on both: the before tree has the patch's test part and not its fix). A program that
fails as a whole proves nothing by itself: a time-out, or a crash between cases, or a failing case
that the after tree does not pass, is not a case failing before and passing after.

Which cases the patch adds or changes is read from the runs, not from the diff (a case's name and
parameters are what the program prints, and a C++ diff does not say which it will print): the
patch's test programs are also run on its parent tree (the tree the patch applies on, without its
test part) whenever the patch changes their source. A case the before run prints and the parent run
does not is `added`; one both print, with another result, is `changed`; the others are `existing`.
A program the parent tree does not have adds every case it prints. A case whose code changed but
whose result did not is indistinguishable from an existing one here.
"""

from __future__ import annotations

from dataclasses import dataclass

from builder import words
from builder.compile import testrun
from builder.series.model import GuardRule

# how a case ran on one tree
PASS, FAIL, CRASH, SKIP = testrun.PASS, testrun.FAIL, testrun.CRASH, testrun.SKIP
TIMEOUT = "timeout"
"""The program was stopped at its time limit inside this case."""
NOT_REACHED = "not reached"
"""The program stopped (a crash, its time limit) before printing this case."""
ABSENT = "absent"
"""The program ran to its end and printed no such case."""

# which cases of the before tree the patch added or changed
ADDED, CHANGED, EXISTING = "added", "changed", "existing"

# what a case says about the patch
PROOF = "proof"
FLAKY = words.FLAKY
GUARD = "guard case"
DECLARED_GUARD = "declared guard"
CANNOT_TELL = words.CANNOT_TELL
NO_PROOF = "no proof"

ROLES: tuple[tuple[str, str], ...] = (
    (PROOF, "fails before (a FAIL, or the case the program crashed in) and passes after: the proof"),
    (FLAKY, "would be proof, but in the confirming runs (`--confirm N`, default 3) it did not fail in every run "
            "without the fix or did not pass in every run with it: flaky (N of M runs), never proof"),
    (GUARD, "added or changed by the patch, passes before and after: not part of the proof; reported by "
            "`verify`, `check --strict` and `export` until a `Patchset-Guard` trailer declares it"),
    (DECLARED_GUARD, "a guard case that a `Patchset-Guard` trailer of the patch matches: not part of the proof, "
                     "not reported"),
    (CANNOT_TELL, "the before run stopped at its time limit in this case, or before reaching it"),
    (NO_PROOF, "anything else: skipped, or not passing after, or an existing case that passes before"),
)
"""Each role a case of the evidence's case table can have, and what it means (docs/verify.md)."""


@dataclass(frozen=True)
class Case:
    """One test case of one test command, on the parent, before and after trees."""

    command: str
    case: str
    """`NAME(PARAMS)`, as the program prints it."""
    backend: str
    scope: str
    before: str
    after: str
    role: str
    guard: str = ""
    """The `Patchset-Guard` rule that declares it, for a declared guard."""
    runs: str = ""
    """For a case of the proof or a flaky one, how it ran in each confirming run (`before: fail fail fail;
    after: pass pass pass`), and for a flaky one how often it failed (`flaky (2 of 3 runs)`)."""

    def as_dict(self) -> dict[str, str]:
        return {"command": self.command, "case": self.case, "backend": self.backend, "scope": self.scope,
                "before": self.before, "after": self.after, "role": self.role,
                **({"guard": self.guard} if self.guard else {}), **({"runs": self.runs} if self.runs else {})}


_RANK = {SKIP: 0, PASS: 1, FAIL: 2, CRASH: 3}


def statuses(r: testrun.ProgramResult) -> dict[tuple[str, str], str]:
    """(backend, NAME(PARAMS)) -> how the case ran. A case printed twice keeps its worst result;
    the case a program was stopped in at its time limit is TIMEOUT (testrun's own `timeout` line
    is not a case)."""
    out: dict[tuple[str, str], str] = {}
    for c in r.cases:
        if r.timed_out and c.name == "timeout" and not c.backend:
            continue
        key = (c.backend + (f" {c.variant}" if c.variant else ""), c.case_id)
        status = TIMEOUT if r.timed_out and c.status == CRASH else c.status
        old = out.get(key)
        if old is None or _RANK.get(status, 4) > _RANK.get(old, 4):
            out[key] = status
    return out


def stopped(r: testrun.ProgramResult) -> bool:
    """Whether the program was stopped early (a signal, its time limit) and not run past it to its end
    (caseselect.run_past_crashes): the cases it never printed say nothing."""
    return r.stopped


def _unfinished_group(before: dict[tuple[str, str], str],
                      after: dict[tuple[str, str], str]) -> dict[tuple[str, str], str]:
    """A program that names a group only at its end (test-opt: `Backend CPU adamw: OK` after its
    cases) and was stopped inside one prints that group's cases without the name. They are cases of
    the after run's first group of that backend that the stopped run did not finish."""
    done = {backend for backend, _ in before}
    out: dict[tuple[str, str], str] = {}
    for (backend, case), status in before.items():
        key = (backend, case)
        if key not in after:
            label = next((ab for ab, _ in after if ab.startswith(backend + " ") and ab not in done), None)
            if label is not None and (label, case) in after:
                key = (label, case)
        out.setdefault(key, status)
    return out


def table(command: str, before: testrun.ProgramResult, after: testrun.ProgramResult,
          parent: testrun.ProgramResult | None, guards: tuple[GuardRule, ...], *, new_program: bool,
          before_more: tuple[testrun.ProgramResult, ...] = (),
          after_more: tuple[testrun.ProgramResult, ...] = ()) -> list[Case]:
    """The cases of one test command: every case the before or after run printed, with its scope
    and role. `parent`: the run on the parent tree (None when the patch does not change the program's
    source: every case is existing; or when `new_program`: the parent tree has no such program).
    `before_more`, `after_more`: the confirming runs of each tree; a case is proof only when it fails in
    every run before and passes in every run after, else it is flaky."""
    b, a = statuses(before), statuses(after)
    # a confirming run stopped inside a group named at its end is matched to the after run's groups too
    b_more = [_unfinished_group(statuses(r), a) if stopped(r) else statuses(r) for r in before_more]
    a_more = [statuses(r) for r in after_more]
    if stopped(before):
        b = _unfinished_group(b, a)
    p = statuses(parent) if parent is not None else {}
    out = []
    for key in list(dict.fromkeys([*b, *a])):
        backend, case = key
        was = b.get(key, NOT_REACHED if stopped(before) else ABSENT)
        now = a.get(key, ABSENT)
        if new_program:
            scope = ADDED
        elif parent is None:
            scope = EXISTING
        elif key not in p:
            # a parent run stopped early may not have reached it: then it is not known to be new
            scope = EXISTING if stopped(parent) else ADDED
        else:
            scope = CHANGED if p[key] != was and was in (PASS, FAIL, CRASH) else EXISTING
        guard, runs = "", ""
        if now == PASS and was in (FAIL, CRASH):
            role, runs = _confirmed(key, was, b_more, a_more)
        elif now == PASS and was in (TIMEOUT, NOT_REACHED):
            role = CANNOT_TELL
        elif now == PASS and was == PASS and scope in (ADDED, CHANGED):
            rule = next((g for g in guards if g.matches(command, case)), None)
            role, guard = (DECLARED_GUARD, str(rule)) if rule else (GUARD, "")
        else:
            role = NO_PROOF
        out.append(Case(command, case, backend, scope, was, now, role, guard, runs))
    return out


def _confirmed(key: tuple[str, str], was: str, b_more: list[dict[tuple[str, str], str]],
               a_more: list[dict[tuple[str, str], str]]) -> tuple[str, str]:
    """(PROOF or FLAKY, how it ran in each run) of a case that failed in the first run before and passed in the
    first run after. A confirming run that did not print it (it stopped first) does not confirm it."""
    if not b_more and not a_more:
        return PROOF, ""
    before = [was, *(m.get(key, NOT_REACHED) for m in b_more)]
    after = [PASS, *(m.get(key, NOT_REACHED) for m in a_more)]
    said = f"before: {' '.join(before)}; after: {' '.join(after)}"
    if all(s in (FAIL, CRASH) for s in before) and all(s == PASS for s in after):
        return PROOF, said
    unsteady = before if not all(s in (FAIL, CRASH) for s in before) else after
    failed = sum(s in (FAIL, CRASH) for s in unsteady)
    return FLAKY, f"{words.flaky(failed, len(unsteady))}: {said}"


def recorded(cases: list[Case]) -> list[Case]:
    """The rows the evidence keeps: the cases the patch added or changed, the proof, and where the
    before run stopped (existing cases that pass before and after are left out: thousands, for
    test-backend-ops)."""
    return [c for c in cases if c.scope != EXISTING or c.role in (PROOF, FLAKY) or c.before in (TIMEOUT, CRASH)]


def undeclared_guards(rows: tuple[dict, ...] | list[dict], guards: tuple[GuardRule, ...]) -> list[dict]:
    """The guard cases of an evidence case table that none of `guards` declares (the patch's trailers
    as they are now, not as they were when the evidence was made)."""
    return [r for r in rows if r.get("role") in (GUARD, DECLARED_GUARD)
            and not any(g.matches(str(r.get("command", "")), str(r.get("case", ""))) for g in guards)]


def markdown(rows: tuple[dict, ...]) -> list[str]:
    """The case table of the evidence Markdown."""
    if not rows:
        return []
    counts: dict[str, int] = {}
    for r in rows:
        counts[r["role"]] = counts.get(r["role"], 0) + 1
    out = ["## cases", "", ", ".join(f"{n} {role}" for role, n in counts.items()), "",
           "| command | backend | case | scope | before | after | role |",
           "| --- | --- | --- | --- | --- | --- | --- |"]
    for r in rows:
        role = r["role"] + (f" ({r['guard']})" if r.get("guard") else "")
        out.append("| " + " | ".join(str(x).replace("|", "/") for x in (
            f"`{r['command']}`", r["backend"], f"`{r['case']}`", r["scope"], r["before"], r["after"], role)) + " |")
    out.append("")
    return out

"""How a patch's test cases decide its proof: the reason a verdict gives, from the case table and the runs.

Pure functions of what the trees' runs printed (no tree is built here): `_case_verdict` says how
the test fails without the fix, or why no case proves the patch; a case that flips between the
confirming runs is flaky, never proof.
"""

from __future__ import annotations

from builder import words
from builder.compile import testrun
from builder.prove import cases, runner

Runs = tuple[list[testrun.ProgramResult], tuple[tuple[testrun.ProgramResult, ...], ...]]
"""The tests' first runs on a tree, and each test's confirming runs (TreeBuilder.last_confirm)."""


def _flaky(first: list[testrun.ProgramResult], more: tuple[tuple[testrun.ProgramResult, ...], ...]) -> str:
    """What failed in some runs of a tree and not in others, in words ('' when nothing did)."""
    return "; ".join(f"`{c}` {how}" for r, m in zip(first, more, strict=True)
                     for c, how in runner.steady_failures(r, m)[1].items())


def _first(lines: tuple[str, ...]) -> str:
    return lines[0] + (f"; and {len(lines) - 1} more" if len(lines) > 1 else "") if lines else "no detail"


def _names(rows: list[cases.Case], limit: int = 3) -> str:
    shown = ", ".join(f"`{r.case}`" for r in rows[:limit])
    return shown + (f" and {len(rows) - limit} more" if len(rows) > limit else "")


def _case_verdict(declared: str, rows: list[cases.Case], before_runs: list[testrun.ProgramResult],
                  before_more: tuple[tuple[testrun.ProgramResult, ...], ...] = ()) -> tuple[str, str]:
    """(how the test fails without the fix, '') when the cases prove the patch, else ('', why not).

    Proof is a case that fails before and passes after, in every run (`before_more`: the before tree's
    confirming runs; a case that flips is flaky, never proof). A program stopped at its time limit proves
    nothing (cannot tell); a crash proves inside the case the program was in when it crashed (as its
    output shows) when the after tree passes that case, or anywhere with `Patchset-Before: crash`."""
    proof = [r for r in rows if r.role == cases.PROOF]
    flaky = [r for r in rows if r.role == cases.FLAKY]
    more = before_more or tuple(() for _ in before_runs)
    # a declared crash counts only at its site (the case it crashed in, or the last one it finished), the same in
    # every run: a crash elsewhere in another run is not the one declared
    signalled = [(r, m) for r, m in zip(before_runs, more, strict=True) if r.signal_name]
    crashed = [r for r, m in signalled if all(x.signal_name and x.crash_site == r.crash_site for x in m)]
    unsteady = [f"{r.program} ({r.signal_name} {r.crash_site}; then " + ", ".join(
        f"{x.signal_name} {x.crash_site}" if x.signal_name else x.verdict for x in m) + ")"
                for r, m in signalled if r not in crashed]
    timed_out = [r for r in before_runs if r.timed_out]
    flaky_note = f"; flaky, not part of the proof: {_flaky_names(flaky)}" if flaky else ""
    if proof:
        crash_cases = [r for r in proof if r.before == cases.CRASH]
        how = f"the test fails in {len(proof)} case(s) that pass with it ({_names(proof)})"
        if crash_cases:
            how += f"; the program crashed in {_names(crash_cases)}"
        if timed_out:
            how += f"; {', '.join(r.program for r in timed_out)} stopped at its time limit (not part of the proof)"
        return how + flaky_note, ""
    if declared == "crash" and crashed:
        n = 1 + max(len(m) for _, m in signalled)
        runs = f" in each of {n} runs" if n > 1 else ""
        return (f"{', '.join(f'{r.program} crashes ({r.signal_name}) {r.crash_site}' for r in crashed)}{runs}, "
                "as the patch declares"), ""
    if declared == "crash" and unsteady:
        return "", (f"{words.FLAKY}: without the fix the test does not crash at one site in every run: "
                    f"{'; '.join(unsteady)}")
    if flaky:
        return "", (f"no case fails in every run without the fix and passes in every run with it: "
                    f"{_flaky_names(flaky)}")
    if timed_out:
        r = timed_out[0]
        where = next((f" in `{c.case}`" for c in rows if c.before == cases.TIMEOUT and c.command.startswith(r.program)),
                     "")
        return "", (f"cannot tell: without the fix {r.program} stopped at its time limit{where}, and no case "
                    "failed there that passes with the fix")
    if crashed:
        r = crashed[0]
        where = next((f"`{c.case}`" for c in rows if c.before == cases.CRASH), "")
        inside = f"in {where}, which the after tree does not pass" if where else "outside any case it printed"
        return "", (f"without the fix {r.program} crashes ({r.signal_name}) {inside}: a crash proves only inside a "
                    "case the after tree runs and passes, or where the patch declares that its before tree crashes")
    if declared == "crash":
        return "", "the patch declares that its before tree crashes, but without the fix no test program crashes"
    failing = [r for r in rows if r.before == cases.FAIL]
    if failing:
        return "", (f"no case fails without the fix and passes with it: those failing without it "
                    f"({_names(failing)}) do not pass with it")
    return "", "no case fails without the fix and passes with it (the before tree fails with no failing case)"


def _flaky_names(rows: list[cases.Case], limit: int = 3) -> str:
    shown = ", ".join(f"`{r.case}` {r.runs.split(':', 1)[0]}" for r in rows[:limit])
    return shown + (f" and {len(rows) - limit} more" if len(rows) > limit else "")


def _guard_note(rows: list[cases.Case]) -> str:
    guards = [r for r in rows if r.role == cases.GUARD]
    if not guards:
        return ""
    return (f"; {len(guards)} added case(s) pass without the fix too ({_names(guards)}): guard cases, not part of "
            "the proof (declare them as guards in the patch's trailers)")

"""The verdict words, each spelled once, with what it requires and how it is rendered.

What verify, the fixed-upstream check, canary, the evidence rules and the case table say.

Every module that says or reads a verdict imports its word from here (a second spelling would let two
rules drift apart: `evidence_rules` once re-declared verify's). The module sits in the base layer so
that the series layer (the rebase dry run's fixed-upstream words) and the compile layer (a program's
verdict) read the same words as the prover. A word that means "we did not check" (cannot tell, needs,
nothing checked, flaky, not modelled) never reads like one that means "we checked".
"""

from __future__ import annotations

# -- one test program run (builder.compile.testrun) -------------------------------------------------------------
PASSED = "passed"
FAILED = "failed"
NOTHING = "nothing checked"
CRASHED = "crashed"
NOT_LOADED = "did not load"
"""The dynamic loader could not start it (exit 127, nothing printed): the tree did not build, never a failed test."""
NOT_MODELLED = "not modelled"
"""A Metal stand-in stopped it at an API it does not model (its own exit status): nothing checked, never a failure."""

# -- one tree (a verify step, the fixed-upstream check's run, canary's check) -------------------------------------
TREE_FAILS = "fails"
TREE_PASSES = "passes"
TREE_NOTHING = NOTHING
BUILD_FAILS = "build-fails"
"""The tree fails to compile, and only in the patch's test paths (a before tree with `Patchset-Before: build-fails`)."""
BUILD_FAILED_STEP = "build-failed"
"""The tree fails to build elsewhere, or a program of it did not load."""
STEP_VERDICTS = (TREE_FAILS, TREE_PASSES, BUILD_FAILS, BUILD_FAILED_STEP, TREE_NOTHING)

# -- verify's outcome per patch and backend --------------------------------------------------------------------
PROVEN = "proven"
NOT_PROVEN = "not proven"
REGRESSED = "regressed"
BUILD_FAILED = "build failed"
NEEDS = "needs"
"""Followed by the backend names (`needs metal`): see needs()."""

# -- the fixed-upstream check (builder.prove.fixed_upstream, the rebase dry run, bump) -----------------------------
FIXED = "fixed upstream"
PARTLY_FIXED = "partly fixed upstream"
NOT_FIXED = "not fixed upstream"

# -- said by several -----------------------------------------------------------------------------------------------
CANNOT_TELL = "cannot tell"
FLAKY = "flaky"
"""A case whose outcome differs between runs of one tree: never proof, never a catch, never fixed."""

CONFIRM_RUNS = 3
"""How many runs confirm a case that decides a verdict (`--confirm N`): it must say the same in each."""


def needs(backends: list[str] | tuple[str, ...]) -> str:
    """`needs metal metal-replay`: the outcome of a proof that needs a backend this machine lacks."""
    return " ".join([NEEDS, *backends])


def is_needs(outcome: str) -> bool:
    return outcome == NEEDS or outcome.startswith(NEEDS + " ")


def flaky(failed: int, runs: int) -> str:
    """`flaky (2 of 3 runs)`: a case that failed in `failed` of `runs` runs of one tree."""
    return f"{FLAKY} ({failed} of {runs} runs)"

"""What verify answers: the outcomes and their meanings, each patch's verdict, the run's report, the recorded ones.

`OUTCOMES` is the table of docs/verify.md; `PatchVerdict` and `VerifyReport` are what `verify`
returns; `report_table` and `recorded_outcome` read the outcomes back from the evidence on disk
(`verify --report`, `patchset report --html`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from builder import words
from builder.compile import backends as backendmod
from builder.project import Project
from builder.prove import evidence as ev
from builder.prove import hunks as hk
from builder.series.load import load_series
from builder.words import BUILD_FAILED, NEEDS, NOT_PROVEN, PROVEN, REGRESSED

OUTCOMES: tuple[tuple[str, str], ...] = (
    (PROVEN, "in every one of the confirming runs (`--confirm N`, default 3): the after tree passes every test; "
             "every mutation tree fails in at least one case (or program) that fails in each run; and the before tree "
             "either fails to compile in the test paths only (with `Patchset-Before: build-fails`) or has at least "
             "one proof case: a case that fails there in each run (a FAIL, or the case a program crashed in, as its "
             "output shows) and passes on the after tree in each run. With `Patchset-Before: crash` a before-tree "
             "program killed by a signal also proves, when it crashes at the same site (the case it crashed in, or "
             "the last one it finished) in each run. With `--hunks`, no hunk is unguarded"),
    (NOT_PROVEN, "the test passes or checks nothing on the before tree; no case fails there and passes on the after "
                 "tree (the failing cases are skipped or absent after, or the program crashed outside any case the "
                 "after tree passes); a mutation is not caught; a hunk is unguarded; or what decides differs "
                 "between the confirming runs (the reason says `flaky (N of M runs)`). When a before-tree program "
                 "was stopped at its time limit and no case proves, the reason starts with `cannot tell`: a time-out "
                 "is never proof; so does a proof on a Metal stand-in whose kernel models do not match the tree's "
                 "kernels (its self-test, `patchset-replay-selftest --tree`)"),
    (REGRESSED, "the after tree's tests do not pass"),
    (BUILD_FAILED, "a tree fails to build where it should not (outside the test paths, or the after or mutation tree)"),
    (f"{NEEDS} BACKEND", "the proof needs a backend this machine does not have; never counted as proven. When the "
                         "patch declares tests for this machine's backend, they are still run on the after tree and "
                         "must pass (else: regressed)"),
)
"""Each outcome of verify per patch and backend, and exactly what it means (the table of docs/verify.md)."""


def markdown_table(rows: tuple[tuple[str, str], ...], head: tuple[str, str]) -> str:
    """A two-column Markdown table (docs/verify.md's outcome and case-role tables)."""
    lines = [f"| {head[0]} | {head[1]} |", "| --- | --- |"]
    lines += [f"| {a} | {b} |" for a, b in rows]
    return "\n".join(lines) + "\n"


@dataclass(frozen=True)
class PatchVerdict:
    patch: str
    backend: str
    outcome: str
    reason: str
    reused: bool
    evidence_json: Path | None
    evidence_md: Path | None
    hunks: tuple[dict, ...] = ()
    """`--hunks`: the per-hunk results (as in the evidence JSON)."""
    carried: bool = False
    """True when an earlier proof still holds for these trees (nothing was built or run)."""
    seconds: float = 0.0
    """Wall time this verdict took in this run (reading the evidence, or building and running its trees)."""


@dataclass(frozen=True)
class VerifyReport:
    verdicts: tuple[PatchVerdict, ...]

    @property
    def ok(self) -> bool:
        return all(v.outcome == PROVEN or words.is_needs(v.outcome) for v in self.verdicts)

    @property
    def regressed(self) -> bool:
        return any(v.outcome in (REGRESSED, BUILD_FAILED) for v in self.verdicts)

    @property
    def not_proven_here(self) -> tuple[str, ...]:
        """The patches proven on no backend of this run, with a `needs X` verdict on one: not proven
        on this machine (their proof runs only on a backend it lacks)."""
        proven = {v.patch for v in self.verdicts if v.outcome == PROVEN}
        return tuple(dict.fromkeys(v.patch for v in self.verdicts
                                   if words.is_needs(v.outcome) and v.patch not in proven))

    def needs_of(self, patch: str) -> str:
        """What a patch not proven here needs, in words (`needs metal`)."""
        return "; ".join(dict.fromkeys(v.outcome for v in self.verdicts
                                       if v.patch == patch and words.is_needs(v.outcome)))


def report_table(project: Project) -> list[tuple[str, dict[str, str]]]:
    """Outcome per patch and backend from the evidence on disk (for `verify --report`), with the
    hunk summary where `--hunks` ran (e.g. `not proven (hunks 7/8 caught, 1 unguarded)`)."""
    series = load_series(project.patches_dir)
    rows = []
    for p in series.patches:
        cells = {}
        for b in backendmod.PROFILES:
            e = ev.load(project.evidence_dir, p.name, b)
            if e is not None:
                cells[b] = recorded_outcome(e.outcome, e.hunks, e.hunks_checked)
        rows.append((p.name, cells))
    return rows


def recorded_outcome(outcome: str, hunks: tuple[dict, ...] | list[dict], hunks_checked: bool) -> str:
    """The words of one evidence record as `verify --report` prints them: its outcome, with the hunk
    summary where `--hunks` ran (`patchset report --html` shows the same words)."""
    return outcome + (f" ({hk.summarize(hunks)})" if hunks_checked else "")

"""`patchset bump`'s terms and verdicts: its options and result, what upstream fixed, the advice and the report."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

from builder.compile import backends as backendmod
from builder.compile import cmakebuild as buildmod
from builder.compile import testrun
from builder.errors import InputError
from builder.project import Project
from builder.prove.sweep_compare import CATEGORIES, SweepReport
from builder.prove.verdicts import VerifyReport
from builder.series import dropped as droplog
from builder.series import dryrun
from builder.series.dropped import DropRecord
from builder.series.dryrun import FIXED as FIXED_VERDICT
from builder.series.dryrun import NOT_FIXED, PARTLY_FIXED, PatchReport, RebaseReport
from builder.series.refresh import FileChange
from builder.series.workrepo import ConflictInfo
from builder.upstream.pin import Pin

REBASE, BUILD, SWEEP, VERIFY = "rebase", "build", "sweep", "verify"

# what a failed stage amounts to (the command turns it into the exit code)
CONFLICT = "conflict"
FAILED = "failed"
NOT_PROVEN = "not proven"
FIXED = "fixed upstream"
REGRESSED = "regressed upstream"
"""Upstream holds a patch's diff byte for byte while the patch's own test fails there: the bug is back
another way (exit 1, "a patch regressed"); never a drop."""

DROPPED = "dropped"
"""The rebase table's outcome of a patch `--drop-fixed` left out."""


@dataclass(frozen=True)
class BumpOptions:
    onto: str
    """A full commit id of the pin's git remote, or a pin file (.toml)."""
    backend: str = "cpu"
    mode: str | None = None
    """test-backend-ops mode of the sweep; None: the backend's default."""
    ops: tuple[str, ...] | None = None
    """Ops of the sweep; None: the series' ops (as `patchset test --against upstream`), or every op with `all_ops`."""
    all_ops: bool = False
    workers: int = 1
    confirm: int = 3
    jobs: int | None = None
    cuda_arch: str | None = None
    timeout_s: float | None = testrun.DEFAULT_TIMEOUT_S
    drop_fixed: bool = False
    """Leave out the patches upstream fixed, recording each in `patches/dropped` (else they stop the bump)."""


@dataclass(frozen=True)
class BumpResult:
    old_pin: Pin
    new_pin: Pin
    failed_stage: str = ""
    """The stage that failed ('' when every stage passed and the project was moved)."""
    failure: str = ""
    """CONFLICT, FIXED, REGRESSED, FAILED or NOT_PROVEN."""
    reason: str = ""
    patches: tuple[str, ...] = ()
    """The patches the failure names."""
    rebase: RebaseReport | None = None
    build: buildmod.BuildResult | None = None
    sweep: SweepReport | None = None
    verify: VerifyReport | None = None
    changes: tuple[FileChange, ...] = ()
    """What changed in `patches/` (only when the bump passed)."""
    records: tuple[DropRecord, ...] = ()
    """The patches `--drop-fixed` left out, as added to `patches/dropped` (when the bump passed)."""
    report_file: Path | None = None
    recovered: bool = False
    """An interrupted earlier bump to this pin was finished instead (no stage ran)."""

    @property
    def ok(self) -> bool:
        return not self.failed_stage

    @property
    def dropped(self) -> list[str]:
        return [r.patch for r in self.records]

    @property
    def not_proven_here(self) -> tuple[str, ...]:
        """The patches the verify stage could not prove on this machine (`needs X` on every backend it ran)."""
        return self.verify.not_proven_here if self.verify is not None else ()


def regressed(rows: tuple[PatchReport, ...] | list[PatchReport]) -> list[PatchReport]:
    """The patches whose diff the new upstream holds byte for byte while their own test fails there
    (`not fixed upstream`): the bug came back another way, so the diff being there proves nothing."""
    return [p for p in rows if p.outcome == dryrun.UPSTREAM and p.fix is not None and p.fix.verdict == NOT_FIXED]


def upstream_fixed(checked: RebaseReport) -> tuple[list[PatchReport], list[PatchReport], list[PatchReport]]:
    """What the bump makes of the dry run's verdicts: (partly fixed: a person keeps what is left of each; fixed:
    `--drop-fixed` leaves them out, and without it the bump stops on them; merged as an upstream commit but no
    controlled run says the bug is gone: a person decides). With any of the first or the third the bump stops."""
    partly = [p for p in checked.patches if p.fix and p.fix.verdict == PARTLY_FIXED]
    fixed = [p for p in checked.patches if p not in partly and _fixed(p) and p not in regressed([p])]
    unsure = [p for p in checked.patches if p.merged_as and p not in partly and not _fixed(p)
              and not (p.fix and p.fix.verdict == NOT_FIXED)]
    return partly, fixed, unsure


def _fixed(p: PatchReport) -> bool:
    """May `--drop-fixed` leave it out? Only on a controlled verdict (`fixed upstream`: its own test's
    cases failed without the fix on the old pin and pass on the new upstream, run after run), or when
    the new upstream holds its diff byte for byte (it applies in reverse: nothing is left to carry) and
    its test does not say `not fixed upstream` there (that is a regression, `regressed`).
    A patch-id match alone is not enough: upstream may have changed the code since."""
    verdict = p.fix.verdict if p.fix else ""
    return verdict == FIXED_VERDICT or p.outcome == dryrun.UPSTREAM


def _record(p: PatchReport, patch_id: str, new_commit: str) -> DropRecord:
    """What `patches/dropped` says of a patch upstream fixed."""
    test = ""
    if p.fix:
        test = (f"now passing without the fix: {', '.join(p.fix.now_passing)}; " if p.fix.now_passing else "") \
            + p.fix.evidence
    if p.fix and p.fix.verdict == FIXED_VERDICT:
        why, evidence = droplog.FIXED_UPSTREAM, test
        if p.merged_as:
            evidence += f"; upstream commit {p.merged_as} has its patch-id"
    else:
        why, evidence = ((droplog.MERGED, f"upstream commit {p.merged_as} has its patch-id {patch_id}") if p.merged_as
                         else (droplog.ALREADY_UPSTREAM, "its diff applies in reverse on the new upstream"))
        if p.fix:
            evidence += f"; its test: {p.fix.verdict}: {test}"
    return DropRecord(p.patch, patch_id, p.merged_as or new_commit, why, evidence)


def fixed_advice(partly: list[PatchReport], drops: list[DropRecord], opts: BumpOptions,
                 unsure: list[PatchReport] | None = None) -> str:
    """Why the bump stops on patches upstream fixed, each with its evidence, and what to do."""
    said = [f"{p.patch}: partly fixed upstream, still failing: {', '.join(p.fix.still_failing)}"
            + (f"; now passing: {', '.join(p.fix.now_passing)}" if p.fix.now_passing else "")
            for p in partly if p.fix]
    said += [f"{p.patch}: merged as {p.merged_as}, but its test {p.fix.verdict if p.fix else 'did not run'}"
             + (f" ({p.fix.evidence})" if p.fix and p.fix.evidence else "") for p in unsure or []]
    said += [f"{d.patch}: {d.why} ({d.evidence})" for d in drops]
    todo = []
    if partly:
        todo.append("a patch fixed in part needs a person: keep only what is left of it (the cases still "
                    "failing) with `patchset rebase --onto` in the project, or drop it by hand")
    if unsure:
        todo.append("a patch upstream merged whose test cannot tell that the bug is gone needs a person: "
                    "drop it by hand, or keep it with `patchset rebase --onto` in the project")
    if drops and not opts.drop_fixed:
        todo.append(f"`patchset bump --onto {opts.onto} --drop-fixed` leaves out the patches upstream fixed and "
                    "records each in patches/dropped")
    return "upstream fixed " + "; ".join(said) + ". Nothing was changed; " + "; ".join(todo)


def conflict_advice(info: ConflictInfo, onto: str) -> str:
    where = "; ".join(filter(None, ["failed hunks: " + ", ".join(info.failed) if info.failed else "",
                                    "conflicts in: " + ", ".join(info.conflicted) if info.conflicted else ""]))
    return (f"patch {info.position}/{info.total} {info.name} does not apply on the new upstream"
            + (f" ({where})" if where else "") + ". Nothing was changed. Resolve it in the project with "
            f"`patchset rebase --onto {onto}` (it stops at this conflict in the work repository: fix the files, "
            f"`git add` them, `patchset rebase --continue`), then check the result with `patchset bump --onto {onto}` "
            "(on the rebased series it rebuilds, sweeps and proves every patch and writes the report)")


# -- the report ---------------------------------------------------------------------------------------
def render_report(r: BumpResult, opts: BumpOptions) -> str:
    """`.patchset/bump-<old>-<new>.md`: the rebase table, the sweep summary and the verify table."""
    old, new = r.old_pin, r.new_pin
    lines = [f"# patchset bump {old.tag or old.short} -> {new.tag or new.short}", "",
             f"- from: {old.commit}" + (f" ({old.tag})" if old.tag else ""),
             f"- onto: {new.commit}" + (f" ({new.tag})" if new.tag else ""),
             f"- backend: {opts.backend}"]
    if r.ok:
        lines.append("- result: every stage passed; pin and patches/ updated")
        if r.not_proven_here:
            lines.append(f"- not proven on this machine: {', '.join(r.not_proven_here)} (their proof needs a "
                         "backend it lacks: see Verify)")
    else:
        lines.append(f"- result: FAILED at {r.failed_stage} ({r.failure}); nothing in the project was changed")
        lines.append(f"- why: {r.reason}")
    lines += ["", "## Rebase", ""]
    if r.rebase is None:
        lines.append("(did not finish)" if r.failed_stage == REBASE else "(not run)")
    else:
        # a finished rebase: what the move did to each patch's own lines (the dry run's table has no such column)
        changed = any(p.change for p in r.rebase.patches)
        lines += ["| # | patch | outcome | upstream |" + (" change |" if changed else ""),
                  "| --- | --- | --- | --- |" + (" --- |" if changed else "")]
        lines += [f"| {i} | {p.patch} | {p.outcome} | {_upstream_cell(p)} |" + (f" {p.change} |" if changed else "")
                  for i, p in enumerate(r.rebase.patches, 1)]
        evidence = [f"- {p.patch}: {p.fix.evidence}" for p in r.rebase.patches if p.fix and p.fix.evidence]
        lines += ["", *evidence] if evidence else []
        if r.records:
            lines += ["", f"Dropped with --drop-fixed, each recorded in patches/{droplog.NAME}:", ""]
            lines += [f"- {d.patch}: {d.why} in {d.commit} ({d.evidence})" for d in r.records]
        if r.rebase.range_diff:
            lines += ["", "### What each patch became (git range-diff, old series .. new)", "", "```",
                      r.rebase.range_diff.rstrip("\n"), "```"]
        if r.rebase.recovery_ref:
            lines += ["", f"The series as it was: `{r.rebase.recovery_ref}` in the work repository. The way back "
                      "(docs/upstream.md): check out the fork's commit before the bump "
                      "(`git checkout REV -- upstream/llama.cpp.toml patches`), then `patchset apply --force`."]
    lines += ["", "## Build", ""]
    if r.build is None:
        lines.append("(not run)" if r.failed_stage != BUILD else f"failed: {r.reason}")
    else:
        b = r.build
        lines.append(f"{b.spec_backend}/{b.targets}: ok in {b.duration_s:.0f}s ({b.steps} steps)")
    lines += ["", "## Sweep (patched against the new upstream)", ""]
    if r.sweep is None:
        lines.append("(not run)" if r.failed_stage != SWEEP else f"failed: {r.reason}")
    else:
        s = r.sweep
        lines.append(f"backend {s.backend}, mode {s.mode}, {','.join(s.ops) if s.ops else 'all ops'}: "
                     f"{s.compared} case(s) compared in {s.duration_s:.0f}s")
        lines += ["", "| category | cases |", "| --- | --- |"]
        lines += [f"| {cat} | {len(s.of(cat))} |" for cat in CATEGORIES]
        for c in s.regressions[:50]:
            lines.append(f"- regression: {c.program} {c.backend} {c.case}: {c.before} -> {c.after}")
    lines += ["", "## Verify", ""]
    if r.verify is None:
        lines.append("(not run)" if r.failed_stage != VERIFY else f"failed: {r.reason}")
    else:
        lines += ["| patch | backend | outcome | reason |", "| --- | --- | --- | --- |"]
        lines += [f"| {v.patch} | {v.backend} | {v.outcome} | {v.reason} |" for v in r.verify.verdicts]
        if r.verify.not_proven_here:
            lines += ["", "Not proven on this machine (the bump moves without their proof; prove them where "
                      "their backend is, e.g. `patchset verify --backend metal` on a Mac):", ""]
            lines += [f"- {name}: {r.verify.needs_of(name)}" for name in r.verify.not_proven_here]
    return "\n".join(lines) + "\n"


def _upstream_cell(p: PatchReport) -> str:
    """The rebase table's upstream column: the patch's own test's verdict, and a patch-id match."""
    words = [p.fix.verdict + (f" (still failing: {', '.join(p.fix.still_failing)})"
                              if p.fix.still_failing and p.fix.verdict == PARTLY_FIXED else "")] if p.fix else []
    words += [f"merged as {p.merged_as[:12]}"] if p.merged_as else []
    words += [f"merged as: {p.merged_unchecked}"] if p.merged_unchecked else []
    return "; ".join(words) or "-"


def report_path(project: Project, old: Pin, new: Pin) -> Path:
    return project.state_dir / f"bump-{old.tag or old.short}-{new.tag or new.short}.md"


def _check_options(opts: BumpOptions) -> None:
    """What would make a stage refuse its input, refused before anything runs."""
    if sys.platform not in backendmod.profile(opts.backend).platforms:
        raise InputError(f"--backend {opts.backend}: its tests cannot run on {sys.platform}, so a bump cannot be "
                         "judged here")
    mode = opts.mode or testrun.default_mode(opts.backend)
    if mode not in testrun.MODES:
        raise InputError(f"unknown mode '{mode}' (known: {', '.join(testrun.MODES)})")
    if opts.workers > 1 and mode != "test":
        raise InputError("--workers: test-backend-ops runs parallel workers in test mode only")


def _reports(found: dict[str, object]) -> dict:
    return {"rebase": found.get(REBASE), "build": found.get(BUILD), "sweep": found.get(SWEEP),
            "verify": found.get(VERIFY)}

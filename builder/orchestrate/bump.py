"""`patchset bump --onto`: move the series to a new upstream only when it rebases, builds, sweeps and proves.

Every stage runs in a scratch project (`.patchset/bump/scratch/`): a copy of `patches/` and the
pin, its own work repository and build folders, the same cache. The project's pin, `patches/` and
work repository are not touched until every stage has passed:

1. rebase: `patchset apply`, then `patchset rebase --onto --dry-run --fixed-upstream` (each
   patch's own test on the new upstream without the fix, and patch-ids), then `patchset rebase
   --onto` in the scratch project. A patch upstream fixed (`fixed upstream` by its test's control:
   its cases fail without the fix on the old pin and pass on the new upstream; or its diff is there
   byte for byte) stops the bump, or with `--drop-fixed` is left out of the rebase and recorded in
   `patches/dropped` (`builder.series.dropped`); a patch upstream fixed in part, or merged (its
   patch-id) while its test cannot tell, always stops it. A conflict stops the bump; it is resolved with
   `patchset rebase --onto` in the project itself.
2. build: `patchset build` of the rebased `patched` (ggml and the test programs).
3. sweep: `patchset test --against upstream`, where `upstream` is now the new upstream.
4. verify: every patch proven again on the new upstream (no evidence reused), on the bump's backend
   and on metal-replay for the patches whose proof runs there (where this machine runs it). A patch
   that needs a backend this machine lacks does not stop the bump; it is named as not proven on
   this machine (`BumpResult.not_proven_here`, exit 6).

Then the switch, in an order that a kill cannot leave half done: the new `patches/` is staged
beside the old one (`.patches.bump-new`), a journal naming the new pin is written
(`.patchset/bump/journal.json`: the commit point), the folders are swapped by two renames, the pin
is written atomically, the work repository is moved to the scratch one's `patched` and `upstream`
(through the sequencer's operation record, as `rebase` does), the scratch project's evidence is
copied to the project's (the same trees), and the journal is removed. A run killed after the
journal was written is finished by the next `patchset bump` before anything else (roll forward:
every stage had passed; a half-done move of the work repository is rolled back and made again);
one killed before it left the project as it was, and its leftovers are removed.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import shutil
from pathlib import Path

from builder.compile import cmakebuild as buildmod
from builder.compile import testrun
from builder.errors import (
    BuildError,
    ConflictError,
    PatchsetError,
    ProcessError,
    SeriesError,
    SourceError,
    StateError,
    TestRunError,
    WorkTreeError,
)
from builder.fsutil import atomic_write_text
from builder.locking import project_lock
from builder.orchestrate.bump_plan import (
    BUILD,
    CONFLICT,
    DROPPED,
    FAILED,
    FIXED,
    NOT_PROVEN,
    REBASE,
    REGRESSED,
    SWEEP,
    VERIFY,
    BumpOptions,
    BumpResult,
    _check_options,
    _record,
    _reports,
    conflict_advice,
    fixed_advice,
    regressed,
    render_report,
    report_path,
    upstream_fixed,
)
from builder.progress import NullProgress, ProgressSink
from builder.project import Project
from builder.prove import evidence
from builder.prove import sweep as sweepmod
from builder.prove import verify as verifymod
from builder.prove.backends_here import available_backends
from builder.prove.fixed_upstream import checker
from builder.prove.pipeline import declared_tests, run_build
from builder.prove.sweep_compare import SweepReport
from builder.prove.verdicts import VerifyReport
from builder.series import dropped as droplog
from builder.series import dryrun, movesnap
from builder.series.apply import apply
from builder.series.dropped import DropRecord
from builder.series.dryrun import PatchReport, RebaseReport
from builder.series.journal import next_recovery_ref
from builder.series.load import load_series
from builder.series.rebase import before_ref, dry_run_rebase, rebase, target_pin
from builder.series.workbase import PATCHED, UPSTREAM, Operation, fingerprint
from builder.series.workrepo import StoppedOnConflict, WorkRepo, ensure_no_op
from builder.upstream import fetch as upstream
from builder.upstream.pin import Pin, dump_pin, load_pin
from builder.words import NEEDS, PROVEN

log = logging.getLogger("patchset")


class _Failed(Exception):
    def __init__(self, stage: str, failure: str, reason: str, patches: tuple[str, ...] = (),
                 found: object | None = None) -> None:
        super().__init__(reason)
        self.stage, self.failure, self.reason, self.patches = stage, failure, reason, patches
        self.found = found
        """What the stage found before it failed (its report), for the report file."""


# -- where things live ----------------------------------------------------------------------------
def bump_dir(project: Project) -> Path:
    return project.state_dir / "bump"


def journal_file(project: Project) -> Path:
    return bump_dir(project) / "journal.json"


def _staged(project: Project) -> Path:
    # beside patches/, so that the swap is a rename on one file system
    return project.root / ".patches.bump-new"


def _retired(project: Project) -> Path:
    return project.root / ".patches.bump-old"


def scratch_project(project: Project) -> Project:
    root = bump_dir(project) / "scratch"
    return Project(root=root / "project", pin_file=root / "project" / "upstream" / "llama.cpp.toml",
                   state_dir=root / "state", cache_dir=project.cache_dir)


# -- the command ------------------------------------------------------------------------------------
def bump(project: Project, opts: BumpOptions, progress: ProgressSink | None = None) -> BumpResult:
    progress = progress or NullProgress()
    _check_options(opts)
    with project_lock(project.lock_file, purpose="bump"):
        finished = recover(project)
        old_pin = load_pin(project.pin_file)
        new_pin = target_pin(old_pin, _absolute(opts.onto))
        if finished is not None and finished == new_pin.commit:
            return BumpResult(old_pin, old_pin, recovered=True)
        work = WorkRepo(project.work_repo)
        had_work = work.exists() and work.head() is not None
        if had_work:
            _refuse_unsaved(work)
        before = _snapshot(project)
        scratch = _fresh_scratch(project)
        result = _stages(scratch, opts, old_pin, new_pin, progress)
        if result.rebase is not None and result.rebase.recovery_ref and not had_work:
            # the scratch project's ref: the project has no work repository to keep one in
            result = dataclasses.replace(result, rebase=dataclasses.replace(result.rebase, recovery_ref=""))
        result = dataclasses.replace(result, report_file=report_path(project, old_pin, result.new_pin))
        assert result.report_file is not None
        atomic_write_text(result.report_file, render_report(result, opts))
        if not result.ok:
            return result
        if _snapshot(project) != before:
            raise WorkTreeError(f"{project.patches_dir} or {project.pin_file} changed while the bump ran; "
                                f"nothing was switched (the bump's result is in {scratch.root})")
        move_work = work.exists() and work.head() is not None
        if move_work:
            _refuse_unsaved(work)  # again: the stages take long, and a fix may have been started meanwhile
        _switch(project, scratch, old_pin, result.new_pin, move_work)
        return result


def _absolute(onto: str) -> str:
    """A pin file given relative to the current folder, made absolute (the scratch project has its own)."""
    path = Path(onto)
    return str(path.resolve()) if path.suffix == ".toml" or path.is_file() else onto


def _refuse_unsaved(work: WorkRepo) -> None:
    ensure_no_op(work)
    reasons = work.unsaved_work(work.load_state())
    if reasons:
        raise WorkTreeError(f"{work.path}: refusing to bump: " + "; ".join(reasons)
                            + ". Run `patchset refresh` or commit/stash first")


def _snapshot(project: Project) -> dict[str, bytes]:
    files = {p.relative_to(project.root).as_posix(): p.read_bytes()
             for p in sorted(project.patches_dir.rglob("*")) if p.is_file()}
    files["<pin>"] = project.pin_file.read_bytes()
    return files


def _fresh_scratch(project: Project) -> Project:
    """The scratch project with a copy of patches/ and the pin; the build folders of the last
    bump are kept (a rebuild of the same paths is cheaper), everything else goes."""
    scratch = scratch_project(project)
    if scratch.root.exists():
        shutil.rmtree(scratch.root)
    if scratch.state_dir.exists():
        for child in scratch.state_dir.iterdir():
            # the build folders stay; the fixed-upstream check's index (upstream-check/) goes with the
            # verify worktree it describes, which the check builds in
            if child == scratch.build_root:
                continue
            if child.is_dir() and not child.is_symlink():
                shutil.rmtree(child)
            else:
                child.unlink()
    shutil.copytree(project.patches_dir, scratch.patches_dir, symlinks=True)
    scratch.pin_file.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(project.pin_file, scratch.pin_file)
    return scratch


def _stages(scratch: Project, opts: BumpOptions, old_pin: Pin, new_pin: Pin,
            progress: ProgressSink) -> BumpResult:
    found: dict[str, object] = {}
    records: tuple[DropRecord, ...] = ()
    try:
        found[REBASE], records = _rebase(scratch, opts, progress)
        new_pin = load_pin(scratch.pin_file)
        found[BUILD] = _build(scratch, opts, progress)
        found[SWEEP] = _sweep(scratch, opts, progress)
        found[VERIFY] = _verify(scratch, opts, progress)
    except _Failed as f:
        found[f.stage] = f.found
        return BumpResult(old_pin, new_pin, f.stage, f.failure, f.reason, f.patches, **_reports(found))
    return BumpResult(old_pin, new_pin, records=records, **_reports(found))


# what a stage raises when the series fails it on the new upstream: a build, a test program or a
# command that failed (a failed stage, in the report); anything else it raises is not about the
# series (bad input, a lock another process holds, a work tree we refuse to touch) and stays what it is
_STAGE_FAILURES = (BuildError, TestRunError, ProcessError, SourceError, StateError, ConflictError)


def _stage_error(stage: str, e: PatchsetError) -> _Failed:
    """A stage that raised, sorted by the kind of error. In verify a patch (or its mutation) that
    does not apply to the trees it is proven on (SeriesError) is not proven there."""
    if stage == VERIFY and isinstance(e, SeriesError):
        return _Failed(stage, NOT_PROVEN, str(e))
    if isinstance(e, _STAGE_FAILURES):
        return _Failed(stage, FAILED, str(e))
    raise e


def _rebase(scratch: Project, opts: BumpOptions, progress: ProgressSink,
            ) -> tuple[RebaseReport, tuple[DropRecord, ...]]:
    """The series rebased in the scratch project, less the patches upstream fixed (with
    `--drop-fixed`, recorded in its `patches/dropped`; without it they stop the bump)."""
    try:
        apply(scratch, progress=progress)
    except StoppedOnConflict as e:
        raise _Failed(REBASE, CONFLICT, f"{e.info.name} does not apply on the current pin; run `patchset apply` "
                                        "and resolve it there first", (e.info.name,)) from e
    # onto the pinned commit itself (a check after `patchset rebase`): the pin as it is, tag and all
    same = opts.onto == load_pin(scratch.pin_file).commit
    onto = str(scratch.pin_file) if same else _absolute(opts.onto)
    try:
        # before anything moves: each patch's own test on the new upstream without the fix, and patch-ids
        backends = (opts.backend, *_replay_for(scratch, opts))
        checked = dry_run_rebase(scratch, onto, checker(scratch, backends, progress, opts.jobs, opts.timeout_s))
    except PatchsetError as e:
        raise _stage_error(REBASE, e) from e
    ids = {name: pid for pid, name in droplog.series_patch_ids(load_series(scratch.patches_dir)).items()}
    _stop_on_regressed(checked.patches, checked)
    partly, fixed, unsure = upstream_fixed(checked)
    drops = [_record(p, ids.get(p.patch, ""), checked.new_commit) for p in fixed]
    if partly or unsure or (drops and not opts.drop_fixed):
        raise _Failed(REBASE, FIXED, fixed_advice(partly, drops, opts, unsure), tuple(p.patch for p in partly)
                      + tuple(p.patch for p in unsure) + tuple(d.patch for d in drops), found=checked)
    try:
        result = rebase(scratch, onto, leave_out=frozenset(d.patch for d in drops))
    except StoppedOnConflict as e:
        raise _Failed(REBASE, CONFLICT, conflict_advice(e.info, opts.onto), (e.info.name,), found=checked) from e
    assert result.report is not None
    rows = {p.patch: p for p in checked.patches}
    # the sequencer's own finding that upstream has a patch (where the dry run said 3-way)
    held = [dataclasses.replace(rows[n], outcome=dryrun.UPSTREAM) for n in result.dropped]
    _stop_on_regressed(held, checked)
    later = [_record(p, ids.get(p.patch, ""), checked.new_commit) for p in held]
    if later and not opts.drop_fixed:
        raise _Failed(REBASE, FIXED, fixed_advice([], later, opts), tuple(r.patch for r in later), found=checked)
    records = (*drops, *later)
    if records:
        droplog.append(scratch.patches_dir, list(records))
    # the table: every patch of the old series, with its upstream verdict; those left out `dropped`
    done, left = {p.patch: p for p in result.report.patches}, {r.patch for r in records}
    table = tuple(dataclasses.replace(done.get(p.patch, p), merged_as=p.merged_as, fix=p.fix,
                                      merged_unchecked=p.merged_unchecked,
                                      outcome=DROPPED if p.patch in left else done[p.patch].outcome)
                  for p in checked.patches)
    return dataclasses.replace(result.report, patches=table), records


def _stop_on_regressed(rows: tuple[PatchReport, ...] | list[PatchReport], checked: RebaseReport) -> None:
    """Stop the bump (before the scratch project's series changes) on any patch `regressed` names."""
    found = regressed(rows)
    if found:
        said = "; ".join(f"{p.patch}: upstream holds its diff byte for byte, but its own test fails there "
                         f"({p.fix.verdict}): a regression upstream"
                         + (f" ({p.fix.evidence})" if p.fix and p.fix.evidence else "") for p in found if p.fix)
        raise _Failed(REBASE, REGRESSED, said + ". Nothing was changed; report it upstream, and stay on the current "
                      "pin (or keep the patch with `patchset rebase --onto` in the project)",
                      tuple(p.patch for p in found), found=checked)


def _build(scratch: Project, opts: BumpOptions, progress: ProgressSink) -> buildmod.BuildResult:
    try:
        result = run_build(scratch, opts.backend, "minimal", opts.jobs, cuda_arch=opts.cuda_arch, progress=progress)
    except PatchsetError as e:
        raise _stage_error(BUILD, e) from e
    if not result.ok:
        where = result.failure or "see the log"
        # an error in a test program of the series names the patches that bring it
        program = Path(result.first_error.file).stem if result.first_error else ""
        raise _Failed(BUILD, FAILED, f"the rebased series does not build for {opts.backend}: {where} "
                                     f"(log {result.log})", _owners(scratch, {program}), found=result)
    return result


def _sweep(scratch: Project, opts: BumpOptions, progress: ProgressSink) -> SweepReport:
    ops = opts.ops
    if ops is None and not opts.all_ops:
        declared = declared_tests(load_series(scratch.patches_dir), opts.backend)
        ops = tuple(testrun.series_ops(declared)) or None
    sopts = sweepmod.SweepOptions(backend=opts.backend, mode=opts.mode, ops=ops, against=UPSTREAM, jobs=opts.jobs,
                                  cuda_arch=opts.cuda_arch, workers=opts.workers, timeout_s=opts.timeout_s,
                                  confirm=opts.confirm)
    try:
        report = sweepmod.sweep(scratch, sopts, progress)
    except PatchsetError as e:
        raise _stage_error(SWEEP, e) from e
    if report.regressions:
        shown = ", ".join(f"{c.program} {c.case}" for c in report.regressions[:5])
        more = f" and {len(report.regressions) - 5} more" if len(report.regressions) > 5 else ""
        raise _Failed(SWEEP, FAILED, f"{len(report.regressions)} case(s) fail with the series that pass on the "
                                     f"new upstream: {shown}{more}",
                      _owners(scratch, {c.program for c in report.regressions}), found=report)
    return report


def _owners(scratch: Project, programs: set[str]) -> tuple[str, ...]:
    """The patches whose own test programs are among `programs` (upstream's programs name none)."""
    return tuple(p.name for p in load_series(scratch.patches_dir).patches
                 if any(t.program in programs and t.program not in buildmod.DEFAULT_PROGRAMS for t in p.meta.tests))


REPLAY = "metal-replay"


def _replay_for(scratch: Project, opts: BumpOptions) -> tuple[str, ...]:
    """("metal-replay",) when this machine runs it, the bump's backend is another one, and a patch's
    proof runs on it (a Metal fix with a `[metal-replay]` test): the bump proves those there too."""
    if opts.backend == REPLAY or REPLAY not in available_backends():
        return ()
    return (REPLAY,) if _replayed(scratch) else ()


def _replayed(scratch: Project) -> list[str]:
    return [p.name for p in load_series(scratch.patches_dir).patches
            if REPLAY in p.meta.backends and any(t.runs_on(REPLAY, p.meta.backends) for t in p.meta.tests)]


def _verify(scratch: Project, opts: BumpOptions, progress: ProgressSink) -> VerifyReport:
    try:
        # the upstream changed: every patch is proven again, no evidence is reused
        report = verifymod.verify(scratch, backends=[opts.backend], progress=progress, reuse=False, jobs=opts.jobs,
                                  cuda_arch=opts.cuda_arch, timeout=opts.timeout_s)
        if _replay_for(scratch, opts):
            # the patches whose proof also runs on the host-side Metal replay: proven there as well
            replayed = verifymod.verify(scratch, _replayed(scratch), backends=[REPLAY], progress=progress,
                                        reuse=False, jobs=opts.jobs, timeout=opts.timeout_s)
            report = VerifyReport(report.verdicts + replayed.verdicts)
    except PatchsetError as e:
        raise _stage_error(VERIFY, e) from e
    if not report.ok:
        bad = tuple(v.patch for v in report.verdicts if v.outcome != PROVEN
                    and not v.outcome.startswith(NEEDS))
        why = "; ".join(f"{v.patch}: {v.outcome} ({v.reason})" for v in report.verdicts if v.patch in bad)
        raise _Failed(VERIFY, FAILED if report.regressed else NOT_PROVEN, why, bad, found=report)
    return report


# -- the switch ---------------------------------------------------------------------------------------
def _switch(project: Project, scratch: Project, old_pin: Pin, new_pin: Pin, move_work: bool) -> None:
    """patches/ and the pin from the scratch project, then the work repository, through the
    journal (see the module docstring). The work repository's `patched` as it was is kept under
    rebase's recovery ref (`refs/patchset/before-<old>`), named in the journal so that a rerun
    after a kill sets it to the same commit."""
    staged = _staged(project)
    for leftover in (staged, _retired(project)):
        if leftover.exists():
            shutil.rmtree(leftover)
    shutil.copytree(scratch.patches_dir, staged, symlinks=True)
    work = WorkRepo(project.work_repo)
    before = [before_ref(old_pin), work.head()] if move_work else None
    # the way back for `patchset undo` (builder/series/movesnap.py): named once the switch is done
    undo = [next_recovery_ref(work.git, "bump"), movesnap.snapshot(
        work, project, "bump", work.head(), work.git.out("rev-parse", UPSTREAM))] if move_work else None
    atomic_write_text(journal_file(project), json.dumps(
        {"pin_file": str(project.pin_file), "patches": str(project.patches_dir), "pin": dump_pin(new_pin),
         "commit": new_pin.commit, "work": move_work, "before": before, "undo": undo}, indent=1) + "\n")
    _roll_forward(project)


def recover(project: Project) -> str | None:
    """Finish a bump a killed process left after its commit point; the commit it moved to (None:
    nothing to finish). Leftovers of one killed before that point are removed."""
    if journal_file(project).exists():
        commit = json.loads(journal_file(project).read_text())["commit"]
        log.warning("finishing an interrupted `patchset bump` to %s: its every stage had passed", commit[:12])
        _roll_forward(project)
        return str(commit)
    for leftover in (_staged(project), _retired(project)):
        if leftover.exists():
            shutil.rmtree(leftover)
    return None


def _roll_forward(project: Project) -> None:
    """Idempotent: every step checks what an earlier, killed run already did."""
    journal = journal_file(project)
    data = json.loads(journal.read_text())
    staged, retired = _staged(project), _retired(project)
    if staged.exists():
        if project.patches_dir.exists():
            os.replace(project.patches_dir, retired)
        os.replace(staged, project.patches_dir)
    atomic_write_text(project.pin_file, data["pin"])
    if retired.exists():
        shutil.rmtree(retired)
    work, scratch_work = WorkRepo(project.work_repo), WorkRepo(scratch_project(project).work_repo)
    if data.get("work") and work.exists() and scratch_work.exists():
        ensure_no_op(work)  # a move that was killed half-way goes back to where it started, and is made again
        _move_work_repo(project, work, scratch_work, load_pin(project.pin_file), data.get("before"))
    _keep_evidence(project)
    if data.get("undo") and work.exists():
        work.git.update_ref(data["undo"][0], data["undo"][1], f"patchset: before bump onto {data['commit']}")
    journal.unlink()


def _keep_evidence(project: Project) -> None:
    """The proofs made on the new upstream, for `patchset verify` in the project to reuse (its
    trees are the very ones proven: the work repository now holds the scratch one's commits)."""
    scratch = scratch_project(project)
    for jpath in sorted(scratch.evidence_dir.glob("*/*.json")):
        found = evidence.load(scratch.evidence_dir, f"{jpath.parent.name}.patch", jpath.stem)
        if found is not None:
            evidence.write(project.evidence_dir, found)


def _move_work_repo(project: Project, work: WorkRepo, scratch_work: WorkRepo, new_pin: Pin,
                    before: list[str] | None = None) -> None:
    """`patched` and `upstream` of the project's work repository where the scratch one has them,
    as `rebase` leaves them (state, fingerprint, pin ref); `before`: (the recovery ref, the commit
    it keeps)."""
    if before:
        work.git.update_ref(before[0], before[1], f"patchset: before bump onto {new_pin.commit}")
    fetched = upstream.fetch(project.cache_dir, new_pin)
    work.borrow_from(fetched.repo)
    head = scratch_work.git.out("rev-parse", f"refs/heads/{PATCHED}")
    new_up = scratch_work.git.out("rev-parse", f"refs/heads/{UPSTREAM}")
    temp_ref = "refs/patchset/bump/patched"
    work.git.run("fetch", "--quiet", "--no-tags", str(scratch_work.path), f"+{head}:{temp_ref}")
    op = Operation("rebase", [], work.head(), work.git.current_branch(), work.git.out("rev-parse", UPSTREAM),
                   new_pin_toml=dump_pin(new_pin), new_upstream=new_up)
    # recorded first: a kill from here on is rolled back by the next command (which then applies)
    work.start(op, [], head)
    work.git.update_ref(f"refs/heads/{UPSTREAM}", new_up, f"patchset: bump onto {new_pin.commit}")
    work.git.update_ref("refs/patchset/pin", new_up)
    series = load_series(project.patches_dir)
    work.finish({"fingerprint": fingerprint(new_pin, new_pin.tree, series), "applied_head": head,
                 "upstream": new_up, "pin_commit": new_pin.commit})
    work.git.run("update-ref", "-d", temp_ref)



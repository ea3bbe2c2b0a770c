"""`patchset fetch` and `patchset apply`: the pinned tree plus the series, on branch `patched`."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from builder.errors import WorkTreeError
from builder.locking import project_lock
from builder.progress import ProgressSink
from builder.project import Project
from builder.series import dryrun, journal
from builder.series.dryrun import RebaseReport
from builder.series.load import load_series
from builder.series.model import Series
from builder.series.refresh import formatted_record
from builder.series.workbase import PATCHED, UPSTREAM, Operation, PatchOutcome, fingerprint, patch_digests
from builder.series.workrepo import WorkRepo, ensure_no_op
from builder.upstream import fetch as upstream
from builder.upstream.fetch import Fetched
from builder.upstream.pin import Pin, load_pin

PURPOSE = "apply"


@dataclass(frozen=True)
class ApplyResult:
    noop: bool
    head: str
    upstream: str
    outcomes: tuple[PatchOutcome, ...] = ()
    backups: tuple[str, ...] = ()
    fetched: Fetched | None = None
    notes: tuple[str, ...] = field(default_factory=tuple)


def fetch(project: Project, progress: ProgressSink | None = None, bundle: Path | None = None) -> Fetched:
    return upstream.fetch(project.cache_dir, load_pin(project.pin_file), progress, bundle=bundle)


def prepare(project: Project, progress: ProgressSink | None = None) -> tuple[Pin, Series, Fetched, WorkRepo]:
    pin = load_pin(project.pin_file)
    series = load_series(project.patches_dir)
    fetched = upstream.fetch(project.cache_dir, pin, progress)
    work = WorkRepo(project.work_repo)
    work.attach_upstream(fetched, pin)
    return pin, series, fetched, work


def dry_run_apply(project: Project) -> RebaseReport:
    """What `apply` would do to each patch on the pin (the `rebase --dry-run` table); changes nothing."""
    with project_lock(project.lock_file, purpose=PURPOSE):
        return dryrun.dry_run_apply(project)


def apply(project: Project, force: bool = False, progress: ProgressSink | None = None) -> ApplyResult:
    """Make `patched` = pin + series. Does nothing when nothing changed; never loses work."""
    with project_lock(project.lock_file, purpose=PURPOSE):
        pin, series, fetched, work = prepare(project, progress)
        journal.recover(project, work)
        if work.load_state().op is not None:
            ensure_no_op(work)
            # an interrupted operation rolled back: `upstream` may still be where it left it
            work.attach_upstream(fetched, pin)
        state = work.load_state()
        fp = fingerprint(pin, fetched.tree, series)
        head = work.head()
        up_to_date = (state.fingerprint == fp and head is not None and head == state.applied_head
                      and state.upstream == fetched.commit)
        if up_to_date and not work.git.is_dirty():
            if work.git.current_branch() != PATCHED:
                work.git.run("checkout", "--quiet", PATCHED)
            return ApplyResult(True, head or "", fetched.commit, fetched=fetched)
        reasons = work.unsaved_work(state)
        if up_to_date and not reasons:
            reasons = ["the work tree has uncommitted changes"]
        backups: list[str] = []
        if reasons:
            if not force:
                raise WorkTreeError(
                    f"{work.path}: refusing to re-apply: " + "; ".join(reasons)
                    + ". Run `patchset refresh` to write commits back to patches/, commit or stash your "
                    "changes, or `patchset apply --force` (saves them under refs/patchset/backup/ first)"
                )
            backups = work.backup("apply --force")
            journal.forget_edit(work)
        mails = [(f"{p.index:04d}.patch", p.path.read_bytes()) for p in series.patches]
        op = Operation("apply", [], head, work.git.current_branch(), None,
                       fingerprint=fp, names=[p.name for p in series.patches])
        work.start(op, mails, UPSTREAM)
        outcomes = work.run_queue()
        return _finish(work, project.patches_dir, fetched, fp, outcomes, backups)


def _finish(work: WorkRepo, patches_dir: Path, fetched: Fetched, fp: str, outcomes: list[PatchOutcome],
            backups: list[str] | tuple[str, ...] = ()) -> ApplyResult:
    state = work.load_state()
    named = state.op.named(outcomes) if state.op else tuple(outcomes)
    head = work.head() or ""
    work.finish({"fingerprint": fp, "applied_head": head, "upstream": fetched.commit,
                 "patch_digests": patch_digests(patches_dir), "digests_fingerprint": fp,
                 **formatted_record(work.git)})
    return ApplyResult(False, head, fetched.commit, named, tuple(backups), fetched)


def continue_apply(project: Project) -> ApplyResult:
    with project_lock(project.lock_file, purpose=PURPOSE):
        _pin, _series, fetched, work = prepare(project)
        state = work.load_state()
        if state.op is None or state.op.kind != "apply":
            raise WorkTreeError(f"{work.path}: no apply is stopped at a conflict")
        outcomes = work.continue_op()
        fp = state.op.fingerprint
        # a resolved conflict makes `patched` differ from patches/: the fingerprint still says
        # which series it came from, and `status` shows the patch as dirty until `refresh`
        return _finish(work, project.patches_dir, fetched, fp, outcomes)


def abort_apply(project: Project) -> None:
    with project_lock(project.lock_file, purpose=PURPOSE):
        work = WorkRepo(project.work_repo)
        state = work.load_state() if work.exists() else None
        if state is None or state.op is None or state.op.kind != "apply":
            raise WorkTreeError(f"{project.work_repo}: no apply is stopped at a conflict")
        work.abort_op()

"""`patchset rebase --onto`: move the series to another upstream commit, patch by patch."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from builder.errors import InputError, WorkTreeError
from builder.fsutil import atomic_write_text
from builder.gitrepo import ISOLATED, GitRepo
from builder.locking import project_lock
from builder.project import Project
from builder.series import dryrun, movesnap, refname, scratch
from builder.series import resolutions as rr
from builder.series.dryrun import Check, RebaseReport
from builder.series.journal import next_recovery_ref
from builder.series.load import load_series
from builder.series.refresh import FileChange, format_mails, write_series
from builder.series.workbase import PATCHED, UPSTREAM, Operation, PatchOutcome, fingerprint
from builder.series.workrepo import (
    OUTCOME_3WAY,
    OUTCOME_CLEAN,
    OUTCOME_RESOLVED,
    OUTCOME_REUSED,
    OUTCOME_SKIPPED,
    OUTCOME_UPSTREAM,
    WorkRepo,
    ensure_no_op,
)
from builder.upstream import fetch as upstream
from builder.upstream.fetch import merge_shallow
from builder.upstream.pin import GitSource, Pin, SdistSource, dump_pin, load_pin, write_pin


@dataclass(frozen=True)
class RebaseResult:
    old_pin: Pin
    new_pin: Pin
    outcomes: tuple[PatchOutcome, ...]
    changes: tuple[FileChange, ...]
    report: RebaseReport | None = None
    """The table of what happened to each patch, also written to `report_file`."""
    report_file: Path | None = None

    @property
    def dropped(self) -> list[str]:
        return [o.name for o in self.outcomes if o.outcome == OUTCOME_UPSTREAM]

    @property
    def skipped(self) -> list[str]:
        return [o.name for o in self.outcomes if o.outcome == OUTCOME_SKIPPED]


# what the sequencer's outcomes are called in the rebase table (the dry run's words)
_TABLE_OUTCOME = {OUTCOME_CLEAN: dryrun.CLEAN, OUTCOME_3WAY: dryrun.THREE_WAY, OUTCOME_RESOLVED: dryrun.RESOLVED,
                  OUTCOME_UPSTREAM: dryrun.UPSTREAM, OUTCOME_SKIPPED: dryrun.SKIPPED, OUTCOME_REUSED: dryrun.REUSED}


def dry_run_rebase(project: Project, onto: str, check: Check | None = None) -> RebaseReport:
    """What `rebase --onto` would do to each patch, without touching branches, the pin or patches/;
    with `check`, also whether upstream fixed each patch's bug (`builder.prove.fixed_upstream`)."""
    with project_lock(project.lock_file):
        return dryrun.dry_run(project, target_pin(load_pin(project.pin_file), onto), check)


def write_report(project: Project, old_pin: Pin, new_pin: Pin, outcomes: tuple[PatchOutcome, ...],
                 predicted: RebaseReport | None = None, range_diff: str = "", recovery_ref: str = "",
                 renamed: dict[str, tuple[str, ...]] | None = None, changes: dict[str, str] | None = None,
                 ) -> tuple[RebaseReport, Path]:
    """The table of a finished rebase, written to `.patchset/rebase-<old>-<new>.json`; `predicted`
    (the dry run made before moving, with its checks) adds each patch's upstream verdict."""
    before = {p.patch: p for p in predicted.patches} if predicted else {}
    report = dryrun.RebaseReport(old_pin.commit, new_pin.commit, False, tuple(
        dryrun.PatchReport(o.name, _TABLE_OUTCOME.get(o.outcome, o.outcome),
                           merged_as=before[o.name].merged_as if o.name in before else "",
                           merged_unchecked=before[o.name].merged_unchecked if o.name in before else "",
                           fix=before[o.name].fix if o.name in before else None,
                           renamed=(renamed or {}).get(o.name, ()), change=(changes or {}).get(o.name, ""),
                           resolutions=tuple(o.resolutions))
        for o in outcomes),
                                   range_diff=range_diff, recovery_ref=recovery_ref)
    path = project.state_dir / f"rebase-{old_pin.short}-{new_pin.short}.json"
    atomic_write_text(path, json.dumps(report.as_json(), indent=1) + "\n")
    return report, path


def target_pin(current: Pin, onto: str) -> Pin:
    """The pin to move to: a pin file, a commit id of the current pin's git remotes, or a tag or
    branch name of theirs (a tag is recorded in the new pin).

    Its sources are the current pin's git remotes, then its sdists: the bindings `patchset wheel`
    builds from (`init --bindings`), kept, each without a tree of its own. An sdist vendors the old
    commit, so as a source of the new pin it fails verification, never passes for it (as the
    bindings `init` records when they vendor another tree)."""
    path = Path(onto)
    if path.suffix == ".toml" or path.is_file():
        return load_pin(path)
    gits = tuple(s for s in current.sources if isinstance(s, GitSource))
    if not gits:
        raise InputError(f"--onto {onto}: the current pin has no git source to fetch a commit from; give a pin file")
    commit, tag = onto, ""
    if refname.is_name(onto):
        named = refname.resolve(current, onto, "--onto")
        commit, tag = named.commit, named.tag
    # the tree is not known yet: it is taken from the fetched commit, which its id verifies
    sdists = tuple(dataclasses.replace(s, tree="") for s in current.sources if isinstance(s, SdistSource))
    return dataclasses.replace(current, commit=commit, tag=tag, date="", tree="", tree_note="",
                               sources=gits + sdists)


def rebase(project: Project, onto: str, check: Check | None = None,
           leave_out: frozenset[str] = frozenset()) -> RebaseResult:
    """Move the series; with `check`, a dry run with it first (nothing moved yet) gives each row of
    the table its upstream verdict. The patches named in `leave_out` are not carried to the new
    upstream (`bump --drop-fixed`: upstream fixed them); the range-diff shows them gone."""
    with project_lock(project.lock_file):
        old_pin = load_pin(project.pin_file)
        new_pin = target_pin(old_pin, onto)
        series = load_series(project.patches_dir)
        work = _work(project)
        if not work.exists() or work.head() is None:
            raise WorkTreeError(f"{work.path}: nothing to rebase; run `patchset apply` first")
        ensure_no_op(work)
        state = work.load_state()
        reasons = work.unsaved_work(state)
        if reasons:
            raise WorkTreeError(f"{work.path}: refusing to rebase: " + "; ".join(reasons)
                                + ". Run `patchset refresh` or commit/stash first")
        predicted = dryrun.dry_run(project, new_pin, check) if check else None
        if predicted is not None:
            # kept for the final table of a rebase that stops at a conflict and goes on later
            atomic_write_text(_checked_file(project, old_pin, new_pin),
                              json.dumps(predicted.as_json(), indent=1) + "\n")
        fetched = upstream.fetch(project.cache_dir, new_pin)
        if not new_pin.tree:
            note = f"Tree of commit {new_pin.commit} as fetched from {fetched.source}."
            new_pin = dataclasses.replace(new_pin, tree=fetched.tree, tree_note=note)
        if not new_pin.date:
            # the commit's own date, as `patchset pin --git` records it (the wheel's provenance and timestamps read it)
            date = GitRepo(fetched.repo).out("show", "-s", "--format=%cI", fetched.commit)[:10]
            new_pin = dataclasses.replace(new_pin, date=date)
        old_base = work.git.out("rev-parse", UPSTREAM)
        unknown = sorted(leave_out - {p.name for p in series.patches})
        if unknown:
            raise InputError(f"not in the series, so not to leave out: {', '.join(unknown)}")
        # the series' mails in order, less those left out (the commits of `patched` are the series':
        # unsaved work was refused above)
        kept = [(p.name, data) for p, (_, data) in zip(series.patches, format_mails(work.git, f"{UPSTREAM}..{PATCHED}"),
                                                      strict=True) if p.name not in leave_out]
        mails = [(f"{i:04d}.patch", data) for i, (_, data) in enumerate(kept, 1)]
        alternates = work.path / ".git" / "objects" / "info" / "alternates"
        want = str((fetched.repo / "objects").resolve())
        if want not in alternates.read_text():
            alternates.write_text(alternates.read_text() + want + "\n")
        merge_shallow(fetched.repo, work.path / ".git")
        # upstream's renames followed: each mail's paths rewritten to the files' new names
        moved = scratch.renames(work.git, old_base, fetched.commit)
        mails = [(name, scratch.follow_renames(data, moved)[0]) for name, data in mails]
        op = Operation("rebase", [], work.head(), work.git.current_branch(), old_base, detect_upstream=True,
                       names=[name for name, _ in kept], new_pin_toml=dump_pin(new_pin),
                       new_upstream=fetched.commit)
        # the way back, whatever happens next (docs/upstream.md): the series as it was, on its old base
        if op.pre_head:
            work.git.update_ref(before_ref(old_pin), op.pre_head, f"patchset: before rebase onto {new_pin.commit}")
        # the operation is recorded first: a process killed after it has its rollback (to pre_upstream),
        # one killed before it has moved nothing; the other way round, a rerun found `upstream` moved
        # and no operation to roll back, and took the new upstream's commits for patches
        work.start(op, mails, fetched.commit)
        work.git.update_ref(f"refs/heads/{UPSTREAM}", fetched.commit, f"patchset: rebase onto {new_pin.commit}")
        outcomes = work.run_queue()
        return _finish(project, work, old_pin, new_pin, outcomes, predicted)


def _work(project: Project) -> WorkRepo:
    """The work repository, with the series' recorded resolutions to reuse and its folder to record
    new ones in (a wrong resolution is refused here, before anything moves)."""
    work = WorkRepo(project.work_repo)
    work.patches_dir = project.patches_dir
    work.resolutions = rr.load(project.patches_dir)
    return work


def _checked_file(project: Project, old_pin: Pin, new_pin: Pin) -> Path:
    """The dry run with its upstream checks that a rebase made before moving (until it finishes)."""
    return project.state_dir / f"rebase-{old_pin.short}-{new_pin.short}.checked.json"


def before_ref(old_pin: Pin) -> str:
    """The recovery ref of a rebase: `patched` as it was before moving off `old_pin`."""
    return f"refs/patchset/before-{old_pin.short}"


def _range_diff(work: WorkRepo, old_base: str | None, old_head: str | None) -> str:
    """`git range-diff` of the old series against the new one: what each patch became."""
    if not old_base or not old_head:
        return ""
    r = work.git.run("range-diff", "--no-color", f"{old_base}..{old_head}", f"{UPSTREAM}..{PATCHED}",
                     env=ISOLATED, check=False)
    return r.stdout if r.returncode == 0 else ""


def _finish(project: Project, work: WorkRepo, old_pin: Pin, new_pin: Pin, outcomes: list[PatchOutcome],
            predicted: RebaseReport | None = None) -> RebaseResult:
    state = work.load_state()
    named = state.op.named(outcomes) if state.op else tuple(outcomes)
    checked = _checked_file(project, old_pin, new_pin)
    if predicted is None and checked.is_file():
        predicted = dryrun.RebaseReport.from_json(json.loads(checked.read_text()))
    checked.unlink(missing_ok=True)
    old_base, old_head = (state.op.pre_upstream, state.op.pre_head) if state.op else (None, None)
    renamed = _followed(project, work, old_base, old_head)
    before = {p.name: p.path.read_bytes() for p in load_series(project.patches_dir).patches}
    # the way back for `patchset undo`: made before the pin and patches/ are written, named once the move is done
    snap = movesnap.snapshot(work, project, "rebase", old_head, old_base)
    write_pin(new_pin, project.pin_file)
    changes = write_series(project.patches_dir, format_mails(work.git, f"{UPSTREAM}..{PATCHED}"))
    series = load_series(project.patches_dir)
    kinds = {p.name: scratch.change_class(before[p.name], p.path.read_bytes())
             for p in series.patches if p.name in before}
    new_up = work.git.out("rev-parse", UPSTREAM)
    work.git.update_ref("refs/patchset/pin", new_up)
    work.finish({"fingerprint": fingerprint(new_pin, new_pin.tree, series), "applied_head": work.head() or "",
                 "upstream": new_up, "pin_commit": new_pin.commit})
    work.git.update_ref(next_recovery_ref(work.git, "rebase"), snap, f"patchset: before rebase onto {new_pin.commit}")
    report, report_file = write_report(project, old_pin, new_pin, named, predicted,
                                       _range_diff(work, old_base, old_head), before_ref(old_pin), renamed, kinds)
    return RebaseResult(old_pin, new_pin, named, tuple(changes), report, report_file)


def _followed(project: Project, work: WorkRepo, old_base: str | None, old_head: str | None,
              ) -> dict[str, tuple[str, ...]]:
    """Per patch: the renames `rebase` followed (its old mail against the new upstream), read
    before patches/ is rewritten (its names are the old series', in the old commits' order)."""
    if not old_base or not old_head:
        return {}
    moved = scratch.renames(work.git, old_base, UPSTREAM)
    if not moved:
        return {}
    old = load_series(project.patches_dir).patches
    mails = format_mails(work.git, f"{old_base}..{old_head}")
    return {p.name: done for p, (_, data) in zip(old, mails, strict=False)
            if (done := scratch.follow_renames(data, moved)[1])}


def continue_rebase(project: Project) -> RebaseResult:
    return _resume(project, WorkRepo.continue_op)


def skip_rebase(project: Project) -> RebaseResult:
    """Drop the patch the rebase stopped at from the series (`git am --skip`), and go on."""
    return _resume(project, WorkRepo.skip_op)


def _resume(project: Project, step: Callable[[WorkRepo], list[PatchOutcome]]) -> RebaseResult:
    with project_lock(project.lock_file):
        work = _work(project)
        state = work.load_state() if work.exists() else None
        if state is None or state.op is None or state.op.kind != "rebase":
            raise WorkTreeError(f"{project.work_repo}: no rebase is stopped at a conflict")
        old_pin = load_pin(project.pin_file)
        tmp = work.meta_dir / "new-pin.toml"
        tmp.write_text(state.op.new_pin_toml)
        new_pin = load_pin(tmp)
        outcomes = step(work)
        return _finish(project, work, old_pin, new_pin, outcomes)


def abort_rebase(project: Project) -> None:
    with project_lock(project.lock_file):
        work = WorkRepo(project.work_repo)
        state = work.load_state() if work.exists() else None
        if state is None or state.op is None or state.op.kind != "rebase":
            raise WorkTreeError(f"{project.work_repo}: no rebase is stopped at a conflict")
        work.abort_op()
        for stale in project.state_dir.glob("rebase-*.checked.json"):
            stale.unlink(missing_ok=True)

"""`patchset status`: the pin, its source, and each patch's state in the work repository."""

from __future__ import annotations

from dataclasses import dataclass

from builder.project import Project
from builder.series import dropped
from builder.series.dropped import DropRecord
from builder.series.load import lint
from builder.series.refresh import current_mails, format_key
from builder.series.workbase import PATCHED, UPSTREAM, State
from builder.series.workrepo import WorkRepo
from builder.upstream import fetch as upstream
from builder.upstream.pin import Pin, load_pin


@dataclass(frozen=True)
class PatchStatus:
    index: int
    name: str
    subject: str
    applied: bool
    dirty: bool
    """The work branch's commit differs from the patch file (refresh would change it)."""
    upstream: str
    """Where the patch stands upstream (`Patchset-Upstream`): not-sent, sent, merged, rejected or not-needed."""
    upstream_ref: str
    """The pull-request URL, upstream commit, reason or note that follows it."""

    @property
    def upstream_status(self) -> str:
        return f"{self.upstream} {self.upstream_ref}".strip()


@dataclass(frozen=True)
class Status:
    pin: Pin
    verified: bool
    source: str
    work_repo: str
    branch: str | None
    work_tree_clean: bool
    operation: str | None
    patches: tuple[PatchStatus, ...]
    extra_commits: int
    """Commits on `patched` beyond the series (not yet refreshed)."""
    problems: tuple[str, ...]
    dropped: tuple[DropRecord, ...] = ()
    """The patches `bump --drop-fixed` took out of the series (`patches/dropped`), oldest first."""


def status(project: Project) -> Status:
    pin = load_pin(project.pin_file)
    fetched = upstream.lookup(project.cache_dir, pin)
    series, findings = lint(project.patches_dir)
    work = WorkRepo(project.work_repo)
    commits: list[str] = []
    branch, clean, op = None, True, None
    state = State()
    records, bad_records = dropped.parse(dropped.log_file(project.patches_dir))
    problems = [str(f) for f in findings + bad_records]
    gone = work.missing_borrowed() if work.exists() else []
    if gone:
        # the patches' diffs need the upstream objects: status says so instead of failing
        problems.append(f"the work repository borrows objects from {', '.join(gone)}, which is gone: "
                        "`patchset apply` (or refresh) fetches the pin again and re-attaches it")
    if work.exists() and not gone:
        head = work.head()
        if head and work.git.rev(UPSTREAM):
            commits = work.git.commits(f"{UPSTREAM}..{PATCHED}")
        branch = work.git.current_branch()
        clean = not work.git.is_dirty()
        state = work.load_state()
        op = state.op.kind if state.op else None
    # the mails as refresh would write them: what the last refresh formatted from the same commits
    # is read back, the rest formatted in one format-patch (one per commit made a 400-patch status
    # take 25 s)
    mails = ([mail for _name, mail in current_mails(project.patches_dir, work.git, commits, state,
                                                     format_key(work.git))] if commits else [])
    rows = []
    for i, p in enumerate(series.patches):
        applied = dirty = False
        if i < len(commits):
            applied = True
            dirty = mails[i] != p.path.read_bytes()
        rows.append(PatchStatus(p.index, p.name, p.subject, applied, dirty, p.meta.upstream, p.meta.upstream_ref))
    return Status(
        pin=pin, verified=fetched is not None, source=fetched.source if fetched else "",
        work_repo=str(work.path), branch=branch, work_tree_clean=clean, operation=op,
        patches=tuple(rows), extra_commits=max(0, len(commits) - len(series.patches)),
        problems=tuple(problems), dropped=tuple(r for _, r in records),
    )

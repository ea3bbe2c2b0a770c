"""`patchset gc`: remove what killed or finished runs left behind, and say what was removed.

- temporary folders and files: the cache's `tmp/` (`quarantine-*`, `dl-*` of a fetch that was
  killed), half-written files (`.NAME.*.tmp` beside patches/ files and state files, slice
  tarballs in progress), the queue of an operation that no longer exists. They are stale when
  no process holds the lock that guards them, and gc takes that lock first;
- verify refs (`refs/patchset/verify/`) and backup refs (`refs/patchset/backup/`) older than a
  limit: a backup's age is the time in its name, a verify ref's the time it was last written;
- with `broken=True`, refs whose objects are gone with a deleted cache.
"""

from __future__ import annotations

import re
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

from builder.errors import LockError
from builder.fsutil import HALF_WRITTEN
from builder.locking import cache_lock, project_lock
from builder.project import Project
from builder.series.workrepo import WorkRepo

DAY_S = 86400.0


@dataclass(frozen=True)
class GcResult:
    removed: tuple[str, ...]
    """What was removed (or, in a dry run, would be), one item each, in words."""
    skipped: tuple[str, ...]
    """What was left alone and why."""


def _remove(path: Path, dry_run: bool) -> None:
    if dry_run:
        return
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)


def _cache_temp(project: Project, dry_run: bool, removed: list[str], skipped: list[str]) -> None:
    tmp = project.cache_dir / "tmp"
    if not tmp.is_dir() or not any(tmp.iterdir()):
        return
    try:
        # a fetch works in tmp/ with this lock held: everything there without it is stale
        with cache_lock(project.cache_dir, timeout=0, purpose="gc"):
            for entry in sorted(tmp.iterdir()):
                _remove(entry, dry_run)
                removed.append(f"temporary {'folder' if entry.is_dir() else 'file'} {entry}")
    except LockError:
        skipped.append(f"{tmp}: a fetch is running (cache lock held); its temporary folders were left alone")




def _state_temp(project: Project, work: WorkRepo, dry_run: bool, removed: list[str]) -> None:
    places = [project.patches_dir, project.state_dir, project.pin_file.parent, work.meta_dir]
    for d in places:
        if not d.is_dir():
            continue
        for f in sorted(d.iterdir()):
            if f.is_file() and (HALF_WRITTEN.match(f.name) or f.name.endswith((".tar.tmp", ".tar.gz.tmp"))):
                _remove(f, dry_run)
                removed.append(f"half-written file {f}")
    if work.exists() and work.queue_dir.exists() and work.load_state().op is None:
        _remove(work.queue_dir, dry_run)
        removed.append(f"queue of a finished operation {work.queue_dir}")


_STAMP = re.compile(r"(\d{8}-\d{6})")


def _ref_time(work: WorkRepo, ref: str) -> float:
    """When `ref` was written: the time in a backup's name, else its file's time."""
    m = _STAMP.search(ref.rsplit("/", 1)[-1])
    if ref.startswith("refs/patchset/backup/") and m:
        return time.mktime(time.strptime(m.group(1), "%Y%m%d-%H%M%S"))
    loose = work.path / ".git" / ref
    packed = work.path / ".git" / "packed-refs"
    for f in (loose, packed):
        if f.exists():
            return f.stat().st_mtime
    return 0.0


def _old_refs(work: WorkRepo, older_than_s: float, broken: bool, dry_run: bool, removed: list[str]) -> None:
    now = time.time()
    refs = work.git.out("for-each-ref", "--format=%(refname)", "refs/patchset/verify/",
                        "refs/patchset/backup/").split()
    doomed: list[tuple[str, str]] = []
    for ref in refs:
        age = now - _ref_time(work, ref)
        if age >= older_than_s:
            doomed.append((ref, f"{age / DAY_S:.1f} day(s) old"))
    if broken:
        seen = {r for r, _ in doomed}
        doomed += [(ref, "its objects are gone") for ref in work.broken_refs() if ref not in seen]
    for ref, why in doomed:
        if not dry_run:
            work.git.run("update-ref", "-d", ref)
        removed.append(f"ref {ref} ({why})")
    if not dry_run and work.exists():
        work.git.run("worktree", "prune")


def gc(project: Project, older_than_days: float = 14.0, *, broken: bool = False, dry_run: bool = False) -> GcResult:
    """Remove stale temporary files and folders, and verify and backup refs older than the limit."""
    removed: list[str] = []
    skipped: list[str] = []
    with project_lock(project.lock_file, purpose="gc"):
        work = WorkRepo(project.work_repo)
        _cache_temp(project, dry_run, removed, skipped)
        _state_temp(project, work, dry_run, removed)
        if work.exists():
            _old_refs(work, older_than_days * DAY_S, broken, dry_run, removed)
    return GcResult(tuple(removed), tuple(skipped))

"""`patchset gc`: remove what killed or finished runs left behind, and say what was removed.

- temporary folders and files: the cache's `tmp/` (`quarantine-*`, `dl-*` of a fetch that was
  killed), half-written files (`.NAME.*.tmp` beside patches/ files and state files, slice
  tarballs in progress), the queue of an operation that no longer exists. They are stale when
  no process holds the lock that guards them, and gc takes that lock first;
- verify refs (`refs/patchset/verify/`) and backup refs (`refs/patchset/backup/`) older than a
  limit: a backup's age is the time in its name, a verify ref's the time it was last written;
- verify's lane folders (builder/prove/treebuild.py names them: worktrees `src`, `src-N`,
  `syntax`, `syntax-N`, build folders `verify-BACKEND-minimal`, `verify-BACKEND-minimal-N`, of
  every series) not used for the same limit: a lane's last use is the newest time of the folder, its
  entries, and for a worktree its record in the work repository (a checkout writes HEAD and index
  there, a build ninja's log). A verify holds the project lock for its whole run, and gc takes it
  first, so a running verify's lanes are never removed: gc waits for it, or refuses;
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
from builder.prove.treebuild import lane_build_dir, lane_src, lane_syntax_tree
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


_LANE_SRC = re.compile(r"(?:src|syntax)(?:-([1-9]\d*))?")
_LANE_BUILD = re.compile(r"verify-([a-z0-9][a-z0-9-]*?)-minimal(?:-([1-9]\d*))?")


def lane_folders(project: Project) -> list[Path]:
    """verify's lane folders of `project`'s series that exist: each name checked against the function
    that names it (a folder these functions would not name is not one of verify's)."""
    found: list[Path] = []
    for series in ["", *project.second_series()]:
        p = project if series == project.series_name else project.series(series)
        for folder in sorted({p.verify_dir, p.state_dir / "verify"}):
            for d in sorted(folder.iterdir()) if folder.is_dir() else []:
                m = _LANE_SRC.fullmatch(d.name)
                lane = int(m.group(1) or 0) if m else -1
                if m and d in (lane_src(p, lane), lane_syntax_tree(p, lane)) and d not in found:
                    found.append(d)
        for d in sorted(p.build_root.iterdir()) if p.build_root.is_dir() else []:
            b = _LANE_BUILD.fullmatch(d.name)
            if b and d == lane_build_dir(p, b.group(1), int(b.group(2) or 0)) and d not in found:
                found.append(d)
    return [d for d in found if d.is_dir() and not d.is_symlink()]


def last_used(folder: Path) -> float:
    """When a lane folder was last used: the newest time of it, its entries and, for a worktree, its
    record in the repository's `worktrees/` (HEAD and index, written at each checkout)."""
    places = [folder, *folder.iterdir()]
    dot_git = folder / ".git"
    if dot_git.is_file():
        text = dot_git.read_text(encoding="utf-8", errors="replace").strip()
        admin = folder / text.removeprefix("gitdir:").strip() if text.startswith("gitdir:") else None
        if admin is not None and admin.is_dir():
            places += [admin, *admin.iterdir()]
    return max(p.lstat().st_mtime for p in places)


def _lanes(project: Project, older_than_s: float, dry_run: bool, removed: list[str]) -> None:
    now = time.time()
    for folder in lane_folders(project):
        age = now - last_used(folder)
        if age >= older_than_s:
            _remove(folder, dry_run)
            removed.append(f"verify lane folder {folder} (unused for {age / DAY_S:.1f} day(s))")


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
    """Remove stale temporary files and folders, verify's lane folders unused for the limit, and verify
    and backup refs older than it."""
    removed: list[str] = []
    skipped: list[str] = []
    with project_lock(project.lock_file, purpose="gc"):
        work = WorkRepo(project.work_repo)
        _cache_temp(project, dry_run, removed, skipped)
        _state_temp(project, work, dry_run, removed)
        _lanes(project, older_than_days * DAY_S, dry_run, removed)
        for series in project.second_series():
            # the lanes' worktrees of another series are its own work repository's: forget the removed ones
            other = WorkRepo(project.series(series).work_repo)
            if not dry_run and other.exists() and other.path != work.path:
                other.git.run("worktree", "prune")
        if work.exists():
            _old_refs(work, older_than_days * DAY_S, broken, dry_run, removed)
    return GcResult(tuple(removed), tuple(skipped))

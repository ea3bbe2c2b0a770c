"""Write `patches/` back from the `patched` branch, byte-stable."""

from __future__ import annotations

import hashlib
import re
import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from builder.errors import SeriesError, WorkTreeError
from builder.fsutil import atomic_write, atomic_write_text
from builder.gitrepo import ISOLATED, GitRepo
from builder.locking import project_lock
from builder.project import Project
from builder.series.load import read_series_file
from builder.series.model import Finding
from builder.series.scratch import CHANGED, CONTEXT_ONLY, UNCHANGED, change_class
from builder.series.workbase import PATCHED, UPSTREAM, State, digests_of, fingerprint_of, read_patches_dir
from builder.series.workrepo import WorkRepo, ensure_no_op, ensure_objects
from builder.upstream import fetch as upstream
from builder.upstream.pin import Pin, load_pin

# Each flag makes the file depend only on the commit, never on when, where or by which git it
# was written (Electron's patch exporter does the same):
FORMAT_PATCH_FLAGS = (
    "--zero-commit",  # From line 0000...: the commit id changes with every re-apply
    "--full-index",  # full blob ids: 3-way merges can always find the base version
    "--no-signature",  # no "-- 2.39.5" footer that changes with the installed git
    "--keep-subject",  # no [PATCH n/m]: adding a patch must not rewrite all the others
    "--no-stat",  # a diffstat repeats the diff and churns with unrelated edits
    "--no-renames",  # rename detection varies with config and version; plain diffs do not
    "--no-numbered",
)


@dataclass(frozen=True)
class FileChange:
    name: str
    change: str  # unchanged | updated | added | removed
    review: str = ""
    """An updated patch: `context only` when its message and the lines it adds and removes are
    unchanged (an earlier patch or upstream moved the lines around it: only context, line numbers or
    blob ids differ; no new review needed), else `changed` (`scratch.change_class`)."""


def review_class(old: bytes | None, new: bytes) -> str:
    """`context only` or `changed` for a patch file rewritten from `old` to `new` (see FileChange)."""
    if old is None:
        return CHANGED
    # the message and headers: everything before the diff
    if old.split(b"\ndiff --git ", 1)[0] != new.split(b"\ndiff --git ", 1)[0]:
        return CHANGED
    return CONTEXT_ONLY if change_class(old, new) in (CONTEXT_ONLY, UNCHANGED) else CHANGED


def normalize(mail: bytes) -> bytes:
    """Exactly one trailing newline: only newlines are stripped, never a context line's space."""
    return mail.rstrip(b"\n") + b"\n"


def format_mails(git: GitRepo, *revs: str) -> list[tuple[str, bytes]]:
    """`git format-patch` of `revs` as (file name, normalized bytes), oldest first."""
    with tempfile.TemporaryDirectory(prefix="patchset-fp-") as tmp:
        git.run("format-patch", *FORMAT_PATCH_FLAGS, "-o", tmp, *revs, env=ISOLATED)
        files = sorted(Path(tmp).glob("*.patch"))
        return [(f.name, normalize(f.read_bytes())) for f in files]


_HEADER = "# patchset series: one patch file per line, applied in order (written by `patchset refresh`)\n"


def write_series(patches_dir: Path, mails: list[tuple[str, bytes]],
                 files: dict[str, bytes] | None = None) -> list[FileChange]:
    """Make `patches/` hold exactly these mails, listed in this order; report what changed.

    `files`: patches/ as read just before (`read_patches_dir`), so that nothing is read twice."""
    series_file = patches_dir / "series"
    old_entries, _ = read_series_file(series_file)
    old_names = [e.name for e in old_entries]
    changes: list[FileChange] = []
    for name, data in mails:
        path = patches_dir / name
        if _file(patches_dir, files, name) == data:
            changes.append(FileChange(name, "unchanged"))
            continue
        old = _file(patches_dir, files, name)
        atomic_write(path, data)
        changes.append(FileChange(name, "updated", review_class(old, data)) if name in old_names and old is not None
                       else FileChange(name, "added"))
    new_names = {n for n, _ in mails}
    for name in old_names:
        if name not in new_names:
            (patches_dir / name).unlink(missing_ok=True)
            changes.append(FileChange(name, "removed"))
    text = _series_text(series_file, [n for n, _ in mails])
    if not series_file.exists() or series_file.read_text(encoding="utf-8") != text:
        atomic_write_text(series_file, text)
    return changes


def _read(path: Path) -> bytes | None:
    try:
        return path.read_bytes() if path.is_file() else None
    except OSError:
        return None


def _series_text(series_file: Path, names: list[str]) -> str:
    """The series file refresh writes: the comments a person put on top, then the names."""
    return (_leading_comments(series_file) or _HEADER) + "".join(f"{n}\n" for n in names)


def stale_files(patches_dir: Path, mails: list[tuple[str, bytes]]) -> list[FileChange]:
    """What `write_series` would change, without writing: each patch file that would be added,
    updated or removed, the series file when its text would change, and top-level `*.patch`
    files that are in no series (refresh leaves those, but they are not part of it)."""
    series_file = patches_dir / "series"
    old_names = [e.name for e in read_series_file(series_file)[0]]
    new_names = [n for n, _ in mails]
    changes: list[FileChange] = []
    for name, data in mails:
        path = patches_dir / name
        if not path.is_file():
            changes.append(FileChange(name, "added"))
        elif (old := path.read_bytes()) != data:
            changes.append(FileChange(name, "updated", review_class(old, data)))
    changes += [FileChange(n, "removed") for n in old_names if n not in new_names and (patches_dir / n).exists()]
    changes += [FileChange(p.name, "unlisted") for p in sorted(patches_dir.glob("*.patch"))
                if p.name not in new_names and p.name not in old_names]
    text = _series_text(series_file, new_names)
    if not series_file.is_file() or series_file.read_text(encoding="utf-8") != text:
        changes.append(FileChange("series", "updated"))
    return changes


def check_current(project: Project) -> tuple[FileChange, ...]:
    """`refresh --check`: the files of `patches/` that differ from what refresh would write from
    `patched` (empty: patches/ is current). Writes nothing."""
    with project_lock(project.lock_file):
        work = WorkRepo(project.work_repo)
        if not work.exists() or work.head() is None:
            raise WorkTreeError(f"{project.work_repo}: no '{PATCHED}' branch; run `patchset apply` first")
        ensure_no_op(work)
        # the files the last apply or refresh formatted from the same commits are read back
        commits = work.git.commits(f"{UPSTREAM}..{PATCHED}")
        mails = current_mails(project.patches_dir, work.git, commits, work.load_state(), format_key(work.git))
        return tuple(stale_files(project.patches_dir, mails))


def _leading_comments(series_file: Path) -> str:
    """Keep the comment block a person wrote at the top of the series file."""
    if not series_file.exists():
        return ""
    lines = []
    for line in series_file.read_text(encoding="utf-8").splitlines(keepends=True):
        if re.match(r"^\s*(#|$)", line):
            lines.append(line)
        else:
            break
    return "".join(lines)


@dataclass(frozen=True)
class RefreshResult:
    changes: tuple[FileChange, ...]
    warnings: tuple[str, ...]
    backup: Path | None = None
    """Where `--force` saved the hand-edited files it overwrote."""


def hand_edits(patches_dir: Path, mails: list[tuple[str, bytes]], state: State, current_fp: str,
               files: dict[str, bytes] | None = None) -> list[str]:
    """Files of patches/ that refresh would overwrite or remove and that changed since the last
    apply or refresh (hand edits): refresh must not lose them.

    A file refresh would leave as it is, or would write with the bytes it already has, loses
    nothing (a refresh killed half-way leaves such files, and running it again must work).
    `files`: patches/ as read just before (`read_patches_dir`).
    """
    planned: dict[str, bytes | None] = dict(mails)
    series_file = patches_dir / "series"
    old_entries, _ = read_series_file(series_file)
    for e in old_entries:
        planned.setdefault(e.name, None)
    planned["series"] = _series_text(series_file, [n for n, _ in mails]).encode("utf-8")
    at_risk = [n for n, new in planned.items() if (data := _file(patches_dir, files, n)) is not None and data != new]
    if not at_risk or (state.fingerprint and state.fingerprint == current_fp):
        return []
    if not state.patch_digests or state.digests_fingerprint != state.fingerprint:
        # no record of the files as they were (an older state, or a rebase since): every file
        # that would change may hold an edit
        return at_risk
    return [n for n in at_risk
            if state.patch_digests.get(n) != hashlib.sha256(_file(patches_dir, files, n) or b"").hexdigest()]


def _save_edits(project: Project, names: list[str]) -> Path:
    dest = project.state_dir / "backup" / f"patches-{time.strftime('%Y%m%d-%H%M%S')}"
    dest.mkdir(parents=True, exist_ok=True)
    for n in names:
        shutil.copy2(project.patches_dir / n, dest / n)
    return dest


def format_key(git: GitRepo) -> str:
    version = git.run("--version", env=ISOLATED).stdout.strip()
    return hashlib.sha256("\0".join((version, *FORMAT_PATCH_FLAGS)).encode()).hexdigest()


def current_mails(patches_dir: Path, git: GitRepo, commits: list[str], state: State,
                  key: str, files: dict[str, bytes] | None = None) -> list[tuple[str, bytes]]:
    """The mails of `commits`, as format_mails gives them: the leading ones that the last apply or
    refresh formatted from the same commits and whose files still hold exactly those bytes are read
    back from patches/; the rest are formatted (one format-patch from the first changed commit on).
    A commit id names its whole content and history, so the same commit formats to the same bytes.
    `files`: patches/ as read just before (`read_patches_dir`)."""
    reused: list[tuple[str, bytes]] = []
    if state.formatted_key == key:
        for commit, (done_commit, name, sha) in zip(commits, state.formatted, strict=False):
            data = None
            if commit == done_commit:
                data = _file(patches_dir, files, name)
            if data is None or hashlib.sha256(data).hexdigest() != sha:
                break
            reused.append((name, data))
    k = len(reused)
    if k == len(commits):
        return reused
    start = f"{commits[k - 1]}..{PATCHED}" if k else f"{UPSTREAM}..{PATCHED}"
    return reused + format_mails(git, f"--start-number={k + 1}", start)


def formatted_record(git: GitRepo) -> dict[str, object]:
    """The state fields that say which file format-patch makes of each commit of the series, made
    right after apply: a refresh or status that follows reads back every file still holding those
    bytes instead of formatting the whole series again (formatting is a small part of an apply,
    most of a refresh)."""
    commits = git.commits(f"{UPSTREAM}..{PATCHED}")
    mails = format_mails(git, f"{UPSTREAM}..{PATCHED}") if commits else []
    if len(commits) != len(mails):
        return {"formatted": [], "formatted_key": ""}
    return {"formatted": [[c, name, hashlib.sha256(data).hexdigest()] for c, (name, data) in zip(commits, mails,
                                                                                                   strict=True)],
            "formatted_key": format_key(git)}


def _dirty_warning(work: WorkRepo) -> list[str]:
    dirty = work.git.is_dirty()
    if not dirty:
        return []
    return [f"{len(dirty)} uncommitted change(s) in {work.path} are not in patches/: commit them on "
            f"'{PATCHED}' and refresh again"]


def refresh(project: Project, *, force: bool = False) -> RefreshResult:
    """Write the commits of upstream..patched back as patches/ and the series file.

    Refuses to overwrite a file of patches/ edited by hand since the last apply or refresh,
    naming it; `force` overwrites and keeps a copy under `.patchset/backup/`.
    """
    with project_lock(project.lock_file, purpose="refresh"):
        work = WorkRepo(project.work_repo)
        head = work.head() if work.exists() else None
        if head is None:
            raise WorkTreeError(f"{project.work_repo}: no '{PATCHED}' branch; run `patchset apply` first")
        ensure_no_op(work)
        ensure_objects(project, work)
        state = work.load_state()
        key = format_key(work.git)
        commits = work.git.commits(f"{UPSTREAM}..{PATCHED}")
        files = read_patches_dir(project.patches_dir)  # each file is read once
        pin = load_pin(project.pin_file)
        tree = upstream.fetched_tree(project.cache_dir, pin)
        current_fp = _fingerprint(pin, tree, project.patches_dir, files)
        mails = current_mails(project.patches_dir, work.git, commits, state, key, files)
        edited = hand_edits(project.patches_dir, mails, state, current_fp, files)
        backup = None
        if edited and not force:
            raise WorkTreeError(
                f"{project.patches_dir}: refusing to refresh: {', '.join(edited)} changed since the last apply or "
                "refresh and would be overwritten. Run `patchset apply` to use the edits, or `patchset refresh "
                "--force` to overwrite them (a copy is kept under .patchset/backup/)")
        if edited:
            backup = _save_edits(project, edited)
        changes = write_series(project.patches_dir, mails, files)
        warnings = _dirty_warning(work)
        fp = current_fp
        series_now = _read(project.patches_dir / "series")
        if any(c.change != "unchanged" for c in changes) or series_now != files.get("series"):
            files = read_patches_dir(project.patches_dir)  # patches/ as refresh left it
            fp = _fingerprint(pin, tree, project.patches_dir, files)
        digests = digests_of(files)
        # a merge on patched formats to no mail: then nothing is recorded, the next refresh formats all
        formatted = ([[c, name, digests.get(name, "")] for c, (name, _) in zip(commits, mails, strict=True)]
                     if len(commits) == len(mails) else [])
        work.finish({"fingerprint": fp, "applied_head": head,
                     "patch_digests": digests, "digests_fingerprint": fp,
                     "formatted": formatted, "formatted_key": key})
        return RefreshResult(tuple(changes), tuple(warnings), backup)


def _file(patches_dir: Path, files: dict[str, bytes] | None, name: str) -> bytes | None:
    """The bytes of patches/`name`: from `files` (patches/ read once) for a file directly in it."""
    return files.get(name) if files is not None and "/" not in name else _read(patches_dir / name)


def _fingerprint(pin: Pin, tree: str, patches_dir: Path, files: dict[str, bytes]) -> str:
    """`fingerprint` of patches/ as `files` holds it, without parsing a mail: the series file and
    the bytes of each patch it lists ("" with no series file: no apply was made from that).

    A patch file the series lists and that is gone was removed by hand: SeriesError says so rather
    than refresh writing it back (`patchset check` judges the rest of the series)."""
    series_file = files.get("series")
    if series_file is None:
        return ""
    listed = []
    for entry in read_series_file(patches_dir / "series")[0]:
        data = _file(patches_dir, files, entry.name)
        if data is None:
            raise SeriesError(str(Finding(patches_dir / "series", entry.line,
                                          f"'{entry.name}' is listed but the file does not exist")))
        listed.append((entry.name, data))
    return fingerprint_of(pin, tree, series_file, listed)

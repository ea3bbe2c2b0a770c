"""Resolutions remembered: conflicts resolved by hand, kept with the series and replayed.

A conflict resolved by hand during `rebase --continue` is kept with the series, under
`patches/resolutions/`, and replayed where the same conflict comes back (a later rebase, its dry
run, canary).

git's rerere does this for one clone; this folder travels with the repository and is reviewed like
any file of the series. One folder per conflicted file, named by its key:

- `preimage`: the file as the conflict left it, normalized: marker lines without their labels
  (`<<<<<<< HEAD` is `<<<<<<<`), and no base section (diff3 style);
- `postimage`: the file as the maintainer resolved it (staged at `--continue`);
- `about`: `patch NAME`, `subject SUBJECT` and `path PATH`: what it was recorded for (read by people
  and by `check`; the subject still names the patch after a rebase renumbered the files).

The key is rerere's: the sha256 of the conflict hunks alone, each hunk's two sides sorted, so the
same conflict has the same key whatever the rest of the file holds, which side git called ours,
and the labels of the markers. A resolution is carried onto the conflict met as rerere carries it:
a 3-way merge of the file met (ours) with the recorded preimage (base) and postimage (theirs), so
that upstream's changes elsewhere in the file are kept; a merge that conflicts is a resolution that
does not fit (stale), and the patch stops as it would without one.

A folder whose preimage does not hash to its name, whose postimage still holds conflict markers, or
that lacks a file is wrong: a rebase refuses to start with one line naming it, and `check` lists
it; one recorded for a patch no longer in the series is stale (`check`).
"""

from __future__ import annotations

import hashlib
import re
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from builder import proc
from builder.errors import SeriesError
from builder.fsutil import atomic_write, atomic_write_text
from builder.gitrepo import ISOLATED
from builder.series.model import Finding

FOLDER = "resolutions"

_OPEN, _BASE, _SEP, _CLOSE = b"<<<<<<<", b"|||||||", b"=======", b">>>>>>>"
_MARKER = re.compile(rb"^(<{7}|\|{7}|={7}|>{7})(?:[ \t].*)?(\r?\n)?$")


def folder(patches_dir: Path) -> Path:
    return patches_dir / FOLDER


def plain(text: bytes) -> bytes:
    """The conflicted file with marker labels and base sections dropped (see the module docstring)."""
    out: list[bytes] = []
    in_base = False
    for line in text.splitlines(keepends=True):
        m = _MARKER.match(line)
        mark = m.group(1) if m else b""
        if mark == _BASE:
            in_base = True
            continue
        if mark == _SEP:
            in_base = False
        if in_base:
            continue
        out.append(mark + b"\n" if mark else line)
    return b"".join(out)


def hunks(text: bytes) -> list[tuple[bytes, bytes]]:
    """The conflict hunks of a file (after `plain`): (one side, the other side) each."""
    found: list[tuple[bytes, bytes]] = []
    side: list[list[bytes]] | None = None
    for line in plain(text).splitlines(keepends=True):
        mark = line.rstrip(b"\n")
        if mark == _OPEN:
            side = [[]]
        elif mark == _SEP and side is not None and len(side) == 1:
            side.append([])
        elif mark == _CLOSE and side is not None and len(side) == 2:
            found.append((b"".join(side[0]), b"".join(side[1])))
            side = None
        elif side is not None:
            side[-1].append(line)
    return found


def has_markers(text: bytes) -> bool:
    return bool(hunks(text))


def key_of(text: bytes) -> str:
    """rerere's key of a conflicted file: its hunks, each with its sides sorted; '' when it has none."""
    found = hunks(text)
    if not found:
        return ""
    h = hashlib.sha256()
    for a, b in found:
        first, second = sorted((a, b))
        h.update(first + b"\0" + second + b"\0")
    return h.hexdigest()


@dataclass(frozen=True)
class Resolution:
    key: str
    patch: str
    subject: str
    path: str
    preimage: bytes
    postimage: bytes

    @property
    def name(self) -> str:
        return f"{FOLDER}/{self.key[:12]}"


def _about(patch: str, subject: str, path: str) -> str:
    return f"patch {patch}\nsubject {subject}\npath {path}\n"


def record(patches_dir: Path, patch: str, subject: str, path: str, conflicted: bytes,
           resolved: bytes) -> Resolution | None:
    """Keep the resolution of one conflicted file (None when `conflicted` holds no conflict or the
    resolution still holds markers: nothing to remember)."""
    key = key_of(conflicted)
    if not key or has_markers(resolved):
        return None
    d = folder(patches_dir) / key
    d.mkdir(parents=True, exist_ok=True)
    pre = plain(conflicted)
    atomic_write(d / "preimage", pre)
    atomic_write(d / "postimage", resolved)
    atomic_write_text(d / "about", _about(patch, subject, path))
    return Resolution(key, patch, subject, path, pre, resolved)


def _read(d: Path) -> tuple[Resolution | None, str]:
    """The resolution in folder `d`, or (None, what is wrong with it)."""
    missing = [f for f in ("preimage", "postimage", "about") if not (d / f).is_file()]
    if missing:
        return None, f"lacks {', '.join(missing)}"
    pre, post = (d / "preimage").read_bytes(), (d / "postimage").read_bytes()
    about = dict(line.split(" ", 1) for line in (d / "about").read_text(encoding="utf-8").splitlines()
                 if " " in line)
    if key_of(pre) != d.name:
        return None, "its preimage does not hash to its name (edited by hand, or not a conflict): record it again"
    if has_markers(post):
        return None, "its postimage still holds conflict markers"
    if "patch" not in about or "path" not in about:
        return None, "its about file names no patch and path"
    return Resolution(d.name, about["patch"], about.get("subject", ""), about["path"], pre, post), ""


def load(patches_dir: Path) -> dict[str, Resolution]:
    """Every recorded resolution, by key; a wrong one is refused (SeriesError, one line)."""
    root = folder(patches_dir)
    if not root.is_dir():
        return {}
    out: dict[str, Resolution] = {}
    for d in sorted(p for p in root.iterdir() if p.is_dir()):
        res, why = _read(d)
        if res is None:
            raise SeriesError(f"{d}: wrong resolution: {why}; fix or remove it (patchset check lists them)")
        out[res.key] = res
    return out


def lint(patches_dir: Path, patches: list[tuple[str, str]]) -> list[Finding]:
    """`check`: wrong folders, and stale ones (recorded for a patch no longer in the series: neither
    its file name nor its subject is one of `patches`, (name, subject) each)."""
    root = folder(patches_dir)
    if not root.is_dir():
        return []
    findings = []
    for d in sorted(root.iterdir()):
        if not d.is_dir():
            findings.append(Finding(d, 0, "not a resolution folder (patches/resolutions holds one folder per key)"))
            continue
        res, why = _read(d)
        if res is None:
            findings.append(Finding(d, 0, f"wrong resolution: {why}"))
        elif res.patch not in {n for n, _ in patches} and res.subject not in {s for _, s in patches}:
            findings.append(Finding(d, 0, f"stale resolution: recorded for {res.patch}, which is not in the series"))
    return findings


def carry(res: Resolution, conflicted: bytes) -> bytes | None:
    """The resolution carried onto the file met (its conflict has `res`'s key): a 3-way merge of that
    file with the recorded preimage as base and postimage as theirs; None when that merge conflicts
    (the resolution does not fit this file) or leaves markers."""
    mine = plain(conflicted)
    if mine == res.preimage:
        return res.postimage
    tmp = Path(tempfile.mkdtemp(prefix="patchset-resolution-"))
    try:
        (tmp / "current").write_bytes(mine)
        (tmp / "pre").write_bytes(res.preimage)
        (tmp / "post").write_bytes(res.postimage)
        # exit status: the number of conflicts (0: merged), negative on error
        r = proc.run(["git", "merge-file", "--quiet", str(tmp / "current"), str(tmp / "pre"), str(tmp / "post")],
                     env=ISOLATED, check=False)
        out = (tmp / "current").read_bytes()
        return out if r.returncode == 0 and not has_markers(out) else None
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

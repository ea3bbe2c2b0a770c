"""The vendored submodule's git dir that a source archive may ship, and what it records.

llama-cpp-python's sdists ship one: the upstream commit it records, and that commit's own object
when the archive carries it.

`patchset pin --sdist` reads the commit id from it; `fetch` writes the commit object itself into
the cache, so that an sdist pin is upstream's real commit (shallow: its parents are absent) and
any later upstream history connects to it.
"""

from __future__ import annotations

import hashlib
import re
import zlib
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path, PurePosixPath

from builder.upstream import mirror

_SHA1 = re.compile(r"[0-9a-f]{40}")


@dataclass(frozen=True)
class CommitMarker:
    """A commit id the archive records, and where."""

    commit: str
    where: str
    tree: str = ""
    """The tree the commit object names, when the archive carries the object (sha1 checked)."""
    date: str = ""
    """That object's committer date (YYYY-MM-DD, in the committer's own time zone)."""
    build_number: int | None = None
    raw: bytes = field(default=b"", repr=False)
    """The commit's loose object as the archive stores it (zlib-compressed; its sha1 checked), when there."""
    parents: int = 0
    """How many parents that object names (absent from the archive: the commit is shallow)."""


# -- markers --------------------------------------------------------------------------------------
def _gitdir(small: dict[str, bytes], subdir: str) -> str:
    """The archive path of the submodule's git dir: from the subdir's `.git` link file, else the
    default `.git/modules/<subdir>`. A link leaving the archive is ignored."""
    m = re.match(rb"gitdir:\s*(\S+)", small.get(f"{subdir}/.git", b""))
    if m:
        parts: list[str] = []
        for part in PurePosixPath(subdir, m.group(1).decode("utf-8", "replace")).parts:
            if part == "..":
                if not parts:
                    return f".git/modules/{subdir}"
                parts.pop()
            elif part not in ("", "."):
                parts.append(part)
        return "/".join(parts)
    return f".git/modules/{subdir}"


def _text(small: dict[str, bytes], name: str) -> str:
    return small.get(name, b"").decode("utf-8", "replace").strip()


def commit_marker(archive: Path, subdir: str, files: Path,
                  commit: str = "") -> tuple[CommitMarker | None, list[str]]:
    """The first commit marker found (the order: `builder.upstream.pinwrite`'s docstring), and the places
    looked at; `files`: the archive's `subdir` as extracted (its build-info files are markers too).

    With `commit`, the archive's copy of that commit object when it has one (else the marker).
    """
    # one pass over the archive: the link file, and the small files of any .git folder
    small = mirror.read_small_files(archive, (f"{subdir}/.git",), (".git/",))
    gitdir = _gitdir(small, subdir)
    looked = [f"{gitdir}/HEAD"]
    if commit and (obj := commit_object(small, gitdir, commit)):
        return obj, looked
    head = _text(small, f"{gitdir}/HEAD")
    if head.startswith("ref: "):
        ref = head[5:].strip()
        looked.append(f"{gitdir}/{ref}")
        head = _text(small, f"{gitdir}/{ref}")
        if not head:
            m = re.search(rf"^([0-9a-f]{{40}}) {re.escape(ref)}$", _text(small, f"{gitdir}/packed-refs"), re.M)
            head = m.group(1) if m else ""
    if _SHA1.fullmatch(head):
        where = f"{gitdir}/HEAD, the vendored submodule's git dir"
        return commit_object(small, gitdir, head) or CommitMarker(head, where), looked
    for rel, commit_re, number_re in (
        ("cmake/build-info.cmake", r'set\(BUILD_COMMIT\s+"?([0-9a-f]{7,40})"?\)', r"set\(BUILD_NUMBER\s+(\d+)\)"),
        ("common/build-info.cpp", r'LLAMA_COMMIT\s*=\s*"([0-9a-f]{7,40})"', r"LLAMA_BUILD_NUMBER\s*=\s*(\d+)"),
    ):
        looked.append(f"{subdir}/{rel}")
        path = files / rel
        text = path.read_text(encoding="utf-8", errors="replace") if path.is_file() else ""
        cm = re.search(commit_re, text)
        if cm:
            nm = re.search(number_re, text)
            number = int(nm.group(1)) if nm and int(nm.group(1)) > 0 else None
            return CommitMarker(cm.group(1), f"{subdir}/{rel}", build_number=number), looked
    return None, looked


def commit_object(small: dict[str, bytes], gitdir: str, commit: str) -> CommitMarker | None:
    """The commit's loose object from the archive, when there and its sha1 is `commit`."""
    name = f"{gitdir}/objects/{commit[:2]}/{commit[2:]}"
    raw = small.get(name)
    if raw is None:
        return None
    try:
        data = zlib.decompress(raw)
    except zlib.error:
        return None
    if hashlib.sha1(data, usedforsecurity=False).hexdigest() != commit or not data.startswith(b"commit "):
        return None
    body = data.split(b"\0", 1)[1].decode("utf-8", "replace")
    tm = re.search(r"^tree ([0-9a-f]{40})$", body, re.M)
    dm = re.search(r"^committer .* (\d+) ([+-])(\d\d)(\d\d)$", body, re.M)
    date = ""
    if dm:
        offset = timedelta(hours=int(dm.group(3)), minutes=int(dm.group(4))) * (1 if dm.group(2) == "+" else -1)
        date = datetime.fromtimestamp(int(dm.group(1)), timezone(offset)).strftime("%Y-%m-%d")
    where = f"the commit object in the vendored submodule's git dir, {name}"
    header = body.split("\n\n", 1)[0]
    parents = len(re.findall(r"^parent [0-9a-f]{40}$", header, re.M))
    return CommitMarker(commit, where, tm.group(1) if tm else "", date, raw=raw, parents=parents)

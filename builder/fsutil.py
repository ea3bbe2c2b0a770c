"""File-system helpers shared by the modules that write into the project."""

from __future__ import annotations

import hashlib
import json
import os
import re
import tempfile
from pathlib import Path
from typing import Any

from builder import proc
from builder.errors import InputError


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def atomic_write(path: Path, data: bytes) -> None:
    """Never leave a half-written file: write beside it, fsync, rename over it.

    The file gets the mode a plain open() would give it: the mode of the file it replaces, else
    0666 less the umask (mkstemp's own 0600 would hide outputs such as a wheel's provenance from
    other users and drop a script's executable bit).
    """
    # a point where the test suite's fault injection can kill the process (nothing written yet)
    proc.fault_point(f"write {path} [write]")
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        mode = path.stat().st_mode & 0o7777
    except FileNotFoundError:
        mode = 0o666 & ~_umask()
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        os.fchmod(fd, mode)
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


HALF_WRITTEN = re.compile(r"^\..+\.[A-Za-z0-9_]+\.tmp$")
"""The name atomic_write's temporary file has (`.NAME.XXXXXXXX.tmp`): one left behind is a write killed
half-way (the process was killed while it wrote; in verify's lanes, while another lane hit a kill)."""


def remove_half_written(folder: Path, *, below: bool = True) -> list[Path]:
    """Remove the half-written files atomic_write left in `folder` and, with `below`, the folders below it;
    the caller holds the lock of whatever writes there. Returns what was removed."""
    found = (folder.rglob if below else folder.glob)(".*.tmp") if folder.is_dir() else ()
    gone = [f for f in sorted(found) if f.is_file() and HALF_WRITTEN.match(f.name)]
    for f in gone:
        f.unlink(missing_ok=True)
    return gone


def atomic_write_text(path: Path, text: str) -> None:
    atomic_write(path, text.encode("utf-8"))


def sha256_file(path: Path) -> str:
    """The sha256 of a file's bytes, read in chunks (archives can be large)."""
    h = hashlib.sha256()
    with path.open("rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def load_json(path: Path) -> Any:
    """The JSON value of a file a person gives or may have edited (a run folder, committed evidence).

    Bad input, not a bug: InputError in one line, `FILE:LINE: not valid JSON: why` (json's own
    line number), or `FILE: cannot read: why`."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise InputError(f"{path}: cannot read: {getattr(e, 'strerror', None) or e}") from e
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise InputError(f"{path}:{e.lineno}: not valid JSON: {e.msg} (column {e.colno})") from e

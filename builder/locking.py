"""One patchset process at a time per project state folder."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from filelock import FileLock, Timeout

from builder.errors import WorkTreeError


@contextmanager
def project_lock(lock_file: Path, timeout: float = 600) -> Iterator[None]:
    lock_file.parent.mkdir(parents=True, exist_ok=True)
    try:
        with FileLock(str(lock_file), timeout=timeout):
            yield
    except Timeout as e:
        raise WorkTreeError(f"{lock_file}: another patchset process is working on this project") from e

"""One patchset process at a time per project state folder.

Every verb that writes to the work repository or to `.patchset/` (apply, refresh, rebase, build,
test, slice, verify, gc) holds the project lock for its whole run. A second process waits for it
(`$PATCHSET_LOCK_TIMEOUT` seconds, default 600; 0 refuses at once), saying once who holds it, and
then refuses with a message naming the holder. The lock is re-entrant within one process: `all`
calls build, which may call apply, each of which takes it.

The lock is the OS's (filelock: flock on POSIX), so a killed holder releases it at once; the
holder's description beside it (`lock.owner`) is only for the message.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from filelock import FileLock, Timeout

from builder.errors import LockError

log = logging.getLogger("patchset")

_held: dict[tuple[Path, int], int] = {}
_guard = threading.Lock()


def lock_timeout(default: float = 600) -> float:
    """How long to wait for another process's lock: `$PATCHSET_LOCK_TIMEOUT` seconds, else `default`."""
    try:
        return float(os.environ.get("PATCHSET_LOCK_TIMEOUT", default))
    except ValueError:
        return default


def _owner_file(lock_file: Path) -> Path:
    return lock_file.with_name(lock_file.name + ".owner")


def holder(lock_file: Path) -> str:
    """Who holds (or last held) the lock, in words."""
    try:
        return _owner_file(lock_file).read_text(encoding="utf-8").strip() or "another patchset process"
    except OSError:
        return "another patchset process"


def _me(purpose: str) -> str:
    verb = purpose or " ".join(sys.argv[1:3]) or "patchset"
    return f"patchset {verb} (pid {os.getpid()}, since {time.strftime('%H:%M:%S')})"


@contextmanager
def project_lock(lock_file: Path, timeout: float | None = None, *, purpose: str = "") -> Iterator[None]:
    """Hold the project lock; wait up to `timeout` seconds (default: lock_timeout()) for another holder."""
    # re-entrant per thread: another thread of this process waits like another process would
    key = (lock_file.resolve() if lock_file.parent.exists() else lock_file.absolute(), threading.get_ident())
    with _guard:
        if _held.get(key):
            _held[key] += 1
            reentered = True
        else:
            reentered = False
    if reentered:
        try:
            yield
        finally:
            with _guard:
                _held[key] -= 1
        return
    lock_file.parent.mkdir(parents=True, exist_ok=True)
    wait = lock_timeout() if timeout is None else timeout
    lock = FileLock(str(lock_file))
    try:
        lock.acquire(timeout=0)
    except Timeout:
        who = holder(lock_file)
        if wait <= 0:
            raise LockError(f"{lock_file}: {who} is working on this project; try again when it is done") from None
        log.info("waiting up to %gs for %s to finish (lock %s)", wait, who, lock_file)
        try:
            lock.acquire(timeout=wait)
        except Timeout:
            raise LockError(f"{lock_file}: {holder(lock_file)} is still working on this project after {wait:g}s "
                            "of waiting; try again when it is done (or set PATCHSET_LOCK_TIMEOUT)") from None
    try:
        _owner_file(lock_file).write_text(_me(purpose) + "\n", encoding="utf-8")
        with _guard:
            _held[key] = 1
        yield
    finally:
        with _guard:
            _held.pop(key, None)
        lock.release()

"""Every lock patchset takes, one mechanism: an OS file lock with its holder written beside it.

The project lock: every verb that writes to the work repository or to `.patchset/` (apply,
refresh, rebase, bump, build, test, slice, verify, all, export, evidence, gc, and the series verbs
new, edit, drop, move, mark, undo) holds it for its whole run. A second process
waits for it (`$PATCHSET_LOCK_TIMEOUT` seconds, default 600; 0 refuses at once), saying once who
holds it, and then refuses with a message naming the holder. The cache lock (`<cache>/lock`,
shared by every project on the machine) keeps two fetches or pin imports from interleaving; a
wheel build holds one lock per backend. Each lock is re-entrant within one thread: `all` calls
build, which may call apply, each of which takes the project lock; another thread of the same
process waits like another process would.

The lock is the OS's (filelock: flock on POSIX), so a killed holder releases it at once; the
holder's description beside it (`<lock>.owner`) is only for the message.
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

from builder import proc
from builder.errors import LockError

log = logging.getLogger("patchset")

_held: dict[tuple[Path, int], int] = {}
_guard = threading.Lock()

CACHE_LOCK_TIMEOUT_S = 1800.0
"""How long a fetch waits for another process's fetch into the same cache."""


def lock_timeout() -> float:
    """How long to wait for another process's lock: `$PATCHSET_LOCK_TIMEOUT` seconds, else 600."""
    return proc.timeout("PATCHSET_LOCK_TIMEOUT")


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
def hold(lock_file: Path, timeout: float, *, purpose: str = "", what: str = "this project",
         hint: str = "") -> Iterator[None]:
    """Hold `lock_file`, waiting up to `timeout` seconds (0: refuse at once) for another holder;
    LockError names the holder. `what` is what the holder is working on, `hint` is added to the
    message after a wait that ran out."""
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
    lock = FileLock(str(lock_file))
    try:
        lock.acquire(timeout=0)
    except Timeout:
        who = holder(lock_file)
        if timeout <= 0:
            raise LockError(f"{lock_file}: {who} is working on {what}; try again when it is done") from None
        log.info("waiting up to %gs for %s to finish (lock %s)", timeout, who, lock_file)
        try:
            lock.acquire(timeout=timeout)
        except Timeout:
            raise LockError(f"{lock_file}: {holder(lock_file)} is still working on {what} after {timeout:g}s "
                            f"of waiting; try again when it is done{hint}") from None
    try:
        _owner_file(lock_file).write_text(_me(purpose) + "\n", encoding="utf-8")
        with _guard:
            _held[key] = 1
        yield
    finally:
        with _guard:
            _held.pop(key, None)
        lock.release()


@contextmanager
def borrowed(lock_file: Path, owner: int) -> Iterator[None]:
    """In a thread the thread `owner` started while it holds `lock_file`: this thread holds it too for the block,
    re-entrantly (`all` builds and tests the patched tree in one thread while verify runs in its own, under
    the one project lock). The owner joins this thread before it lets the lock go."""
    path = lock_file.resolve() if lock_file.parent.exists() else lock_file.absolute()
    key = (path, threading.get_ident())
    with _guard:
        if not _held.get((path, owner)):
            raise RuntimeError(f"{lock_file}: not held by the thread that lends it")
        _held[key] = _held.get(key, 0) + 1
    try:
        yield
    finally:
        with _guard:
            _held[key] -= 1
            if not _held[key]:
                del _held[key]


@contextmanager
def project_lock(lock_file: Path, timeout: float | None = None, *, purpose: str = "") -> Iterator[None]:
    """Hold the project lock; wait up to `timeout` seconds (default: lock_timeout()) for another holder."""
    wait = lock_timeout() if timeout is None else timeout
    with hold(lock_file, wait, purpose=purpose, hint=" (or set PATCHSET_LOCK_TIMEOUT)"):
        yield


def cache_lock_file(cache_dir: Path) -> Path:
    return cache_dir / "lock"


@contextmanager
def cache_lock(cache_dir: Path, timeout: float = CACHE_LOCK_TIMEOUT_S, *, purpose: str = "") -> Iterator[None]:
    """Hold the cache's lock: downloads and imports of two processes never interleave."""
    cache_dir.mkdir(parents=True, exist_ok=True)
    with hold(cache_lock_file(cache_dir), timeout, purpose=purpose, what="the cache"):
        yield

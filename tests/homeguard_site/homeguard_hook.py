"""The audit hook of the suite's home guard (tests/homeguard.py), without pytest: loaded by the
test process and, through sitecustomize beside it, by every Python process the suite starts."""

from __future__ import annotations

import os
import sys
import threading

# the folders under the home that patchset or git write to; any new entry at the home's top level counts too
WATCHED = (".gitconfig", ".config/git", ".config/patchset", ".cache/patchset", ".patchset",
           ".local/share/patchset", ".local/state/patchset")

# audit events that write, and which of their arguments are the paths written
_WRITES = {
    "open": (0,), "os.mkdir": (0,), "os.remove": (0,), "os.rmdir": (0,), "os.truncate": (0,), "os.utime": (0,),
    "os.chmod": (0,), "os.chown": (0,), "shutil.rmtree": (0,), "tempfile.mkstemp": (0,), "tempfile.mkdtemp": (0,),
    "os.rename": (0, 1), "os.link": (1,), "os.symlink": (1,), "shutil.copyfile": (1,), "shutil.copytree": (1,),
    "shutil.move": (0, 1),
}
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND

_state: dict[str, str] = {}
_busy = threading.local()


def watched(path: str, home: str) -> bool:
    """Whether a write to `path` is a write into `home` that the guard watches."""
    rel = os.path.relpath(os.path.abspath(path), home)
    if rel == "." or rel.startswith(".." + os.sep) or rel == "..":
        return False
    rel = rel.replace(os.sep, "/")
    return "/" not in rel or any(rel == w or rel.startswith(w + "/") for w in WATCHED)


def _is_write(event: str, args: tuple[object, ...]) -> bool:
    if event != "open":
        return True
    mode, flags = (*args, None, None)[1:3]
    if isinstance(mode, str):
        return any(c in mode for c in "wax+")
    return isinstance(flags, int) and bool(flags & _WRITE_FLAGS)


def _hook(event: str, args: tuple[object, ...]) -> None:
    which = _WRITES.get(event)
    if which is None or getattr(_busy, "on", False) or not _is_write(event, args):
        return
    home = _state["home"]
    for i in which:
        p = args[i] if i < len(args) else None
        if isinstance(p, bytes):
            p = os.fsdecode(p)
        elif isinstance(p, os.PathLike):
            p = os.fspath(p)
        if isinstance(p, str) and watched(p, home):
            _busy.on = True
            try:
                with open(_state["log"], "a", encoding="utf-8") as fh:
                    fh.write(f"{event} {os.path.abspath(p)} (pid {os.getpid()}, {' '.join(sys.argv[:2])})\n")
            finally:
                _busy.on = False


def install(home: str, log: str) -> None:
    """Record this process's writes into `home` in the file `log` (once per process)."""
    if _state:
        return
    _state.update(home=os.path.abspath(home), log=log)
    sys.addaudithook(_hook)

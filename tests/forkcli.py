"""`patchset` for the tests, each call a process forked from one that has imported it already.

A `patchset` process spends about a fifth of a second of CPU importing before it does anything, and the
fast tests start some three hundred. The server (`python tests/forkcli.py SOCKET`, one per test process,
started on its first call) imports builder.cli and every command's module once; for each call it forks a
process that takes the caller's arguments, environment, working folder and standard streams (passed as file
descriptors), runs `builder.cli.main` and exits with its code, at-exit handlers run as at a normal exit. So
each call is still a process of its own with its own pid, environment, exit status and death by a signal
(the fault tests' kills), as `patchset` is, without the imports.

Only what an import reads could differ from a fresh process: `run` starts a real process when the call's
environment differs from the server's in a variable read at import (IMPORT_TIME). tests/test_cli.py keeps
starting the installed command itself. PATCHSET_TEST_FORKCLI=0 starts every call afresh
(benchmarks/cli_calls.py runs the tests both ways side by side).
"""

from __future__ import annotations

import atexit
import contextlib
import io
import json
import os
import selectors
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from pathlib import Path

IMPORT_TIME = ("NO_COLOR", "FORCE_COLOR", "COLUMNS", "LINES", "TERM", "COLORTERM", "TTY_COMPATIBLE",
               "TTY_INTERACTIVE", "JUPYTER_COLUMNS", "JUPYTER_LINES", "PATCHSET_TEST_REAL_HOME",
               "PATCHSET_TEST_HOME_WRITES")
"""Read when a module is imported (rich's consoles in builder/console.py, the home guard's sitecustomize),
besides every PYTHON* variable: a call whose value differs runs in a fresh process."""

_HEADER = struct.Struct("!I")


def _send(conn: socket.socket, doc: object, fds: list[int] | None = None) -> None:
    data = json.dumps(doc).encode()
    msg = _HEADER.pack(len(data)) + data
    if fds:
        socket.send_fds(conn, [msg], fds)
    else:
        conn.sendall(msg)


def _recv(conn: socket.socket, nfds: int = 0) -> tuple[object, list[int]]:
    """One message and the file descriptors that came with it; (None, []) at the end of the stream."""
    buf, fds = b"", []
    if nfds:
        buf, fds, _flags, _addr = socket.recv_fds(conn, 1 << 16, nfds)
    while len(buf) < _HEADER.size or len(buf) < _HEADER.size + _HEADER.unpack_from(buf)[0]:
        chunk = conn.recv(1 << 16)
        if not chunk:
            return None, fds
        buf += chunk
    return json.loads(buf[_HEADER.size:_HEADER.size + _HEADER.unpack_from(buf)[0]]), fds


# -- the server ------------------------------------------------------------------------------------------
def _child(req: dict, fds: list[int]) -> None:
    """In the forked process: become the call's `patchset` and exit with its status. Its signal dispositions are
    the server's: what a process the caller starts inherits (SIGINT ignored under a shell's background job)."""
    code = 1
    try:
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
            os.close(fd)
        os.chdir(req["cwd"])
        os.environ.clear()
        os.environ.update(req["env"])
        sys.argv = ["patchset", *req["argv"]]
        from builder.cli import main  # noqa: PLC0415 (imported already: a name, not a load)

        code = main(req["argv"])
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        if e.code is not None and not isinstance(e.code, int):
            print(e.code, file=sys.stderr)
    except BaseException:  # as an uncaught exception ends a fresh process: its traceback, exit 1
        traceback.print_exc()
    finally:
        threading._shutdown()  # type: ignore[attr-defined]  # as the interpreter does at exit, then atexit
        atexit._run_exitfuncs()
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(OSError, ValueError):
                stream.flush()
        os._exit(code & 0xFF)


def _serve_one(listener: socket.socket, conn: socket.socket) -> None:
    """In a process forked for one call: fork the call's process, tell its pid, wait, tell its status and
    CPU seconds (its children's included: they are not the caller's children)."""
    listener.close()
    req, fds = _recv(conn, 3)
    if req is None:
        os._exit(0)
    pid = os.fork()
    if pid == 0:
        conn.close()
        _child(req, fds)
    for fd in fds:
        os.close(fd)
    with contextlib.suppress(OSError):  # a caller past its time-out has gone
        _send(conn, {"pid": pid})
    _pid, status, usage = os.wait4(pid, 0)
    with contextlib.suppress(OSError):
        _send(conn, {"returncode": os.waitstatus_to_exitcode(status), "cpu_s": usage.ru_utime + usage.ru_stime})
    os._exit(0)


def _reap(block: bool) -> None:
    """Wait for the per-call processes that ended (all of them with `block`): their CPU time then counts
    in the server's, and the server's in the test process's when it ends."""
    while True:
        try:
            pid, _status = os.waitpid(-1, 0 if block else os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def serve(path: str, parent: int) -> None:
    import builder.cli  # noqa: PLC0415, F401
    from builder.commands import NAMES, load  # noqa: PLC0415

    for name in NAMES:
        load(name)
    stop = []
    signal.signal(signal.SIGTERM, lambda _sig, _frame: stop.append(True))
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(64)
    sys.stdout.write("ready\n")
    sys.stdout.flush()
    sel = selectors.DefaultSelector()
    sel.register(listener, selectors.EVENT_READ)
    while not stop and os.getppid() == parent:
        _reap(block=False)
        if not sel.select(timeout=1.0):
            continue
        conn, _addr = listener.accept()
        if os.fork() == 0:
            sel.close()
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            _serve_one(listener, conn)
        conn.close()
    _reap(block=True)


# -- the client ------------------------------------------------------------------------------------------
class _Server:
    def __init__(self) -> None:
        self.dir = tempfile.mkdtemp(prefix="pscli-")
        self.path = os.path.join(self.dir, "s")
        self.env = dict(os.environ)
        self.proc = subprocess.Popen([sys.executable, __file__, self.path, str(os.getpid())],
                                     stdout=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True)
        assert self.proc.stdout is not None
        if self.proc.stdout.readline() != "ready\n":
            raise RuntimeError(f"tests/forkcli.py: the server did not start (exit {self.proc.wait()})")
        atexit.register(self.close)

    def close(self) -> None:
        self.proc.terminate()  # it waits for the calls still running, then ends; a call left hanging is not waited for
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        for name in os.listdir(self.dir):
            os.unlink(os.path.join(self.dir, name))
        os.rmdir(self.dir)

    def serves(self, env: dict[str, str]) -> bool:
        """Whether a process forked from the server is what a fresh one would be in `env`."""
        names = {*IMPORT_TIME, *(n for n in (*env, *self.env) if n.startswith("PYTHON"))}
        return self.proc.poll() is None and all(env.get(n) == self.env.get(n) for n in names)


class _Calls:
    """This test process's server, and the CPU seconds of the calls forked for it (not in its RUSAGE_CHILDREN)."""

    def __init__(self) -> None:
        self.server: _Server | None = None
        self.cpu_s = 0.0
        self.lock = threading.Lock()

    def server_for(self, env: dict[str, str]) -> _Server | None:
        if os.environ.get("PATCHSET_TEST_FORKCLI") == "0":
            return None
        with self.lock:
            if self.server is None or self.server.proc.poll() is not None:
                self.server = _Server()
            return self.server if self.server.serves(env) else None


CALLS = _Calls()


def run(argv: list[str], env: dict[str, str], timeout: float, fallback: list[str], cwd: Path | None = None,
        ) -> subprocess.CompletedProcess[str]:
    """`patchset ARGV` in `env` and `cwd` (default: this process's), its output captured as
    subprocess.run(capture_output=True, text=True) would; TimeoutExpired (the process killed) past `timeout`.
    `fallback` is the command line of a fresh process, for an environment the server cannot serve."""
    server = CALLS.server_for(env)
    if server is None:
        return subprocess.run([*fallback, *argv], capture_output=True, text=True, env=env, check=False,
                              timeout=timeout, cwd=cwd)
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        conn.connect(server.path)
        _send(conn, {"argv": argv, "env": env, "cwd": str(cwd or Path.cwd())}, [0, out_w, err_w])
        os.close(out_w)
        os.close(err_w)
        out_w = err_w = -1
        started, _ = _recv(conn)
        assert isinstance(started, dict), "tests/forkcli.py: the server closed the call"
        pid = started["pid"]
        outputs = _read_all([out_r, err_r], conn, time.monotonic() + timeout)
        if outputs is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
            raise subprocess.TimeoutExpired([*fallback, *argv], timeout)
        (out, err), (status, cpu) = outputs
        CALLS.cpu_s += cpu
        return subprocess.CompletedProcess([*fallback, *argv], status, out, err)
    finally:
        conn.close()
        for fd in (out_r, err_r, out_w, err_w):
            if fd >= 0:
                os.close(fd)


def _read_all(fds: list[int], conn: socket.socket, deadline: float,
              ) -> tuple[tuple[str, str], tuple[int, float]] | None:
    """Both streams to their end, and the exit status and CPU seconds from `conn`; None past `deadline`."""
    sel = selectors.DefaultSelector()
    chunks: dict[int, list[bytes]] = {fd: [] for fd in fds}
    for fd in fds:
        sel.register(fd, selectors.EVENT_READ)
    sel.register(conn, selectors.EVENT_READ)
    status: tuple[int, float] | None = None
    while len(sel.get_map()) > 0:
        left = deadline - time.monotonic()
        if left <= 0:
            return None
        for key, _events in sel.select(timeout=left):
            if key.fileobj is conn:
                sel.unregister(conn)
                doc, _ = _recv(conn)
                assert isinstance(doc, dict), "tests/forkcli.py: the server closed the call"
                status = doc["returncode"], doc["cpu_s"]
                continue
            fd = key.fd
            data = os.read(fd, 1 << 16)
            if data:
                chunks[fd].append(data)
            else:
                sel.unregister(fd)
    assert status is not None

    def text(fd: int) -> str:  # as subprocess.run(text=True) reads it: the locale's encoding, universal newlines
        return io.TextIOWrapper(io.BytesIO(b"".join(chunks[fd]))).read()

    return (text(fds[0]), text(fds[1])), status


if __name__ == "__main__":
    serve(sys.argv[1], int(sys.argv[2]))

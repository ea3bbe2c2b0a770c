"""The one subprocess runner: captured for short queries (git included), streamed for long builds and tests.

Commands are argument lists, never shell strings. Every run is logged as `RUN: ...` at debug
level with its time and exit code. Every run can carry a time limit that holds whatever the
program does with its output: the program is started in a process group of its own and the
whole group is killed at the limit (a test program's children included), and the reading of
its output never waits past the limit.

Fault injection (for the test suite, off unless set): the points are the subprocesses this
process starts and the files it writes atomically (`fsutil.atomic_write`: evidence, reports, the
pin, state), counted in order. `PATCHSET_FAULT_KILL_AT=N` kills this process with SIGKILL just
before its Nth point; `PATCHSET_FAULT_PAUSE_AT=N` with `PATCHSET_FAULT_PAUSE_FILE=F` creates F there
and waits until F is removed; `PATCHSET_FAULT_TRACE=F` appends one line per point to F, `PID N
LABEL` (how many points there are): a subprocess's first words, then git's subcommand in brackets;
a write is `write PATH [write]`.
"""

from __future__ import annotations

import logging
import os
import queue
import signal
import subprocess
import threading
import time
import weakref
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from builder.errors import InputError, ProcessError, ProcessTimeout

log = logging.getLogger("patchset")

DEFAULT_TIMEOUT_S = 3600.0
"""The limit of a captured command that names none: nothing patchset runs may hang forever."""



def env_seconds(name: str, default: float) -> float:
    """A time limit in seconds from the environment variable `name`, else `default`.

    A value that is not a number of seconds (a word, a negative number) is refused, naming the
    variable and the value: a typo must not silently become the default limit."""
    raw = os.environ.get(name)
    if raw is None:
        return default
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not 0 <= value < float("inf"):  # NaN too
        raise InputError(f"{name}={raw!r}: not a number of seconds (give a number >= 0, e.g. {name}={default:g})")
    return value


BUILD_TIMEOUT_S = 7200.0
"""The default limit of each configure and build step (cmake, the wheel's build): a CUDA build of the
whole tree on a small machine takes tens of minutes, a hung compiler or linker forever."""


TIMEOUTS: dict[str, tuple[float, str]] = {
    "PATCHSET_GIT_TIMEOUT": (1800.0, "each git command"),
    "PATCHSET_FETCH_TIMEOUT": (3600.0, "a fetch from one git source (past it the next source is tried)"),
    "PATCHSET_LOCK_TIMEOUT": (600.0, "the wait for the project lock another command holds (0: refuse at once; "
                              "then exit 7)"),
    "PATCHSET_BUILD_TIMEOUT": (BUILD_TIMEOUT_S, "each configure and build step (cmake, ninja, the wheel's build)"),
}
"""The environment variables that set a time limit in seconds: their defaults and what they limit
(the code reads the defaults from here; `patchset --help` lists them)."""

TIMEOUT_VARIABLES = tuple(TIMEOUTS)


def timeout(name: str) -> float:
    """The time limit the variable `name` (one of TIMEOUTS) sets, else its default."""
    return env_seconds(name, TIMEOUTS[name][0])


BUILD_TIMEOUT_HELP = (f"Each configure and build step runs under $PATCHSET_BUILD_TIMEOUT seconds (default "
                      f"{BUILD_TIMEOUT_S:g}); past it the step is killed and the build has failed.")
"""The limit as --help says it (the commands that build)."""


def build_timeout() -> float:
    """The time limit of each configure and build step: `$PATCHSET_BUILD_TIMEOUT` seconds, else BUILD_TIMEOUT_S."""
    return timeout("PATCHSET_BUILD_TIMEOUT")


def check_timeout_variables() -> None:
    """Refuse a malformed time limit in the environment before anything runs (InputError)."""
    for name in TIMEOUT_VARIABLES:
        env_seconds(name, 0)


@dataclass(frozen=True)
class Completed:
    """What a finished process left behind."""

    cmd: tuple[str, ...]
    returncode: int
    stdout: str
    stderr: str
    duration_s: float
    timed_out: bool = False
    """True when the process was killed at its time limit (streamed runs; captured runs raise)."""


def clean_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment for child processes, without inherited GIT_* variables.

    A GIT_DIR or GIT_INDEX_FILE inherited from a git hook would redirect every git command we
    run into the caller's repository (pre-commit's `no_git_env` exists for the same reason).
    """
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_") or k in _GIT_KEEP}
    if extra:
        env.update(extra)
    return env


# identity and config isolation are the user's choice and must survive
_GIT_KEEP = {
    "GIT_AUTHOR_NAME", "GIT_AUTHOR_EMAIL", "GIT_COMMITTER_NAME", "GIT_COMMITTER_EMAIL",
    "GIT_CONFIG_NOSYSTEM", "GIT_CONFIG_GLOBAL", "GIT_SSH_COMMAND", "GIT_TERMINAL_PROMPT",
}

_spawned = [0]
_spawn_lock = threading.Lock()
_live: weakref.WeakSet[subprocess.Popen] = weakref.WeakSet()
_cancelled = threading.Event()


class Cancelled(BaseException):
    """Raised in a worker thread at its next subprocess or file write once `cancel()` was called (the
    main thread was interrupted): a lane stops there, and writes nothing it found with killed programs."""


def cancel() -> None:
    """Stop every worker thread's work: their next subprocess or write raises Cancelled, and every
    running child's process group is killed (a child in a session of its own gets no Ctrl-C)."""
    _cancelled.set()
    for p in list(_live):
        if p.poll() is None:
            _kill_group(p)


def raise_if_cancelled(label: str) -> None:
    """In a worker thread once `cancel()` was called: raise Cancelled (a wait of its own ends there)."""
    if _cancelled.is_set() and threading.current_thread() is not threading.main_thread():
        raise Cancelled(label)


def uncancel() -> None:
    """After the workers have stopped: subprocesses run again (a library caller that goes on)."""
    _cancelled.clear()


def _subcommand(argv: tuple[str, ...]) -> str:
    """The first word after the program's options (git's subcommand), for the trace."""
    rest = iter(argv[1:])
    for a in rest:
        if a in ("-c", "-C"):
            next(rest, None)
        elif not a.startswith("-"):
            return a
    return ""


def fault_point(label: str) -> None:
    """Count one fault-injection point and apply the hooks (see the module docstring).

    The points are the subprocesses this process starts (`_popen`) and the files it writes through
    `fsutil.atomic_write`, just before each; `label` is what the trace says of it.
    """
    if _cancelled.is_set() and threading.current_thread() is not threading.main_thread():
        raise Cancelled(label)
    with _spawn_lock:
        _spawned[0] += 1
        n = _spawned[0]
    if trace := os.environ.get("PATCHSET_FAULT_TRACE"):
        with open(trace, "a", encoding="utf-8") as fh:
            fh.write(f"{os.getpid()} {n} {label}\n")
    if os.environ.get("PATCHSET_FAULT_KILL_AT") == str(n):
        os.kill(os.getpid(), signal.SIGKILL)
    if os.environ.get("PATCHSET_FAULT_PAUSE_AT") == str(n):
        flag = Path(os.environ["PATCHSET_FAULT_PAUSE_FILE"])
        flag.write_text(f"{os.getpid()}\n")
        give_up = time.monotonic() + 300
        while flag.exists() and time.monotonic() < give_up:
            time.sleep(0.02)


def _popen(argv: tuple[str, ...], cwd: Path | None, env: Mapping[str, str] | None, **kw: object) -> subprocess.Popen:
    fault_point(f"{' '.join(argv[:6])} [{_subcommand(argv)}]")
    try:
        # a session of its own: at the limit the whole group goes, children of the program too
        p = subprocess.Popen(argv, cwd=cwd, env=clean_env(env), text=True, errors="replace",
                             start_new_session=os.name == "posix", **kw)  # type: ignore[call-overload]
        _live.add(p)
        return p
    except FileNotFoundError as e:
        raise ProcessError(argv, 127, "", f"{argv[0]}: not found") from e
    except PermissionError as e:
        raise ProcessError(argv, 126, "", f"{argv[0]}: not executable") from e


def _kill_group(p: subprocess.Popen) -> None:
    try:
        if os.name == "posix":
            os.killpg(p.pid, signal.SIGKILL)
        else:
            p.kill()
    except (ProcessLookupError, PermissionError):
        pass


def _logged(argv: tuple[str, ...], start: float, rc: int | str) -> None:
    log.debug("RUN: %s (%.2fs, exit %s)", " ".join(argv), time.monotonic() - start, rc)


def run(
    cmd: Sequence[str | os.PathLike[str]],
    *,
    cwd: Path | None = None,
    env: Mapping[str, str] | None = None,
    check: bool = True,
    timeout: float | None = None,
    input_text: str | None = None,
) -> Completed:
    """Run a short command with its output captured.

    Raises ProcessError when `check` and it fails, and ProcessTimeout (always) when it runs past
    `timeout` seconds (default DEFAULT_TIMEOUT_S).
    """
    argv = tuple(str(c) for c in cmd)
    limit = DEFAULT_TIMEOUT_S if timeout is None else timeout
    start = time.monotonic()
    log.debug("RUN: %s", " ".join(argv))
    p = _popen(argv, cwd, env, stdin=subprocess.PIPE if input_text is not None else subprocess.DEVNULL,
               stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        out, err = p.communicate(input_text, timeout=limit)
    except subprocess.TimeoutExpired:
        _kill_group(p)
        try:
            out, err = p.communicate(timeout=5)
        except subprocess.TimeoutExpired:  # a grandchild in another session still holds the pipes
            out, err = "", ""
        _logged(argv, start, "timeout")
        raise ProcessTimeout(argv, limit, out or "", err or "") from None
    except BaseException:
        _kill_group(p)
        p.wait()
        raise
    _logged(argv, start, p.returncode)
    done = Completed(argv, p.returncode, out, err, time.monotonic() - start)
    if check and p.returncode != 0:
        raise ProcessError(argv, p.returncode, out, err)
    return done


def stream(
    cmd: Sequence[str | os.PathLike[str]],
    *,
    log_file: Path,
    cwd: Path | None = None,
    env: Mapping[str, str] | None = None,
    on_line: Callable[[str], None] | None = None,
    timeout: float | None = None,
) -> Completed:
    """Run a long command, appending its merged output to `log_file` line by line.

    Never raises for a non-zero exit: builds and tests are judged by their caller, which has the
    log. Returns the whole output as `stdout` (stderr is merged into it). At `timeout` seconds
    the process group is killed, whether or not it still prints, and the result says
    `timed_out`; what it printed until then is kept.
    """
    argv = tuple(str(c) for c in cmd)
    log.debug("RUN: %s", " ".join(argv))
    log_file.parent.mkdir(parents=True, exist_ok=True)
    start = time.monotonic()
    deadline = None if timeout is None else start + timeout
    chunks: list[str] = []
    p = _popen(argv, cwd, env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, bufsize=1)
    lines: queue.Queue[str | None] = queue.Queue()

    def reader() -> None:
        assert p.stdout is not None
        try:
            for line in p.stdout:
                lines.put(line)
        except (OSError, ValueError):
            pass
        lines.put(None)

    # a thread reads, this one keeps the time: a program that prints nothing, or never closes its
    # output, cannot hold us past the limit
    t = threading.Thread(target=reader, daemon=True)
    t.start()
    timed_out = False
    with log_file.open("a", encoding="utf-8") as fh:
        fh.write(f"$ {' '.join(argv)}\n")

        def take(line: str) -> None:
            fh.write(line)
            chunks.append(line)
            if on_line is not None:
                on_line(line.rstrip("\n"))

        try:
            while True:
                wait = None if deadline is None else max(0.0, deadline - time.monotonic())
                try:
                    item = lines.get(timeout=wait)
                except queue.Empty:
                    timed_out = True
                    break
                if item is None:
                    break
                take(item)
            if not timed_out:
                try:
                    p.wait(timeout=None if deadline is None else max(0.0, deadline - time.monotonic()))
                except subprocess.TimeoutExpired:
                    timed_out = True
            if timed_out:
                _kill_group(p)
                p.wait()
                t.join(timeout=5)
                while not lines.empty():
                    item = lines.get_nowait()
                    if item is not None:
                        take(item)
                fh.write(f"# killed after {timeout:g}s (time limit)\n")
        except BaseException:
            _kill_group(p)
            p.wait()
            raise
        rc = p.returncode
        fh.write(f"# exit {rc}\n")
    if p.stdout is not None:
        p.stdout.close()
    _logged(argv, start, "timeout" if timed_out else rc)
    return Completed(argv, rc, "".join(chunks), "", time.monotonic() - start, timed_out)


def interactive(cmd: Sequence[str | os.PathLike[str]]) -> int:
    """Run a program a person works in (an editor) on this terminal: stdin, stdout and stderr are
    ours, no time limit. Its exit code."""
    argv = tuple(str(c) for c in cmd)
    fault_point(f"{' '.join(argv[:6])} [{_subcommand(argv)}]")
    start = time.monotonic()
    log.debug("RUN: %s", " ".join(argv))
    rc = subprocess.call(argv)
    _logged(argv, start, rc)
    return rc

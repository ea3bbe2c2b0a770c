"""The one subprocess runner: captured for short queries, streamed for long builds and tests.

Commands are argument lists, never shell strings. Every run is logged as `RUN: ...` at debug level.
"""

from __future__ import annotations

import logging
import os
import subprocess
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from builder.errors import ProcessError

log = logging.getLogger("patchset")


@dataclass(frozen=True)
class Completed:
    """What a finished process left behind."""

    cmd: tuple[str, ...]
    returncode: int
    stdout: str
    stderr: str
    duration_s: float


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


def run(
    cmd: Sequence[str | os.PathLike[str]],
    *,
    cwd: Path | None = None,
    env: Mapping[str, str] | None = None,
    check: bool = True,
    timeout: float | None = None,
    input_text: str | None = None,
) -> Completed:
    """Run a short command with its output captured. Raises ProcessError when `check` and it fails."""
    argv = tuple(str(c) for c in cmd)
    log.debug("RUN: %s", " ".join(argv))
    start = time.monotonic()
    try:
        p = subprocess.run(
            argv, cwd=cwd, env=clean_env(env), capture_output=True, text=True,
            errors="replace", timeout=timeout, input=input_text, check=False,
        )
    except FileNotFoundError as e:
        raise ProcessError(argv, 127, "", f"{argv[0]}: not found") from e
    done = Completed(argv, p.returncode, p.stdout, p.stderr, time.monotonic() - start)
    if check and p.returncode != 0:
        raise ProcessError(argv, p.returncode, p.stdout, p.stderr)
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
    log. Returns the whole output as `stdout` (stderr is merged into it).
    """
    argv = tuple(str(c) for c in cmd)
    log.debug("RUN: %s", " ".join(argv))
    log_file.parent.mkdir(parents=True, exist_ok=True)
    start = time.monotonic()
    chunks: list[str] = []
    try:
        proc = subprocess.Popen(
            argv, cwd=cwd, env=clean_env(env), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            text=True, errors="replace", bufsize=1,
        )
    except FileNotFoundError as e:
        raise ProcessError(argv, 127, "", f"{argv[0]}: not found") from e
    # the timeout must hold while the output is read: a program that hangs keeps its stdout open,
    # so a wait after the read loop never came (seen: a test that deadlocked in a futex)
    watchdog = threading.Timer(timeout, proc.kill) if timeout is not None else None
    with proc, log_file.open("a", encoding="utf-8") as fh:
        fh.write(f"$ {' '.join(argv)}\n")
        assert proc.stdout is not None
        if watchdog is not None:
            watchdog.start()
        try:
            for line in proc.stdout:
                fh.write(line)
                chunks.append(line)
                if on_line is not None:
                    on_line(line.rstrip("\n"))
            rc = proc.wait()
        finally:
            if watchdog is not None:
                watchdog.cancel()
        fh.write(f"# exit {rc}\n")
    return Completed(argv, rc, "".join(chunks), "", time.monotonic() - start)

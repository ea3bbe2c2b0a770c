"""The one subprocess runner: time limits that hold whatever the program does, for git too."""

from __future__ import annotations

import os
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers import Proj, Upstream, git, pin_toml, run_patchset

from builder import proc
from builder.errors import ProcessError, ProcessTimeout
from builder.gitrepo import GitRepo
from builder.upstream import fetch as upstream
from builder.upstream.pin import load_pin


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie is dead for our purpose
    stat = Path(f"/proc/{pid}/stat")
    return not (stat.exists() and stat.read_text().split(") ", 1)[1].startswith("Z"))


# what a program that hangs sleeps; the limits under test are 1 s, and a test allows half of this:
# far from both, so that neither a busy machine nor a limit that fails can pass for the other
HANG_S = 120


def test_stream_stops_a_silent_program_at_its_limit(tmp_path: Path) -> None:
    # it prints, then sleeps without closing its output: the limit must hold anyway. The program
    # sleeps 120 s and the limit is 1 s: a limit that did not hold takes 120 s, a busy machine not 60
    start = time.monotonic()
    r = proc.stream(["sh", "-c", f"echo started; sleep {HANG_S}; echo late"], log_file=tmp_path / "log", timeout=1)
    took = time.monotonic() - start
    assert took < HANG_S / 2, f"took {took:.1f}s: the limit did not hold"
    assert r.timed_out
    assert r.returncode != 0
    assert r.stdout == "started\n"
    log = (tmp_path / "log").read_text()
    assert "\nstarted\n" in log and "time limit" in log and "\nlate" not in log


def test_stream_kills_the_whole_process_group(tmp_path: Path) -> None:
    pidfile = tmp_path / "pid"
    r = proc.stream(["sh", "-c", f"sleep {HANG_S} & echo $! > {pidfile}; wait"], log_file=tmp_path / "log", timeout=1)
    assert r.timed_out
    child = int(pidfile.read_text())
    deadline = time.monotonic() + 25
    while _alive(child) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(child), "the program's child outlived the limit"


def test_stream_without_limit_reads_to_the_end(tmp_path: Path) -> None:
    lines: list[str] = []
    r = proc.stream(["sh", "-c", "echo a; echo b >&2; exit 3"], log_file=tmp_path / "log", on_line=lines.append)
    assert (r.returncode, r.timed_out) == (3, False)
    assert sorted(lines) == ["a", "b"]


def test_run_limit_raises_a_one_line_timeout() -> None:
    start = time.monotonic()
    with pytest.raises(ProcessTimeout) as ei:
        proc.run(["sh", "-c", f"echo working; sleep {HANG_S}"], timeout=1)
    assert time.monotonic() - start < HANG_S / 2
    assert "timed out after 1s" in str(ei.value)
    assert len(str(ei.value).splitlines()) == 1
    assert isinstance(ei.value, ProcessError) and ei.value.exit_code == 1


def test_git_goes_through_the_runner_and_its_limit(tmp_path: Path) -> None:
    git(tmp_path, "init", "--quiet", str(tmp_path / "r"))
    repo = GitRepo(tmp_path / "r")
    # a git that hangs (an alias that sleeps) is killed at the limit, as one error
    start = time.monotonic()
    with pytest.raises(ProcessTimeout) as ei:
        repo.run("-c", f"alias.hang=!sleep {HANG_S}", "hang", timeout=1)
    assert time.monotonic() - start < HANG_S / 2
    assert "git" in str(ei.value)
    done = repo.run("rev-parse", "--git-dir")
    assert isinstance(done, proc.Completed) and done.stdout.strip() == ".git"


@pytest.fixture
def silent_server() -> Iterator[str]:
    """A git:// address whose server accepts connections and never answers."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(8)
    held: list[socket.socket] = []
    stop = threading.Event()

    def serve() -> None:
        sock.settimeout(0.2)
        while not stop.is_set():
            try:
                conn, _ = sock.accept()
                held.append(conn)
            except OSError:
                continue

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    yield f"git://127.0.0.1:{sock.getsockname()[1]}/llama.cpp.git"
    stop.set()
    t.join(timeout=2)
    for c in held:
        c.close()
    sock.close()


def test_a_git_source_that_hangs_falls_through_to_the_next(tmp_path: Path, up: Upstream, cache_dir: Path,
                                                           silent_server: str,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATCHSET_FETCH_TIMEOUT", "2")
    f = tmp_path / "pin.toml"
    f.write_text(pin_toml(up.commit, up.tree, [{"kind": "git", "url": silent_server}, {"kind": "git", "url": up.url}]))
    start = time.monotonic()
    got = upstream.fetch(cache_dir, load_pin(f))
    assert time.monotonic() - start < 90  # the hanging source alone would never end
    assert got.source == f"git {up.url}"
    assert got.tree == up.tree


def test_a_git_timeout_is_a_one_line_error_with_an_exit_code(tmp_path: Path, up: Upstream, silent_server: str) -> None:
    root = tmp_path / "p"
    (root / "upstream").mkdir(parents=True)
    (root / "upstream" / "llama.cpp.toml").write_text(
        pin_toml(up.commit, up.tree, [{"kind": "git", "url": silent_server}]))
    r = run_patchset("--project", str(root), "fetch", env={"PATCHSET_FETCH_TIMEOUT": "2"}, timeout=60)
    assert r.returncode == 1, r.stderr
    assert "Traceback" not in r.stderr + r.stdout
    assert "timed out after 2s" in r.stderr
    errors = [line for line in r.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1


def test_any_git_command_past_its_limit_is_a_one_line_error(proj: Proj) -> None:
    r = run_patchset("--project", str(proj.root), "apply", env={"PATCHSET_GIT_TIMEOUT": "0.001"}, timeout=60)
    assert r.returncode == 1, r.stdout + r.stderr
    assert "Traceback" not in r.stderr + r.stdout
    errors = [line for line in r.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "timed out after 0.001s" in errors[0] and "git" in errors[0]

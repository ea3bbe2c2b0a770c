"""Two verbs at once on one project: the second waits or refuses, naming the first; nothing is corrupted."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from helpers import (
    VERIFY_PATCHES,
    Proj,
    Upstream,
    fsck_clean,
    git,
    make_project,
    patchset_argv,
    run_patchset,
    start_patchset,
)
from test_bump import make_mini

from builder.errors import EXIT_LOCKED, LockError
from builder.locking import borrowed, project_lock
from builder.series.apply import apply
from builder.series.workrepo import WorkRepo


@pytest.fixture
def proj(tmp_path: Path, up: Upstream, cache_dir: Path) -> Proj:
    """A project whose series verify runs through (to build failures, in seconds)."""
    return make_project(tmp_path, up, cache_dir, patches=VERIFY_PATCHES)


def _held_by(proj: Proj, args: tuple[str, ...], flag: Path) -> subprocess.Popen[str]:
    """`patchset ARGS` started and paused at its first subprocess (it holds the lock by then)."""
    p = start_patchset("--project", str(proj.root), *args,
                       env={"PATCHSET_FAULT_PAUSE_AT": "1", "PATCHSET_FAULT_PAUSE_FILE": str(flag)})
    deadline = time.monotonic() + 60
    while not flag.exists():
        assert p.poll() is None, p.communicate()
        assert time.monotonic() < deadline, "the first process never got going"
        time.sleep(0.05)
    return p


def _release(p: subprocess.Popen[str], flag: Path) -> tuple[int, str]:
    flag.unlink()
    out, err = p.communicate(timeout=120)
    return p.returncode, out + err


VERIFY = ("verify", "--backend", "cpu", "-j", "1")


@pytest.mark.parametrize(("first", "second"), [
    (("apply", "--force"), VERIFY),
    (VERIFY, VERIFY),
    (("refresh",), ("apply",)),
    (("apply", "--force"), ("build",)),
    (("apply", "--force"), ("slice",)),
])
def test_second_verb_refuses_naming_the_first(proj: Proj, tmp_path: Path, first: tuple[str, ...],
                                             second: tuple[str, ...]) -> None:
    apply(proj.project)
    patched = proj.wgit("rev-parse", "patched")
    flag = tmp_path / "paused"
    holder = _held_by(proj, first, flag)
    try:
        r = run_patchset("--project", str(proj.root), *second, env={"PATCHSET_LOCK_TIMEOUT": "0.5"})
    finally:
        rc, out = _release(holder, flag)
    assert r.returncode == EXIT_LOCKED == 7, r.stdout + r.stderr
    assert f"patchset {first[0]} (pid {holder.pid}" in r.stderr
    assert "Traceback" not in r.stderr
    assert len([line for line in r.stderr.splitlines() if line.startswith("error:")]) == 1
    assert rc in (0, 1), out  # verify of this tiny tree fails its builds: exit 1, not a crash
    fsck_clean(proj.work)
    assert WorkRepo(proj.work).load_state().op is None
    assert proj.wgit("rev-parse", "patched") == patched
    assert proj.wgit("status", "--porcelain") == ""


def test_second_verb_waits_for_the_first(proj: Proj, tmp_path: Path) -> None:
    apply(proj.project)
    flag = tmp_path / "paused"
    holder = _held_by(proj, ("apply", "--force"), flag)
    err = tmp_path / "waiter.err"
    with err.open("w") as fh:
        waiter = subprocess.Popen([*patchset_argv(), "--project", str(proj.root), "refresh"], stdout=fh, stderr=fh,
                                  env={**os.environ, "PATCHSET_LOCK_TIMEOUT": "120"}, text=True)
    deadline = time.monotonic() + 60
    while "waiting up to 120s for patchset apply" not in err.read_text():
        assert waiter.poll() is None, err.read_text()
        assert time.monotonic() < deadline, "refresh never said it waits"
        time.sleep(0.05)
    rc, out = _release(holder, flag)
    assert rc == 0, out
    assert waiter.wait(timeout=120) == 0, err.read_text()
    fsck_clean(proj.work)
    assert git(proj.work, "status", "--porcelain") == ""


# a second process: takes the project lock (waiting up to argv[2] seconds), says so, and holds it
# until a line arrives on its stdin; or says it was refused, with the error's words
_TAKE = """
import sys
from pathlib import Path
from builder.errors import LockError
from builder.errors import LockError
from builder.locking import project_lock
try:
    with project_lock(Path(sys.argv[1]), timeout=float(sys.argv[2]), purpose="child"):
        print("took", flush=True)
        sys.stdin.readline()
except LockError as e:
    print("refused:", e, flush=True)
"""


def _other_process(lock: Path, wait_s: float) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-c", _TAKE, str(lock), str(wait_s)], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_lock_is_reentrant_in_one_thread_and_exclusive_across_processes(tmp_path: Path) -> None:
    lock = tmp_path / "state" / "lock"
    with project_lock(lock, purpose="outer"), project_lock(lock, purpose="inner"):
        # re-entered, not taken twice: the owner is still the outer holder
        assert "patchset outer" in (tmp_path / "state" / "lock.owner").read_text()
        # another process is refused while this one holds it, and is told who holds it
        out, err = _other_process(lock, 0).communicate(timeout=60)
        assert out.startswith("refused: ") and f"patchset outer (pid {os.getpid()}," in out, out + err
    # released by both levels: the other process takes it now, and this one is refused while it holds it
    other = _other_process(lock, 0)
    try:
        assert other.stdout is not None
        assert other.stdout.readline() == "took\n", other.stderr.read() if other.stderr else ""
        with pytest.raises(LockError, match=rf"patchset child \(pid {other.pid},"), project_lock(lock, timeout=0):
            pass
    finally:
        out, err = other.communicate("\n", timeout=60)
    assert other.returncode == 0, out + err
    # its holder gone, the lock is free again
    with project_lock(lock, timeout=0, purpose="again"):
        assert "patchset again" in (tmp_path / "state" / "lock.owner").read_text()


def test_a_sweep_holds_the_lock_while_it_builds_and_runs(tmp_path: Path, up: Upstream, cache_dir: Path) -> None:
    """`test --against` builds and runs in .patchset/ under the project lock, not only while it applies
    and builds the patched tree: paused at the other tree's configure, another verb is refused naming
    it (exit 7)."""
    proj = make_mini(tmp_path / "mini", up, cache_dir)
    trace = tmp_path / "trace"
    against = ("test", "--against", "upstream", "-j", "1")
    run_patchset("--project", str(proj.root), *against, env={"PATCHSET_FAULT_TRACE": str(trace)})
    configures = [int(n) for _pid, n, label in (ln.split(" ", 2) for ln in trace.read_text().splitlines())
                  if " -G Ninja " in label]
    assert len(configures) == 2, trace.read_text()  # the patched tree's, then the other's
    cmake = configures[1]
    flag = tmp_path / "paused"
    p = start_patchset("--project", str(proj.root), *against,
                       env={"PATCHSET_FAULT_PAUSE_AT": str(cmake), "PATCHSET_FAULT_PAUSE_FILE": str(flag)})
    deadline = time.monotonic() + 120
    while not flag.exists():
        assert p.poll() is None, p.communicate()
        assert time.monotonic() < deadline, "the sweep never reached its build"
        time.sleep(0.05)
    try:
        r = run_patchset("--project", str(proj.root), "apply", "--force", env={"PATCHSET_LOCK_TIMEOUT": "0.5"})
    finally:
        _release(p, flag)
    assert r.returncode == EXIT_LOCKED, r.stdout + r.stderr
    assert f"patchset test --against (pid {p.pid}" in r.stderr


def test_a_thread_borrows_the_lock_its_starter_holds_and_no_other_does(tmp_path: Path) -> None:
    """`all` builds the patched tree in a thread of its own while verify runs under the project lock: that thread
    holds the lock through the one that started it (a verb it calls takes it re-entrantly); a thread that
    borrows from one not holding it is refused."""
    lock = tmp_path / "state" / "lock"
    owner = threading.get_ident()
    seen: list[str] = []

    def helper() -> None:
        with borrowed(lock, owner), project_lock(lock, timeout=0, purpose="inner"):
            seen.append("took it")
        try:
            with borrowed(lock, threading.get_ident()):
                seen.append("borrowed from nobody")
        except RuntimeError:
            seen.append("refused")

    with project_lock(lock, purpose="outer"):
        t = threading.Thread(target=helper)
        t.start()
        t.join(10)
    assert seen == ["took it", "refused"]
    # and a thread without it waits like another process: refused at once with timeout 0
    with project_lock(lock, purpose="outer"):
        errors: list[BaseException] = []

        def other() -> None:
            try:
                with project_lock(lock, timeout=0):
                    pass
            except LockError as e:
                errors.append(e)

        t = threading.Thread(target=other)
        t.start()
        t.join(10)
    assert len(errors) == 1

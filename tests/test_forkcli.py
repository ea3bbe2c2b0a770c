"""The tests' forked `patchset` calls (tests/forkcli.py) behave as fresh processes do: output, exit status,
environment, working folder, death by a signal, time-out and CPU seconds."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import forkcli
import pytest
from helpers import Proj, patchset_argv


@pytest.fixture(autouse=True)
def forking(monkeypatch: pytest.MonkeyPatch) -> None:
    """These tests fork even where the run starts every call afresh (benchmarks/cli_calls.py)."""
    monkeypatch.delenv("PATCHSET_TEST_FORKCLI", raising=False)


def both(*args: str, env: dict[str, str] | None = None, timeout: float = 60, cwd: Path | None = None,
         ) -> tuple[subprocess.CompletedProcess[str], subprocess.CompletedProcess[str]]:
    """The call forked, then in a fresh process."""
    full = {**os.environ, **(env or {})}
    forked = forkcli.run(list(args), full, timeout, patchset_argv(), cwd)
    fresh = subprocess.run([*patchset_argv(), *args], capture_output=True, text=True, env=full, check=False,
                           timeout=timeout, cwd=cwd)
    return forked, fresh


def same(forked: subprocess.CompletedProcess[str], fresh: subprocess.CompletedProcess[str]) -> None:
    assert (forked.returncode, forked.stdout, forked.stderr) == (fresh.returncode, fresh.stdout, fresh.stderr)


def test_output_and_exit_status_are_a_fresh_processes(proj: Proj) -> None:
    forked, fresh = both("help", "mark")
    same(forked, fresh)
    assert forked.returncode == 0 and "mark" in forked.stdout
    # an argument error (argparse exits 2) and a command's error (one line, its exit code)
    same(*both("status", "--no-such-option"))
    forked, fresh = both("--project", str(proj.root / "nowhere"), "status")
    same(forked, fresh)
    assert forked.returncode == 2 and "pin file not found" in forked.stderr


def test_the_calls_environment_and_folder_are_its_own(proj: Proj) -> None:
    # --version names the project found above the working folder: the call's, not the server's
    forked, fresh = both("--version", cwd=proj.root / "patches")
    same(forked, fresh)
    assert f"series: {len(proj.series())} patch(es) in {proj.root / 'patches'}" in forked.stdout
    # a variable set for one call only, and gone in the next: a malformed time limit is refused before anything runs
    forked, fresh = both("--project", str(proj.root), "status", env={"PATCHSET_GIT_TIMEOUT": "soon"})
    same(forked, fresh)
    assert forked.returncode == 2 and "PATCHSET_GIT_TIMEOUT" in forked.stderr
    forked, fresh = both("--project", str(proj.root), "status")
    same(forked, fresh)
    assert forked.returncode == 0, forked.stderr

def test_killed_and_timed_out_calls(proj: Proj, tmp_path: Path) -> None:
    # the fault tests' kill: death by SIGKILL, as subprocess reports it
    forked, fresh = both("--project", str(proj.root), "status", env={"PATCHSET_FAULT_KILL_AT": "1"})
    assert forked.returncode == fresh.returncode == -9
    flag = tmp_path / "paused"  # the call makes it and waits until it is removed: never here
    with pytest.raises(subprocess.TimeoutExpired):
        forkcli.run(["--project", str(proj.root), "status"],
                    {**os.environ, "PATCHSET_FAULT_PAUSE_AT": "1", "PATCHSET_FAULT_PAUSE_FILE": str(flag)}, 3,
                    patchset_argv())


def test_a_calls_cpu_time_is_counted() -> None:
    before = forkcli.CALLS.cpu_s
    r = forkcli.run(["help", "mark"], dict(os.environ), 60, patchset_argv())
    assert r.returncode == 0
    assert forkcli.CALLS.cpu_s > before


def test_an_import_time_variable_gets_a_fresh_process() -> None:
    server = forkcli.CALLS.server_for(dict(os.environ))
    assert server is not None
    assert server.serves(dict(os.environ))
    assert not server.serves({**os.environ, "NO_COLOR": "" if os.environ.get("NO_COLOR") else "1"})
    assert not server.serves({**os.environ, "PYTHONHASHSEED": "7"})

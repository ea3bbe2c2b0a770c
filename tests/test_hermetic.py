"""The isolation the suite relies on is really there."""

from __future__ import annotations

import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from conftest import REAL_HOME
from helpers import git


def test_environment_points_away_from_the_real_home(tmp_path: Path, cache_dir: Path) -> None:
    assert Path(os.environ["HOME"]) != REAL_HOME
    assert Path(os.environ["HOME"]).is_relative_to(tmp_path)
    assert Path(os.environ["XDG_CONFIG_HOME"]).is_relative_to(tmp_path)
    assert Path(os.environ["XDG_CACHE_HOME"]).is_relative_to(tmp_path)
    assert Path(os.environ["PATCHSET_CACHE"]) == cache_dir
    assert cache_dir.is_relative_to(tmp_path)
    assert os.environ["GIT_CONFIG_NOSYSTEM"] == "1"
    # git reads only the test's global config
    origin = git(tmp_path, "config", "--global", "--show-origin", "--get", "init.defaultBranch")
    assert origin == f"file:{os.environ['GIT_CONFIG_GLOBAL']}\tmain"
    assert git(tmp_path, "config", "--global", "--get", "commit.gpgsign") == "false"


# a suite of four tests run by the test below with the guard watching a home made for it, while a
# process the suite did not start (a user's patchset, say) writes into that home's patchset cache
_INNER_CONFTEST = """
import sys
sys.path.insert(0, {tests!r})
from homeguard import home_guard, home_guard_session, pytest_configure, pytest_unconfigure  # noqa: F401
"""
_INNER_TESTS = """
import os, subprocess, sys, time
from pathlib import Path

HOME = Path(os.environ["PATCHSET_TEST_REAL_HOME"])
LOCK = HOME / ".cache" / "patchset" / "lock"


def test_an_outside_writer_is_not_blamed():
    # the writer rewrites its lock file all along: see it do so twice while this test runs
    seen = {{LOCK.read_text()}}
    deadline = time.monotonic() + 60
    while len(seen) < 3 and time.monotonic() < deadline:
        time.sleep(0.01)
        seen.add(LOCK.read_text())
    assert len(seen) >= 3


def test_a_write_of_the_test_is_blamed():
    (HOME / ".cache" / "patchset" / "mine").write_text("x")


def test_a_write_of_a_process_the_test_started_is_blamed():
    subprocess.run([sys.executable, "-c", "import pathlib, sys; pathlib.Path(sys.argv[1]).mkdir()",
                    str(HOME / ".config" / "patchset")], check=True)


def test_a_write_elsewhere_in_the_home_is_not_watched():
    (HOME / "projects" / "notes.txt").write_text("x")
"""
# the outside writer: a Python process with none of the suite's environment
_WRITER = """
import os, sys, time
from pathlib import Path
lock, stop = Path(sys.argv[1]), Path(sys.argv[2])
n = 0
while not stop.exists():
    n += 1
    tmp = lock.with_name(f"lock.{{n}}.tmp")
    tmp.write_text(f"pid {{os.getpid()}} write {{n}}")
    os.replace(tmp, lock)
    (lock.parent / "tmp" / str(n)).mkdir(parents=True)
    time.sleep(0.005)
"""


def test_the_guard_blames_only_what_the_tests_did(tmp_path: Path) -> None:
    home = tmp_path / "user-home"
    (home / ".cache" / "patchset").mkdir(parents=True)
    (home / "projects").mkdir()
    (home / ".cache" / "patchset" / "lock").write_text("pid 0 write 0")
    inner = tmp_path / "inner"
    inner.mkdir()
    (inner / "pytest.ini").write_text("[pytest]\n")
    (inner / "conftest.py").write_text(_INNER_CONFTEST.format(tests=str(Path(__file__).resolve().parent)))
    (inner / "test_inner.py").write_text(_INNER_TESTS.format())
    stop = tmp_path / "stop"
    outsider_env = {k: v for k, v in os.environ.items() if not k.startswith(("PATCHSET_", "PYTHON"))}
    writer = subprocess.Popen([sys.executable, "-c", _WRITER.format(), str(home / ".cache" / "patchset" / "lock"),
                               str(stop)], env=outsider_env)
    try:
        env = {k: v for k, v in os.environ.items() if k != "PATCHSET_TEST_HOME_WRITES"}
        r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--junitxml",
                            str(tmp_path / "inner.xml"), str(inner)], cwd=inner, capture_output=True, text=True,
                           env={**env, "PATCHSET_TEST_REAL_HOME": str(home)}, check=False, timeout=300)
    finally:
        stop.touch()
        assert writer.wait(timeout=60) == 0
    out = r.stdout + r.stderr
    # the writer really wrote while the suite ran
    assert int((home / ".cache" / "patchset" / "lock").read_text().split()[-1]) > 3
    errors = {tc.get("name"): [e.get("message", "") for e in tc.iter("error")]
              for tc in ET.parse(tmp_path / "inner.xml").getroot().iter("testcase")}
    assert errors["test_an_outside_writer_is_not_blamed"] == [], out
    assert errors["test_a_write_elsewhere_in_the_home_is_not_watched"] == [], out
    own = errors["test_a_write_of_the_test_is_blamed"]
    assert len(own) == 1 and "wrote into the real home directory" in own[0], out
    assert f"open {home}/.cache/patchset/mine" in out
    child = errors["test_a_write_of_a_process_the_test_started_is_blamed"]
    assert len(child) == 1 and "wrote into the real home directory" in child[0], out
    assert f"os.mkdir {home}/.config/patchset" in out
    assert r.returncode == 1, out


@pytest.fixture(scope="module")
def module_env() -> dict[str, str]:
    """What a module-scoped fixture (like those that build and verify once per module) sees."""
    return {k: os.environ.get(k, "") for k in ("HOME", "GIT_CONFIG_GLOBAL", "PATCHSET_CACHE", "XDG_CACHE_HOME",
                                               "CCACHE_DIR")}


def test_module_scoped_fixtures_run_inside_the_isolation(module_env: dict[str, str]) -> None:
    assert Path(module_env["HOME"]).resolve() != REAL_HOME
    assert module_env["GIT_CONFIG_GLOBAL"] and not module_env["GIT_CONFIG_GLOBAL"].startswith(str(REAL_HOME))
    assert module_env["PATCHSET_CACHE"] and not Path(module_env["PATCHSET_CACHE"]).is_relative_to(REAL_HOME)
    assert not Path(module_env["XDG_CACHE_HOME"]).is_relative_to(REAL_HOME)


def test_one_compiler_cache_for_the_whole_run(module_env: dict[str, str], tmp_path: Path) -> None:
    # set once for the session: a module's fixture and a test see the same one, outside the real home
    ccache = Path(os.environ["CCACHE_DIR"])
    assert not ccache.is_relative_to(REAL_HOME) and ccache.is_dir()
    assert module_env["CCACHE_DIR"] == str(ccache)
    assert "CCACHE_BASEDIR" not in os.environ

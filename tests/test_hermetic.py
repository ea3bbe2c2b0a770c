"""The isolation the suite relies on is really there."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from conftest import REAL_HOME, _home_snapshot
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


def test_home_snapshot_sees_writes(tmp_path: Path) -> None:
    home = tmp_path / "fake-home"
    (home / ".cache" / "patchset").mkdir(parents=True)
    before = _home_snapshot(home)
    (home / ".cache" / "patchset" / "x").write_text("x")
    assert _home_snapshot(home) != before
    middle = _home_snapshot(home)
    (home / ".newfile").write_text("x")
    assert _home_snapshot(home) != middle
    middle = _home_snapshot(home)
    (home / ".gitconfig").write_text("[user]\n")
    assert _home_snapshot(home) != middle


@pytest.fixture(scope="module")
def module_env() -> dict[str, str]:
    """What a module-scoped fixture (like those that build and verify once per module) sees."""
    return {k: os.environ.get(k, "") for k in ("HOME", "GIT_CONFIG_GLOBAL", "PATCHSET_CACHE", "XDG_CACHE_HOME")}


def test_module_scoped_fixtures_run_inside_the_isolation(module_env: dict[str, str]) -> None:
    assert Path(module_env["HOME"]).resolve() != REAL_HOME
    assert module_env["GIT_CONFIG_GLOBAL"] and not module_env["GIT_CONFIG_GLOBAL"].startswith(str(REAL_HOME))
    assert module_env["PATCHSET_CACHE"] and not Path(module_env["PATCHSET_CACHE"]).is_relative_to(REAL_HOME)
    assert not Path(module_env["XDG_CACHE_HOME"]).is_relative_to(REAL_HOME)

"""The real pin: fetched from the PyPI mirror (or a warm PATCHSET_TEST_CACHE), verified, and patched."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from helpers import git

from builder.project import load_project
from builder.series.apply import apply
from builder.series.model import load_series
from builder.upstream import fetch as upstream
from builder.upstream.pin import load_pin

pytestmark = pytest.mark.integration

REPO_ROOT = Path(__file__).resolve().parent.parent
REAL_TREE = "b2da53584951ec8aa40680229509a6646a637560"


def test_real_pin_fetches_and_the_real_series_applies(real_pin_cache: Path, tmp_path: Path) -> None:
    pin = load_pin(REPO_ROOT / "upstream" / "llama.cpp.toml")
    assert pin.tree == REAL_TREE
    found = upstream.lookup(real_pin_cache, pin)
    assert found is not None, "the session fixture left no verified pin in the cache"
    assert found.tree == REAL_TREE

    # a copy of the project, so that the work repository is not made inside the real checkout
    root = tmp_path / "proj"
    shutil.copytree(REPO_ROOT / "upstream", root / "upstream")
    shutil.copytree(REPO_ROOT / "patches", root / "patches")
    project = load_project(root=root, pin_file=root / "upstream" / "llama.cpp.toml",
                           state_dir=root / ".patchset", cache_dir=real_pin_cache)
    series = load_series(project.patches_dir)

    result = apply(project)

    work = project.work_repo
    assert git(work, "rev-parse", "upstream^{tree}") == REAL_TREE
    assert git(work, "rev-parse", "upstream") == found.commit
    commits = git(work, "rev-list", "upstream..patched").split()
    assert len(commits) == len(series.patches) == len(result.outcomes)
    assert git(work, "status", "--porcelain") == ""
    assert apply(project).noop

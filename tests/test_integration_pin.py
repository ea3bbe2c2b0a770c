"""The real pin: fetched from the PyPI mirror (or a warm PATCHSET_TEST_CACHE), verified, and patched."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import copy_real_project, git

from builder.series.apply import apply
from builder.series.load import load_series
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
    project = copy_real_project(root, real_pin_cache)
    series = load_series(project.patches_dir)

    result = apply(project)

    work = project.work_repo
    assert git(work, "rev-parse", "upstream^{tree}") == REAL_TREE
    assert git(work, "rev-parse", "upstream") == found.commit
    # upstream's own commit, read from the sdist (issue 43): `patched` descends from 0c1e570 itself
    assert found.commit == pin.commit == "0c1e57098bba43ac29e6e3b677cdceebdd22334f"
    assert git(work, "merge-base", "--is-ancestor", pin.commit, "patched") == ""
    assert git(work, "cat-file", "-t", pin.commit) == "commit"
    commits = git(work, "rev-list", "upstream..patched").split()
    assert len(commits) == len(series.patches) == len(result.outcomes)
    assert git(work, "status", "--porcelain") == ""
    assert apply(project).noop

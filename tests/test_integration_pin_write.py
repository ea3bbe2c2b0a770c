"""`patchset pin` on the real mirror reproduces the shipped pin exactly."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from builder.cli import main
from builder.upstream.pin import load_pin

pytestmark = pytest.mark.integration

REPO_ROOT = Path(__file__).resolve().parent.parent


def test_pin_from_the_pypi_sdist_reproduces_the_shipped_pin(
        real_pin_cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    shipped = load_pin(REPO_ROOT / "upstream" / "llama.cpp.toml")
    root = tmp_path / "proj"
    shutil.copytree(REPO_ROOT / "upstream", root / "upstream")
    # the session cache already holds the sdist: served from there, but re-hashed and re-imported
    monkeypatch.setenv("PATCHSET_CACHE", str(real_pin_cache))
    out = tmp_path / "written.toml"

    assert main(["--project", str(root), "pin", "--sdist", "llama-cpp-python==0.3.36", "--commit", shipped.commit,
                 "--tag", shipped.tag, "--out", str(out)]) == 0

    written = load_pin(out)
    assert (written.commit, written.tree, written.date) == (shipped.commit, shipped.tree, shipped.date)
    assert written.sources == shipped.sources  # the git remote, then the sdist with the same sha256 and subdir
    # the sdist ships the submodule's commit object: GitHub's commit names this very tree
    assert "sha1 checked" in written.tree_note
    assert "names this very tree" in written.tree_note

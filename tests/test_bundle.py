"""Carrying the pin to a machine without network: `fetch --export-bundle` here, `fetch --bundle` there."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import UPSTREAM_FILES, Upstream, commit, git, pin_toml

from builder.cli import main
from builder.errors import SourceError
from builder.upstream import fetch as upstream
from builder.upstream.pin import load_pin


def _pin_file(tmp_path: Path, up: Upstream, sources: list[dict[str, str]]) -> Path:
    f = tmp_path / "pin.toml"
    f.write_text(pin_toml(up.commit, up.tree, sources))
    return f


def test_bundle_carries_the_pin_to_a_cache_with_no_source(tmp_path: Path, up: Upstream, cache_dir: Path) -> None:
    pin = load_pin(_pin_file(tmp_path, up, [{"kind": "git", "url": up.url}]))
    upstream.fetch(cache_dir, pin)
    bundle = upstream.export_bundle(cache_dir, pin, tmp_path / "out" / "pin.bundle")
    assert bundle.is_file() and not list(bundle.parent.glob(".*.tmp"))

    # the other machine: its only source is a remote that does not exist
    offline = load_pin(_pin_file(tmp_path, up, [{"kind": "git", "url": (tmp_path / "nowhere.git").as_uri()}]))
    other_cache = tmp_path / "other-cache"
    with pytest.raises(SourceError):
        upstream.fetch(other_cache, offline)
    got = upstream.fetch(other_cache, offline, bundle=bundle)
    assert got.tree == up.tree and got.commit == up.commit
    assert got.source == "bundle pin.bundle"
    # afterwards the pin is simply cached: no bundle, no source needed
    again = upstream.fetch(other_cache, offline)
    assert again.cached and again.commit == got.commit
    assert git(got.repo, "fsck", "--no-dangling") == ""


def test_a_bundle_of_another_tree_is_refused(tmp_path: Path, up: Upstream, cache_dir: Path) -> None:
    # a bundle whose pin ref holds a different tree (someone's edited copy) must not enter the cache
    other = tmp_path / "other"
    git(tmp_path, "clone", "--quiet", str(up.bare), str(other))
    c = commit(other, {"src/a.c": UPSTREAM_FILES["src/a.c"] + "/* edited */\n"}, "edit\n")
    git(other, "update-ref", f"refs/patchset/pins/{up.commit}", c)
    bad = tmp_path / "bad.bundle"
    git(other, "bundle", "create", "--quiet", str(bad), f"refs/patchset/pins/{up.commit}")
    pin = load_pin(_pin_file(tmp_path, up, [{"kind": "git", "url": (tmp_path / "nowhere.git").as_uri()}]))
    with pytest.raises(SourceError, match="not the pinned tree"):
        upstream.fetch(cache_dir, pin, bundle=bad)
    assert upstream.lookup(cache_dir, pin) is None


def test_cli_round_trip(tmp_path: Path, up: Upstream, cache_dir: Path, monkeypatch: pytest.MonkeyPatch,
                        capsys: pytest.CaptureFixture[str]) -> None:
    root = tmp_path / "proj"
    (root / "upstream").mkdir(parents=True)
    pin_file = root / "upstream" / "llama.cpp.toml"
    pin_file.write_text(pin_toml(up.commit, up.tree, [{"kind": "git", "url": up.url}]))
    bundle = tmp_path / "carry" / "llama.cpp.bundle"
    assert main(["--project", str(root), "fetch", "--export-bundle", str(bundle)]) == 0
    assert bundle.is_file()
    pin_file.write_text(pin_toml(up.commit, up.tree, [{"kind": "git", "url": (tmp_path / "gone.git").as_uri()}]))
    monkeypatch.setenv("PATCHSET_CACHE", str(tmp_path / "fresh-cache"))
    assert main(["--project", str(root), "fetch", "--bundle", str(bundle)]) == 0
    assert "fetched from bundle llama.cpp.bundle" in capsys.readouterr().out
    # a missing bundle file is a one-line error, not a traceback
    monkeypatch.setenv("PATCHSET_CACHE", str(tmp_path / "third-cache"))
    assert main(["--project", str(root), "fetch", "--bundle", str(tmp_path / "missing.bundle")]) == 1
    assert "missing.bundle" in capsys.readouterr().err

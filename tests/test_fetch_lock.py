"""upstream.fetch from the git remote, and two fetches racing on a cold cache."""

from __future__ import annotations

import subprocess
import threading
import time
from pathlib import Path

import pytest
from helpers import (
    UPSTREAM_FILES,
    Upstream,
    git,
    make_project,
    make_sdist,
    pin_toml,
    sdist_pin_sources,
    start_patchset,
)

from builder.errors import LockError, SourceError
from builder.upstream import fetch as upstream
from builder.upstream.pin import load_pin


def test_git_fetch_verifies_commit_and_tree(tmp_path: Path, up: Upstream, cache_dir: Path) -> None:
    f = tmp_path / "pin.toml"
    f.write_text(pin_toml(up.commit, up.tree, [{"kind": "git", "url": up.url}]))
    got = upstream.fetch(cache_dir, load_pin(f))
    assert (got.commit, got.tree, got.cached) == (up.commit, up.tree, False)
    assert got.source == f"git {up.url}"
    assert upstream.fetch(cache_dir, load_pin(f)).cached


def test_git_fetch_with_wrong_pinned_tree_is_refused(tmp_path: Path, up: Upstream, cache_dir: Path) -> None:
    wrong = "0" * 40
    f = tmp_path / "pin.toml"
    f.write_text(pin_toml(up.commit, wrong, [{"kind": "git", "url": up.url}]))
    with pytest.raises(SourceError) as ei:
        upstream.fetch(cache_dir, load_pin(f))
    assert up.tree in str(ei.value)
    assert wrong in str(ei.value)
    repo = cache_dir / "upstream" / "llama.cpp.git"
    assert git(repo, "for-each-ref") == ""
    # the fetched objects stayed in the quarantine and went with it (cat-file -e prints nothing
    # either way: its exit code says whether the object is there)
    gone = subprocess.run(["git", "-C", str(repo), "cat-file", "-e", up.commit], capture_output=True, check=False)
    assert gone.returncode != 0
    assert [p for p in (repo / "objects").rglob("*") if p.is_file()] == []


@pytest.mark.parametrize("kind", ["git", "sdist"])
def test_concurrent_fetches_on_a_cold_cache(tmp_path: Path, up: Upstream, cache_dir: Path,
                                            monkeypatch: pytest.MonkeyPatch, kind: str) -> None:
    if kind == "git":
        sources = [{"kind": "git", "url": up.url}]
    else:
        sources = sdist_pin_sources(make_sdist(tmp_path / "dist" / "pkg-1.0.tar.gz", UPSTREAM_FILES))
    f = tmp_path / "pin.toml"
    f.write_text(pin_toml(up.commit, up.tree, sources))
    pin = load_pin(f)

    imports = []
    real = upstream._fetch_locked

    def counting(*args, **kwargs):  # type: ignore[no-untyped-def]
        imports.append(threading.current_thread().name)
        return real(*args, **kwargs)

    monkeypatch.setattr(upstream, "_fetch_locked", counting)
    barrier = threading.Barrier(2)
    results: dict[str, upstream.Fetched] = {}
    errors: list[BaseException] = []

    def worker(name: str) -> None:
        try:
            barrier.wait(timeout=30)
            results[name] = upstream.fetch(cache_dir, pin, lock_timeout=60)
        except BaseException as e:  # reported below, not lost in the thread
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(n,), name=n) for n in ("t1", "t2")]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not any(t.is_alive() for t in threads)
    assert errors == []
    assert len(imports) == 1  # one import; the other waited for the lock and found it done
    assert sorted(r.cached for r in results.values()) == [False, True]
    a, b = results["t1"], results["t2"]
    assert (a.commit, a.tree) == (b.commit, b.tree)
    assert a.tree == up.tree
    repo = cache_dir / "upstream" / "llama.cpp.git"
    assert git(repo, "for-each-ref", "--format=%(refname)") == f"refs/patchset/pins/{pin.commit}"
    assert git(repo, "fsck", "--no-dangling") == ""
    assert list((cache_dir / "tmp").iterdir()) == []


def test_a_fetch_that_waits_too_long_for_the_cache_lock_names_its_holder(tmp_path: Path, up: Upstream,
                                                                        cache_dir: Path) -> None:
    # the cache lock is the project lock's mechanism: an error naming who holds it, not "no source"
    proj = make_project(tmp_path, up, cache_dir)
    flag = tmp_path / "paused"
    # a `patchset fetch` on the cold cache, paused at its first child (`git init` of the cache, lock held)
    other = start_patchset("--project", str(proj.root), "fetch",
                           env={"PATCHSET_FAULT_PAUSE_AT": "1", "PATCHSET_FAULT_PAUSE_FILE": str(flag)})
    try:
        deadline = time.monotonic() + 60
        while not flag.exists():
            assert other.poll() is None and time.monotonic() < deadline, other.communicate()
            time.sleep(0.05)
        with pytest.raises(LockError) as ei:
            upstream.fetch(cache_dir, load_pin(proj.project.pin_file), lock_timeout=0.2)
    finally:
        flag.unlink(missing_ok=True)
        out, err = other.communicate(timeout=120)
    assert other.returncode == 0, out + err
    assert f"patchset fetch (pid {other.pid}" in str(ei.value)
    assert "the cache" in str(ei.value)
    assert upstream.fetch(cache_dir, load_pin(proj.project.pin_file), lock_timeout=0).cached

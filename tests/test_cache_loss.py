"""The work repository borrows the cache's objects: a cache deleted or moved leaves it usable, or
says how to restore it. And `patchset gc` removes what killed runs left, saying what."""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

import pytest
from filelock import FileLock
from helpers import STANDARD_NAMES, Proj, fsck_clean, git

from builder.cli import main
from builder.series.apply import apply
from builder.series.refresh import refresh


def test_deleted_cache_is_fetched_again_and_reattached(proj: Proj, capsys: pytest.CaptureFixture[str]) -> None:
    apply(proj.project)
    patched = proj.wgit("rev-parse", "patched")
    before = proj.snapshot()
    shutil.rmtree(proj.project.cache_dir)

    # status reads nothing it cannot, and says what is missing and what restores it
    assert main(["--project", str(proj.root), "status"]) == 0
    out = capsys.readouterr().out
    assert "is gone" in out and "patchset apply" in out

    # refresh needs the upstream objects for its diffs: the pin is fetched again first
    assert main(["--project", str(proj.root), "refresh"]) == 0
    captured = capsys.readouterr()
    assert "is gone" in captured.err
    assert proj.snapshot() == before
    fsck_clean(proj.work)
    assert proj.wgit("rev-parse", "patched") == patched
    assert main(["--project", str(proj.root), "apply"]) == 0
    assert "up to date" in capsys.readouterr().out


def test_moved_cache_keeps_older_objects_borrowed(proj: Proj, tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    apply(proj.project)
    old_cache = proj.project.cache_dir
    # a backup ref, as `apply --force` makes them
    proj.wgit("update-ref", "refs/patchset/backup/20250101-000000", "patched")
    new_cache = tmp_path / "new-cache"
    monkeypatch.setenv("PATCHSET_CACHE", str(new_cache))
    assert main(["--project", str(proj.root), "apply"]) == 0
    alternates = (proj.work / ".git" / "objects" / "info" / "alternates").read_text().split()
    assert alternates[0] == str((new_cache / "upstream" / "llama.cpp.git" / "objects").resolve())
    assert str((old_cache / "upstream" / "llama.cpp.git" / "objects").resolve()) in alternates
    fsck_clean(proj.work)
    # the old cache deleted now: the new one has the pin, and nothing is missing
    shutil.rmtree(old_cache)
    assert main(["--project", str(proj.root), "status"]) == 0
    assert main(["--project", str(proj.root), "refresh"]) == 0
    fsck_clean(proj.work)


def test_deleted_cache_with_an_unreachable_source_says_how_to_restore(
        proj: Proj, capsys: pytest.CaptureFixture[str]) -> None:
    apply(proj.project)
    shutil.rmtree(proj.project.cache_dir)
    shutil.rmtree(proj.upstream.bare)  # the pin's only source is gone too
    assert main(["--project", str(proj.root), "refresh"]) == 2
    err = capsys.readouterr().err
    assert "is gone" in err and "PATCHSET_CACHE" in err and "Traceback" not in err
    assert [line for line in err.splitlines() if line.startswith("error:")]


def test_gc_removes_what_killed_runs_left(proj: Proj, capsys: pytest.CaptureFixture[str]) -> None:
    apply(proj.project)
    cache = proj.project.cache_dir
    q = cache / "tmp" / "quarantine-abc123"
    (q / "q.git").mkdir(parents=True)
    (cache / "tmp" / "dl-xyz").mkdir()
    half = proj.patches / f".{STANDARD_NAMES[0]}.k2j3_x.tmp"
    half.write_text("half\n")
    old_backup = "refs/patchset/backup/20200101-000000"
    new_backup = f"refs/patchset/backup/{time.strftime('%Y%m%d-%H%M%S')}"
    for ref in (old_backup, new_backup, "refs/patchset/verify/0001/after"):
        proj.wgit("update-ref", ref, "patched")
    old = time.time() - 30 * 86400
    os.utime(proj.work / ".git" / "refs" / "patchset" / "verify" / "0001" / "after", (old, old))

    assert main(["--project", str(proj.root), "gc", "--dry-run"]) == 0
    assert "would remove" in capsys.readouterr().out
    assert q.exists() and half.exists()

    assert main(["--project", str(proj.root), "gc", "--older-than", "14"]) == 0
    out = capsys.readouterr().out
    assert "quarantine-abc123" in out and "dl-xyz" in out and half.name in out
    assert old_backup in out and "refs/patchset/verify/0001/after" in out and new_backup not in out
    assert list((cache / "tmp").iterdir()) == []
    assert not half.exists()
    refs = proj.wgit("for-each-ref", "--format=%(refname)", "refs/patchset/").split()
    assert new_backup in refs and old_backup not in refs and "refs/patchset/verify/0001/after" not in refs
    fsck_clean(proj.work)
    assert main(["--project", str(proj.root), "gc"]) == 0
    assert "nothing to remove" in capsys.readouterr().out
    assert refresh(proj.project).changes


def test_gc_leaves_a_running_fetch_alone(proj: Proj, capsys: pytest.CaptureFixture[str]) -> None:
    apply(proj.project)
    q = proj.project.cache_dir / "tmp" / "quarantine-busy"
    q.mkdir(parents=True)
    with FileLock(str(proj.project.cache_dir / "lock")):
        assert main(["--project", str(proj.root), "gc"]) == 0
    assert "a fetch is running" in capsys.readouterr().out
    assert q.exists()
    assert git(proj.work, "status", "--porcelain") == ""

"""The work repository borrows the cache's objects: a cache deleted or moved leaves it usable, or
says how to restore it. And `patchset gc` removes what killed runs left, saying what."""

from __future__ import annotations

import json
import os
import shutil
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from filelock import FileLock
from helpers import STANDARD_NAMES, Proj, fsck_clean, git

from builder.cli import main
from builder.locking import project_lock
from builder.orchestrate.gc import lane_folders
from builder.prove.pipeline import build_dir
from builder.prove.treebuild import lane_build_dir, lane_src, lane_syntax_tree
from builder.prove.trees import checkout_detached
from builder.series.apply import apply
from builder.series.refresh import refresh
from builder.series.workrepo import WorkRepo


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


def _age(folder: Path, days: float) -> None:
    """Every time of `folder`, its files and its worktree record set `days` back."""
    t = time.time() - days * 86400
    places = [folder]
    dot_git = folder / ".git"
    if dot_git.is_file():
        places.append(Path(dot_git.read_text().split(":", 1)[1].strip()))
    for place in places:
        for p in [place, *place.rglob("*")]:
            os.utime(p, (t, t), follow_symlinks=False)


def _lanes(proj: Proj) -> tuple[list[Path], list[Path]]:
    """verify's lane folders as verify names them, made for real: (unused for 30 days, used now)."""
    p = proj.project
    work = WorkRepo(p.work_repo)
    patched = proj.wgit("rev-parse", "patched")
    old = [lane_src(p, 2), lane_syntax_tree(p, 1), lane_build_dir(p, "cpu", 1), lane_build_dir(p, "metal-linux", 0)]
    new = [lane_src(p, 0), lane_build_dir(p, "cpu", 0)]
    for d in old + new:
        if d.parent == p.build_root:
            d.mkdir(parents=True)
            (d / ".ninja_log").write_text("# ninja log v6\n")
        else:
            checkout_detached(work.git, d, patched)
    for d in old:
        _age(d, 30)
    return old, new


def test_gc_removes_lane_folders_unused_for_the_limit(proj: Proj, capsys: pytest.CaptureFixture[str]) -> None:
    apply(proj.project)
    old, new = _lanes(proj)
    own_build = build_dir(proj.project, "cpu", "minimal")  # `patchset build`'s, no lane of verify's
    own_build.mkdir(parents=True)
    _age(own_build, 30)
    assert sorted(lane_folders(proj.project)) == sorted(old + new)

    assert main(["--project", str(proj.root), "gc", "--dry-run", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert sorted(r for r in doc["removed"] if "lane folder" in r) == \
        sorted(f"verify lane folder {d} (unused for 30.0 day(s))" for d in old)
    assert all(d.is_dir() for d in old + new)

    assert main(["--project", str(proj.root), "gc"]) == 0
    out = capsys.readouterr().out
    assert all(str(d) in out for d in old) and not any(f"{d} " in out for d in new)
    assert not any(d.exists() for d in old) and all(d.is_dir() for d in [*new, own_build])
    # the removed worktrees are forgotten by the work repository, the kept one is not
    listed = proj.wgit("worktree", "list", "--porcelain")
    assert str(lane_src(proj.project, 2)) not in listed and str(lane_src(proj.project, 0)) in listed
    fsck_clean(proj.work)

    assert main(["--project", str(proj.root), "gc", "--older-than", "0"]) == 0
    assert not any(d.exists() for d in new) and own_build.is_dir()
    assert lane_folders(proj.project) == []


def test_gc_leaves_a_running_verifys_lanes_alone(proj: Proj, capsys: pytest.CaptureFixture[str],
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    apply(proj.project)
    old, new = _lanes(proj)
    monkeypatch.setenv("PATCHSET_LOCK_TIMEOUT", "0")
    # a verify holds the project lock for its whole run: gc refuses, naming it, and removes nothing
    with project_lock(proj.project.lock_file, purpose="verify"), ThreadPoolExecutor(1) as other:
        rc = other.submit(main, ["--project", str(proj.root), "gc", "--older-than", "0"]).result()
    assert rc == 7
    assert "patchset verify" in capsys.readouterr().err
    assert all(d.is_dir() for d in old + new)

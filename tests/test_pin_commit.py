"""The pin is upstream's own commit, whatever source it came from (issue 43 point 2).

An sdist shaped like llama-cpp-python's ships the vendored submodule's git dir with the pin's commit
object. Fetched from it, the cache holds that very commit (shallow: its parents are absent), not a
stand-in made here, so later upstream history connects to it: a git fetch of newer commits,
patch-ids over the commits between two pins (`rebase --dry-run`), `canary`. Where the history is
missing, the row says what was not checked. A cache and work repository made on a stand-in by an
earlier patchset move onto the real commit, user work kept.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
from helpers import (
    NOTE,
    PATCH2_B_C,
    UPSTREAM_FILES,
    Proj,
    Upstream,
    git,
    make_project,
    pin_toml,
    sdist_first,
    sdist_with_commit,
)

from builder.errors import WorkTreeError
from builder.gitrepo import GitRepo
from builder.prove.fixed_upstream import checker
from builder.series.apply import apply
from builder.series.canary import KIND_UPSTREAM, canary
from builder.series.rebase import dry_run_rebase
from builder.upstream import fetch as upstream
from builder.upstream.pin import load_pin
from tests.test_fixed_upstream import _missing_backend


@pytest.fixture
def pinned(tmp_path: Path, up: Upstream, cache_dir: Path) -> Proj:
    """A project pinned at a commit with a parent (so its history is really cut), from the sdist."""
    c1 = up.advance(NOTE, "upstream: a note\n")
    archive = sdist_with_commit(tmp_path / "dist" / "pkg-1.0.tar.gz", up, c1, {**UPSTREAM_FILES, **NOTE})
    return make_project(tmp_path, dataclasses.replace(up, commit=c1, tree=up.tree_of(c1)), cache_dir,
                        sources=sdist_first(archive, up))


def test_a_pin_from_the_sdist_is_upstreams_own_commit_and_history_connects(pinned: Proj, cache_dir: Path) -> None:
    pin = load_pin(pinned.project.pin_file)
    fetched = upstream.fetch(cache_dir, pin)

    assert fetched.source.startswith("sdist ") and fetched.commit == pin.commit
    cache = fetched.repo
    assert pin.commit in (cache / "shallow").read_text().split()
    assert git(cache, "cat-file", "commit", pin.commit).startswith(f"tree {pin.tree}\nparent ")
    assert git(cache, "fsck", "--no-dangling", "--connectivity-only", pin.commit) == ""

    apply(pinned.project)
    work = pinned.project.work_repo
    assert git(work, "rev-parse", "upstream") == pin.commit
    assert git(work, "merge-base", "--is-ancestor", pin.commit, "patched") == ""
    # upstream moves on: a plain git fetch brings only the new commit, and it descends from the pin
    newer = pinned.upstream.advance({"README": "moved\n"}, "readme\n")
    git(work, "fetch", "--quiet", pinned.upstream.url, "main")
    assert git(work, "rev-parse", "FETCH_HEAD") == newer
    assert git(work, "rev-list", "upstream..FETCH_HEAD").split() == [newer]


def test_dry_run_and_canary_read_the_history_on_top_of_the_sdist_pin(pinned: Proj, cache_dir: Path) -> None:
    """Upstream takes patch 2 as is, then moves on: the dry run names the commit (patch-id) and canary
    the commit where patch 2 stops applying; the pin itself is never fetched from git."""
    up = pinned.upstream
    merged = up.advance({"src/b.c": PATCH2_B_C}, "b: take the fix\n")
    newer = up.advance({"README": "moved\n"}, "readme\n")

    report = dry_run_rebase(pinned.project, newer, checker(pinned.project, _missing_backend()))

    rows = {p.patch: p for p in report.patches}
    name = pinned.series()[1]
    assert rows[name].merged_as == merged
    assert all(not p.merged_unchecked for p in report.patches)
    assert upstream.fetch(cache_dir, load_pin(pinned.project.pin_file)).source.startswith("sdist ")

    result = canary(pinned.project, new=newer)
    broken = {p.patch: p for p in result.patches}[name]
    assert broken.broken_at is not None and broken.broken_at.id == merged and broken.kind == KIND_UPSTREAM


def test_a_commit_an_earlier_dry_run_fetched_alone_does_not_cut_the_history_of_a_later_one(
        pinned: Proj, cache_dir: Path) -> None:
    """A dry run onto the commit that merged patch 2 leaves that commit in the cache without its parents; a
    later dry run onto a newer commit still reads the history through it, and names it merged as."""
    up = pinned.upstream
    merged = up.advance({"src/b.c": PATCH2_B_C}, "b: take the fix\n")
    dry_run_rebase(pinned.project, merged, checker(pinned.project, _missing_backend()))
    newer = up.advance({"README": "moved\n"}, "readme\n")

    report = dry_run_rebase(pinned.project, newer, checker(pinned.project, _missing_backend()))

    rows = {p.patch: p for p in report.patches}
    assert rows[pinned.series()[1]].merged_as == merged
    assert all(not p.merged_unchecked for p in report.patches), [p.merged_unchecked for p in report.patches]


def test_where_history_is_missing_the_row_says_merged_as_was_not_checked(
        pinned: Proj, tmp_path: Path, cache_dir: Path) -> None:
    """The new pin from an sdist alone: its commit is upstream's, but nothing before it is here."""
    up = pinned.upstream
    up.advance({"src/b.c": PATCH2_B_C}, "b: take the fix\n")
    newer = up.advance({"README": "moved\n"}, "readme\n")
    files = {**UPSTREAM_FILES, **NOTE, "src/b.c": PATCH2_B_C, "README": "moved\n"}
    archive = sdist_with_commit(tmp_path / "dist2" / "pkg-1.1.tar.gz", up, newer, files)
    new_pin = tmp_path / "new.toml"
    new_pin.write_text(pin_toml(newer, up.tree_of(newer), sdist_first(archive, up)[:1]))

    report = dry_run_rebase(pinned.project, str(new_pin), checker(pinned.project, _missing_backend()))

    assert [(p.merged_as, p.merged_unchecked) for p in report.patches] == [
        ("", "not checked, no history before the new pin")] * 3
    assert report.as_json()["patches"][0]["merged_as_unchecked"] == "not checked, no history before the new pin"


def test_a_cache_and_work_repository_on_the_old_stand_in_move_onto_the_real_commit(
        pinned: Proj, cache_dir: Path) -> None:
    """A cache that an earlier patchset filled with a stand-in commit, and a work repository applied on
    it with a commit not written back and an uncommitted change: the next command that fetches finds
    upstream's own commit in the archive, and every branch moves onto it, nothing lost."""
    pin = load_pin(pinned.project.pin_file)
    fetched = upstream.fetch(cache_dir, pin)
    # the cache as the old code left it: the pin ref on a stand-in, the record naming it, no shallow
    # commit, no object of upstream's commit; for now marked read, so that `apply` makes its work on it
    src = pin.sources[0]
    assert isinstance(src, upstream.SdistSource)
    old = upstream.stand_in(GitRepo(fetched.repo), pin, src, pin.tree)
    record = fetched.repo / "patchset-pins" / f"{pin.commit}.json"
    info = {**json.loads(record.read_text()), "local": old}
    record.write_text(json.dumps({**info, "archive_read": True}))
    git(fetched.repo, "update-ref", upstream.pin_ref(pin), old)
    (fetched.repo / "shallow").unlink()
    (fetched.repo / "objects" / pin.commit[:2] / pin.commit[2:]).unlink()
    apply(pinned.project)
    work = pinned.project.work_repo
    assert git(work, "rev-parse", "upstream") == old
    (work / "mine.txt").write_text("a commit not written back\n")
    git(work, "add", "mine.txt")
    git(work, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "--quiet", "-m", "mine")
    (work / "README").write_text("uncommitted\n")
    tree, subjects = git(work, "rev-parse", "patched^{tree}"), git(work, "log", "--format=%s%n%an", "upstream..patched")
    record.write_text(json.dumps(info))  # as an old cache: the archive never read for the object

    with pytest.raises(WorkTreeError, match="refusing to re-apply"):
        apply(pinned.project)  # the commit not written back: apply refuses, as always; the move is done already

    assert upstream.lookup(cache_dir, pin).commit == pin.commit  # type: ignore[union-attr]
    assert pin.commit in (fetched.repo / "shallow").read_text().split()
    assert git(work, "rev-parse", "upstream") == pin.commit
    assert git(work, "merge-base", "--is-ancestor", pin.commit, "patched") == ""
    assert git(work, "rev-parse", "patched^{tree}") == tree
    assert git(work, "log", "--format=%s%n%an", "upstream..patched") == subjects
    assert git(work, "symbolic-ref", "HEAD") == "refs/heads/patched"
    assert (work / "README").read_text() == "uncommitted\n"
    assert git(work, "rev-list", "--count", "patched") == "5"  # the pin (shallow), three patches and mine
    # the stand-in stays readable (backups made on it), under a ref of its own
    assert git(fetched.repo, "rev-parse", f"refs/patchset/imports/{old}") == old
    # the state moved with it: without the user's work, `patched` is what apply makes, and apply does nothing
    git(work, "checkout", "--quiet", "--", "README")
    git(work, "reset", "--quiet", "--hard", "HEAD~1")
    assert apply(pinned.project).noop
    assert git(work, "rev-parse", "upstream") == pin.commit


def test_a_bundle_carries_the_shallow_pin_commit(pinned: Proj, cache_dir: Path, tmp_path: Path) -> None:
    """The real pin has no parents here: its bundle is fetched with the commit marked shallow first
    (else git walks to the absent parents and refuses the bundle)."""
    pin = load_pin(pinned.project.pin_file)
    upstream.fetch(cache_dir, pin)
    bundle = upstream.export_bundle(cache_dir, pin, tmp_path / "carry" / "pin.bundle")
    offline = dataclasses.replace(pin, sources=())
    got = upstream.fetch(tmp_path / "other-cache", offline, bundle=bundle)
    assert (got.commit, got.source) == (pin.commit, "bundle pin.bundle")
    assert pin.commit in (got.repo / "shallow").read_text().split()

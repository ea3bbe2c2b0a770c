"""The sdist mirror: verified imports, and a cache left exactly as it was by anything bad."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from helpers import UPSTREAM_FILES, Upstream, evil_member, git, make_project, make_sdist, pin_toml, sdist_pin_sources

from builder.console import CliProgress
from builder.errors import SourceError
from builder.series.apply import apply
from builder.upstream import fetch as upstream
from builder.upstream import mirror
from builder.upstream.pin import Pin, load_pin


def _pin(tmp_path: Path, up: Upstream, archive: Path, **kw: object) -> Pin:
    f = tmp_path / "pin.toml"
    f.write_text(pin_toml(up.commit, up.tree, sdist_pin_sources(archive, **kw)))  # type: ignore[arg-type]
    return load_pin(f)


def _objects(cache: Path) -> set[str]:
    objects = cache / "upstream" / "llama.cpp.git" / "objects"
    return {p.relative_to(objects).as_posix() for p in objects.rglob("*") if p.is_file()} if objects.is_dir() else set()


def _assert_cache_clean(cache: Path, pin: Pin, objects_before: set[str]) -> None:
    repo = cache / "upstream" / "llama.cpp.git"
    if (repo / "HEAD").exists():
        assert git(repo, "for-each-ref", "refs/patchset/") == ""
        assert git(repo, "rev-parse", "--verify", "--quiet", f"refs/patchset/pins/{pin.commit}", check=False) == ""
        assert not (repo / "patchset-pins" / f"{pin.commit}.json").exists()
    assert list((cache / "tmp").iterdir()) == [] if (cache / "tmp").exists() else True
    downloads = cache / "downloads"
    assert [p for p in downloads.rglob("*") if p.is_file()] == [] if downloads.exists() else True
    assert _objects(cache) == objects_before
    assert upstream.lookup(cache, pin) is None


def test_sdist_source_used_when_git_fails(tmp_path: Path, up: Upstream, cache_dir: Path) -> None:
    archive = make_sdist(tmp_path / "dist" / "pkg-1.0.tar.gz", UPSTREAM_FILES)
    pin = _pin(tmp_path, up, archive)

    got = upstream.fetch(cache_dir, pin)

    assert not got.cached
    assert got.source == f"sdist {archive.as_uri()}"
    assert got.tree == up.tree
    repo = cache_dir / "upstream" / "llama.cpp.git"
    assert got.repo == repo
    assert git(repo, "rev-parse", f"refs/patchset/pins/{pin.commit}") == got.commit
    assert git(repo, "rev-parse", f"refs/patchset/pins/{pin.commit}^{{tree}}") == up.tree
    # the .git link file and the package files beside the subdir are not part of the tree
    assert sorted(git(repo, "ls-tree", "-r", "--name-only", got.commit).split()) == sorted(UPSTREAM_FILES)
    assert git(repo, "fsck", "--no-dangling") == ""
    assert list((cache_dir / "tmp").iterdir()) == []

    # cached: the archive is not even needed any more, and the lookup is two git queries (the pin's
    # ref, its tree), nothing written: counted, not timed (a busy machine makes any time limit flake)
    archive.unlink()
    trace = tmp_path / "trace"
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("PATCHSET_FAULT_TRACE", str(trace))
        again = upstream.fetch(cache_dir, pin)
    assert again.cached
    assert (again.commit, again.tree) == (got.commit, got.tree)
    points = [line.split(" ", 2)[2] for line in trace.read_text().splitlines()]
    assert len(points) == 2 and all(p.startswith("git ") and p.endswith("[rev-parse]") for p in points), points


def test_a_download_says_its_size_and_rate(tmp_path: Path, up: Upstream, cache_dir: Path,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    archive = make_sdist(tmp_path / "dist" / "pkg-1.0.tar.gz", UPSTREAM_FILES)
    pin = _pin(tmp_path, up, archive, bogus_git_first=False)
    upstream.fetch(cache_dir, pin, CliProgress())
    out = capsys.readouterr().out
    assert re.search(r"^  downloading .*pkg-1\.0\.tar\.gz \(checked by sha256\): \d+\.\d MiB in \d+ s, "
                     r"\d+\.\d MiB/s$", out, re.M), out


def test_sdist_import_is_deterministic_and_applies(tmp_path: Path, up: Upstream, cache_dir: Path) -> None:
    archive = make_sdist(tmp_path / "dist" / "pkg-1.0.tar.gz", UPSTREAM_FILES)
    proj = make_project(tmp_path, up, cache_dir, sources=sdist_pin_sources(archive))
    result = apply(proj.project)
    assert proj.wgit("rev-parse", "upstream^{tree}") == up.tree
    assert len(result.outcomes) == 3
    # a second cache importing the same archive gets the same commit id
    other = upstream.fetch(tmp_path / "cache2", load_pin(proj.project.pin_file))
    assert other.commit == result.upstream


def test_tampered_archive_is_refused_and_leaves_no_trace(tmp_path: Path, up: Upstream, cache_dir: Path) -> None:
    archive = make_sdist(tmp_path / "dist" / "pkg-1.0.tar.gz", UPSTREAM_FILES)
    pin = _pin(tmp_path, up, archive)
    expected = pin.sources[1].sha256  # type: ignore[union-attr]
    make_sdist(archive, {**UPSTREAM_FILES, "src/a.c": UPSTREAM_FILES["src/a.c"] + "/* backdoor */\n"})
    found = mirror.sha256_file(archive)

    with pytest.raises(SourceError) as ei:
        upstream.fetch(cache_dir, pin)

    msg = str(ei.value)
    assert "sha256 mismatch" in msg
    assert f"expected {expected}" in msg
    assert f"found {found}" in msg
    assert "no-such-repo.git" in msg  # the git source's failure is reported too
    _assert_cache_clean(cache_dir, pin, set())


@pytest.mark.parametrize(
    "files",
    [
        pytest.param({**UPSTREAM_FILES, "src/extra.c": "/* not upstream */\n"}, id="extra-file"),
        pytest.param({**UPSTREAM_FILES, "src/b.c": UPSTREAM_FILES["src/b.c"].replace("n++", "n += 1")},
                     id="changed-file"),
    ],
)
def test_archive_with_wrong_tree_is_refused_and_leaves_no_trace(
    tmp_path: Path, up: Upstream, cache_dir: Path, files: dict[str, str]
) -> None:
    # the checksum is right (it pins this very archive), the tree inside it is not the pin's
    archive = make_sdist(tmp_path / "dist" / "pkg-1.0.tar.gz", files)
    pin = _pin(tmp_path, up, archive, bogus_git_first=False)
    # warm the cache repository with another upstream first, so there are objects to compare
    (cache_dir / "upstream").mkdir(parents=True)
    git(cache_dir / "upstream", "init", "--quiet", "--bare", "llama.cpp.git")
    git(cache_dir / "upstream" / "llama.cpp.git", "fetch", "--quiet", str(up.bare), "main:refs/heads/other")
    objects_before = _objects(cache_dir)
    assert objects_before

    with pytest.raises(SourceError) as ei:
        upstream.fetch(cache_dir, pin)

    msg = str(ei.value)
    m = re.search(r"imported tree ([0-9a-f]{40}) does not match the pinned tree ([0-9a-f]{40})", msg)
    assert m, msg
    assert m.group(1) != up.tree
    assert m.group(2) == up.tree
    # the refused import's objects (the extra or changed blob) must not stay in the cache
    assert git(cache_dir / "upstream" / "llama.cpp.git", "for-each-ref", "--format=%(refname)") == "refs/heads/other"
    _assert_cache_clean(cache_dir, pin, objects_before)


@pytest.mark.parametrize(
    "member",
    [
        pytest.param(evil_member("pkg-1.0/../evil"), id="dotdot-file"),
        pytest.param(evil_member("/tmp/evil"), id="absolute-file"),
        pytest.param(evil_member("pkg-1.0/vendor/up/evil", symlink_to="/etc/passwd"), id="symlink-absolute"),
        pytest.param(evil_member("pkg-1.0/evil", symlink_to="../../x"), id="symlink-leaves-archive"),
        # inside the archive, but outside the extracted subdir: dangling at best, an escape at worst
        pytest.param(evil_member("pkg-1.0/vendor/up/evil", symlink_to="../../x"), id="symlink-leaves-subdir"),
        pytest.param(evil_member("pkg-1.0/vendor/up/evil", hardlink_to="pkg-1.0/setup.py"),
                     id="hardlink-leaves-subdir"),
        pytest.param(evil_member("pkg-1.0/vendor/up/evil", device=True), id="device"),
    ],
)
def test_hostile_archive_is_refused(tmp_path: Path, up: Upstream, cache_dir: Path, member) -> None:  # type: ignore[no-untyped-def]
    archive = make_sdist(tmp_path / "dist" / "pkg-1.0.tar.gz", UPSTREAM_FILES, extra=[member])
    outside = tmp_path / "a" / "b"
    dest = outside / "dest"

    with pytest.raises(SourceError, match="refused"):
        mirror.extract_subdir(archive, "vendor/up", dest)
    # refused before anything was written
    assert not outside.exists() or [p for p in outside.rglob("*")] == []
    assert not list(tmp_path.rglob("evil"))

    pin = _pin(tmp_path, up, archive)
    with pytest.raises(SourceError, match="refused"):
        upstream.fetch(cache_dir, pin)
    assert not list(tmp_path.rglob("evil"))
    assert not list(tmp_path.rglob("x"))
    _assert_cache_clean(cache_dir, pin, set())

"""`patchset pin`: a pin written from the source itself, accepted by fetch and by rebase --onto."""

from __future__ import annotations

import zlib
from pathlib import Path

import pytest
from helpers import UPSTREAM_FILES, Proj, git, make_sdist, sha256

from builder.cli import main
from builder.series.apply import apply
from builder.upstream import fetch as upstream
from builder.upstream.pin import GitSource, SdistSource, load_pin

FAKE_COMMIT = "1234567890abcdef1234567890abcdef12345678"


def _pin(proj: Proj, *args: str) -> int:
    return main(["--project", str(proj.root), "pin", *args])


def test_pin_from_a_tarball_is_accepted_by_fetch_and_refused_after_one_byte_changes(
        proj: Proj, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    archive = make_sdist(tmp_path / "dl" / "pkg-1.0.tar.gz", dict(UPSTREAM_FILES))
    out = tmp_path / "new.toml"

    assert _pin(proj, "--sdist", str(archive), "--subdir", "vendor/up", "--commit", FAKE_COMMIT,
                "--tag", "b2", "--date", "2024-05-06", "--out", str(out)) == 0

    pin = load_pin(out)
    # the tree git itself gives the same files (the synthetic upstream's commit), and the archive's hash
    assert pin.tree == proj.upstream.tree
    assert (pin.commit, pin.tag, pin.date) == (FAKE_COMMIT, "b2", "2024-05-06")
    assert pin.sources[0] == GitSource(proj.upstream.url)  # the current pin's remote comes first
    sdist = pin.sources[1]
    assert isinstance(sdist, SdistSource)
    assert (sdist.sha256, sdist.url, sdist.subdir, sdist.tree) == (sha256(archive), archive.as_uri(), "vendor/up", "")
    assert "given with --commit" in pin.tree_note
    assert "commit-to-tree link is unchecked" in pin.tree_note

    # the remote does not have the commit: fetch falls back to the archive and verifies it
    monkeypatch.setenv("PATCHSET_CACHE", str(tmp_path / "cache-a"))
    assert main(["--project", str(proj.root), "fetch", "--pin", str(out)]) == 0
    assert upstream.lookup(tmp_path / "cache-a", pin) is not None

    data = bytearray(archive.read_bytes())
    data[len(data) // 2] ^= 0x01
    archive.write_bytes(bytes(data))
    monkeypatch.setenv("PATCHSET_CACHE", str(tmp_path / "cache-b"))
    capsys.readouterr()
    assert main(["--project", str(proj.root), "fetch", "--pin", str(out)]) == 1
    assert "sha256 mismatch" in capsys.readouterr().err
    assert upstream.lookup(tmp_path / "cache-b", pin) is None


def _sdist_with_submodule_git_dir(path: Path, commit: str, obj: bytes,
                                  files: dict[str, str] = UPSTREAM_FILES) -> Path:
    """An sdist that ships the vendored submodule's git dir as llama-cpp-python's do: HEAD and
    the commit's loose object (`obj`, stored under the commit's id)."""
    gitdir = ".git/modules/vendor/up"
    return make_sdist(path, dict(files), package_files={
        f"{gitdir}/HEAD": f"{commit}\n".encode(),
        f"{gitdir}/objects/{commit[:2]}/{commit[2:]}": obj,
    })


def test_commit_read_from_the_vendored_submodule_git_dir(proj: Proj, tmp_path: Path) -> None:
    up = proj.upstream
    obj = (up.src / ".git" / "objects" / up.commit[:2] / up.commit[2:]).read_bytes()
    archive = _sdist_with_submodule_git_dir(tmp_path / "pkg.tar.gz", up.commit, obj)
    out = tmp_path / "new.toml"

    assert _pin(proj, "--sdist", str(archive), "--subdir", "vendor/up", "--out", str(out)) == 0

    pin = load_pin(out)
    assert (pin.commit, pin.tree) == (up.commit, up.tree)
    # the committer date of the object (the test's commit was made today, in the local zone)
    assert pin.date == git(up.src, "show", "-s", "--format=%cd", "--date=format:%Y-%m-%d", up.commit)
    assert "read from the archive" in pin.tree_note
    assert "sha1 checked" in pin.tree_note


def test_a_forged_commit_object_is_not_believed(proj: Proj, tmp_path: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    up = proj.upstream
    # an object that claims another tree, stored under the commit's id: its sha1 does not match
    body = f"tree {'0' * 40}\nauthor a <a> 1 +0000\ncommitter a <a> 1 +0000\n\nx\n".encode()
    forged = zlib.compress(b"commit %d\0" % len(body) + body)
    archive = _sdist_with_submodule_git_dir(tmp_path / "pkg.tar.gz", up.commit, forged)
    out = tmp_path / "new.toml"

    assert _pin(proj, "--sdist", str(archive), "--subdir", "vendor/up", "--out", str(out)) == 0

    pin = load_pin(out)
    assert (pin.commit, pin.tree) == (up.commit, up.tree)
    assert "unchecked" in pin.tree_note


def test_sdist_without_a_commit_marker_needs_commit(proj: Proj, tmp_path: Path,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    files = dict(UPSTREAM_FILES)
    archive = make_sdist(tmp_path / "pkg.tar.gz", files)
    assert _pin(proj, "--sdist", str(archive), "--subdir", "vendor/up", "--out", str(tmp_path / "a.toml")) == 2
    err = capsys.readouterr().err
    assert "pass --commit" in err
    assert not (tmp_path / "a.toml").exists()

    # a packager's build-info with a short id: named, but a pin needs the full id
    files["cmake/build-info.cmake"] = 'set(BUILD_NUMBER 4321)\nset(BUILD_COMMIT "abc1234")\n'
    archive = make_sdist(tmp_path / "pkg2.tar.gz", files)
    assert _pin(proj, "--sdist", str(archive), "--subdir", "vendor/up", "--out", str(tmp_path / "a.toml")) == 2
    err = capsys.readouterr().err
    assert "cmake/build-info.cmake records commit 'abc1234'" in err


def test_pin_from_git_then_rebase_onto_it(proj: Proj, tmp_path: Path) -> None:
    apply(proj.project)
    new = proj.upstream.advance({"README": "tiny upstream, moved on\n"}, "readme\n")
    git(proj.upstream.bare, "tag", "b2", new)
    out = tmp_path / "b2.toml"

    assert _pin(proj, "--git", proj.upstream.url, "b2", "--out", str(out)) == 0
    pin = load_pin(out)
    assert (pin.commit, pin.tree, pin.tag) == (new, proj.upstream.tree_of(new), "b2")
    assert pin.sources == (GitSource(proj.upstream.url),)
    # never overwritten silently, and never the pin in use
    assert _pin(proj, "--git", proj.upstream.url, "b2", "--out", str(out)) == 2
    assert _pin(proj, "--git", proj.upstream.url, "b2", "--out", str(proj.project.pin_file)) == 2

    assert main(["--project", str(proj.root), "rebase", "--onto", str(out)]) == 0
    moved = load_pin(proj.project.pin_file)
    assert (moved.commit, moved.tree) == (new, pin.tree)


def test_mirror_that_differs_from_its_commit_records_its_own_tree(
        proj: Proj, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The archive leaves README out, but ships the commit object: the pin's tree is the commit's
    (what a git fetch verifies), the sdist source's own tree is what the archive gives."""
    up = proj.upstream
    obj = (up.src / ".git" / "objects" / up.commit[:2] / up.commit[2:]).read_bytes()
    files = {k: v for k, v in UPSTREAM_FILES.items() if k != "README"}
    archive = _sdist_with_submodule_git_dir(tmp_path / "pkg.tar.gz", up.commit, obj, files)
    out = tmp_path / "new.toml"

    assert _pin(proj, "--sdist", str(archive), "--subdir", "vendor/up", "--git-source",
                str(tmp_path / "none.git"), "--out", str(out)) == 0

    pin = load_pin(out)
    sdist = pin.sources[1]
    assert isinstance(sdist, SdistSource)
    assert pin.tree == up.tree
    assert sdist.tree not in ("", up.tree)
    assert "differ from upstream's" in pin.tree_note
    # the git remote is missing: fetch takes the archive and checks it against the source's own tree
    assert main(["--project", str(proj.root), "fetch", "--pin", str(out)]) == 0


@pytest.mark.parametrize(("args", "message"), [
    (["--sdist", "missing.tar.gz"], "archive file not found"),
    (["--sdist", "pkg==1.0", "--commit", "abc1234"], "full 40-hex commit id"),
    (["--sdist", "pkg==1.0", "--date", "yesterday"], "YYYY-MM-DD"),
    (["--sdist", "pkg==1.0", "--subdir", "../up"], "relative path inside the archive"),
    (["--git", "file:///nowhere.git", "main", "--commit", FAKE_COMMIT], "--commit is for an sdist"),
])
def test_bad_arguments_are_one_line_errors(proj: Proj, capsys: pytest.CaptureFixture[str], args: list[str],
                                           message: str) -> None:
    assert _pin(proj, *args) == 2
    err = capsys.readouterr().err
    assert message in err
    assert len(err.strip().splitlines()) == 1


def test_a_held_release_is_never_pinned(proj: Proj, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """upstream/hold lists upstream commits and tags known to be bad (issue 23): pin refuses them."""
    new = proj.upstream.advance({"README": "tiny upstream, broken\n"}, "readme\n")
    git(proj.upstream.bare, "tag", "b2", new)
    hold = proj.project.pin_file.parent / "hold"
    out = tmp_path / "b2.toml"
    hold.write_text(f"# known bad\n{new[:10]} breaks the Metal build (see #123)\n")
    assert _pin(proj, "--git", proj.upstream.url, "b2", "--out", str(out)) == 2
    assert f"{hold}:2: b2 is held ({new[:10]}: breaks the Metal build (see #123))" in capsys.readouterr().err
    assert not out.exists()
    hold.write_text("b2 the tag itself\n")
    assert _pin(proj, "--git", proj.upstream.url, "b2", "--out", str(out)) == 2
    hold.write_text("b3 another release\n")
    assert _pin(proj, "--git", proj.upstream.url, "b2", "--out", str(out)) == 0
    hold.write_text("b2\n")
    assert _pin(proj, "--git", proj.upstream.url, "b2", "--out", str(tmp_path / "x.toml")) == 2
    assert f"{hold}:1: expected '<commit or tag> <reason>'" in capsys.readouterr().err

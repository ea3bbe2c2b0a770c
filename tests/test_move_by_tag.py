"""Moving by name: `rebase --onto`, `bump --onto` and `canary --range` take an upstream tag or branch
name of the pin's git source, and a tag lands in the new pin. On a synthetic upstream with tags (a
local bare repository: no network)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from helpers import UPSTREAM_FILES, Proj, Upstream, git, json_document, make_project, make_sdist, sha256

from builder.cli import main
from builder.errors import SourceError
from builder.series.apply import apply
from builder.upstream import fetch
from builder.upstream.pin import GitSource, SdistSource, load_pin
from tests.test_bump import make_mini


def tag(up: Upstream, name: str, rev: str, annotated: bool = True) -> None:
    """Tag `rev` in the upstream and push the tag to its remote."""
    git(up.src, "tag", *(["-a", "-m", f"release {name}"] if annotated else []), name, rev)
    git(up.src, "push", "--quiet", str(up.bare), f"refs/tags/{name}")


def ps(proj: Proj, *args: str) -> int:
    return main(["--project", str(proj.root), *args])


def test_rebase_onto_a_tag_records_it_in_the_pin(proj: Proj, capsys: pytest.CaptureFixture[str]) -> None:
    apply(proj.project)
    new = proj.upstream.advance({"README": "tiny upstream, b2\n"}, "upstream b2\n")
    tag(proj.upstream, "b2", new)
    proj.upstream.advance({"README": "tiny upstream, after b2\n"}, "after b2\n")

    assert ps(proj, "rebase", "--onto", "b2", "--dry-run", "--json") == 0
    assert json_document(capsys.readouterr().out)["new"] == new
    assert ps(proj, "rebase", "--onto", "b2") == 0
    assert f"onto {new[:12]} (b2)" in capsys.readouterr().out
    pin = load_pin(proj.project.pin_file)
    # the annotated tag's commit (not the tag object), its name kept, the tree of the fetched commit
    assert (pin.commit, pin.tag, pin.tree) == (new, "b2", proj.upstream.tree_of(new))
    # and the commit's own date, as `patchset pin` records it (a wheel's provenance and timestamps read it)
    assert pin.date == git(proj.upstream.src, "show", "-s", "--format=%cI", new)[:10]
    assert proj.wgit("rev-parse", "upstream") == new
    assert ps(proj, "refresh", "--check") == 0


def test_a_move_keeps_the_bindings_sdist_which_cannot_give_the_new_pin(
        tmp_path: Path, up: Upstream, cache_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # the pin as `init --bindings` writes it: the git source, then the bindings' sdist that vendors the pin
    # (here with a tree of its own, as a mirror known to differ would record it)
    sdist = make_sdist(tmp_path / "dl" / "llama_cpp_python-1.0.tar.gz", dict(UPSTREAM_FILES),
                       subdir="vendor/llama.cpp")
    proj = make_project(tmp_path, up, cache_dir, sources=[
        {"kind": "git", "url": up.url},
        {"kind": "sdist", "url": sdist.as_uri(), "sha256": sha256(sdist), "subdir": "vendor/llama.cpp",
         "tree": up.tree}])
    apply(proj.project)
    new = up.advance({"README": "tiny upstream, b2\n"}, "upstream b2\n")
    tag(up, "b2", new)
    assert ps(proj, "rebase", "--onto", "b2") == 0, capsys.readouterr()
    pin = load_pin(proj.project.pin_file)
    # `patchset wheel` still finds the bindings; the sdist names no tree: the new pin's is the one it must give
    assert pin.sources == (GitSource(up.url), SdistSource(sha256=sha256(sdist), subdir="vendor/llama.cpp",
                                                          url=sdist.as_uri()))
    # and it cannot give it: its files are the old commit's
    with pytest.raises(SourceError, match="no source gave verified"):
        fetch.fetch(tmp_path / "fresh-cache", dataclasses.replace(pin, sources=pin.sources[1:]))


def test_rebase_onto_a_branch_records_no_tag(proj: Proj, capsys: pytest.CaptureFixture[str]) -> None:
    apply(proj.project)
    new = proj.upstream.advance({"README": "tiny upstream, on main\n"}, "main moves\n")
    assert ps(proj, "rebase", "--onto", "refs/heads/main") == 0, capsys.readouterr()
    pin = load_pin(proj.project.pin_file)
    assert (pin.commit, pin.tag) == (new, "")


def test_an_unknown_name_is_refused_in_one_line_and_nothing_moves(proj: Proj,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    apply(proj.project)
    pin = proj.project.pin_file.read_bytes()
    before = proj.snapshot()
    for args, words in ((["rebase", "--onto", "b404"], "--onto b404: "),
                        (["rebase", "--onto", "b404", "--dry-run"], "no tag or branch 'b404'"),
                        (["rebase", "--onto", "bad..name"], "not a commit id, tag or branch name"),
                        (["rebase", "--onto", "abc1234"], "a commit id is given in full, 40 hex"),
                        (["canary", "--range", "b1..b404"], "--range b1: ")):
        capsys.readouterr()
        assert ps(proj, *args) == 2
        errors = [ln for ln in capsys.readouterr().err.splitlines() if ln.startswith("error:")]
        assert len(errors) == 1 and words in errors[0], errors
    assert proj.project.pin_file.read_bytes() == pin and proj.snapshot() == before


def test_canary_takes_a_range_of_tags(proj: Proj, capsys: pytest.CaptureFixture[str]) -> None:
    up = proj.upstream
    tag(up, "b1", up.commit, annotated=False)
    ids = [up.advance({f"notes/n{i}.txt": f"note {i}\n"}, f"upstream change {i}\n") for i in range(1, 5)]
    tag(up, "b3", ids[1])
    tag(up, "b5", ids[3])
    assert ps(proj, "canary", "--range", "b3..b5", "--json") == 0
    data = json_document(capsys.readouterr().out)
    assert (data["old"], data["new"], data["commits"]) == (ids[1], ids[3], 2)
    assert ps(proj, "canary", "--range", "b1..b3", "--json") == 0
    data = json_document(capsys.readouterr().out)
    assert (data["old"], data["new"], data["commits"]) == (up.commit, ids[1], 2)


def test_bump_onto_a_tag_records_it_in_the_pin(tmp_path: Path, up: Upstream, cache_dir: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    mini = make_mini(tmp_path, up, cache_dir)
    new = mini.upstream.advance({"README": "calc b9\n"}, "README\n")
    tag(mini.upstream, "b9", new)
    assert ps(mini, "bump", "--onto", "b9", "-j", "2", "--confirm", "0") == 0, capsys.readouterr()
    pin = load_pin(mini.project.pin_file)
    assert (pin.commit, pin.tag) == (new, "b9")
    assert mini.wgit("rev-parse", "upstream") == new

"""A switch to a tree whose files differ in comments and whitespace only compiles nothing again: the
worktree gets those files' times back (builder.prove.trees), and a real ninja finds nothing to do; a
change of a token compiles what includes the file again. Patch 3's one line of comment in
ggml-backend.h compiled all of ggml-cuda again in its before tree (226 s on 16 cores)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from builder.compile.toolchain import find_tool
from builder.gitrepo import GitRepo, init_repo
from builder.prove import trees

HEADER = "#pragma once\n// the value\nint value(void);\n"
MAIN = '#include "a.h"\nint value(void) { return 3; }\nint main(void) { return value() - 3; }\n'
NINJA = """\
rule cc
  command = cc -MD -MF $out.d -c $in -o $out
  depfile = $out.d
  deps = gcc
rule link
  command = cc $in -o $out
build main.o: cc {src}/main.c
build main: link main.o
"""

pytestmark = pytest.mark.skipif(shutil.which("cc") is None, reason="no C compiler")


def commit(repo: Path, files: dict[str, str], message: str) -> str:
    for name, text in files.items():
        (repo / name).write_text(text)
    subprocess.run(["git", "-C", str(repo), "add", "-A"], check=True)
    subprocess.run(["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t", "commit", "--quiet",
                    "-m", message], check=True)
    return subprocess.run(["git", "-C", str(repo), "rev-parse", "HEAD"], check=True, capture_output=True,
                          text=True).stdout.strip()


@pytest.fixture
def history(tmp_path: Path) -> tuple[GitRepo, str, str, str]:
    repo = tmp_path / "repo"
    init_repo(repo)
    base = commit(repo, {"a.h": HEADER, "main.c": MAIN}, "base")
    comment = commit(repo, {"a.h": HEADER.replace("// the value\n", "// the value\n// of three lines\n\n")},
                     "a comment")
    token = commit(repo, {"a.h": HEADER.replace("int value(void);", "int value(void);\nint other;")}, "a token")
    return GitRepo(repo), base, comment, token


def build(build_dir: Path, src: Path) -> int:
    """Run ninja in `build_dir` on the sources in `src`; the object's time after it (ns)."""
    build_dir.mkdir(exist_ok=True)
    (build_dir / "build.ninja").write_text(NINJA.format(src=src))
    subprocess.run([find_tool("ninja").path, "-C", str(build_dir)], check=True, capture_output=True)
    return (build_dir / "main.o").stat().st_mtime_ns


def test_a_worktree_switch_keeps_what_a_comment_only_change_would_compile_again(
        tmp_path: Path, history: tuple[GitRepo, str, str, str]) -> None:
    git, base, comment, token = history
    src, out = tmp_path / "src", tmp_path / "build"
    trees.checkout_detached(git, src, base)
    first = build(out, src)
    kept = trees.checkout_detached(git, src, comment)
    assert "of three lines" in (src / "a.h").read_text()
    assert not GitRepo(src).is_dirty()
    assert build(out, src) == first, "a comment in a header compiled main.c again"
    assert kept == ("a.h",)
    assert trees.checkout_detached(git, src, token) == ()
    assert build(out, src) > first, "a new declaration in a header did not compile main.c again"


def test_a_scratch_tree_switch_keeps_them_too(tmp_path: Path, history: tuple[GitRepo, str, str, str]) -> None:
    git, base, comment, token = history
    src, out, index = tmp_path / "src", tmp_path / "build", tmp_path / "index"
    trees.checkout_tree(git, src, index, git.tree_of(base))
    first = build(out, src)
    kept = trees.checkout_tree(git, src, index, git.tree_of(comment))
    assert build(out, src) == first, "a comment in a header compiled main.c again"
    assert kept == ("a.h",)
    # back again: the comment goes, nothing is compiled; then a token comes
    assert trees.checkout_tree(git, src, index, git.tree_of(base)) == ("a.h",)
    assert build(out, src) == first
    assert trees.checkout_tree(git, src, index, git.tree_of(token)) == ()
    assert build(out, src) > first


def test_a_file_edited_by_hand_in_the_worktree_keeps_its_own_time(
        tmp_path: Path, history: tuple[GitRepo, str, str, str]) -> None:
    git, base, comment, _ = history
    src, out = tmp_path / "src", tmp_path / "build"
    trees.checkout_detached(git, src, base)
    first = build(out, src)
    (src / "a.h").write_text(HEADER + "int edited;\n")
    build(out, src)
    # the worktree held what no tree has: the switch writes every changed file anew
    assert trees.checkout_detached(git, src, comment) == ()
    assert build(out, src) > first


def test_a_tree_is_checked_out_with_the_comments_of_the_reference(
        tmp_path: Path, history: tuple[GitRepo, str, str, str]) -> None:
    git, base, comment, token = history
    made, files = trees.with_comments_of(git, base, comment)
    assert files == ("a.h",)
    assert made != base
    # the reference's header, the tree's own main.c, and the tree it stands for as its parent
    assert git.blob(made, "a.h") == git.blob(comment, "a.h")
    assert git.blob(made, "main.c") == git.blob(base, "main.c")
    assert git.out("rev-parse", f"{made}^") == base
    # made again, the same commit: every lane checks out the same tree for it
    assert trees.with_comments_of(git, base, comment) == (made, files)
    # a header that differs in a token is the tree's own; the reference itself and no reference change nothing
    assert trees.with_comments_of(git, token, comment) == (token, ())
    assert trees.with_comments_of(git, comment, comment) == (comment, ())
    assert trees.with_comments_of(git, base, None) == (base, ())
    # checked out and built, it compiles the same objects as the reference's tree in another folder
    src, out, ref_src, ref_out = tmp_path / "src", tmp_path / "build", tmp_path / "ref", tmp_path / "rbuild"
    trees.checkout_detached(git, ref_src, comment)
    build(ref_out, ref_src)
    trees.checkout_detached(git, src, made)
    build(out, src)
    assert (src / "a.h").read_bytes() == (ref_src / "a.h").read_bytes()
    assert not GitRepo(src).is_dirty()

"""The trees a proof runs on, made with git plumbing only, and the one worktree they are checked out in.

For patch k: before = pin + patches 1..k-1 + only patch k's test paths; after = pin + 1..k;
mutation = after + the patch's known-bad variant. The commits are made in a temporary index (the
user's work tree and patches/ are never touched).

A switch from tree to tree rewrites only the files that differ; a C-family file whose change is
comments and whitespace only (the same tokens, builder.prove.lexers) gets its time of before the
switch back, so the build folder beside it does not compile again what includes it: the same code
(patch 3's one line of comment in ggml-backend.h compiled all of ggml-cuda again, 226 s on 16 cores).
And a tree is checked out with the series head's version of such files (`with_comments_of`), so that
the trees of every lane and the patched build compile them alike and share objects in the compiler cache.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from builder.compile import backends as backendmod
from builder.errors import ProcessError, SeriesError
from builder.gitrepo import COMMITTER, ISOLATED, GitRepo
from builder.prove import lexers
from builder.series.model import Series

_DATE = {"GIT_AUTHOR_DATE": "2000-01-01T00:00:00Z", "GIT_COMMITTER_DATE": "2000-01-01T00:00:00Z",
         "GIT_AUTHOR_NAME": "patchset verify", "GIT_AUTHOR_EMAIL": "verify@patchset.invalid"}


@dataclass(frozen=True)
class Trees:
    before: str
    after: str
    mutations: tuple[str, ...]
    parent: str = ""
    """The after tree of the previous patch (the pin for the first): what the patch applies on."""

    def named(self) -> list[tuple[str, str]]:
        """(name, commit) of each proof tree: before, after, mutation, mutation-2, ..."""
        refs = [("before", self.before), ("after", self.after)]
        return refs + [("mutation" if i == 1 else f"mutation-{i}", c) for i, c in enumerate(self.mutations, 1)]


class TreeMaker:
    """Builds the before/after/mutation commits of each patch with plumbing only."""

    def __init__(self, git: GitRepo, base: str, tmp: Path) -> None:
        self.git = git
        self.base = base
        self.tmp = tmp

    def commit(self, parent: str, mail: Path, message: str, include: tuple[str, ...] = ()) -> str:
        index = self.tmp / "index"
        index.unlink(missing_ok=True)
        env = {**ISOLATED, **COMMITTER, **_DATE, "GIT_INDEX_FILE": str(index)}
        self.git.run("read-tree", parent, env=env)
        args = ["apply", "--cached", "--whitespace=nowarn"]
        for p in include:
            args += [f"--include={p}", f"--include={p.rstrip('/')}/*"]
        try:
            self.git.run(*args, str(mail), env=env)
        except ProcessError as e:
            raise SeriesError(f"{mail.name}: does not apply on {parent[:12]} ({e.stderr.strip()}); "
                              "run `patchset apply` to see and resolve the conflict") from e
        tree = self.git.out("write-tree", env=env)
        if include and tree == self.git.tree_of(parent):
            raise SeriesError(
                f"{mail.name}: Patchset-Test-Paths ({' '.join(include)}) match no file the patch changes")
        return self.git.out("commit-tree", tree, "-p", parent, "-m", message, env=env)

    def for_series(self, series: Series, patches_dir: Path) -> dict[int, Trees]:
        trees: dict[int, Trees] = {}
        prev = self.base
        for p in series.patches:
            if p.meta.test_in_tree or not p.meta.tests:
                # a fix to the test program itself: before is the tree it applies on; a patch with no
                # test has no before tree to run (a fork's series is mostly such patches)
                before = prev
            else:
                before = self.commit(prev, p.path, f"verify: before {p.name}", p.meta.test_part)
            after = self.commit(prev, p.path, f"verify: after {p.name}")
            mutations = tuple(self.commit(after, patches_dir / m, f"verify: mutation {m}") for m in p.meta.mutation)
            trees[p.index] = Trees(before, after, mutations, prev)
            for kind, c in trees[p.index].named():
                self.git.update_ref(f"refs/patchset/verify/{p.index:04d}/{kind}", c)
            prev = after
        return trees


_WORKTREES = threading.Lock()


def comment_only_changes(git: GitRepo, old: str, new: str) -> tuple[str, ...]:
    """The C-family files that `old` and `new` (commits or trees) both have and that differ in comments
    and whitespace only: their tokens are the same, so what is compiled from them is the same code,
    but for the line numbers `__LINE__` gives (which only messages show)."""
    raw = git.run("diff", "--raw", "-z", "--no-abbrev", "--no-renames", "--diff-filter=M", old, new).stdout
    fields = raw.split("\0")
    same = []
    # `:mode mode blob blob M` then the path, each ended by a NUL
    for meta, rel in zip(fields[0::2], fields[1::2], strict=False):
        if not meta or not rel.endswith(lexers.C_LIKE):
            continue
        blobs = meta.split()[2:4]
        mine = _token_digest(git, blobs[0], rel)
        if mine is not None and mine == _token_digest(git, blobs[1], rel):
            same.append(rel)
    return tuple(same)


_TOKEN_DIGESTS: dict[tuple[str, str], str | None] = {}
_TOKEN_LOCKS: dict[tuple[str, str], threading.Lock] = {}
_TOKEN_LOCKS_LOCK = threading.Lock()


def _token_digest(git: GitRepo, blob: str, rel: str) -> str | None:
    """A digest of the tokens of `blob` as the file `rel` (lexers.tokens; None: not readable or no lexer), kept by
    blob id for the process: every tree of a run is compared with the series head (with_comments_of), and lexing
    the head's test-backend-ops.cpp again for each took 17.5 s for the 21 trees of this series on 2 cores."""
    key = (blob, rel)
    if key in _TOKEN_DIGESTS:
        return _TOKEN_DIGESTS[key]
    # once per blob: lanes that reach the same file at once wait for the first to lex it
    with _TOKEN_LOCKS_LOCK:
        lock = _TOKEN_LOCKS.setdefault(key, threading.Lock())
    with lock:
        if key not in _TOKEN_DIGESTS:
            text = git.run("cat-file", "blob", blob, check=False)
            found = lexers.tokens(text.stdout, rel) if text.returncode == 0 else None
            _TOKEN_DIGESTS[key] = None if found is None else hashlib.sha256(
                "".join(f"{len(t)}:{t}" for t in found).encode("utf-8", "surrogatepass")).hexdigest()
    return _TOKEN_DIGESTS[key]


def with_comments_of(git: GitRepo, commit: str, reference: str | None) -> tuple[str, tuple[str, ...]]:
    """`commit`, or a commit of its tree with `reference`'s version of each C-family file that differs from it
    in comments and whitespace only (comment_only_changes), and those files. What is compiled from it is the
    same code, and every tree of a run compiles those files alike: the compiler cache finds the objects of one
    tree's build in another's (patch 3's one line of comment in ggml-backend.h, which every object of ggml and
    llama includes, compiled all of them again for each tree before it in a build folder of its own)."""
    tree, same = tree_with_comments_of(git, commit, reference)
    if not same or reference is None:
        return commit, ()
    env = {**ISOLATED, **COMMITTER, **_DATE}
    made = git.out("commit-tree", tree, "-p", commit, "-m",
                   f"verify: {commit[:12]} with the comments of {reference[:12]}", env=env)
    return made, same


def tree_with_comments_of(git: GitRepo, tree: str, reference: str | None) -> tuple[str, tuple[str, ...]]:
    """`tree` (a tree or commit), or a tree with `reference`'s version of each C-family file that differs from it
    in comments and whitespace only, and those files (with_comments_of's tree, for a check that builds trees
    rather than commits: `rebase --fixed-upstream`)."""
    if not reference or reference == tree:
        return tree, ()
    same = comment_only_changes(git, reference, tree)
    if not same:
        return tree, ()
    entries = git.run("ls-tree", "-z", reference, "--", *same).stdout
    with tempfile.TemporaryDirectory(prefix="patchset-comments-") as tmp:
        env = {**ISOLATED, "GIT_INDEX_FILE": str(Path(tmp) / "index")}
        git.run("read-tree", tree, env=env)
        git.run("update-index", "-z", "--index-info", env=env, input_text=entries)
        return git.out("write-tree", env=env), same


def _switch_keeping_times(src: Path, same: tuple[str, ...], switch: Callable[[], None]) -> tuple[str, ...]:
    """`switch()` (which rewrites the files of `src`), then the times of before it back on the files
    named in `same` (comment_only_changes): what was compiled from them is not compiled again. The
    files whose times were kept."""
    times = {}
    for rel in same:
        try:
            st = (src / rel).stat()
        except OSError:
            continue
        times[rel] = (st.st_atime_ns, st.st_mtime_ns)
    switch()
    for rel, ns in times.items():
        os.utime(src / rel, ns=ns)
    return tuple(times)


def checkout_detached(git: GitRepo, path: Path, commit: str) -> tuple[str, ...]:
    """Make `path` a worktree of `git` with exactly `commit` checked out (detached, clean).

    One worktree per purpose, switched from tree to tree: a switch rewrites only the files that
    differ, so the build folder beside it recompiles only those, and nothing of the files that differ
    in comments and whitespace only (whose times it keeps, and returns).
    """
    if not (path / ".git").exists():
        # lanes make their worktrees at once: `prune` must not see another one half-made
        with _WORKTREES:
            if path.exists():
                shutil.rmtree(path)
            git.run("worktree", "prune")
            path.parent.mkdir(parents=True, exist_ok=True)
            git.run("worktree", "add", "--detach", "--force", str(path), commit)
        return ()
    wt = GitRepo(path)
    head, dirty = wt.rev("HEAD"), bool(wt.is_dirty())
    if head == commit and not dirty:
        return ()
    # a file edited in the worktree holds what no tree has: its time says so, and stays
    same = comment_only_changes(git, head, commit) if head and not dirty else ()

    def switch() -> None:
        wt.run("checkout", "--quiet", "--detach", "--force", commit)
        wt.run("clean", "-fdxq")
    kept = _switch_keeping_times(path, same, switch)
    if kept:
        wt.run("update-index", "-q", "--refresh", check=False)
    return kept


def checkout_tree(git: GitRepo, src: Path, index: Path, tree: str) -> tuple[str, ...]:
    """Make `src` hold exactly `tree` of `git` (a scratch repository, no worktree of its own), through
    `index`, which says what was written there last: only the files that differ are rewritten, so the
    build folder of `src` recompiles only those (`rebase --fixed-upstream`, `canary --build`), and
    nothing of the files that differ in comments and whitespace only (whose times it keeps, and returns)."""
    env = {"GIT_INDEX_FILE": str(index)}
    work = f"--work-tree={src}"
    src.mkdir(parents=True, exist_ok=True)
    index.parent.mkdir(parents=True, exist_ok=True)
    same: tuple[str, ...] = ()
    if index.exists():
        # what the index says was written there last, when the files there still are that
        last = git.run("write-tree", env=env, check=False)
        clean = git.run(work, "diff-files", "--quiet", env=env, check=False).returncode == 0
        if last.returncode == 0 and clean:
            same = comment_only_changes(git, last.stdout.strip(), tree)

    def switch() -> None:
        if git.run(work, "read-tree", "--reset", "-u", tree, env=env, check=False).returncode != 0:
            # an index of another run that git cannot read: write every file again
            index.unlink(missing_ok=True)
            git.run(work, "read-tree", "--reset", "-u", tree, env=env)
    kept = _switch_keeping_times(src, same, switch)
    if kept:
        git.run(work, "update-index", "-q", "--refresh", env=env, check=False)
    # files of a tree verify checked out there that this one lacks: not in this index, so left behind
    others = git.run(work, "ls-files", "-z", "--others", env=env).stdout
    for rel in filter(None, others.split("\0")):
        (src / rel).unlink(missing_ok=True)
    return kept


def library_sources(git: GitRepo, commit: str, backend: str) -> tuple[str, ...]:
    """What ggml's libraries of `commit` are compiled from on `backend`: the backend, and the ids of
    ggml's files and folders but the `ggml/src/ggml-*` folders of the other backends (a change of the
    Metal code leaves a CPU build's objects alike)."""
    keep = set(backendmod.profile(backend).ggml_dirs)
    entries = [backend]
    for line in git.out("ls-tree", commit, "ggml/", "ggml/src/").splitlines():
        meta, path = line.split("\t", 1)
        _, kind, oid = meta.split()
        name = path.rsplit("/", 1)[-1]
        if path == "ggml/src" or (kind == "tree" and path.startswith("ggml/src/ggml-") and name not in keep):
            continue
        entries.append(f"{oid} {path}")
    return tuple(entries)


def make_trees(git: GitRepo, base: str, series: Series, patches_dir: Path) -> dict[int, Trees]:
    """The proof trees of every patch of `series` on `base`, by patch index."""
    with tempfile.TemporaryDirectory(prefix="patchset-verify-") as tmp:
        return TreeMaker(git, base, Path(tmp)).for_series(series, patches_dir)

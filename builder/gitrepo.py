"""Git, driven as git itself: porcelain through `git -C`, object reads through GitPython.

Every command runs with a clean environment (no inherited GIT_DIR and friends) and without the
user's signing or hook configuration getting in the way of commits we create on their behalf.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from functools import cached_property
from pathlib import Path

import git as gitpython

from builder import proc

# commits patchset creates must not prompt for a signing key or run the user's hooks
_SAFE_CONFIG = ("-c", "commit.gpgsign=false", "-c", "core.hooksPath=/dev/null", "-c", "core.autocrlf=false")

# identity for commits we create (imports, applied patches); authorship of patches is kept by am
COMMITTER = {"GIT_COMMITTER_NAME": "patchset", "GIT_COMMITTER_EMAIL": "patchset@localhost"}

# output that must be byte-stable whatever the user's ~/.gitconfig says (diff prefixes, renames,
# signatures, abbreviations all change format-patch and diff output)
ISOLATED = {"GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": "/dev/null"}


class GitRepo:
    """A repository on disk (bare or not)."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def run(
        self,
        *args: str,
        env: Mapping[str, str] | None = None,
        check: bool = True,
        input_text: str | None = None,
        timeout: float | None = None,
    ) -> proc.Completed:
        return proc.run(
            ["git", "-C", str(self.path), *_SAFE_CONFIG, *args],
            env=env, check=check, input_text=input_text, timeout=timeout,
        )

    def out(self, *args: str, env: Mapping[str, str] | None = None) -> str:
        """Stdout of a git query, stripped."""
        return self.run(*args, env=env).stdout.strip()

    @cached_property
    def repo(self) -> gitpython.Repo:
        return gitpython.Repo(self.path)

    def rev(self, ref: str) -> str | None:
        """The object id `ref` names, or None when it names nothing."""
        r = self.run("rev-parse", "--verify", "--quiet", f"{ref}^{{object}}", check=False)
        return r.stdout.strip() or None

    def tree_of(self, ref: str) -> str:
        return self.out("rev-parse", f"{ref}^{{tree}}")

    def commits(self, range_: str) -> list[str]:
        """Commit ids in `range_`, oldest first."""
        text = self.out("rev-list", "--reverse", range_)
        return text.split() if text else []

    def update_ref(self, ref: str, target: str, message: str = "patchset") -> None:
        self.run("update-ref", "-m", message, ref, target)

    def delete_ref(self, ref: str) -> None:
        self.run("update-ref", "-d", ref, check=False)

    def is_dirty(self) -> list[str]:
        """Uncommitted changes, untracked files included (they are someone's work too)."""
        text = self.run("status", "--porcelain=v1", "--untracked-files=normal").stdout
        return [line for line in text.splitlines() if line]

    def current_branch(self) -> str | None:
        r = self.run("symbolic-ref", "--quiet", "--short", "HEAD", check=False)
        return r.stdout.strip() or None

    def message(self, commit: str) -> str:
        return self.repo.commit(commit).message

    def patch_id(self, diff_text: str) -> str | None:
        """git's stable patch id of a diff (whitespace-insensitive, context-independent)."""
        r = self.run("patch-id", "--stable", input_text=diff_text)
        return r.stdout.split()[0] if r.stdout.strip() else None


def init_repo(path: Path, bare: bool = False) -> GitRepo:
    path.mkdir(parents=True, exist_ok=True)
    args: Sequence[str] = ["init", "--quiet", *(["--bare"] if bare else []), str(path)]
    proc.run(["git", *args])
    return GitRepo(path)

"""Git, driven as git itself through the one subprocess runner (`builder.proc`).

Patch application, merges and mails are git's own (`am --3way`, `apply`, `format-patch`); we
never re-implement them. Every command is an argument list with `-C <repo>`, logged as `RUN:`
with its time, under a time limit, with the locale fixed to C (the few messages we show are
git's English ones), and without the user's signing or hook configuration getting in the way of
commits we create on their behalf. Failures become one ProcessError carrying command, exit code
and output; a command past its limit is killed and becomes a ProcessTimeout.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from builder import proc

# commits patchset creates must not prompt for a signing key or run the user's hooks; checkouts
# of the 3,665-file tree write files in parallel (about half the time of one worker, measured)
_SAFE_CONFIG = ("-c", "commit.gpgsign=false", "-c", "core.hooksPath=/dev/null", "-c", "core.autocrlf=false",
                "-c", "checkout.workers=0")

# identity for commits we create (imports, applied patches); authorship of patches is kept by am
COMMITTER = {"GIT_COMMITTER_NAME": "patchset", "GIT_COMMITTER_EMAIL": "patchset@localhost"}

# output that must be byte-stable whatever the user's ~/.gitconfig says (diff prefixes, renames,
# signatures, abbreviations all change format-patch and diff output)
ISOLATED = {"GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": "/dev/null"}

_LOCALE = {"LC_ALL": "C", "LANGUAGE": "C"}


def git_timeout() -> float:
    """The limit of one git command, in seconds: `$PATCHSET_GIT_TIMEOUT`, else 30 minutes.

    Nothing local takes that long on the llama.cpp tree (a checkout is seconds); a git that
    waits on a dead network or a stuck filesystem is killed and reported instead of hanging.
    """
    return proc.timeout("PATCHSET_GIT_TIMEOUT")


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
        argv = ["git", "-C", str(self.path), *_SAFE_CONFIG, *args]
        limit = git_timeout() if timeout is None else timeout
        return proc.run(argv, env={**_LOCALE, **(env or {})}, check=check, timeout=limit, input_text=input_text)

    def out(self, *args: str, env: Mapping[str, str] | None = None) -> str:
        """Stdout of a git query, stripped."""
        return self.run(*args, env=env).stdout.strip()

    def rev(self, ref: str) -> str | None:
        """The object id `ref` names, or None when it names nothing."""
        r = self.run("rev-parse", "--verify", "--quiet", f"{ref}^{{object}}", check=False)
        return r.stdout.strip() or None

    def blob(self, commit: str, path: str) -> str | None:
        """The id of the file at `path` in `commit`, or None when there is none.

        Not through rev(): a `^{object}` after `commit:path` would be read as part of the path.
        """
        r = self.run("rev-parse", "--verify", "--quiet", f"{commit}:{path}", check=False)
        return r.stdout.strip() or None

    def tree_of(self, ref: str) -> str:
        return self.out("rev-parse", f"{ref}^{{tree}}")

    def subject(self, commit: str) -> str:
        """The first line of `commit`'s message."""
        return self.out("log", "-1", "--format=%s", commit)

    def commits(self, range_: str) -> list[str]:
        """Commit ids in `range_`, oldest first."""
        text = self.out("rev-list", "--reverse", range_)
        return text.split() if text else []

    def update_ref(self, ref: str, target: str, message: str = "patchset") -> None:
        self.run("update-ref", "-m", message, ref, target)

    def is_dirty(self) -> list[str]:
        """Uncommitted changes, untracked files included (they are someone's work too)."""
        text = self.run("status", "--porcelain=v1", "--untracked-files=normal").stdout
        return [line for line in text.splitlines() if line]

    def current_branch(self) -> str | None:
        r = self.run("symbolic-ref", "--quiet", "--short", "HEAD", check=False)
        return r.stdout.strip() or None


def init_repo(path: Path, bare: bool = False) -> GitRepo:
    path.mkdir(parents=True, exist_ok=True)
    repo = GitRepo(path)
    repo.run("init", "--quiet", *(["--bare"] if bare else []))
    return repo

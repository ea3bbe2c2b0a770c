"""The work repository: branch `upstream` at the pin, branch `patched` = upstream + one commit per patch.

Patches are applied by `git am` one at a time (a small sequencer of ours on top), so that a
conflict stops at a known patch, can be resolved in the work tree, and continued or aborted.
Bookkeeping lives in `<git dir>/patchset/state.json`; uncommitted work and commits not yet
written back to `patches/` are never thrown away.
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from builder.errors import ConflictError, WorkTreeError
from builder.fsutil import atomic_write_text
from builder.gitrepo import COMMITTER, GitRepo, init_repo
from builder.series.model import Series
from builder.upstream.fetch import Fetched
from builder.upstream.pin import Pin

UPSTREAM = "upstream"
PATCHED = "patched"

OUTCOME_CLEAN = "applied clean"
OUTCOME_3WAY = "applied by 3-way merge"
OUTCOME_RESOLVED = "conflict resolved by hand"
OUTCOME_UPSTREAM = "already upstream (dropped)"
OUTCOME_SKIPPED = "skipped (dropped with --skip)"


@dataclass
class PatchOutcome:
    name: str
    outcome: str
    commit: str = ""


@dataclass
class Operation:
    """An apply or rebase in progress (persisted so that --continue/--abort work across runs)."""

    kind: str
    queue: list[str]
    """Names of the mails still to apply, in `<git dir>/patchset/queue/`."""
    pre_head: str | None
    pre_branch: str | None
    pre_upstream: str | None
    done: list[PatchOutcome] = field(default_factory=list)
    detect_upstream: bool = False
    extra: dict = field(default_factory=dict)

    def named(self, outcomes: list[PatchOutcome]) -> tuple[PatchOutcome, ...]:
        """The outcomes under the series' file names (`extra['names']`), not the queue's 0001.patch."""
        names = self.extra.get("names", [])
        return tuple(PatchOutcome(names[i] if i < len(names) else o.name, o.outcome, o.commit)
                     for i, o in enumerate(outcomes))


@dataclass
class State:
    pin_commit: str = ""
    upstream: str = ""
    fingerprint: str = ""
    applied_head: str = ""
    op: Operation | None = None


@dataclass(frozen=True)
class ConflictInfo:
    """Where a sequence stopped."""

    kind: str
    position: int
    total: int
    name: str
    failed: tuple[str, ...]
    """`path:line` of each hunk git could not place."""
    conflicted: tuple[str, ...]
    """Files left with conflict markers."""


def _conflict_message(c: ConflictInfo) -> str:
    lines = [f"patch {c.position}/{c.total} {c.name} does not apply"]
    if c.failed:
        lines.append("  failed hunks: " + ", ".join(c.failed))
    if c.conflicted:
        lines.append("  conflicts in: " + ", ".join(c.conflicted))
    lines.append(f"  resolve in the work tree and `git add` the files, then `patchset {c.kind} --continue`;")
    lines.append(f"  or `patchset {c.kind} --abort` to go back to the state before")
    return "\n".join(lines)


class StoppedOnConflict(ConflictError):
    def __init__(self, info: ConflictInfo, workdir: Path) -> None:
        self.info = info
        super().__init__(_conflict_message(info) + f"\n  work tree: {workdir}")


def fingerprint(pin: Pin, fetched_tree: str, series: Series) -> str:
    """What `patched` was built from: the pin and every byte of the series."""
    h = hashlib.sha256()
    h.update(f"{pin.commit}\n{fetched_tree}\n".encode())
    h.update(series.series_file.read_bytes() if series.series_file.exists() else b"")
    for p in series.patches:
        h.update(p.name.encode() + b"\0" + p.path.read_bytes() + b"\0")
    return h.hexdigest()


class WorkRepo:
    """The work repository of one project."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.git = GitRepo(path)

    @property
    def meta_dir(self) -> Path:
        return self.path / ".git" / "patchset"

    @property
    def queue_dir(self) -> Path:
        return self.meta_dir / "queue"

    def exists(self) -> bool:
        return (self.path / ".git" / "HEAD").exists()

    # -- state -------------------------------------------------------------------------------
    def load_state(self) -> State:
        f = self.meta_dir / "state.json"
        if not f.exists():
            return State()
        data = json.loads(f.read_text())
        op = data.pop("op", None)
        state = State(**data)
        if op:
            op["done"] = [PatchOutcome(**d) for d in op.get("done", [])]
            state.op = Operation(**op)
        return state

    def save_state(self, state: State) -> None:
        self.meta_dir.mkdir(parents=True, exist_ok=True)
        atomic_write_text(self.meta_dir / "state.json", json.dumps(asdict(state), indent=1) + "\n")

    # -- setup -------------------------------------------------------------------------------
    def attach_upstream(self, fetched: Fetched, pin: Pin) -> None:
        """Create the repository if needed and point `upstream` at the fetched pin.

        The work repository borrows the cache's objects (git alternates) instead of copying the
        whole upstream history: creating it costs a checkout, not a clone.
        """
        if not self.exists():
            init_repo(self.path)
            self.git.run("config", "user.name", "patchset")
            self.git.run("config", "user.email", "patchset@localhost")
        alternates = self.path / ".git" / "objects" / "info" / "alternates"
        want = str((fetched.repo / "objects").resolve()) + "\n"
        if not alternates.exists() or want not in alternates.read_text():
            alternates.parent.mkdir(parents=True, exist_ok=True)
            alternates.write_text(want)
        if self.git.rev(f"refs/heads/{UPSTREAM}") != fetched.commit:
            state = self.load_state()
            if state.op is None:
                self.git.update_ref(f"refs/heads/{UPSTREAM}", fetched.commit, f"patchset: pin {pin.commit}")
        self.git.update_ref("refs/patchset/pin", fetched.commit, f"patchset: pin {pin.commit}")

    def head(self, branch: str = PATCHED) -> str | None:
        return self.git.rev(f"refs/heads/{branch}")

    def in_am(self) -> bool:
        return (self.path / ".git" / "rebase-apply").exists()

    # -- safety ------------------------------------------------------------------------------
    def unsaved_work(self, state: State) -> list[str]:
        """Reasons why replacing `patched` would lose something; empty when it is safe."""
        reasons: list[str] = []
        dirty = self.git.is_dirty() if self.exists() else []
        if dirty:
            shown = ", ".join(line[3:] for line in dirty[:5]) + (" ..." if len(dirty) > 5 else "")
            reasons.append(f"the work tree has uncommitted changes ({shown})")
        head = self.head()
        if head and head != state.applied_head:
            n = len(self.git.commits(f"{state.applied_head}..{head}")) if state.applied_head and self.git.rev(
                state.applied_head) else 0
            what = f"{n} commit(s)" if n else "commits"
            reasons.append(f"branch '{PATCHED}' has {what} not written back to patches/")
        return reasons

    def backup(self, reason: str) -> list[str]:
        """Save the current branch and uncommitted work under refs/patchset/backup/; say where."""
        stamp = time.strftime("%Y%m%d-%H%M%S")
        saved: list[str] = []
        head = self.head()
        if head:
            ref = f"refs/patchset/backup/{stamp}"
            self.git.update_ref(ref, head, f"patchset: {reason}")
            saved.append(f"branch '{PATCHED}' saved as {ref}")
        if self.git.is_dirty():
            stash = self.git.run("stash", "push", "--include-untracked", "-m", f"patchset {reason} {stamp}",
                                 env=COMMITTER)
            if stash.returncode == 0:
                sha = self.git.out("rev-parse", "stash@{0}")
                ref = f"refs/patchset/backup/{stamp}-worktree"
                self.git.update_ref(ref, sha, f"patchset: {reason}")
                saved.append(f"uncommitted changes saved as stash@{{0}} and {ref}")
        return saved

    # -- the sequencer -----------------------------------------------------------------------
    def start(self, op: Operation, mails: list[tuple[str, bytes]], base: str) -> None:
        """Queue the mails, check out `patched` at `base`, and persist the operation."""
        if self.queue_dir.exists():
            shutil.rmtree(self.queue_dir)
        self.queue_dir.mkdir(parents=True)
        for name, data in mails:
            (self.queue_dir / name).write_bytes(data)
        op.queue = [name for name, _ in mails]
        state = self.load_state()
        state.op = op
        self.save_state(state)
        self.git.run("checkout", "--quiet", "--force", "-B", PATCHED, base)

    def run_queue(self) -> list[PatchOutcome]:
        """Apply what is queued; raises StoppedOnConflict at the first patch that needs a hand."""
        state = self.load_state()
        op = state.op
        if op is None:
            raise WorkTreeError(f"{self.path}: nothing to continue")
        total = len(op.done) + len(op.queue)
        while op.queue:
            name = op.queue[0]
            mail = self.queue_dir / name
            outcome = self._apply_one(mail, op.detect_upstream)
            if outcome is None:
                self.save_state(state)
                # name the series' file (kept in extra['names']), not the queue's 0002.patch
                position = len(op.done) + 1
                names = op.extra.get("names", [])
                shown = names[position - 1] if position <= len(names) else name
                raise StoppedOnConflict(self._conflict(op.kind, position, total, shown, mail), self.path)
            op.done.append(PatchOutcome(name, outcome, self.git.out("rev-parse", "HEAD")))
            op.queue.pop(0)
            self.save_state(state)
        return op.done

    def _am(self, *args: str) -> tuple[int, str]:
        r = self.git.run("am", "--keep", "--committer-date-is-author-date", "--quiet", *args,
                         env=COMMITTER, check=False)
        return r.returncode, r.stdout + r.stderr

    def _apply_one(self, mail: Path, detect_upstream: bool) -> str | None:
        if self.git.run("apply", "--check", str(mail), check=False).returncode == 0:
            rc, out = self._am(str(mail))
            if rc == 0:
                return OUTCOME_CLEAN
            if _is_empty(out):
                self.git.run("am", "--skip", check=False)
                return OUTCOME_UPSTREAM
            self.git.run("am", "--abort", check=False)
        if detect_upstream and self.git.run("apply", "--check", "--reverse", str(mail), check=False).returncode == 0:
            return OUTCOME_UPSTREAM
        rc, out = self._am("--3way", str(mail))
        if rc == 0:
            return OUTCOME_3WAY
        if _is_empty(out):
            self.git.run("am", "--skip", check=False)
            return OUTCOME_UPSTREAM
        self._last_am_output = out
        return None

    def _conflict(self, kind: str, position: int, total: int, name: str, mail: Path) -> ConflictInfo:
        out = getattr(self, "_last_am_output", "")
        failed = re.findall(r"error: patch failed: (\S+:\d+)", out)
        conflicted = self.git.out("diff", "--name-only", "--diff-filter=U").split()
        if not failed:
            check = self.git.run("apply", "--check", str(mail), check=False)
            failed = re.findall(r"error: patch failed: (\S+:\d+)", check.stderr)
            failed += re.findall(r"error: (\S+): does not exist in index", check.stderr)
        return ConflictInfo(kind, position, total, name, tuple(dict.fromkeys(failed)), tuple(conflicted))

    def continue_op(self) -> list[PatchOutcome]:
        state = self.load_state()
        op = state.op
        if op is None:
            raise WorkTreeError(f"{self.path}: no apply or rebase is stopped at a conflict")
        if self.in_am():
            unmerged = self.git.out("diff", "--name-only", "--diff-filter=U").split()
            if unmerged:
                raise WorkTreeError(f"still unresolved: {', '.join(unmerged)}; resolve them and `git add` first")
            r = self.git.run("am", "--continue", env=COMMITTER, check=False)
            if r.returncode != 0:
                out = r.stdout + r.stderr
                # resolved to nothing (the new upstream already has the change): git am --continue
                # says "No changes - did you forget to use 'git add'?"; that is a drop, unless the
                # work tree still holds edits that were not added (am --skip would discard them)
                nothing_left = "No changes - did you forget to use 'git add'?" in out
                if nothing_left and self.git.run("diff", "--quiet", check=False).returncode != 0:
                    raise WorkTreeError(f"{self.path}: nothing is staged but the work tree has changes; "
                                        "`git add` the resolution first")
                if _is_empty(out) or nothing_left:
                    self.git.run("am", "--skip", check=False)
                    op.done.append(PatchOutcome(op.queue.pop(0), OUTCOME_UPSTREAM))
                else:
                    raise WorkTreeError(f"git am --continue failed: {out.strip().splitlines()[-1:]}")
            else:
                op.done.append(PatchOutcome(op.queue.pop(0), OUTCOME_RESOLVED, self.git.out("rev-parse", "HEAD")))
            self.save_state(state)
        return self.run_queue()

    def skip_op(self) -> list[PatchOutcome]:
        """Drop the patch the operation stopped at, as `git am --skip` and quilt do (its conflicted
        files go back to the last applied patch), and go on with the rest."""
        state = self.load_state()
        op = state.op
        if op is None or not op.queue:
            raise WorkTreeError(f"{self.path}: no apply or rebase is stopped at a conflict")
        if self.in_am():
            self.git.run("am", "--skip", env=COMMITTER)
        op.done.append(PatchOutcome(op.queue.pop(0), OUTCOME_SKIPPED))
        self.save_state(state)
        return self.run_queue()

    def abort_op(self) -> Operation:
        state = self.load_state()
        op = state.op
        if op is None:
            raise WorkTreeError(f"{self.path}: no apply or rebase is stopped at a conflict")
        if self.in_am():
            self.git.run("am", "--abort", check=False)
        if op.pre_upstream:
            self.git.update_ref(f"refs/heads/{UPSTREAM}", op.pre_upstream, "patchset: abort")
        if op.pre_head:
            self.git.run("checkout", "--quiet", "--force", "-B", PATCHED, op.pre_head)
        else:
            self.git.run("checkout", "--quiet", "--force", "--detach", UPSTREAM)
            self.git.run("branch", "-D", PATCHED, check=False)
        if op.pre_branch and op.pre_branch != PATCHED:
            self.git.run("checkout", "--quiet", op.pre_branch, check=False)
        state.op = None
        self.save_state(state)
        return op

    def finish(self, state_update: dict) -> State:
        state = self.load_state()
        state.op = None
        for k, v in state_update.items():
            setattr(state, k, v)
        self.save_state(state)
        if self.queue_dir.exists():
            shutil.rmtree(self.queue_dir)
        return state


def _is_empty(am_output: str) -> bool:
    return "No changes -- Patch already applied" in am_output or "Patch is empty" in am_output


def ensure_no_op(work: WorkRepo) -> None:
    state = work.load_state()
    if state.op is not None:
        raise WorkTreeError(
            f"a {state.op.kind} is stopped at a conflict in {work.path}: "
            f"`patchset {state.op.kind} --continue` or `patchset {state.op.kind} --abort` first"
        )

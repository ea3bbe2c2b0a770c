"""The work repository: branch `upstream` at the pin, branch `patched` = upstream + one commit per patch.

Patches are applied by `git am` (a small sequencer of ours on top): the queue in one `git am`
process while it applies clean, and the patch that stops it in a `git am` of its own (3-way,
"already upstream"), so that a conflict stops at a known patch, can be resolved in the work tree,
and continued or aborted.
Bookkeeping lives in `<git dir>/patchset/state.json`; uncommitted work and commits not yet
written back to `patches/` are never thrown away.

Outcomes are read from git's state, never from its messages: a patch "already upstream" is one
whose 3-way application gives HEAD's tree back (or whose mail holds no diff, as `git am` leaves
it in `rebase-apply/patch`); a resolution "to nothing" is an index equal to HEAD. An operation
that was stopped at a conflict says so (`stopped`); one found in the state without that mark was
interrupted (the process was killed) and is rolled back by the next command that needs the
repository.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import re
import shutil
import tempfile
import time
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

from builder.errors import ConflictError, SourceError, StateError, WorkTreeError
from builder.fsutil import atomic_write_text
from builder.gitrepo import COMMITTER, GitRepo, init_repo
from builder.project import Project
from builder.series import resolutions as rr
from builder.series.model import Series
from builder.upstream.fetch import Fetched, fetch, merge_shallow
from builder.upstream.pin import Pin, load_pin

log = logging.getLogger("patchset")

UPSTREAM = "upstream"
PATCHED = "patched"

OUTCOME_CLEAN = "applied clean"
OUTCOME_3WAY = "applied by 3-way merge"
OUTCOME_RESOLVED = "conflict resolved by hand"
OUTCOME_UPSTREAM = "already upstream (dropped)"
OUTCOME_SKIPPED = "skipped (dropped with --skip)"
OUTCOME_REUSED = "conflict resolved by a recorded resolution"

AM_BATCH_MAX = 1000
"""Mails per `git am` process: the queue's paths stay well inside the command line's limit."""


@dataclass
class PatchOutcome:
    name: str
    outcome: str
    commit: str = ""
    resolutions: list[str] = field(default_factory=list)
    """Keys of the resolutions (patches/resolutions/) reused (OUTCOME_REUSED) or recorded (resolved by hand)."""


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
    names: list[str] = field(default_factory=list)
    """The series' file names of the queued mails, in order (the queue holds 0001.patch ...)."""
    fingerprint: str = ""
    """apply: what `patched` is being made from (see `fingerprint()`)."""
    new_pin_toml: str = ""
    """rebase: the pin being moved to, as TOML."""
    new_upstream: str = ""
    """rebase: the cache commit of that pin."""
    stopped: bool = False
    """True while the operation waits at a conflict for --continue or --abort; an operation in
    the state without it was interrupted (killed) and is rolled back."""

    def named(self, outcomes: list[PatchOutcome]) -> tuple[PatchOutcome, ...]:
        """The outcomes under the series' file names, not the queue's 0001.patch."""
        return tuple(PatchOutcome(self.name_at(i, o.name), o.outcome, o.commit, o.resolutions)
                     for i, o in enumerate(outcomes))

    def name_at(self, index: int, default: str) -> str:
        return self.names[index] if index < len(self.names) else default

    def as_dict(self) -> dict:
        return {f.name: getattr(self, f.name) if f.name != "done" else [asdict(d) for d in self.done]
                for f in fields(self)}


@dataclass
class State:
    pin_commit: str = ""
    upstream: str = ""
    fingerprint: str = ""
    applied_head: str = ""
    op: Operation | None = None
    patch_digests: dict[str, str] = field(default_factory=dict)
    """sha256 of each file of patches/ (and of `series`) as the last apply or refresh left them."""
    digests_fingerprint: str = ""
    """The fingerprint those digests belong to; another fingerprint makes them stale."""
    formatted: list[list[str]] = field(default_factory=list)
    """What the last refresh formatted, in series order: [commit, patch file name, sha256 of the
    file it wrote]. A later refresh reuses a file whose commit and bytes are still these."""
    formatted_key: str = ""
    """The format-patch flags and git version those files were formatted with."""


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
    unfit: str = ""
    """A recorded resolution with this conflict's key that does not carry onto it (stale)."""


def _conflict_message(c: ConflictInfo) -> str:
    lines = [f"patch {c.position}/{c.total} {c.name} does not apply"]
    if c.failed:
        lines.append("  failed hunks: " + ", ".join(c.failed))
    if c.conflicted:
        lines.append("  conflicts in: " + ", ".join(c.conflicted))
    if c.unfit:
        lines.append(f"  patches/{c.unfit} was recorded for this conflict but does not fit this file (stale): "
                     "not used; the resolution made now replaces it")
    lines.append(f"  resolve in the work tree and `git add` the files, then `patchset {c.kind} --continue`;")
    lines.append(f"  or `patchset {c.kind} --abort` to go back to the state before")
    return "\n".join(lines)


class StoppedOnConflict(ConflictError):
    def __init__(self, info: ConflictInfo, workdir: Path) -> None:
        self.info = info
        super().__init__(_conflict_message(info) + f"\n  work tree: {workdir}")


def fingerprint(pin: Pin, fetched_tree: str, series: Series) -> str:
    """What `patched` was built from: the pin and every byte of the series."""
    return fingerprint_of(pin, fetched_tree, series.series_file.read_bytes() if series.series_file.exists() else b"",
                          [(p.name, p.path.read_bytes()) for p in series.patches])


def fingerprint_of(pin: Pin, fetched_tree: str, series_file: bytes, patches: list[tuple[str, bytes]]) -> str:
    """`fingerprint` from bytes already read: the series file and each listed patch, in order."""
    h = hashlib.sha256()
    h.update(f"{pin.commit}\n{fetched_tree}\n".encode())
    h.update(series_file)
    for name, data in patches:
        h.update(name.encode() + b"\0" + data + b"\0")
    return h.hexdigest()


def read_patches_dir(patches_dir: Path) -> dict[str, bytes]:
    """Every file directly in patches/ (the series file and the patch files), by name."""
    if not patches_dir.is_dir():
        return {}
    return {f.name: f.read_bytes() for f in sorted(patches_dir.iterdir())
            if not f.name.startswith(".") and f.is_file()}


def digests_of(files: dict[str, bytes]) -> dict[str, str]:
    return {name: hashlib.sha256(data).hexdigest() for name, data in sorted(files.items())}


def patch_digests(patches_dir: Path) -> dict[str, str]:
    """sha256 of every file directly in patches/ (the series file and the patch files)."""
    return digests_of(read_patches_dir(patches_dir))


class WorkRepo:
    """The work repository of one project."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.git = GitRepo(path)
        self.patches_dir: Path | None = None
        """Set by rebase: conflicts resolved by hand are recorded in its resolutions/ folder, and the
        resolutions there (`resolutions`) are reused where the same conflict comes back."""
        self.resolutions: dict[str, rr.Resolution] = {}

    @property
    def meta_dir(self) -> Path:
        return self.path / ".git" / "patchset"

    @property
    def queue_dir(self) -> Path:
        return self.meta_dir / "queue"

    def exists(self) -> bool:
        return (self.path / ".git" / "HEAD").exists()

    # -- state -------------------------------------------------------------------------------
    @property
    def state_file(self) -> Path:
        return self.meta_dir / "state.json"

    def load_state(self) -> State:
        f = self.state_file
        try:
            text = f.read_text(encoding="utf-8")
        except FileNotFoundError:
            return State()
        except (OSError, UnicodeDecodeError) as e:
            raise StateError(f"{f}: cannot read the state file: {e}") from e
        try:
            data = json.loads(text)
            op = data.pop("op", None)
            state = State(**data)
            if op:
                op["done"] = [PatchOutcome(**d) for d in op.get("done", [])]
                # the first versions kept names, fingerprint, new_pin and new_upstream in a bag
                for key, value in (op.pop("extra", None) or {}).items():
                    if key == "new_pin":
                        op["new_pin_toml"] = value["toml"] if isinstance(value, dict) else value
                    else:
                        op[key] = value
                # a state written before `stopped` existed only ever held operations stopped at a conflict
                op.setdefault("stopped", True)
                state.op = Operation(**op)
        except (ValueError, TypeError, AttributeError, KeyError) as e:
            raise StateError(
                f"{f}: damaged state file ({type(e).__name__}: {e}); move it away and run "
                "`patchset apply --force` (the branch is saved under refs/patchset/backup/ first)") from None
        return state

    def save_state(self, state: State) -> None:
        self.meta_dir.mkdir(parents=True, exist_ok=True)
        data = {f.name: getattr(state, f.name) for f in fields(state)}
        data["op"] = state.op.as_dict() if state.op else None
        atomic_write_text(self.state_file, json.dumps(data, indent=1) + "\n")

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
        gone = self.borrow_from(fetched.repo)
        if gone:
            log.warning("the work repository borrowed objects from %s, which is gone (cache deleted or "
                        "PATCHSET_CACHE moved); re-attached it to %s", ", ".join(gone), fetched.repo)
        current = self.git.rev(f"refs/heads/{UPSTREAM}")
        if current != fetched.commit:
            state = self.load_state()
            if state.op is None and current and self.git.tree_of(current) == fetched.tree:
                # the same tree under another commit: a stand-in made from an sdist, now upstream's own
                # commit (or back); what was made on it moves over, commit for commit (issue 43)
                self._regraft(current, fetched.commit, state)
            elif state.op is None:
                self.git.update_ref(f"refs/heads/{UPSTREAM}", fetched.commit, f"patchset: pin {pin.commit}")
        self.git.update_ref("refs/patchset/pin", fetched.commit, f"patchset: pin {pin.commit}")

    def _regraft(self, old: str, new: str, state: State) -> None:
        """Move every branch made on `old` (and a detached HEAD) onto `new`, a commit of the same tree:
        each commit written again with the same tree, author, committer and message, its parent `old`
        (or a commit already moved) replaced. Work trees, indexes and uncommitted work are untouched
        (the trees are the same); `upstream` and the state follow. Deferred while an edit or a series
        verb's journal is in progress (`builder.series.edit`: they record commit ids)."""
        if (self.meta_dir / "edit.json").exists() or (self.meta_dir / "series-op.json").exists():
            return
        heads = [line.split() for line in self.git.out(
            "for-each-ref", "--format=%(objectname) %(refname)", "refs/heads/").splitlines()]
        moved_refs = [(sha, ref) for sha, ref in heads if ref != f"refs/heads/{UPSTREAM}"
                      and self.git.run("merge-base", "--is-ancestor", old, sha, check=False).returncode == 0]
        detached = None if self.git.current_branch() else self.git.rev("HEAD")
        # the state's head too: a run killed after moving `patched` but before saving the state is
        # finished by the next one (the same commits written again give the same ids)
        recorded = [c for c in (state.applied_head,) if c and self.git.rev(c)
                    and self.git.run("merge-base", "--is-ancestor", old, c, check=False).returncode == 0]
        tips = [sha for sha, _ in moved_refs] + ([detached] if detached else []) + recorded
        mapping = {old: new}
        if tips:
            for c in self.git.out("rev-list", "--topo-order", "--reverse", *tips, "--not", old).split():
                mapping[c] = self._rewrite_parents(c, mapping)
        for sha, ref in moved_refs:
            self.git.update_ref(ref, mapping.get(sha, sha), f"patchset: {old[:12]} -> {new[:12]} (same tree)")
        if detached and detached in mapping:
            self.git.run("update-ref", "--no-deref", "HEAD", mapping[detached])
        state.applied_head = mapping.get(state.applied_head, state.applied_head)
        state.upstream = mapping.get(state.upstream, state.upstream)
        state.formatted = [[mapping.get(row[0], row[0]), *row[1:]] for row in state.formatted]
        self.save_state(state)
        # last: until `upstream` moves, the next run does this again (and finds the branches moved)
        self.git.update_ref(f"refs/heads/{UPSTREAM}", new, f"patchset: {old[:12]} -> {new[:12]} (same tree)")
        log.info("the pin's commit in %s was %s; it is now %s (the same tree): %d branch(es) moved onto it",
                 self.path, old[:12], new[:12], len(moved_refs))

    def _rewrite_parents(self, commit: str, mapping: dict[str, str]) -> str:
        """`commit` written again with its parents replaced by `mapping` (a signature would no longer hold:
        dropped)."""
        raw = self.git.run("cat-file", "commit", commit).stdout
        head, sep, message = raw.partition("\n\n")
        lines: list[str] = []
        skipping = False
        for line in head.split("\n"):
            if line.startswith(" ") and skipping:
                continue
            skipping = line.startswith("gpgsig")
            if skipping:
                continue
            parent = line.removeprefix("parent ")
            lines.append(f"parent {mapping.get(parent, parent)}" if line.startswith("parent ") else line)
        return self.git.run("hash-object", "-t", "commit", "-w", "--stdin",
                            input_text="\n".join(lines) + sep + message).stdout.strip()

    @property
    def alternates_file(self) -> Path:
        return self.path / ".git" / "objects" / "info" / "alternates"

    def borrowed(self) -> list[str]:
        """The object folders this repository borrows from (git alternates), in order."""
        try:
            text = self.alternates_file.read_text()
        except FileNotFoundError:
            return []
        return [line.strip() for line in text.splitlines() if line.strip() and not line.startswith("#")]

    def missing_borrowed(self) -> list[str]:
        """Borrowed object folders that no longer exist (the cache was deleted or moved)."""
        return [d for d in self.borrowed() if not Path(d).is_dir()]

    def borrow_from(self, cache_repo: Path) -> list[str]:
        """Borrow `cache_repo`'s objects (first), keeping every other folder that still exists.

        Returns the folders dropped because they are gone. Folders of other caches are kept, not
        replaced: backup refs and older trees may need objects only they hold.
        """
        want = str((cache_repo / "objects").resolve())
        merge_shallow(cache_repo, self.path / ".git")
        have = self.borrowed()
        gone = [d for d in have if not Path(d).is_dir()]
        keep = [want] + [d for d in have if d != want and d not in gone]
        if keep != have:
            self.alternates_file.parent.mkdir(parents=True, exist_ok=True)
            atomic_write_text(self.alternates_file, "".join(f"{d}\n" for d in keep))
        return gone

    def broken_refs(self) -> list[str]:
        """Refs whose history or trees are not all present (objects that were only in a lost cache)."""
        refs = self.git.out("for-each-ref", "--format=%(refname)").split()
        broken = []
        for ref in refs:
            r = self.git.run("rev-list", "--objects", "--quiet", ref, "--", check=False)
            if r.returncode != 0:
                broken.append(ref)
        return broken

    def worktree_tree(self) -> str:
        """The tree id of the work tree as it is on disk: HEAD plus uncommitted and untracked edits.

        Computed in a copy of the index (its stat data keeps this fast), so the real index is
        left alone.
        """
        with tempfile.TemporaryDirectory(prefix="patchset-tree-") as tmp:
            index = Path(tmp) / "index"
            real = self.path / ".git" / "index"
            if real.exists():
                shutil.copyfile(real, index)
            env = {"GIT_INDEX_FILE": str(index)}
            self.git.run("add", "--all", "--", ".", env=env)
            return self.git.out("write-tree", env=env)

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
        batch = True
        while op.queue:
            if batch:
                batch = self._am_batch(state)
                if not op.queue:
                    break
            # the patch the batch stopped at (or every patch, once batching is off): one `git am`
            # of its own, with the 3-way fallback and the checks for "already upstream"
            name = op.queue[0]
            mail = self.queue_dir / name
            outcome, am_output = self._apply_one(mail, op.detect_upstream)
            # name the series' file, not the queue's 0002.patch
            position = len(op.done) + 1
            shown = op.name_at(position - 1, name)
            reused: list[str] = []
            unfit = ""
            if outcome is None and self.resolutions:
                reused, unfit = self._reuse()
                outcome = OUTCOME_REUSED if reused else None
            if outcome is None:
                op.stopped = True
                self.save_state(state)
                self._keep_conflict(shown, mail)
                info = self._conflict(op.kind, position, total, shown, mail, am_output)
                raise StoppedOnConflict(dataclasses.replace(info, unfit=unfit), self.path)
            op.done.append(PatchOutcome(name, outcome, self.git.out("rev-parse", "HEAD"), reused))
            op.queue.pop(0)
            self.save_state(state)
        return op.done

    def _am_batch(self, state: State) -> bool:
        """Apply the longest prefix of the queue that applies clean, in one `git am` process.

        The commits are the ones one `git am` per mail makes (same flags, same mails). Where the
        batch stops is read from git's state (`rebase-apply/next` and `last`), not its messages;
        the batch is then ended with `git am --quit` (a failed apply leaves the index and work
        tree as they were: HEAD is the last mail applied), and the stopped mail is left at the
        head of the queue for the one-mail path. Returns False when the batch's commits cannot
        be matched one to one with its mails (a file holding more than one mail): then the batch
        is undone and every mail goes through the one-mail path, as before batching existed.
        """
        op = state.op
        assert op is not None
        names = op.queue[:AM_BATCH_MAX]
        start = self.git.out("rev-parse", "HEAD")
        rc, _ = self._am(*(str(self.queue_dir.relative_to(self.path) / n) for n in names))
        stopped = self.in_am()
        if rc == 0 and not stopped:
            expected = len(names)
        elif stopped:
            expected = self._am_position("next") - 1 if self._am_position("last") == len(names) else -1
            self.git.run("am", "--quit")
        else:
            expected = -1
        commits = self.git.commits(f"{start}..HEAD")
        if len(commits) != expected:
            log.debug("git am of %d mails made %d commits (expected %d): one mail at a time instead",
                      len(names), len(commits), expected)
            self.git.run("reset", "--quiet", "--hard", start)
            return False
        for name, commit in zip(names, commits, strict=False):
            op.done.append(PatchOutcome(name, OUTCOME_CLEAN, commit))
        del op.queue[:len(commits)]
        self.save_state(state)
        return True

    def _am_position(self, name: str) -> int:
        """A number `git am` keeps in `rebase-apply/` (`next`: the mail it is at; `last`: how many), or -1."""
        try:
            return int((self.path / ".git" / "rebase-apply" / name).read_text().strip())
        except (OSError, ValueError):
            return -1

    def _am(self, *args: str) -> tuple[int, str]:
        r = self.git.run("am", "--keep", "--committer-date-is-author-date", "--quiet", *args,
                         env=COMMITTER, check=False)
        return r.returncode, r.stdout + r.stderr

    def _apply_one(self, mail: Path, detect_upstream: bool) -> tuple[str | None, str]:
        """The outcome of applying `mail` on its own, and what `git am` said when it stopped on a
        conflict (outcome None), for the conflict's description."""
        if self.git.run("apply", "--check", str(mail), check=False).returncode == 0:
            rc, _ = self._am(str(mail))
            if rc == 0:
                return OUTCOME_CLEAN, ""
            if self._am_changes_nothing():
                self.git.run("am", "--skip", check=False)
                return OUTCOME_UPSTREAM, ""
            self.git.run("am", "--abort", check=False)
        if detect_upstream and self.git.run("apply", "--check", "--reverse", str(mail), check=False).returncode == 0:
            return OUTCOME_UPSTREAM, ""
        head = self.git.out("rev-parse", "HEAD")
        rc, out = self._am("--3way", str(mail))
        if rc == 0:
            # a merge that changes nothing is no commit: am says "already applied" and goes on
            return (OUTCOME_3WAY if self.git.out("rev-parse", "HEAD") != head else OUTCOME_UPSTREAM), ""
        if self._am_changes_nothing():
            self.git.run("am", "--skip", check=False)
            return OUTCOME_UPSTREAM, ""
        return None, out

    def _am_changes_nothing(self) -> bool:
        """After `git am` stopped: does the patch it stopped at change nothing on HEAD?

        True when the mail holds no diff (am leaves its diff, empty, in `rebase-apply/patch`), or
        when the diff, applied with a 3-way merge in a scratch index, gives HEAD's tree back:
        the change is already there. A conflict (unmerged entries) is never "nothing".
        """
        if not self.in_am():
            return False
        patch = self.path / ".git" / "rebase-apply" / "patch"
        if not patch.exists() or patch.stat().st_size == 0:
            return True
        if self.git.out("ls-files", "--unmerged"):
            return False
        with tempfile.TemporaryDirectory(prefix="patchset-am-") as tmp:
            env = {"GIT_INDEX_FILE": str(Path(tmp) / "index")}
            self.git.run("read-tree", "HEAD", env=env)
            r = self.git.run("apply", "--cached", "--3way", str(patch), env=env, check=False)
            return r.returncode == 0 and self.git.out("write-tree", env=env) == self.git.tree_of("HEAD")

    def _conflict(self, kind: str, position: int, total: int, name: str, mail: Path, am_output: str) -> ConflictInfo:
        failed = re.findall(r"error: patch failed: (\S+:\d+)", am_output)
        conflicted = self.git.out("diff", "--name-only", "--diff-filter=U").split()
        if not failed:
            check = self.git.run("apply", "--check", str(mail), check=False)
            failed = re.findall(r"error: patch failed: (\S+:\d+)", check.stderr)
            failed += re.findall(r"error: (\S+): does not exist in index", check.stderr)
        return ConflictInfo(kind, position, total, name, tuple(dict.fromkeys(failed)), tuple(conflicted))

    # -- resolutions remembered (builder.series.resolutions) ------------------------------------
    @property
    def conflict_dir(self) -> Path:
        """The conflicted files as the stop left them, for recording their resolution at --continue."""
        return self.meta_dir / "conflict"

    def _reuse(self) -> tuple[list[str], str]:
        """At a conflict: resolve every conflicted file with a recorded resolution and finish the
        patch (`git am --continue`). (keys reused, '') when all were; else nothing is touched and
        ([], the name of a resolution that has the key but does not fit, or '')."""
        paths = self.git.out("diff", "--name-only", "--diff-filter=U").split()
        if not paths:
            return [], ""
        plan: dict[str, tuple[rr.Resolution, bytes]] = {}
        for path in paths:
            text = (self.path / path).read_bytes()
            res = self.resolutions.get(rr.key_of(text))
            if res is None:
                return [], ""
            resolved = rr.carry(res, text)
            if resolved is None:
                return [], res.name
            plan[path] = (res, resolved)
        for path, (_res, resolved) in plan.items():
            (self.path / path).write_bytes(resolved)
        self.git.run("add", "--", *plan)
        r = self.git.run("am", "--continue", env=COMMITTER, check=False)
        if r.returncode != 0:
            last = (r.stderr or r.stdout).strip().splitlines()[-1:] or ["(no message)"]
            raise WorkTreeError(f"{self.path}: git am --continue with the recorded resolutions "
                                f"({', '.join(res.name for res, _ in plan.values())}) failed: {last[0]}")
        return list(dict.fromkeys(res.key for res, _ in plan.values())), ""

    def _keep_conflict(self, patch: str, mail: Path) -> None:
        """Save the conflicted files as they are now (rebase only), so that --continue can record
        their resolution."""
        shutil.rmtree(self.conflict_dir, ignore_errors=True)
        if self.patches_dir is None:
            return
        paths = self.git.out("diff", "--name-only", "--diff-filter=U").split()
        self.conflict_dir.mkdir(parents=True)
        for i, path in enumerate(paths):
            (self.conflict_dir / str(i)).write_bytes((self.path / path).read_bytes())
        subject = next((ln[9:] for ln in mail.read_text(encoding="utf-8", errors="replace").splitlines()
                        if ln.startswith("Subject: ")), "")
        atomic_write_text(self.conflict_dir / "files.json",
                          json.dumps({"patch": patch, "subject": subject, "paths": paths}) + "\n")

    def _staged_resolutions(self) -> list[tuple[str, str, str, bytes, bytes]]:
        """(patch, subject, path, conflicted, staged) of each file the stop saved: read before `am --continue`."""
        listing = self.conflict_dir / "files.json"
        if self.patches_dir is None or not listing.is_file():
            return []
        data = json.loads(listing.read_text())
        out = []
        for i, path in enumerate(data["paths"]):
            tmp = self.git.out("checkout-index", "--temp", "--", path).split("\t", 1)[0]
            if not tmp:
                continue
            staged = (self.path / tmp).read_bytes()
            (self.path / tmp).unlink()
            out.append((data["patch"], data.get("subject", ""), path, (self.conflict_dir / str(i)).read_bytes(),
                        staged))
        return out

    def _remember(self, staged: list[tuple[str, str, str, bytes, bytes]]) -> list[str]:
        """Record each resolution in patches/resolutions/; their keys."""
        kept = []
        if self.patches_dir is not None:
            for patch, subject, path, conflicted, resolved in staged:
                res = rr.record(self.patches_dir, patch, subject, path, conflicted, resolved)
                if res is not None:
                    kept.append(res.key)
        shutil.rmtree(self.conflict_dir, ignore_errors=True)
        return kept

    def continue_op(self) -> list[PatchOutcome]:
        state = self.load_state()
        op = state.op
        if op is None:
            raise WorkTreeError(f"{self.path}: no apply or rebase is stopped at a conflict")
        if self.in_am():
            unmerged = self.git.out("diff", "--name-only", "--diff-filter=U").split()
            if unmerged:
                raise WorkTreeError(f"still unresolved: {', '.join(unmerged)}; resolve them and `git add` first")
            staged = self.git.run("diff", "--cached", "--quiet", "HEAD", "--", check=False).returncode != 0
            if not staged:
                # resolved to nothing (the new upstream already has the change): a drop, unless the
                # work tree still holds edits that were not added (am --skip would discard them)
                if self.git.run("diff", "--quiet", check=False).returncode != 0:
                    raise WorkTreeError(f"{self.path}: nothing is staged but the work tree has changes; "
                                        "`git add` the resolution first")
                self.git.run("am", "--skip", check=False)
                op.done.append(PatchOutcome(op.queue.pop(0), OUTCOME_UPSTREAM))
            else:
                saved = self._staged_resolutions()
                r = self.git.run("am", "--continue", env=COMMITTER, check=False)
                if r.returncode != 0:
                    last = (r.stderr or r.stdout).strip().splitlines()[-1:] or ["(no message)"]
                    raise WorkTreeError(f"{self.path}: git am --continue failed: {last[0]}")
                kept = self._remember(saved)
                op.done.append(PatchOutcome(op.queue.pop(0), OUTCOME_RESOLVED, self.git.out("rev-parse", "HEAD"),
                                            kept))
            op.stopped = False
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
        shutil.rmtree(self.conflict_dir, ignore_errors=True)
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
        shutil.rmtree(self.conflict_dir, ignore_errors=True)
        return op

    def finish(self, state_update: dict) -> State:
        state = self.load_state()
        state.op = None
        for k, v in state_update.items():
            setattr(state, k, v)
        self.save_state(state)
        if self.queue_dir.exists():
            shutil.rmtree(self.queue_dir)
        shutil.rmtree(self.conflict_dir, ignore_errors=True)
        return state


def ensure_no_op(work: WorkRepo) -> None:
    """Refuse while an operation waits at a conflict; roll back one that a killed process left.

    Called with the project lock held: an operation in the state that is not stopped at a
    conflict belongs to no running process, so nobody else is in the middle of it.
    """
    state = work.load_state()
    if state.op is not None and not state.op.stopped:
        log.warning("an earlier %s in %s was interrupted; rolling it back to where it started",
                    state.op.kind, work.path)
        work.abort_op()
        return
    if state.op is not None:
        raise WorkTreeError(
            f"a {state.op.kind} is stopped at a conflict in {work.path}: "
            f"`patchset {state.op.kind} --continue` or `patchset {state.op.kind} --abort` first"
        )


def ensure_objects(project: Project, work: WorkRepo) -> None:
    """Make sure the objects the work repository borrows are there.

    It borrows the cache's objects (git alternates). When that cache was deleted, or
    PATCHSET_CACHE now points elsewhere, the pin is fetched again into the cache in use and the
    repository re-attached to it, with a warning; refs that still miss objects are named.
    """
    if not work.exists() or not work.missing_borrowed():
        return
    gone = ", ".join(work.missing_borrowed())
    pin = load_pin(project.pin_file)
    log.warning("the cache the work repository borrows objects from is gone (%s); fetching the pin %s again "
                "into %s", gone, pin.short, project.cache_dir)
    try:
        fetched = fetch(project.cache_dir, pin)
    except SourceError as e:
        raise WorkTreeError(
            f"{work.path}: its objects were borrowed from {gone}, which is gone, and the pin could not be fetched "
            f"again ({'; '.join(line.strip() for line in str(e).splitlines())}); restore that folder or "
            "set PATCHSET_CACHE to a cache holding "
            "the pin, then run `patchset fetch`") from e
    work.attach_upstream(fetched, pin)
    broken = work.broken_refs()
    if f"refs/heads/{PATCHED}" in broken:
        raise WorkTreeError(
            f"{work.path}: branch '{PATCHED}' needs objects that were only in {gone} (another pin's tree); "
            "restore that cache, or `patchset apply --force` to make it again from patches/")
    if broken:
        log.warning("%d ref(s) need objects that were only in %s and cannot be read: %s; `patchset gc "
                    "--broken` removes them", len(broken), gone, ", ".join(broken))

"""The work repository's git directory: its state file, branches and refs, borrowed objects, a new upstream."""

from __future__ import annotations

import hashlib
import json
import logging
import shutil
import tempfile
import time
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

from builder.errors import StateError
from builder.fsutil import atomic_write_text
from builder.gitrepo import COMMITTER, GitRepo, init_repo
from builder.series import resolutions as rr
from builder.series.model import Series
from builder.upstream.fetch import Fetched, merge_shallow
from builder.upstream.pin import Pin

log = logging.getLogger("patchset")

UPSTREAM = "upstream"
PATCHED = "patched"


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


class WorkRepoBase:
    """The work repository's git directory: its state file, branches, borrowed objects, a new upstream."""

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

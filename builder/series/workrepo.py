"""The work repository's sequencer: branch `patched` = `upstream` + one commit per patch, by `git am`.

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
import json
import logging
import re
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from builder.errors import ConflictError, SourceError, WorkTreeError
from builder.fsutil import atomic_write_text
from builder.gitrepo import COMMITTER
from builder.project import Project
from builder.series import resolutions as rr
from builder.series.workbase import PATCHED, UPSTREAM, Operation, PatchOutcome, State, WorkRepoBase
from builder.upstream.fetch import fetch
from builder.upstream.pin import load_pin

log = logging.getLogger("patchset")


OUTCOME_CLEAN = "applied clean"
OUTCOME_3WAY = "applied by 3-way merge"
OUTCOME_RESOLVED = "conflict resolved by hand"
OUTCOME_UPSTREAM = "already upstream (dropped)"
OUTCOME_SKIPPED = "skipped (dropped with --skip)"
OUTCOME_REUSED = "conflict resolved by a recorded resolution"

AM_BATCH_MAX = 1000
"""Mails per `git am` process: the queue's paths stay well inside the command line's limit."""


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
        self.patch = info.name
        super().__init__(_conflict_message(info) + f"\n  work tree: {workdir}")


class WorkRepo(WorkRepoBase):
    """The work repository of one project."""

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

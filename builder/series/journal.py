"""The series verbs' machinery: the step journal and its recovery, recovery refs, replaying commits, writing back."""

from __future__ import annotations

import json
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from builder.errors import ConflictError, InputError, WorkTreeError
from builder.fsutil import atomic_write_text
from builder.gitrepo import COMMITTER, GitRepo
from builder.locking import project_lock
from builder.project import Project
from builder.series import dropped as droplog
from builder.series import movesnap
from builder.series.load import read_series_file
from builder.series.refresh import current_mails, format_key, format_mails, stale_files, write_series
from builder.series.workbase import PATCHED, UPSTREAM, digests_of, fingerprint_of, read_patches_dir
from builder.series.workrepo import WorkRepo, ensure_no_op
from builder.upstream.pin import load_pin

UNDO_PREFIX = "refs/patchset/undo/"


@dataclass(frozen=True)
class Recovery:
    """A recovery ref a series verb left: `patched` as it was before that verb."""

    ref: str
    commit: str
    verb: str
    patches: int


@dataclass(frozen=True)
class EditResult:
    verb: str
    recovery: str
    """The recovery ref this verb left ('' for none)."""
    patches: tuple[str, ...] = ()
    """patches/ as the verb left it."""
    editing: str = ""
    """new/edit: the subject of the patch now checked out for editing."""
    work_tree: Path | None = None


# -- the journal and the edit record ---------------------------------------------------------------
def _journal(work: WorkRepo) -> Path:
    return work.meta_dir / "series-op.json"


def _edit_file(work: WorkRepo) -> Path:
    return work.meta_dir / "edit.json"


def editing(work: WorkRepo) -> dict | None:
    """The edit in progress (`edit N` or `new`), or None."""
    try:
        data = json.loads(_edit_file(work).read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as e:
        raise WorkTreeError(f"{_edit_file(work)}: unreadable edit record ({e}); `patchset undo` ends the edit") from e
    return data if isinstance(data, dict) else None


def forget_edit(work: WorkRepo) -> None:
    """An edit in progress given up (`apply --force` makes `patched` again from patches/)."""
    _edit_file(work).unlink(missing_ok=True)


def recover(project: Project, work: WorkRepo) -> None:
    """Finish what a killed series verb left: roll its step back unless the state already
    records it (then only the journal is left). Called with the project lock held."""
    if not work.exists():
        return
    journal = _journal(work)
    try:
        data = json.loads(journal.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return
    except (OSError, ValueError):
        journal.unlink(missing_ok=True)  # written atomically: a damaged journal was never a commit point
        return
    if data.get("verb") == "undo-move":
        # an undo of a rebase or bump is finished: the restore is idempotent
        movesnap.restore(project, work, data["snapshot"])
        work.git.run("update-ref", "-d", data["ref"], check=False)
        journal.unlink(missing_ok=True)
        return
    state = work.load_state()
    if data.get("verb") == "undo":
        # an undo is finished, not rolled back: the edit it gave up is gone already
        if state.applied_head != data["new"]:
            work.git.run("checkout", "--quiet", "--force", "-B", PATCHED, data["new"])
            _write_back(project, work)
    elif state.applied_head != data["new"]:
        work.git.run("checkout", "--quiet", "--force", "-B", PATCHED, data["old"])
        mails = format_mails(work.git, f"{UPSTREAM}..{PATCHED}")
        write_series(project.patches_dir, mails)
        # the new files written before the series file named them: the verb started from a patches/
        # without unlisted files (`_in_step`), so every one now is the killed run's
        keep = {n for n, _ in mails}
        for stray in project.patches_dir.glob("*.patch"):
            if stray.name not in keep:
                stray.unlink()
        if "log" in data:
            droplog.restore(project.patches_dir, data["log"])
    if data.get("ref") and (data.get("verb") == "undo" or state.applied_head != data["new"]):
        work.git.run("update-ref", "-d", data["ref"], check=False)
    journal.unlink(missing_ok=True)


def _in_step(project: Project, work: WorkRepo, *, allow_edit: bool = False) -> str:
    """Refuse unless `patched` and patches/ are in step; `patched`'s head."""
    head = work.head() if work.exists() else None
    if head is None:
        raise WorkTreeError(f"{project.work_repo}: no '{PATCHED}' branch; run `patchset apply` first")
    recover(project, work)
    ensure_no_op(work)
    ed = editing(work)
    if ed is not None and not allow_edit:
        raise WorkTreeError(f"patch {ed['index']} is being edited in {work.path}: `patchset refresh` writes it back, "
                            "`patchset undo` gives the edit up")
    dirty = work.git.is_dirty()
    if dirty:
        raise WorkTreeError(f"{work.path}: uncommitted changes ({', '.join(d[3:] for d in dirty[:3])}): "
                            "commit them on 'patched' and `patchset refresh`, or `git stash` them first")
    state = work.load_state()
    head = work.head() or ""
    if head != state.applied_head:
        raise WorkTreeError(f"branch '{PATCHED}' has commits not written back to patches/: `patchset refresh` first")
    commits = work.git.commits(f"{UPSTREAM}..{PATCHED}")
    mails = current_mails(project.patches_dir, work.git, commits, state, format_key(work.git))
    stale = stale_files(project.patches_dir, mails)
    if stale:
        raise WorkTreeError(
            f"{project.patches_dir}: not what `patchset refresh` writes from '{PATCHED}' "
            f"({', '.join(f'{c.name} {c.change}' for c in stale[:4])}): `patchset apply` to use the edits, "
            "or `patchset refresh` to write the branch back")
    return head


def _series_commits(work: WorkRepo) -> list[str]:
    return work.git.commits(f"{UPSTREAM}..{PATCHED}")


def _pick(commits: list[str], n: int, what: str = "patch") -> int:
    """The 0-based index of patch `n` (1-based, as `patchset status` numbers them)."""
    if not 1 <= n <= len(commits):
        raise InputError(f"{what} {n}: the series has {len(commits)} patch(es) (1..{len(commits)})")
    return n - 1


def recoveries(git: GitRepo) -> list[Recovery]:
    """The recovery refs of the series verbs, oldest first."""
    out = git.out("for-each-ref", "--format=%(refname) %(objectname)", UNDO_PREFIX)
    found = []
    base = git.rev(f"refs/heads/{UPSTREAM}") if out else None
    for line in out.splitlines():
        ref, commit = line.split()
        name = ref[len(UNDO_PREFIX):]
        verb = name.split("-", 1)[1] if "-" in name else name
        n = len(git.commits(f"{base}..{commit}")) if base and _is_ancestor(git, base, commit) else -1
        found.append(Recovery(ref, commit, verb, n))
    return sorted(found, key=lambda r: r.ref)


def _is_ancestor(git: GitRepo, a: str, b: str) -> bool:
    return git.run("merge-base", "--is-ancestor", a, b, check=False).returncode == 0


def next_recovery_ref(git: GitRepo, verb: str) -> str:
    """The name of the recovery ref the next `verb` leaves (numbered after the newest)."""
    have = recoveries(git)
    last = max((int(r.ref[len(UNDO_PREFIX):].split("-", 1)[0]) for r in have
                if r.ref[len(UNDO_PREFIX):].split("-", 1)[0].isdigit()), default=0)
    return f"{UNDO_PREFIX}{last + 1:04d}-{verb}"


# -- making commits without touching the work tree -------------------------------------------------
@dataclass(frozen=True)
class CommitFacts:
    """What a commit made again elsewhere keeps: its tree, message and author."""

    tree: str
    message: str
    author_env: dict[str, str]
    """commit-tree's environment: the author's name, email and date, and the committer patchset is."""


def commit_facts(git: GitRepo, commits: list[str]) -> dict[str, CommitFacts]:
    """The facts of each of `commits` (full ids), read by one `git log` (a commit message holds no NUL byte)."""
    if not commits:
        return {}
    out = git.run("log", "-z", "--no-walk=unsorted", "--date=raw",
                  "--format=%H%x00%T%x00%an%x00%ae%x00%ad%x00%B", *commits).stdout
    fields = out.split("\0")
    facts = {}
    for at in range(0, len(fields) - 1, 6):  # each record ends in a NUL: an empty field after the last
        commit, tree, name, email, date, message = fields[at:at + 6]
        facts[commit] = CommitFacts(tree, message.rstrip("\n") + "\n", {
            **COMMITTER, "GIT_AUTHOR_NAME": name, "GIT_AUTHOR_EMAIL": email, "GIT_AUTHOR_DATE": date})
    return facts


def _commit(git: GitRepo, tree: str, parent: str, message: str, env: dict[str, str]) -> str:
    return git.run("commit-tree", tree, "-p", parent, "-F", "-", input_text=message, env=env).stdout.strip()


def _replay(git: GitRepo, onto: str, commits: list[str], names: dict[str, int],
            then: str = "nothing was changed") -> str:
    """`commits` applied one by one on `onto` (a 3-way apply of each one's diff in a scratch
    index), keeping message and author; the new tip. ConflictError names the first that does not apply."""
    tip = onto
    facts = commit_facts(git, commits)
    with tempfile.TemporaryDirectory(prefix="patchset-replay-") as tmp:
        env = {"GIT_INDEX_FILE": str(Path(tmp) / "index")}
        git.run("read-tree", tip, env=env)  # then it holds each new tip's tree, written from it
        for c in commits:
            diff = git.run("diff", "--binary", "--full-index", "--no-renames", f"{c}^", c).stdout
            if diff:
                r = git.run("apply", "--cached", "--3way", "-", env=env, input_text=diff, check=False)
                if r.returncode != 0 or git.out("ls-files", "--unmerged", env=env):
                    raise ConflictError(f"patch {names.get(c, '?')} ({git.subject(c)}) does not apply there; {then}")
            tree = git.out("write-tree", env=env)
            tip = _commit(git, tree, tip, facts[c].message, facts[c].author_env)
    return tip


def _rewrite(project: Project, work: WorkRepo, verb: str, old: str, new: str,
             log: droplog.DropRecord | None = None) -> EditResult:
    """Move `patched` from `old` to `new`, write patches/ and the state (and `log` appended to
    patches/dropped); the journal first, so that a killed run is rolled back by the next one (`recover`)."""
    ref = next_recovery_ref(work.git, verb)
    step: dict[str, str | None] = {"verb": verb, "old": old, "new": new, "ref": ref}
    if log is not None:
        path = droplog.log_file(project.patches_dir)
        step["log"] = path.read_text(encoding="utf-8") if path.is_file() else None
    atomic_write_text(_journal(work), json.dumps(step) + "\n")
    work.git.update_ref(ref, old, f"patchset {verb}")
    work.git.run("checkout", "--quiet", "--force", "-B", PATCHED, new)
    if log is not None:
        droplog.append(project.patches_dir, [log])
    _write_back(project, work)
    _journal(work).unlink(missing_ok=True)
    return EditResult(verb, ref, tuple(_listed(project)))


def _write_back(project: Project, work: WorkRepo) -> None:
    """patches/ from `patched`, and the state that says they are in step."""
    commits = work.git.commits(f"{UPSTREAM}..{PATCHED}")
    mails = format_mails(work.git, f"{UPSTREAM}..{PATCHED}") if commits else []
    write_series(project.patches_dir, mails)
    files = read_patches_dir(project.patches_dir)
    pin = load_pin(project.pin_file)
    listed = [(n, files.get(n, b"")) for n in _listed(project)]
    fp = fingerprint_of(pin, pin.tree, files.get("series", b""), listed)
    digests = digests_of(files)
    formatted = ([[c, name, digests.get(name, "")] for c, (name, _) in zip(commits, mails, strict=True)]
                 if len(commits) == len(mails) else [])
    work.finish({"fingerprint": fp, "applied_head": work.head() or "", "patch_digests": digests,
                 "digests_fingerprint": fp, "formatted": formatted, "formatted_key": format_key(work.git)})


def _listed(project: Project) -> list[str]:
    return [e.name for e in read_series_file(project.series_file)[0]]


# -- the verbs -------------------------------------------------------------------------------------
@contextmanager
def _on_patch(project: Project, verb: str, n: int) -> Iterator[tuple[WorkRepo, str, list[str], int]]:
    """The lock held and the series in step: the work repository, `patched`'s head, the series'
    commits and the 0-based index of patch `n`."""
    with project_lock(project.lock_file, purpose=verb):
        work = WorkRepo(project.work_repo)
        head = _in_step(project, work)
        commits = _series_commits(work)
        yield work, head, commits, _pick(commits, n)

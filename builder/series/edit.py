"""The series verbs: `new`, `edit`, `drop`, `move`, `mark` and `undo`.

Each works on branch `patched` and `patches/` together, under the project lock.

Every verb starts from a series in step (the work tree clean, `patched` as the last apply or
refresh left it, `patches/` exactly what refresh writes from it), leaves a recovery ref
`refs/patchset/undo/NNNN-<verb>` at `patched` as it was, and ends with the two in step again:

- `drop`, `move` and `mark` make the new commits in a scratch index (each later patch replayed
  with a 3-way apply; nothing is touched when one does not apply), then record the step in a
  journal (`<git dir>/patchset/series-op.json`), move `patched`, write `patches/` and the state.
  A run killed after the journal was written is rolled back by the next series verb, `refresh` or
  `apply`: `patched` and `patches/` as they were, the recovery ref removed.
- `edit N` checks out patch N on `patched` (the later patches kept in `<git dir>/patchset/edit.json`
  and under the recovery ref); `new NAME` adds an empty patch with the trailer template on top of
  the series and starts an edit of it. The next `refresh` folds the work tree into the patch,
  replays the later patches on it and writes `patches/` back.
- `undo` moves `patched` and `patches/` back to the newest recovery ref (and ends an edit), and
  removes that ref; the others are kept and listed.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

from builder.errors import InputError, SeriesError, WorkTreeError
from builder.fsutil import atomic_write_text
from builder.gitrepo import COMMITTER, GitRepo
from builder.locking import project_lock
from builder.project import Project
from builder.series import dropped as droplog
from builder.series import movesnap
from builder.series.journal import (
    EditResult,
    Recovery,
    _commit,
    _edit_file,
    _in_step,
    _is_ancestor,
    _journal,
    _listed,
    _on_patch,
    _replay,
    _rewrite,
    _series_commits,
    _write_back,
    commit_facts,
    editing,
    next_recovery_ref,
    recover,
    recoveries,
)
from builder.series.model import UPSTREAM_STATES
from builder.series.trailers import _upstream_problem
from builder.series.workbase import PATCHED, UPSTREAM
from builder.series.workrepo import WorkRepo, ensure_no_op
from builder.upstream.pin import load_pin

TEMPLATE_BODY = """\
<what was wrong, what the fix changes, how it was tested>

Patchset-Upstream: not-sent
Patchset-Origin: <the pull request or commit the fix comes from>
Patchset-Backends: cpu
Patchset-Test: <test program and its arguments, e.g. test-backend-ops test -o ADD>
Patchset-Test-Paths: <the patch's test files, e.g. tests/test-backend-ops.cpp>
"""
"""The message of a new patch after its subject (`docs/series-format.md` says what each trailer means)."""


@dataclass(frozen=True)
class UndoResult:
    restored: Recovery
    kept: tuple[Recovery, ...]
    patches: tuple[str, ...]


def drop(project: Project, n: int, reason: str = "") -> EditResult:
    """Remove patch `n` from the series (the later ones replayed without it); with `reason`, its
    record appended to patches/dropped (by-hand), in the same step."""
    with _on_patch(project, "drop", n) as (work, head, commits, i):
        base = commits[i - 1] if i else work.git.out("rev-parse", UPSTREAM)
        names = {c: k for k, c in enumerate(commits, 1)}
        new = _replay(work.git, base, commits[i + 1:], names)
        log = (droplog.by_hand(project.patches_dir / _listed(project)[i], load_pin(project.pin_file).commit, reason)
               if reason else None)
        return _rewrite(project, work, "drop", head, new, log)


def move(project: Project, n: int, before: int) -> EditResult:
    """Put patch `n` just before patch `before` (numbers as they are now; `before` = count + 1: last)."""
    with _on_patch(project, "move", n) as (work, head, commits, i):
        if not 1 <= before <= len(commits) + 1:
            raise InputError(f"--before {before}: the series has {len(commits)} patch(es) "
                             f"(1..{len(commits) + 1}; {len(commits) + 1} puts it last)")
        if before in (n, n + 1):
            raise InputError(f"patch {n} is already just before patch {before}: nothing to move")
        order = list(commits)
        moving = order.pop(i)
        order.insert(before - 1 if before < n else before - 2, moving)
        first = next(k for k, (a, b) in enumerate(zip(order, commits, strict=True)) if a != b)
        base = commits[first - 1] if first else work.git.out("rev-parse", UPSTREAM)
        names = {c: k for k, c in enumerate(commits, 1)}
        new = _replay(work.git, base, order[first:], names)
        return _rewrite(project, work, "move", head, new)


def upstream_value(state: str, value: str) -> str:
    """The `Patchset-Upstream` value `mark` writes; InputError when malformed."""
    if state not in UPSTREAM_STATES or state == "not-sent":
        raise InputError(f"mark: '{state}' is not one of sent URL, merged COMMIT, rejected URL, not-needed WHY, "
                         "fork-only WHY")
    problem = _upstream_problem(state, value)
    if problem:
        raise InputError(f"mark: {problem}")
    return f"{state} {value}".strip()


def set_upstream_trailer(message: str, value: str) -> str:
    """`message` with its `Patchset-Upstream` (or deprecated `Patchset-Status`) trailer replaced by `value`,
    or the trailer added at the end of the trailer block."""
    lines = message.rstrip("\n").split("\n")
    # the trailer block: the last paragraph
    start = max((k + 1 for k, line in enumerate(lines) if not line.strip()), default=len(lines))
    block = lines[start:]
    is_trailers = start > 0 and block and all(re.match(r"^[A-Za-z0-9-]+:\s", b) or b[:1].isspace() for b in block)
    new_line = f"Patchset-Upstream: {value}"
    if not is_trailers:
        return "\n".join(lines) + "\n\n" + new_line + "\n"
    kept: list[str] = []
    placed = False
    for b in block:
        if re.match(r"^(Patchset-Upstream|Patchset-Status):", b, re.IGNORECASE):
            if not placed:
                kept.append(new_line)
                placed = True
            continue
        kept.append(b)
    if not placed:
        kept.append(new_line)
    return "\n".join(lines[:start] + kept) + "\n"


def mark(project: Project, n: int, state: str, value: str) -> EditResult:
    """Set patch `n`'s `Patchset-Upstream` trailer to `state value` (sent URL, merged COMMIT, ...)."""
    text = upstream_value(state, value)
    with _on_patch(project, "mark", n) as (work, head, commits, i):
        git = work.git
        parent = commits[i - 1] if i else git.out("rev-parse", UPSTREAM)
        facts = commit_facts(git, commits[i:])
        marked = facts[commits[i]]
        msg = set_upstream_trailer(marked.message, text)
        tip = _commit(git, marked.tree, parent, msg, marked.author_env)
        for c in commits[i + 1:]:  # the same trees on the new parent
            tip = _commit(git, facts[c].tree, tip, facts[c].message, facts[c].author_env)
        return _rewrite(project, work, "mark", head, tip)


def edit(project: Project, n: int) -> EditResult:
    """Check out patch `n` on `patched` to amend it; the later patches wait for `refresh`."""
    with _on_patch(project, "edit", n) as (work, head, commits, i):
        return _start_edit(work, head, n, commits[i], commits[i + 1:], "edit")


def _start_edit(work: WorkRepo, tip: str, n: int, at: str, rest: list[str], verb: str) -> EditResult:
    ref = next_recovery_ref(work.git, verb)
    work.git.update_ref(ref, tip, f"patchset {verb}")
    atomic_write_text(_edit_file(work), json.dumps({"index": n, "commit": at, "rest": rest, "tip": tip,
                                                    "ref": ref}, indent=1) + "\n")
    work.git.run("checkout", "--quiet", "--force", "-B", PATCHED, at)
    return EditResult(verb, ref, editing=work.git.subject(at), work_tree=work.path)


def author_ident(project: Project, author: str = "") -> dict[str, str]:
    """The author of a new patch: `author` ("Name <email>"), else the person git names outside the
    work repository (whose own configuration says `patchset`)."""
    if author:
        m = re.fullmatch(r"\s*(.+?)\s*<([^<>]+)>\s*", author)
        if not m:
            raise InputError(f"--author '{author}': give it as 'Name <email>'")
        return {"GIT_AUTHOR_NAME": m[1], "GIT_AUTHOR_EMAIL": m[2]}
    r = GitRepo(project.root).run("var", "GIT_AUTHOR_IDENT", check=False)
    m = re.match(r"(.+?) <([^<>]*)>", r.stdout.strip())
    if r.returncode != 0 or not m:
        return {}
    return {"GIT_AUTHOR_NAME": m[1], "GIT_AUTHOR_EMAIL": m[2]}


def new(project: Project, name: str, body: str, author: dict[str, str]) -> EditResult:
    """Add an empty patch `name` with message body `body` on top of the series and start editing it."""
    subject = " ".join(name.split())
    if not subject:
        raise InputError("new: give the patch's subject, e.g. `patchset new 'ggml : fix ADD for n == 0'`")
    body = "\n".join(line for line in body.splitlines() if not line.startswith("#")).strip("\n")
    with project_lock(project.lock_file, purpose="new"):
        work = WorkRepo(project.work_repo)
        head = _in_step(project, work)
        n = len(_series_commits(work)) + 1
        c = _commit(work.git, work.git.tree_of(head), head, f"{subject}\n\n{body}\n" if body else f"{subject}\n",
                    {**COMMITTER, **author})
        return _start_edit(work, head, n, c, [], "new")


def finish_edit(project: Project, work: WorkRepo) -> str:
    """Called by `refresh` (lock held): fold the work tree into the patch being edited, replay the
    later patches on it and leave `patched` at the new tip; '' when no edit is in progress, else the
    subject of the edited patch."""
    ed = editing(work)
    if ed is None:
        return ""
    git = work.git
    done = ed.get("result")
    if done and work.head() == done:  # killed after moving the branch: only the record is left
        _edit_file(work).unlink(missing_ok=True)
        return git.subject(done)
    if git.current_branch() != PATCHED:
        raise WorkTreeError(f"{work.path}: patch {ed['index']} is being edited on '{PATCHED}', but another branch "
                            "is checked out: check out 'patched' again")
    parent = git.rev(f"{ed['commit']}^") or ""
    if git.is_dirty():
        git.run("add", "--all")
        git.run("commit", "--quiet", "--amend", "--no-edit", "--allow-empty", env=COMMITTER)
    head = git.out("rev-parse", "HEAD")
    if parent and not _is_ancestor(git, parent, head):
        raise WorkTreeError(f"{work.path}: 'patched' no longer holds the patches before patch {ed['index']}; "
                            "`patchset undo` gives the edit up")
    rest = list(ed.get("rest", []))
    names = {c: ed["index"] + k for k, c in enumerate(rest, 1)}
    tip = _replay(git, head, rest, names,
                  f"patch {ed['index']} is still being edited (its changes committed on 'patched'): change it so "
                  "that the later patches apply and refresh again, or `patchset undo` to give the edit up"
                  ) if rest else head
    atomic_write_text(_edit_file(work), json.dumps({**ed, "result": tip}, indent=1) + "\n")
    if tip != head:
        git.run("checkout", "--quiet", "--force", "-B", PATCHED, tip)
    _edit_file(work).unlink(missing_ok=True)
    if git.tree_of(head) == git.tree_of(parent or head):
        raise SeriesError(f"patch {ed['index']} ({git.subject(head)}) changes nothing: make its change in "
                          f"{work.path} and refresh again, or `patchset drop {ed['index']}`")
    return git.subject(head)


def undo(project: Project) -> UndoResult:
    """`patched` and patches/ back to the newest recovery ref, which is removed; an edit in
    progress is given up (its uncommitted work saved under refs/patchset/backup/ first)."""
    with project_lock(project.lock_file, purpose="undo"):
        work = WorkRepo(project.work_repo)
        if not work.exists() or work.head() is None:
            raise WorkTreeError(f"{project.work_repo}: no '{PATCHED}' branch; run `patchset apply` first")
        killed = _killed_undo_move(work)
        recover(project, work)
        ensure_no_op(work)
        have = recoveries(work.git)
        if killed is not None:
            # an undo of a rebase or bump killed half-way, finished by recover: that is this undo
            return UndoResult(killed, tuple(have), tuple(_listed(project)))
        if not have:
            raise WorkTreeError("nothing to undo: no recovery ref under refs/patchset/undo/ "
                                "(the series verbs leave one)")
        last = have[-1]
        if last.verb in movesnap.MOVE_VERBS:
            return _undo_move(project, work, last, have)
        up = work.git.out("rev-parse", UPSTREAM)
        if not _is_ancestor(work.git, up, last.commit):
            raise WorkTreeError(f"{last.ref} was made on another upstream (before a rebase or bump); "
                                "`patchset rebase` names that way back (refs/patchset/before-<pin>)")
        if work.git.is_dirty():
            work.backup("undo")
        atomic_write_text(_journal(work), json.dumps({"verb": "undo", "old": work.head(), "new": last.commit,
                                                      "ref": last.ref}) + "\n")
        _edit_file(work).unlink(missing_ok=True)
        work.git.run("checkout", "--quiet", "--force", "-B", PATCHED, last.commit)
        _write_back(project, work)
        if last.verb == "drop":  # a `drop --reason` logged the patch that is back now
            droplog.unlog_back(project.patches_dir, _listed(project))
        work.git.run("update-ref", "-d", last.ref)
        _journal(work).unlink(missing_ok=True)
        return UndoResult(last, tuple(have[:-1]), tuple(_listed(project)))


def _killed_undo_move(work: WorkRepo) -> Recovery | None:
    """The recovery ref of an undo of a rebase or bump that was killed before it finished, or None."""
    try:
        data = json.loads(_journal(work).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or data.get("verb") != "undo-move":
        return None
    return Recovery(data["ref"], data["snapshot"], data["ref"].rsplit("-", 1)[-1], -1)


def _undo_move(project: Project, work: WorkRepo, last: Recovery, have: list[Recovery]) -> UndoResult:
    """Undo a rebase or bump: the pin, patches/, `patched` and `upstream` as its snapshot holds them
    (builder/series/movesnap.py); journaled, so that a killed undo is finished by `recover`."""
    if work.git.is_dirty():
        work.backup("undo")
    atomic_write_text(_journal(work), json.dumps({"verb": "undo-move", "snapshot": last.commit,
                                                  "ref": last.ref}) + "\n")
    _edit_file(work).unlink(missing_ok=True)
    movesnap.restore(project, work, last.commit)
    work.git.run("update-ref", "-d", last.ref)
    _journal(work).unlink(missing_ok=True)
    return UndoResult(last, tuple(have[:-1]), tuple(_listed(project)))


def finish_pending(project: Project) -> str:
    """Before a refresh (the lock held or taken here): a killed verb rolled back, an edit in progress
    folded back into `patched` (`finish_edit`). The subject of the edited patch, or ''."""
    with project_lock(project.lock_file, purpose="refresh"):
        work = WorkRepo(project.work_repo)
        if not work.exists():
            return ""
        recover(project, work)
        ensure_no_op(work)
        return finish_edit(project, work)

"""`patchset import`: commits from elsewhere into the series, on top of it, in one step.

The sources are a range `A..B` of a git repository (the work repository, or a fork's clone), an mbox
(`git format-patch --stdout`) or a pull request's `.patch` file (an mbox of its commits). Each commit
or mail becomes one patch with its author, date and message, plus the Patchset-* trailers of
`patchset new`'s template that it lacks and that have a value there (`Patchset-Upstream: not-sent`,
`Patchset-Backends: cpu`), and its origin (the commit, or `--origin URL`); the test trailers are the
person's to fill (`TO_FILL`). Every mail is applied in a scratch index first
(a 3-way apply, as the other series verbs replay); only when all of them apply do `patched` and
`patches/` move, together, with a recovery ref that `patchset undo` goes back to.
"""

from __future__ import annotations

import dataclasses
import re
import tempfile
from dataclasses import dataclass
from pathlib import Path

from builder import proc
from builder.errors import InputError, ProcessError
from builder.gitrepo import COMMITTER, GitRepo
from builder.locking import project_lock
from builder.project import Project
from builder.series.edit import TEMPLATE_BODY
from builder.series.journal import EditResult, _commit, _in_step, _rewrite
from builder.series.workrepo import WorkRepo

_INFO = re.compile(r"^(Author|Email|Subject|Date): ?(.*)$", re.MULTILINE)


@dataclass(frozen=True)
class Mail:
    """One patch to import, read by `git mailinfo`."""

    where: str
    """What it is, for messages: `FILE mail 2` or the commit id."""
    subject: str
    message: str
    """The message after the subject (description and trailers), without Patchset-* trailers added."""
    author: dict[str, str]
    diff: str
    origin: str = ""
    """The commit it was made from (a range's), for its Patchset-Origin."""


def is_range(source: str) -> bool:
    """True when `source` reads as A..B (release names with dots included: v1.2..v1.3), not A...B."""
    a, sep, b = source.partition("..")
    return bool(sep and a and b) and "..." not in source and not any(c.isspace() for c in source)


def mails_from_file(path: Path) -> list[Mail]:
    """The mails of an mbox or a pull request's .patch file, in order."""
    if not path.is_file():
        raise InputError(f"{path}: no such file (import takes A..B, an mbox or a pull request's .patch file)")
    with tempfile.TemporaryDirectory(prefix="patchset-import-") as tmp:
        try:
            n = int(proc.run(["git", "mailsplit", f"-o{tmp}", str(path)]).stdout.strip() or 0)
        except ProcessError as e:
            raise InputError(f"{path}: not an mbox (git format-patch output, or a pull request's .patch file)") from e
        return [_mail(Path(tmp) / f"{i:04d}", f"{path} mail {i}") for i in range(1, n + 1)]


def mails_from_range(repo: Path, range_: str) -> list[Mail]:
    """The commits of `range_` (A..B) of `repo`, oldest first, as format-patch writes them."""
    git = GitRepo(repo)
    try:
        commits = git.out("rev-list", "--reverse", range_).split()
        merges = git.out("rev-list", "--merges", range_).split()
    except ProcessError as e:
        raise InputError(f"{range_}: not a range of {repo} ({(e.stderr.strip().splitlines() or [''])[0]})") from e
    if merges:
        raise InputError(f"{range_}: commit {merges[0][:12]} of {repo} is a merge; import the commits it brings "
                         "(a range of one side) instead")
    if not commits:
        raise InputError(f"{range_}: no commits in {repo}")
    mails = []
    with tempfile.TemporaryDirectory(prefix="patchset-import-") as tmp:
        for c in commits:
            mbox = Path(tmp) / c
            # the commit as a mail: full blob ids, so the 3-way apply can use them
            mbox.write_text(git.run("format-patch", "--stdout", "-1", "--full-index", "--binary", "--no-signature",
                                    "--no-stat", c).stdout, encoding="utf-8")
            mails.append(dataclasses.replace(_mail(mbox, c), origin=c))
    return mails


def _mail(path: Path, where: str) -> Mail:
    with tempfile.TemporaryDirectory(prefix="patchset-mailinfo-") as tmp:
        msg, patch = Path(tmp) / "msg", Path(tmp) / "patch"
        info = proc.run(["git", "mailinfo", str(msg), str(patch)],
                        input_text=path.read_text(encoding="utf-8", errors="replace")).stdout
        fields = dict(_INFO.findall(info))
        body, diff = msg.read_text(encoding="utf-8"), patch.read_text(encoding="utf-8")
    if not fields.get("Subject", "").strip():
        raise InputError(f"{where}: no subject (not a mail: import takes git format-patch output)")
    if not diff.strip():
        raise InputError(f"{where} ({fields['Subject']}): no diff in it")
    author = {k: v for k, v in (("GIT_AUTHOR_NAME", fields.get("Author", "")),
                                ("GIT_AUTHOR_EMAIL", fields.get("Email", "")),
                                ("GIT_AUTHOR_DATE", fields.get("Date", ""))) if v}
    return Mail(where, fields["Subject"].strip(), body.strip("\n"), author, diff)


def _with_trailers(subject: str, message: str, trailers: list[str]) -> str:
    """`message` (after `subject`) with `trailers` appended to its trailer block (git
    interpret-trailers; a key the message has already keeps its value)."""
    args = [a for t in trailers for a in ("--trailer", t)]
    out = proc.run(["git", "interpret-trailers", "--if-exists", "doNothing", "--if-missing", "add", *args],
                   input_text=f"{subject}\n\n{message}\n").stdout
    return out.split("\n", 1)[1].strip("\n")


TEMPLATE_TRAILERS = [line for line in TEMPLATE_BODY.splitlines() if line.startswith("Patchset-")]
ORIGIN = "Patchset-Origin"
TO_FILL = tuple(key for key in (line.split(":", 1)[0] for line in TEMPLATE_TRAILERS if "<" in line) if key != ORIGIN)
"""The template's trailers that only the person can fill (which test proves the patch); a placeholder
would make the series fail to load, so an imported patch is left without them and the command says so."""


def message(mail: Mail, origin: str = "") -> str:
    """The patch's message: subject, the mail's own message, and the template's Patchset-* trailers
    with a value (`Patchset-Upstream: not-sent`, ...) that it lacks; its Patchset-Origin, when it
    has none, `origin` (a pull request's URL) or the commit it was made from."""
    wanted = [line for line in TEMPLATE_TRAILERS if "<" not in line]
    if origin or mail.origin:
        wanted.append(f"{ORIGIN}: {origin or mail.origin}")
    return f"{mail.subject}\n\n{_with_trailers(mail.subject, mail.message, wanted)}\n"


def import_mails(project: Project, mails: list[Mail], source: str, origin: str = "") -> EditResult:
    """The mails on top of the series, each one patch; nothing changes unless every one applies.
    `origin`: the Patchset-Origin of each (a pull request's URL), where the mail has none."""
    if not mails:
        raise InputError(f"{source}: no patch in it")
    with project_lock(project.lock_file, purpose="import"):
        work = WorkRepo(project.work_repo)
        head = _in_step(project, work)
        tip = head
        with tempfile.TemporaryDirectory(prefix="patchset-import-") as tmp:
            env = {"GIT_INDEX_FILE": str(Path(tmp) / "index")}
            for mail in mails:
                work.git.run("read-tree", tip, env=env)
                r = work.git.run("apply", "--cached", "--3way", "-", env=env, input_text=mail.diff, check=False)
                if r.returncode != 0 or work.git.out("ls-files", "--unmerged", env=env):
                    raise InputError(f"{mail.where} ({mail.subject}) does not apply on the series; nothing imported")
                tip = _commit(work.git, work.git.out("write-tree", env=env), tip, message(mail, origin),
                              {**COMMITTER, **mail.author})
        return _rewrite(project, work, "import", head, tip)

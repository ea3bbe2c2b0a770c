"""`patchset rebase --dry-run`: what every patch of the series would do on a new base.

Nothing in the project moves: the patches are tried in a scratch bare repository that borrows
the cache's objects, through a temporary index (`GIT_INDEX_FILE`) with `git apply --cached`, and
each result that applies is carried forward as a tree (`write-tree`). Outcomes are read from exit
codes and from `ls-files --unmerged -z`, never from git's messages.

Per patch, in series order, on the tree carried so far:

- clean: `git apply --cached` applies it as is;
- already upstream: it applies in reverse (the new base has it), or its 3-way merge leaves the
  tree unchanged;
- 3-way: `git apply --cached --3way` merges it without conflict;
- conflict: the 3-way merge leaves unmerged files; the hunks listed are those that do not apply
  one by one (`path:line`, the hunk's line in the old file);
- depends: the patch needs a patch that failed earlier (conflict or depends). The signal is
  exact, on the old base: the patch applies on the pin with the series before it, and does not
  apply there once the failed patches are left out (its context holds lines they add or change).
  It names the first failed patch whose presence makes it apply again. Such a patch is not tried
  on the new base: a 3-way merge would "succeed" by dropping the lines it builds on.

`apply --dry-run` (`dry_run_apply`) makes the same table for a series with no old base here: there
`depends` is read from the blob ids the diffs name, for a patch that does not apply as is (one
written after a failed patch whose context is intact on the new base is `clean`). A rebase dry
run with a `Check` also hands the trees it made to that check (`builder.prove.fixed_upstream`:
each patch's own test, without the fix, on the new upstream) and compares patch-ids with the
commits between the pins.
"""

from __future__ import annotations

import contextlib
import dataclasses
import re
import shutil
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from builder import proc, words
from builder.errors import ProcessError, SeriesError
from builder.fsutil import atomic_write_text
from builder.gitrepo import ISOLATED, GitRepo, init_repo
from builder.project import Project
from builder.series import resolutions as rr
from builder.series.load import load_series
from builder.series.model import Patch
from builder.upstream import fetch as upstream
from builder.upstream.fetch import Fetched, merge_shallow
from builder.upstream.pin import GitSource, Pin, load_pin

CLEAN = "clean"
THREE_WAY = "3-way"
CONFLICT = "conflict"
UPSTREAM = "already-upstream"
DEPENDS = "depends"
RESOLVED = "resolved"
REUSED = "resolution reused"
"""A conflict resolved by a resolution recorded in patches/resolutions/ (`builder.series.resolutions`)."""
SKIPPED = "skipped"


FIXED, PARTLY_FIXED, NOT_FIXED, CANNOT_TELL = words.FIXED, words.PARTLY_FIXED, words.NOT_FIXED, words.CANNOT_TELL


@dataclass(frozen=True)
class UpstreamFix:
    """Whether the new upstream fixed the bug a patch fixes, by the patch's own test: its test part
    alone on the new upstream (with the earlier patches that still apply), as verify's before tree."""

    verdict: str
    """fixed upstream, partly fixed upstream, not fixed upstream, or cannot tell."""
    still_failing: tuple[str, ...] = ()
    """The cases that fail without the fix on the new upstream (and failed on the old one)."""
    now_passing: tuple[str, ...] = ()
    """The cases that failed without the fix on the old upstream and pass on the new one."""
    evidence: str = ""
    """In words: what ran, where, and what it said (the compiler's first errors when it did not build)."""

    def as_json(self) -> dict:
        return {"verdict": self.verdict, "still_failing": list(self.still_failing),
                "now_passing": list(self.now_passing), "evidence": self.evidence}


@dataclass(frozen=True)
class PatchReport:
    """What happened (or would happen) to one patch."""

    patch: str
    outcome: str
    """clean, 3-way, conflict, already-upstream, depends (dry run); resolved, skipped (a real rebase)."""
    files: tuple[str, ...] = ()
    """conflict: the files left unmerged (or that could not be merged at all)."""
    hunks: tuple[str, ...] = ()
    """conflict: `path:line` of each hunk that does not apply on its own."""
    depends_on: str = ""
    """depends: the earlier failed patch it needs."""
    merged_as: str = ""
    """An upstream commit between the old base and the new one with the same patch-id (the same
    diff, whatever its context): merged as is, even when the diff no longer applies."""
    fix: UpstreamFix | None = None
    """Whether upstream fixed the bug, by the patch's own test (only when asked for: it builds)."""
    renamed: tuple[str, ...] = ()
    """Files of the patch that upstream renamed or moved, as `old -> new`: the patch was tried with
    its paths rewritten to the new names (renames followed; see `follow_renames`)."""
    change: str = ""
    """A finished rebase: what the move did to the patch's diff (`change_class`): unchanged, context
    only, or changed ('' when the patch is gone or nothing compared it)."""
    resolutions: tuple[str, ...] = ()
    """Keys of the recorded resolutions (patches/resolutions/) reused for it (REUSED), or recorded
    for it (a conflict resolved by hand at `rebase --continue`)."""
    merged_unchecked: str = ""
    """Why no patch-id was compared although the check asked for it (`not checked, ...`: the
    history between the pins is missing); '' when compared, or not asked."""

    @property
    def failed(self) -> bool:
        return self.outcome in (CONFLICT, DEPENDS)


@dataclass(frozen=True)
class RebaseReport:
    """The table of a rebase: one row per patch of the series, in order."""

    old_commit: str
    new_commit: str
    dry_run: bool
    patches: tuple[PatchReport, ...] = field(default_factory=tuple)
    range_diff: str = ""
    """A finished rebase: `git range-diff` of the old series against the new one."""
    recovery_ref: str = ""
    """A finished rebase: the ref of the work repository that holds the series as it was before."""

    @property
    def failed(self) -> tuple[PatchReport, ...]:
        return tuple(p for p in self.patches if p.failed)

    @classmethod
    def from_json(cls, data: dict) -> RebaseReport:
        """The report `as_json` wrote."""
        rows = tuple(PatchReport(
            r["patch"], r["outcome"], tuple(r["files"]), tuple(r["hunks"]), r["depends_on"], r.get("merged_as", ""),
            UpstreamFix(f["verdict"], tuple(f["still_failing"]), tuple(f["now_passing"]), f["evidence"])
            if (f := r.get("fixed_upstream")) else None, tuple(r.get("renamed", ())), r.get("change", ""),
            tuple(r.get("resolutions", ())), r.get("merged_as_unchecked", ""))
            for r in data["patches"])
        return cls(data["old"], data["new"], data["dry_run"], rows, data.get("range_diff", ""),
                   data.get("recovery_ref", ""))

    def as_json(self) -> dict:
        return {
            "old": self.old_commit, "new": self.new_commit, "dry_run": self.dry_run,
            "patches": [{"patch": p.patch, "outcome": p.outcome, "files": list(p.files), "hunks": list(p.hunks),
                         "depends_on": p.depends_on,
                         **({"merged_as": p.merged_as} if p.merged_as else {}),
                         **({"merged_as_unchecked": p.merged_unchecked} if p.merged_unchecked else {}),
                         **({"renamed": list(p.renamed)} if p.renamed else {}),
                         **({"change": p.change} if p.change else {}),
                         **({"resolutions": list(p.resolutions)} if p.resolutions else {}),
                         **({"fixed_upstream": p.fix.as_json()} if p.fix else {})} for p in self.patches],
            **({"recovery_ref": self.recovery_ref} if self.recovery_ref else {}),
            **({"range_diff": self.range_diff} if self.range_diff else {}),
        }


class Scratch:
    """A bare scratch repository and one temporary index in it."""

    def __init__(self, root: Path, borrow: list[Path]) -> None:
        self.git = init_repo(root / "scratch.git", bare=True)
        (root / "scratch.git" / "objects" / "info" / "alternates").write_text(
            "".join(f"{p.resolve()}\n" for p in dict.fromkeys(borrow)))
        self.env = {"GIT_INDEX_FILE": str(root / "index")}
        self.root = root
        self.resolutions: dict[str, rr.Resolution] = {}
        """The series' recorded resolutions (patches/resolutions/), reused where a conflict has one."""
        self.hunks = True
        """Whether a conflict's row lists the hunks that do not apply, each tried on its own (canary
        asks for them only at the commit it reports: a range's other conflicts need no detail)."""

    def apply(self, tree: str, mail: Path, *flags: str) -> tuple[bool, str]:
        """Apply `mail` on `tree` in the index: (applied, the resulting tree or '')."""
        self.git.run("read-tree", tree, env=self.env)
        if self.git.run("apply", "--cached", *flags, str(mail), env=self.env, check=False).returncode != 0:
            return False, ""
        return True, ("" if "--check" in flags else self.git.out("write-tree", env=self.env))

    def applies(self, tree: str, mail: Path, *flags: str) -> bool:
        return self.apply(tree, mail, "--check", *flags)[0]

    def applies_all(self, tree: str, mails: list[Path]) -> bool:
        """Do the mails apply on `tree` in order, each as is? One `git apply` of them all: it
        applies each patch on the result of those before it, all or nothing (not with `--check`,
        which tries each on `tree` alone)."""
        self.git.run("read-tree", tree, env=self.env)
        return self.git.run("apply", "--cached", *map(str, mails), env=self.env, check=False).returncode == 0

    def stack(self, base: str, mails: list[Path]) -> str:
        """`base` with each mail applied in order (3-way where a plain apply fails); one that does
        not apply at all is left out."""
        tree = base
        for mail in mails:
            ok, after = self.apply(tree, mail)
            if not ok:
                ok, after = self.three_way(tree, mail)
            tree = after if ok else tree
        return tree

    def three_way(self, tree: str, mail: Path) -> tuple[bool, str]:
        self.git.run("read-tree", tree, env=self.env)
        rc = self.git.run("apply", "--cached", "--3way", str(mail), env=self.env, check=False).returncode
        if rc != 0 or self.unmerged():
            return False, ""
        return True, self.git.out("write-tree", env=self.env)

    def on_pin(self, tree: str, names: list[str], mails: list[Path], short: str) -> None:
        """Apply the series on its own base (the pin `short`), each patch on the result of those
        before it: every patch must apply there, and applying writes the intermediate blobs that
        3-way merges elsewhere need (the patches name them)."""
        for name, mail in zip(names, mails, strict=True):
            ok, tree = self.apply(tree, mail)
            if not ok:
                raise SeriesError(f"{name}: does not apply on the current pin {short}; "
                                  "run `patchset apply` to see where")

    def follow(self, mails: list[Path], moved: dict[str, str]) -> tuple[list[Path], list[tuple[str, ...]]]:
        """The mails with their paths following `moved` (`renames`), written into the scratch folder
        where a path changes, and per mail the renames followed (`old -> new`)."""
        out: list[Path] = []
        followed: list[tuple[str, ...]] = []
        for i, mail in enumerate(mails):
            data, done = follow_renames(mail.read_bytes(), moved)
            if done:
                out.append(self.root / f"followed-{i}-{mail.name}")
                out[-1].write_bytes(data)
            else:
                out.append(mail)
            followed.append(done)
        return out, followed

    def reuse(self, tree: str, mail: Path) -> tuple[str, tuple[str, ...]]:
        """`mail` on `tree` by a 3-way merge whose conflicts each have a recorded resolution that fits:
        (the tree, the keys reused); ('', ()) otherwise. The merge runs in a scratch work tree holding
        only the mail's files, so the conflicted files are those `rebase` would meet."""
        wt = self.root / "wt"
        shutil.rmtree(wt, ignore_errors=True)
        wt.mkdir()
        work = f"--work-tree={wt}"
        self.git.run("read-tree", tree, env=self.env)
        paths = [p for p, _h, _l in split_hunks(mail.read_bytes())]
        self.git.run(work, "checkout-index", "-f", "--", *paths, env=self.env, check=False)
        self.git.run(work, "apply", "--3way", str(mail), env=self.env, check=False)
        conflicted = self.unmerged()
        keys: list[str] = []
        if not conflicted:
            return "", ()
        # the conflicted files with their markers, merged again from the index's stages (`apply --3way`
        # with a work tree of a bare repository leaves the file as it was)
        self.git.run(work, "checkout", "-m", "--", *conflicted, env=self.env, check=False)
        for path in conflicted:
            text = (wt / path).read_bytes() if (wt / path).is_file() else b""
            res = self.resolutions.get(rr.key_of(text))
            resolved = rr.carry(res, text) if res else None
            if res is None or resolved is None:
                return "", ()
            (wt / path).write_bytes(resolved)
            keys.append(res.key)
        self.git.run(work, "add", "--", *conflicted, env=self.env)
        if self.unmerged():
            return "", ()
        return self.git.out("write-tree", env=self.env), tuple(dict.fromkeys(keys))

    def unmerged(self) -> list[str]:
        out = self.git.run("ls-files", "--unmerged", "-z", env=self.env).stdout
        # <mode> <oid> <stage>\t<path>\0 ...
        return list(dict.fromkeys(e.split("\t", 1)[1] for e in out.split("\0") if "\t" in e))

    def failed_hunks(self, tree: str, mail: Path) -> tuple[list[str], list[str]]:
        """(files, hunks) of `mail` that do not apply on `tree`, each hunk tried on its own."""
        files: list[str] = []
        hunks: list[str] = []
        for i, (path, header, hunk_list) in enumerate(split_hunks(mail.read_bytes())):
            file_ok = True
            for j, (line, body) in enumerate(hunk_list or [(0, b"")]):
                one = self.root / f"hunk-{i}-{j}.patch"
                one.write_bytes(header + body)
                if not self.applies(tree, one):
                    file_ok = False
                    if hunk_list:
                        hunks.append(f"{path}:{line}")
            if not file_ok:
                files.append(path)
        return files, hunks


_HUNK = re.compile(rb"^@@ -(\d+)(?:,(\d+))? \+\d+(?:,(\d+))? @@")


def split_hunks(mail: bytes) -> list[tuple[str, bytes, list[tuple[int, bytes]]]]:
    """The diff of a mail as (path, file header, [(old start line, hunk)]) per file.

    Hunks are read by their line counts, so a trailing signature is never taken for a line.
    """
    lines = mail.splitlines(keepends=True)
    files: list[tuple[str, bytes, list[tuple[int, bytes]]]] = []
    i = 0
    while i < len(lines):
        if not lines[i].startswith(b"diff --git "):
            i += 1
            continue
        m = re.match(rb"diff --git a/(.*) b/(.*)$", lines[i].rstrip(b"\n"))
        path = (m.group(2) if m else lines[i][11:].strip()).decode("utf-8", "replace")
        header = [lines[i]]
        i += 1
        while i < len(lines) and not lines[i].startswith((b"@@", b"diff --git ")):
            header.append(lines[i])
            i += 1
        hunks: list[tuple[int, bytes]] = []
        while i < len(lines) and (h := _HUNK.match(lines[i])):
            old_n = int(h.group(2)) if h.group(2) is not None else 1
            new_n = int(h.group(3)) if h.group(3) is not None else 1
            body = [lines[i]]
            i += 1
            while i < len(lines) and (old_n > 0 or new_n > 0 or lines[i].startswith(b"\\")):
                tag = lines[i][:1]
                if tag in (b" ", b"\n"):
                    old_n, new_n = old_n - 1, new_n - 1
                elif tag == b"-":
                    old_n -= 1
                elif tag == b"+":
                    new_n -= 1
                body.append(lines[i])
                i += 1
            hunks.append((int(h.group(1)), b"".join(body)))
        files.append((path, b"".join(header), hunks))
    return files


def renames(git: GitRepo, old: str, new: str) -> dict[str, str]:
    """The files upstream renamed or moved between two trees or commits, by git's rename detection
    (`diff -M`, the default similarity): old path -> new path. A renamed path is gone from `new`."""
    fields = git.run("diff-tree", "-r", "-M", "--name-status", "-z", old, new).stdout.split("\0")
    moved: dict[str, str] = {}
    i = 0
    while i < len(fields) - 1:
        status = fields[i]
        if status[:1] in ("R", "C"):
            if status[:1] == "R":
                moved[fields[i + 1]] = fields[i + 2]
            i += 3
        else:
            i += 2
    return moved


_PATH_LINES = (b"--- a/", b"+++ b/", b"rename from ", b"rename to ", b"copy from ", b"copy to ")
_DIFF_GIT = re.compile(rb"^diff --git a/(.*) b/(.*?)(\r?\n)?$")


def follow_renames(mail: bytes, moved: dict[str, str]) -> tuple[bytes, tuple[str, ...]]:
    """`mail` with each path upstream renamed (`renames`) rewritten to its new name, in the diff's
    file headers only, and the renames followed (`old -> new`).

    Upstream moving a file a patch touches is what left Ollama's bump with "sha1 information is
    lacking or useless": the patch names a path the new tree does not have. With the path
    rewritten, `git apply` finds the file, and `--3way` merges from the blob the patch names.
    """
    out: list[bytes] = []
    done: dict[str, None] = {}
    in_header = False

    def new_name(raw: bytes) -> bytes:
        path = raw.decode("utf-8", "surrogateescape")
        if path in moved:
            done[f"{path} -> {moved[path]}"] = None
            return moved[path].encode("utf-8", "surrogateescape")
        return raw

    for line in mail.splitlines(keepends=True):
        if line.startswith(b"diff --git "):
            in_header = True
            m = _DIFF_GIT.match(line)
            out.append(b"diff --git a/" + new_name(m.group(1)) + b" b/" + new_name(m.group(2)) + (m.group(3) or b"")
                       if m else line)
            continue
        if in_header and line.startswith(b"@@"):
            in_header = False
        elif in_header and line.startswith(_PATH_LINES):
            head = next(p for p in _PATH_LINES if line.startswith(p))
            body = line[len(head):]
            eol = body[len(body.rstrip(b"\r\n")):]
            out.append(head + new_name(body[:len(body) - len(eol)]) + eol)
            continue
        out.append(line)
    return b"".join(out), tuple(done)


UNCHANGED = "unchanged"
CONTEXT_ONLY = "context only"
CHANGED = "changed"


def _own_lines(mail: bytes) -> list[bytes]:
    """The lines a mail's diff adds and removes, in order, without paths, context or line numbers."""
    return [ln for _p, _h, hunks in split_hunks(mail) for _n, body in hunks
            for ln in body.splitlines()[1:] if ln[:1] in (b"+", b"-")]


def _bodies(mail: bytes) -> list[bytes]:
    return [body for _p, _h, hunks in split_hunks(mail) for _n, body in hunks]


def change_class(old: bytes, new: bytes) -> str:
    """What a move did to a patch, as Electron's roll tooling separates them: `unchanged` (the same
    hunks), `context only` (upstream moved or changed the lines around the patch's own; the lines it
    adds and removes are the same: no new review needed) or `changed` (its own lines differ: a
    3-way merge or a resolution changed what it does)."""
    if _bodies(old) == _bodies(new):
        return UNCHANGED
    return CONTEXT_ONLY if _own_lines(old) == _own_lines(new) else CHANGED


@dataclass(frozen=True)
class Moved:
    """What a dry run made, for a check that builds on it (valid inside `dry_run`'s `check` only)."""

    git: GitRepo
    """The scratch repository: it borrows both pins' objects and holds every tree below."""
    patches: tuple[Patch, ...]
    old_commit: str
    new_commit: str
    old_bases: tuple[str, ...]
    """Per patch: the tree it applies on at the old pin (the pin with the patches before it)."""
    new_bases: tuple[str, ...]
    """Per patch: the tree it is tried on at the new base (with the earlier patches that still apply)."""
    report: RebaseReport


Check = Callable[[Moved], dict[str, UpstreamFix]]
"""Whether upstream fixed each patch's bug (by patch name); `builder.prove.fixed_upstream.checker`."""


def dry_run(project: Project, new_pin: Pin, check: Check | None = None) -> RebaseReport:
    """Try the series of `patches/` on `new_pin`'s tree; nothing in the project changes.

    Both pins are fetched into the cache when they are not there yet (that is all it writes).
    With `check`, each row also says whether upstream fixed the patch's bug (see `Moved`; the
    check builds in its own folders under the state folder), and which patches upstream merged as
    they are (patch-id over the commits between the pins, fetched from the new pin's git source).
    """
    old_pin = load_pin(project.pin_file)
    series = load_series(project.patches_dir)
    old = upstream.fetch(project.cache_dir, old_pin)
    new = upstream.fetch(project.cache_dir, new_pin)
    new_commit = new_pin.commit or new.commit
    with scratch_repo([old.repo / "objects", new.repo / "objects"]) as sc:
        sc.resolutions = rr.load(project.patches_dir)
        mails = [p.path for p in series.patches]
        names = [p.name for p in series.patches]
        moved, followed = sc.follow(mails, renames(sc.git, old.tree, new.tree))
        # most moves: the whole series applies as is on the new base (and so on its own): every
        # patch is clean, found in one `git apply` instead of several processes a patch
        if mails and sc.applies_all(new.tree, moved) and (old.tree == new.tree or sc.applies_all(old.tree, mails)):
            report = RebaseReport(old_pin.commit, new_commit, True, tuple(
                PatchReport(name, CLEAN, renamed=f) for name, f in zip(names, followed, strict=True)))
            return report if check is None else _checked(sc, series.patches, report, old, new, check, new_pin)
        # the series on its own base first: every patch must apply there, and applying writes the
        # intermediate blobs that the 3-way merges on the new base need (the patches name them)
        sc.on_pin(old.tree, names, mails, old_pin.short)
        rows = table(sc, names, mails, new.tree, old.tree, moved)
        report = RebaseReport(old_pin.commit, new_commit, True, tuple(
            dataclasses.replace(r, renamed=f) for r, f in zip(rows, followed, strict=True)))
        return report if check is None else _checked(sc, series.patches, report, old, new, check, new_pin)


def _checked(sc: Scratch, patches: tuple[Patch, ...], report: RebaseReport, old: Fetched, new: Fetched,
             check: Check, new_pin: Pin) -> RebaseReport:
    """The report with patch-id matches and `check`'s verdict on every row."""
    old_bases: list[str] = []
    new_bases: list[str] = []
    old_at, new_at = old.tree, new.tree
    for p, row in zip(patches, report.patches, strict=True):
        old_bases.append(old_at)
        new_bases.append(new_at)
        old_at = sc.stack(old_at, [p.path])
        if row.outcome in (CLEAN, THREE_WAY):
            new_at = sc.stack(new_at, [p.path])
    merged: dict[str, str] = {}
    if (old.commit, new.commit) == (report.old_commit, report.new_commit):
        _history(sc.git, new.repo, new_pin, old.commit, new.commit)
        unchecked = missing_history(sc.git, old.commit, new.commit)
        if not unchecked:
            merged = merged_as(sc.git, old.commit, new.commit, [p.path for p in patches])
    else:
        # a pin the cache holds as a stand-in (an sdist without upstream's commit object): no history at all
        merge_shallow(new.repo, sc.git.path)
        unchecked = "not checked, a pin is a stand-in commit without history (its archive lacks upstream's commit)"
    fixes = check(Moved(sc.git, patches, report.old_commit, report.new_commit, tuple(old_bases), tuple(new_bases),
                        report))
    rows = tuple(dataclasses.replace(row, merged_as=merged.get(row.patch, ""), fix=fixes.get(row.patch),
                                     merged_unchecked=unchecked) for row in report.patches)
    return dataclasses.replace(report, patches=rows)


HISTORY_DEPTH = 2000
"""The most upstream commits a `--fixed-upstream` check fetches to compare patch-ids with."""


def _history(git: GitRepo, cache_repo: Path, new_pin: Pin, old_commit: str, new_commit: str) -> None:
    """The commits between the pins, into the scratch repository, and which commits it holds
    without their parents (its `shallow` file).

    The cache holds each pin at depth 1; patch-id needs the commits upstream made in between. They
    are fetched from the new pin's git source, if it has one, offering only the old pin as what we
    have (`--negotiation-tip`; the cache's other refs are not offered), so that only the commits in
    between and the files they change come, at most HISTORY_DEPTH commits. Best effort: without
    them only the new commit itself is compared.
    """
    cache = cache_repo / "shallow"
    listed = cache.read_text().split() if cache.exists() else []
    # the new commit is no longer without parents once they come; the old one stays so
    atomic_write_text(git.path / "shallow", "".join(
        f"{c}\n" for c in dict.fromkeys([*(c for c in listed if c != new_commit), old_commit])))
    git.update_ref("refs/old", old_commit)
    for src in new_pin.sources:
        if not isinstance(src, GitSource):
            continue
        with contextlib.suppress(ProcessError):
            r = git.run("-c", "http.lowSpeedLimit=1000", "-c", "http.lowSpeedTime=60",
                        "-c", "core.alternateRefsCommand=true", "fetch", "--quiet", "--no-tags",
                        "--negotiation-tip=refs/old", f"--depth={HISTORY_DEPTH}", src.url, new_commit,
                        env={"GIT_TERMINAL_PROMPT": "0"}, timeout=upstream.fetch_timeout(), check=False)
            if r.returncode == 0:
                return
    merge_shallow(cache_repo, git.path)


def missing_history(git: GitRepo, old: str, new: str) -> str:
    """'' when `git` holds the history from `old` to `new` (patch-ids can be compared over it), else
    what was not checked and why, as a row says it."""
    if git.run("merge-base", "--is-ancestor", old, new, check=False).returncode == 0:
        return ""
    # a commit of a shallow history reads as a root: one commit is the new pin alone
    if git.out("rev-list", "--count", new) == "1":
        return "not checked, no history before the new pin"
    return f"not checked, the history fetched ({HISTORY_DEPTH} commits at most) does not reach the old pin"


def merged_as(git: GitRepo, old: str, new: str, mails: list[Path]) -> dict[str, str]:
    """Per mail name: the commit of `old..new` with the same patch-id (`git` holds that history:
    `missing_history` says when it does not)."""
    r = git.run("log", "-p", "--no-color", "--no-renames", "--format=commit %H", new, "--not", old, check=False)
    if r.returncode != 0 or not r.stdout:
        return {}
    ids = patch_ids(r.stdout)
    found: dict[str, str] = {}
    for mail in mails:
        mine = patch_ids(mail.read_text(encoding="utf-8", errors="replace"))
        for pid in mine:
            if pid in ids:
                found[mail.name] = ids[pid]
    return found


def patch_ids(text: str) -> dict[str, str]:
    """patch-id -> the commit (or mail) it was read from, by `git patch-id --stable`."""
    r = proc.run(["git", "patch-id", "--stable"], input_text=text, env=ISOLATED)
    out: dict[str, str] = {}
    for line in r.stdout.splitlines():
        pid, _, commit = line.partition(" ")
        out.setdefault(pid, commit)
    return out


def dry_run_apply(project: Project) -> RebaseReport:
    """What `apply` would do to each patch on the pin, for a series that has no base of its own
    here (not applied yet, written on another upstream commit, or whose old base is gone).

    The same table as `dry_run`, without an old base: a patch is `depends` when a file's version
    it starts from (the blob id its diff names) is the one a failed patch writes. Only the pin is
    fetched into the cache when it is not there yet; nothing else is written.
    """
    pin = load_pin(project.pin_file)
    series = load_series(project.patches_dir)
    fetched = upstream.fetch(project.cache_dir, pin)
    with scratch_repo([fetched.repo / "objects"]) as sc:
        mails = [p.path for p in series.patches]
        names = [p.name for p in series.patches]
        moved, followed = sc.follow(mails, moved_files(sc.git, fetched.tree, mails))
        if mails and sc.applies_all(fetched.tree, moved):
            rows = [PatchReport(name, CLEAN) for name in names]
        else:
            rows = table(sc, names, mails, fetched.tree, None, moved)
        return RebaseReport("", pin.commit or fetched.commit, True, tuple(
            dataclasses.replace(r, renamed=f) for r, f in zip(rows, followed, strict=True)))


def moved_files(git: GitRepo, tree: str, mails: list[Path]) -> dict[str, str]:
    """Without an old base to compare with (`apply --dry-run`): each file a mail changes that `tree`
    lacks, found at another path of `tree` by the blob id the mail starts from (a file moved as it
    was; one moved and changed is not found). Old path -> new path, as `renames` gives them."""
    starts: dict[str, str] = {}
    for mail in mails:
        for path, (old, _new) in blob_ids(mail.read_bytes()).items():
            starts.setdefault(path, old)
    wanted = {p: b for p, b in starts.items() if b.strip("0")}
    if not wanted:
        return {}
    listing = git.run("ls-tree", "-r", "-z", tree).stdout.split("\0")
    # <mode> SP <type> SP <object> TAB <path>
    blobs = [(e.split("\t", 1)[0].split()[2], e.split("\t", 1)[1]) for e in listing if "\t" in e]
    present = {path for _b, path in blobs}
    moved: dict[str, str] = {}
    for path, start in wanted.items():
        if path in present:
            continue
        found = [p for b, p in blobs if _same_blob(b, start)]
        if len(found) == 1:
            moved[path] = found[0]
    return moved


@contextlib.contextmanager
def scratch_repo(borrow: list[Path]) -> Iterator[Scratch]:
    root = Path(tempfile.mkdtemp(prefix="patchset-dry-run-"))
    try:
        yield Scratch(root, borrow)
    finally:
        shutil.rmtree(root, ignore_errors=True)


def table(sc: Scratch, names: list[str], mails: list[Path], new_tree: str, old_tree: str | None,
           moved: list[Path] | None = None) -> list[PatchReport]:
    """Each patch on `new_tree` carried forward, in order. With `old_tree` (the series' own base,
    where every patch applies) `depends` is found by applying there without the failed patches;
    without it, from the blob ids the diffs name. `moved`: the mails as tried on `new_tree` (their
    paths following upstream's renames), `mails` as they apply on `old_tree`."""
    news = mails if moved is None else moved
    reports: list[PatchReport] = []
    carried = new_tree
    without_failed = old_tree  # the old base with every patch that has not failed on the new one
    for j, (name, mail) in enumerate(zip(names, mails, strict=True)):
        failed = [i for i, r in enumerate(reports) if r.failed]
        if failed:
            if without_failed is not None and old_tree is not None:
                needs = ("" if sc.applies(without_failed, mail)
                         else _blame(sc, old_tree, mails[:j], failed, mail, names))
            else:
                # the blob ids say only that the patch was written after a failed one: a patch that
                # applies as is (its context matched exactly, no merge) does not need it
                needs = _builds_on(mails, failed, mail, names)
                if needs:
                    ok, after = sc.apply(carried, news[j])
                    if ok:
                        reports.append(PatchReport(name, CLEAN))
                        carried = after
                        continue
            if needs:
                reports.append(PatchReport(name, DEPENDS, depends_on=needs))
                continue
        report, carried = _try(sc, carried, name, news[j])
        reports.append(report)
        if without_failed is not None and not report.failed:
            without_failed = sc.stack(without_failed, [mail])
    return reports


_INDEX = re.compile(rb"^index ([0-9a-f]+)\.\.([0-9a-f]+)", re.M)


def blob_ids(mail: bytes) -> dict[str, tuple[str, str]]:
    """Per file of the diff: (the blob id it starts from, the blob id it writes), as the mail's
    `index` lines give them (full with `--full-index`, else abbreviated); a new file starts from 0s."""
    out: dict[str, tuple[str, str]] = {}
    for path, header, _hunks in split_hunks(mail):
        m = _INDEX.search(header)
        if m:
            out[path] = (m.group(1).decode(), m.group(2).decode())
    return out


def _same_blob(a: str, b: str) -> bool:
    n = min(len(a), len(b))
    return n >= 7 and a[:n] == b[:n] and a.strip("0") != ""


def _builds_on(mails: list[Path], failed: list[int], mail: Path, names: list[str]) -> str:
    """The first failed patch that writes a version of a file which `mail` starts from; '' if none."""
    starts = {path: old for path, (old, _new) in blob_ids(mail.read_bytes()).items()}
    for f in failed:
        for path, (_old, new) in blob_ids(mails[f].read_bytes()).items():
            if path in starts and _same_blob(starts[path], new):
                return names[f]
    return ""


def _try(sc: Scratch, tree: str, name: str, mail: Path) -> tuple[PatchReport, str]:
    """One patch on the carried tree: its report and the tree to carry on with."""
    ok, after = sc.apply(tree, mail)
    if ok:
        return PatchReport(name, CLEAN), after
    if sc.applies(tree, mail, "--reverse"):
        return PatchReport(name, UPSTREAM), tree
    ok, after = sc.three_way(tree, mail)
    if ok:
        return PatchReport(name, UPSTREAM if after == tree else THREE_WAY), after
    unmerged = sc.unmerged()
    if unmerged and sc.resolutions:
        after, keys = sc.reuse(tree, mail)
        if after:
            return PatchReport(name, REUSED, resolutions=keys), after
    files, hunks = sc.failed_hunks(tree, mail) if sc.hunks else ([], [])
    return PatchReport(name, CONFLICT, tuple(dict.fromkeys(unmerged + files)), tuple(hunks)), tree


def _blame(sc: Scratch, base: str, before: list[Path], failed: list[int], mail: Path, names: list[str]) -> str:
    """The first failed patch f such that the patch applies on the old base with every earlier
    patch except the failed ones after f (see the module docstring)."""
    for k, f in enumerate(failed):
        left_out = set(failed[k + 1:])
        tree = sc.stack(base, [m for i, m in enumerate(before) if i not in left_out])
        if sc.applies(tree, mail):
            return names[f]
    return names[failed[-1]]

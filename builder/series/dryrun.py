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

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from builder import words
from builder.gitrepo import GitRepo
from builder.project import Project
from builder.series import resolutions as rr
from builder.series.load import load_series
from builder.series.model import Patch
from builder.series.scratch import (
    Scratch,
    _history,
    _same_blob,
    blob_ids,
    merged_as,
    missing_history,
    moved_files,
    renames,
    scratch_repo,
)
from builder.upstream import fetch as upstream
from builder.upstream.fetch import Fetched, merge_shallow
from builder.upstream.pin import Pin, load_pin

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
    head: str = ""
    """The series' tree on the old pin (every patch applied): what `patchset build` compiled, whose version of
    each file that differs from a tree's in comments only the check builds (trees.tree_with_comments_of)."""


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
                        report, old_at))
    rows = tuple(dataclasses.replace(row, merged_as=merged.get(row.patch, ""), fix=fixes.get(row.patch),
                                     merged_unchecked=unchecked) for row in report.patches)
    return dataclasses.replace(report, patches=rows)


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

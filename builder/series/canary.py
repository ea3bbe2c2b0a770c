"""`patchset canary`: the map of an upstream range for the series, by bisection.

Over the first-parent commits of the pin's git source between the pin (or OLD) and NEW, it finds
for each patch the first commit where the patch stops applying, and the newest commit where the
whole series applies. Text checks first: each commit tried
gets the table of `rebase --dry-run` (`builder.series.dryrun`, in a scratch index that borrows
the cache's objects; no work tree is touched), with upstream's renames between the pin and that
commit followed. A patch that breaks does not hide the ones after it: each later patch is tried
on the tree carried without it, and is `depends` only when it builds on it (the dry run's rule).
With a tree check (`--build`, `--test`: `builder.prove.canary_check`, given by the command, as the
layers go), a patch survives a commit only when it applies there and the commit's tree with the series
up to it builds (and its test passes with the fix): the bisection runs over that predicate, and only
commits where the text checks pass are built.

Bisection assumes that breakage is monotonic: once a patch stops applying it does not apply again
later in the range (upstream reverting a change, or moving a line out and back, breaks that). The
commit found is the first bad one after the last good one the bisection tried; with `step` 1 that
good commit is its first parent, so "its parent applies" is checked, not assumed. `scan` tries
every commit instead (the linear scan the bisection is checked against: tests, benchmarks).
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from builder.errors import InputError, ProcessError, SourceError
from builder.fsutil import atomic_write_text
from builder.gitrepo import GitRepo
from builder.progress import NullProgress, ProgressSink
from builder.project import Project
from builder.series import dryrun, scratch
from builder.series import resolutions as rr
from builder.series.dryrun import CONFLICT, DEPENDS, UPSTREAM, PatchReport
from builder.series.load import load_series
from builder.series.model import Patch
from builder.series.scratch import Scratch
from builder.upstream import fetch as upstream
from builder.upstream.pin import GitSource, load_pin

KIND_CONFLICT = "conflict"
KIND_RENAME = "rename"
"""A conflict at a commit that renames, moves or deletes a file the patch touches (what git's rename
detection could not follow)."""
KIND_UPSTREAM = "already upstream"
KIND_DEPENDS = "depends"
FOLLOWED = "rename, followed"
"""A patch that still applies because its paths were rewritten to upstream's new names."""
KIND_BUILD = "build"
"""`--build`: it applies, and the tree with the series up to it does not build (ggml and its test programs)."""
KIND_TEST = "test"
"""`--test`: it applies and builds, and its test fails there with the fix."""

TreeCheck = Callable[[GitRepo, Patch, str], tuple[str, str]]
"""`--build`/`--test` (`builder.prove.canary_check.checker`): given the scratch repository, a patch and
the tree of a commit with the series up to that patch, ('', '') when it passes, else (KIND_BUILD or
KIND_TEST, why). A check with a `many(git, patch, trees)` method and `lanes` above 1 checks that many
trees at once: the bisection then tries as many commits a round (see `_probes`)."""


@dataclass(frozen=True)
class Commit:
    """One upstream commit of the range."""

    id: str
    subject: str
    files: tuple[str, ...] = ()
    """The files it changes (against its first parent) that the patch touches (old or new names);
    every file it changes when it touches none of them (a patch that depends on another)."""

    def as_json(self) -> dict:
        return {"commit": self.id, "subject": self.subject, "files": list(self.files)}


@dataclass(frozen=True)
class PatchCanary:
    """Where in the range one patch stops applying."""

    patch: str
    tries: int
    """Commits at which this patch was tried (bisection: at most 1 + ceil(log2(commits)))."""
    broken_at: Commit | None = None
    """The first commit where it does not apply; None when it applies at NEW."""
    last_good: str = ""
    """The newest commit tried before `broken_at` where it applies (its first parent with step 1)."""
    kind: str = ""
    """conflict, rename, already upstream, depends, build or test (the KIND_ constants); '' when not broken."""
    why: str = ""
    """build: the first compiler error; test: what its tests said (at `broken_at`)."""
    depends_on: str = ""
    hunks: tuple[str, ...] = ()
    """conflict: `path:line` of the hunks that do not apply at `broken_at`."""
    renamed: tuple[str, ...] = ()
    """Renames followed (`old -> new`) at the newest commit where it applies."""
    resolutions: tuple[str, ...] = ()
    """Keys of the recorded resolutions (patches/resolutions/) reused at the newest commit where it applies."""

    @property
    def state(self) -> str:
        """The class in words, as `canary` prints it: the kind of break, `rename, followed`, or `applies`."""
        return self.kind or (FOLLOWED if self.renamed else "applies")

    def detail(self) -> str:
        """What else the report says of it, in one line (files, hunks, what it needs, why, renames, resolutions)."""
        words = []
        if self.broken_at and self.broken_at.files:
            words.append("files: " + ", ".join(self.broken_at.files))
        if self.hunks:
            words.append("hunks: " + ", ".join(self.hunks))
        if self.depends_on:
            words.append(f"needs {self.depends_on}")
        if self.why:
            words.append(self.why)
        if self.renamed:
            words.append("renames followed: " + ", ".join(self.renamed))
        if self.resolutions:
            words.append("recorded resolutions reused: " + ", ".join(k[:12] for k in self.resolutions))
        return "; ".join(words)

    @classmethod
    def from_json(cls, data: dict) -> PatchCanary:
        """The record `as_json` wrote (`canary --json`'s `patches` entries); raises KeyError/TypeError on another."""
        at = data.get("broken_at")
        broken = Commit(at["commit"], at.get("subject", ""), tuple(at.get("files", ()))) if at else None
        kind = data.get("class", "")
        return cls(data["patch"], int(data.get("tries", 0)), broken, data.get("last_good", ""),
                   "" if kind == FOLLOWED else kind, data.get("why", ""), data.get("depends_on", ""),
                   tuple(data.get("hunks", ())), tuple(data.get("renamed", ())), tuple(data.get("resolutions", ())))

    def as_json(self) -> dict:
        return {"patch": self.patch, "tries": self.tries,
                "broken_at": self.broken_at.as_json() if self.broken_at else None,
                "last_good": self.last_good, "class": self.kind or (FOLLOWED if self.renamed else ""),
                "depends_on": self.depends_on, "why": self.why, "hunks": list(self.hunks),
                "renamed": list(self.renamed), "resolutions": list(self.resolutions)}


@dataclass(frozen=True)
class CanaryReport:
    old: str
    new: str
    commits: int
    """First-parent commits in OLD..NEW."""
    step: int
    tried: int
    """Commits tried for the series (each costs a dry-run table)."""
    newest_whole: str
    """The newest commit tried where the whole series applies (OLD when it breaks at once)."""
    newest_subject: str
    scan: bool = False
    patches: tuple[PatchCanary, ...] = field(default_factory=tuple)
    checked: str = ""
    """'' (text checks only), 'build' or 'test': what a commit had to pass besides applying."""
    builds: int = 0
    """Trees built (`--build`/`--test`): one per patch and commit tried where the text checks passed."""

    @property
    def broken(self) -> tuple[PatchCanary, ...]:
        return tuple(p for p in self.patches if p.broken_at)

    def where(self) -> str:
        """The range and how it was searched, in one line (`canary`'s report and `report --html`)."""
        return (f"{len(self.patches)} patch(es) over {self.commits} commit(s) {self.old[:12]}..{self.new[:12]}"
                + (f", every {self.step}th" if self.step > 1 else "")
                + f"; {self.tried} commit(s) tried ({'linear scan' if self.scan else 'bisection'})"
                + (f", {self.builds} tree(s) built ({self.checked})" if self.checked else ", text checks only"))

    @property
    def survives(self) -> str:
        """What the newest whole-series commit passes, in words: applies, and builds, and passes."""
        return {"": "applies", "build": "applies and builds", "test": "applies, builds and passes"}[self.checked]

    @classmethod
    def from_json(cls, data: dict) -> CanaryReport:
        """The report as `canary --json` printed it (`patchset-canary/1`); raises KeyError/TypeError/ValueError
        on another document."""
        checked = data.get("checked", "text")
        return cls(data["old"], data["new"], int(data["commits"]), int(data.get("step", 1)), int(data["tried"]),
                   data["newest_whole"]["commit"], data["newest_whole"].get("subject", ""),
                   data.get("method") == "scan", tuple(PatchCanary.from_json(p) for p in data["patches"]),
                   "" if checked == "text" else checked, int(data.get("builds", 0)))

    def as_json(self) -> dict:
        return {"old": self.old, "new": self.new, "commits": self.commits, "step": self.step,
                "method": "scan" if self.scan else "bisect", "tried": self.tried,
                "checked": self.checked or "text", "builds": self.builds,
                "newest_whole": {"commit": self.newest_whole, "subject": self.newest_subject},
                "patches": [p.as_json() for p in self.patches]}


def canary(project: Project, new: str = "HEAD", old: str = "", step: int = 1, scan: bool = False,
           progress: ProgressSink | None = None, check: TreeCheck | None = None, checked: str = "") -> CanaryReport:
    """The canary over OLD..NEW of the pin's git source (OLD: the pin). Nothing in the project
    changes; the pin is fetched into the cache when it is not there yet. With `check` (`checked`:
    'build' or 'test'), a patch counts as surviving a commit only when it applies there and its tree
    passes the check (built in verify's folders, see `builder.prove.canary_check`)."""
    if step < 1:
        raise InputError(f"--step {step}: must be 1 or more")
    progress = progress or NullProgress()
    pin = load_pin(project.pin_file)
    series = load_series(project.patches_dir)
    urls = [s.url for s in pin.sources if isinstance(s, GitSource)]
    if not urls:
        raise InputError(f"{project.pin_file}: canary needs a git source (the pin's history); it has none")
    fetched = upstream.fetch(project.cache_dir, pin)
    if fetched.commit != pin.commit:
        raise InputError(f"{project.pin_file}: the cached pin {pin.short} is a stand-in commit without history (its "
                         "archive lacks upstream's commit object); canary needs upstream's own commit: fetch it "
                         "from the git source")
    mails = [p.path for p in series.patches]
    names = [p.name for p in series.patches]
    with scratch.scratch_repo([fetched.repo / "objects"]) as sc:
        sc.resolutions = rr.load(project.patches_dir)
        sc.hunks = False
        # the files of the pin the series changes (not those it creates): a rename can only take those
        paths = sorted({p for mail in mails for p, _h, _l in scratch.split_hunks(mail.read_bytes())})
        at_pin = set(sc.git.run("ls-tree", "-r", "-z", "--name-only", fetched.tree, "--", *paths).stdout.split("\0"))
        touched = [p for p in paths if p in at_pin]
        new_id = _history(sc.git, urls, pin.commit, new, old)
        old_id = sc.git.out("rev-parse", "refs/canary/old^{commit}") if old and old != pin.commit else pin.commit
        line = sc.git.out("rev-list", "--first-parent", "--reverse", f"{old_id}..{new_id}").split()
        if old_id != pin.commit and sc.git.run("merge-base", "--is-ancestor", pin.commit, old_id,
                                               check=False).returncode != 0:
            raise InputError(f"--range: {old} does not descend from the pin {pin.short}")
        if sc.git.run("merge-base", "--is-ancestor", old_id, new_id, check=False).returncode != 0:
            raise InputError(f"--range: {new} does not descend from {old or 'the pin'}")
        if not line:
            raise InputError(f"--range: no commit after {old or 'the pin'} up to {new}: nothing to try")
        tried = line[step - 1::step]
        if tried[-1] != line[-1]:
            tried.append(line[-1])
        sc.on_pin(fetched.tree, names, mails, pin.short)
        tables: dict[str, tuple[list[PatchReport], list[Path]]] = {}

        def table(commit: str) -> list[PatchReport]:
            if commit not in tables:
                tables[commit] = _table_at(sc, names, mails, fetched.tree, commit, touched)
            return tables[commit][0]

        verdicts: dict[tuple[int, str], tuple[str, str]] = {}

        def verdicts_at(k: int, commits: list[str]) -> list[tuple[str, str]]:
            """Patch k at each of `commits`: ('', '') where it applies (and passes `check`), else (class,
            why); the trees the check needs are checked at once where it has lanes."""
            rows = [table(c)[k] for c in commits]
            todo = [c for c, r in zip(commits, rows, strict=True)
                    if check is not None and _applies(r) and (k, c) not in verdicts]
            if todo and check is not None:
                trees = [_carried(sc, sc.git.out("rev-parse", f"{c}^{{tree}}"), tables[c][1], table(c), k)
                         for c in todo]
                many = getattr(check, "many", None)
                got = (many(sc.git, series.patches[k], trees) if many is not None and len(trees) > 1
                       else [check(sc.git, series.patches[k], t) for t in trees])
                verdicts.update(zip(((k, c) for c in todo), got, strict=True))
            return [(r.outcome, "") if not _applies(r) else verdicts.get((k, c), ("", ""))
                    for c, r in zip(commits, rows, strict=True)]

        def verdict(k: int, commit: str) -> tuple[str, str]:
            return verdicts_at(k, [commit])[0]

        if old_id != pin.commit and any(not _applies(r) for r in table(old_id)):
            raise InputError(f"--range: the series does not apply at {old} (run `patchset rebase --dry-run "
                             f"--onto {old_id}`)")
        # commits tried a round of the bisection: one, or as many as the tree check has lanes
        width = max(1, int(getattr(check, "lanes", 1))) if check is not None else 1
        progress.begin(f"canary: {len(names)} patch(es) over {len(line)} commit(s)", len(names))
        rows = []
        for k, name in enumerate(names):
            rows.append(_one(sc, k, name, mails[k], tried, old_id, table, verdict, verdicts_at, width, scan,
                             lambda c, j: (_carried(sc, sc.git.out("rev-parse", f"{c}^{{tree}}"), tables[c][1],
                                                    table(c), j - 1), tables[c][1][j])))
            progress.update(k + 1, len(names), name)
        progress.end()
        # the newest commit tried where every patch applies: the one before the first that breaks one
        first_bad = min((tried.index(p.broken_at.id) for p in rows if p.broken_at), default=len(tried))
        whole = tried[first_bad - 1] if first_bad else old_id
        return CanaryReport(old_id, new_id, len(line), step, len(tables), whole, sc.git.subject(whole), scan,
                            tuple(rows), checked if check else "", len(verdicts))


def _applies(r: PatchReport) -> bool:
    return not r.failed and r.outcome != UPSTREAM


def _probes(lo: int, hi: int, width: int) -> list[int]:
    """The commits a bisection round tries between `lo` (survives) and `hi` (does not): `width` of them
    evenly spaced, the midpoint alone for one; the first that fails is the new `hi`, the one before it
    the new `lo`, so each round leaves a `width + 1`-th of the range."""
    m = min(width, hi - lo - 1)
    return sorted({lo + (hi - lo) * (j + 1) // (m + 1) for j in range(m)})


def _one(sc: Scratch, k: int, name: str, mail: Path, tried: list[str], old_id: str,
         table: Callable[[str], list[PatchReport]], verdict: Callable[[int, str], tuple[str, str]],
         verdicts_at: Callable[[int, list[str]], list[tuple[str, str]]], width: int,
         scan: bool, before: Callable[[str, int], tuple[str, Path]]) -> PatchCanary:
    """Patch k over the commits `tried`: bisection, `width` commits a round (or every commit with `scan`).
    `before(commit, j)`: the commit's tree with the patches before j that apply there, and patch j's mail
    as tried there."""
    git = sc.git
    n = len(tried)
    tries = 0

    def ok(i: int) -> bool:
        nonlocal tries
        tries += 1
        return verdict(k, tried[i]) == ("", "")

    if scan:
        bad = next((i for i in range(n) if not ok(i)), n)
    elif ok(n - 1):
        bad = n
    else:
        lo, hi = -1, n - 1  # lo applies (OLD), hi does not
        while hi - lo > 1:
            probes = _probes(lo, hi, width)
            tries += len(probes)
            for i, got in zip(probes, verdicts_at(k, [tried[i] for i in probes]), strict=True):
                if got != ("", ""):
                    hi = i
                    break
                lo = i
        bad = hi
    last_good = tried[bad - 1] if bad > 0 else old_id
    good_row = table(last_good)[k] if last_good in tried else None
    renamed = good_row.renamed if good_row else ()
    reused = good_row.resolutions if good_row else ()
    if bad == n:
        return PatchCanary(name, tries, None, last_good, renamed=renamed, resolutions=reused)
    row = table(tried[bad])[k]
    commit = _commit(git, tried[bad], scratch.split_hunks(mail.read_bytes()), row)
    if _applies(row):
        # it applies there: the build or the test stopped it
        kind, why = verdict(k, tried[bad])
        return PatchCanary(name, tries, commit, last_good, kind, why=why, renamed=renamed, resolutions=reused)
    kind = {DEPENDS: KIND_DEPENDS, UPSTREAM: KIND_UPSTREAM}.get(row.outcome, KIND_CONFLICT)
    paths = {p for p, _h, _l in scratch.split_hunks(mail.read_bytes())} | {r.split(" -> ")[-1] for r in renamed}
    if row.outcome == CONFLICT and _moves(git, tried[bad], paths):
        kind = KIND_RENAME
    hunks = row.hunks
    if row.outcome == CONFLICT and not hunks:
        # the hunks that do not apply on their own: at the commit reported only (sc.hunks is off)
        hunks = tuple(sc.failed_hunks(*before(tried[bad], k))[1])
    return PatchCanary(name, tries, commit, last_good, kind, depends_on=row.depends_on, hunks=hunks,
                       renamed=renamed, resolutions=reused)


def _carried(sc: Scratch, tree: str, moved: list[Path], rows: list[PatchReport], k: int) -> str:
    """`tree` with the patches 1..k that apply there (by `rows`), as the dry run carries them."""
    for mail, row in zip(moved[:k + 1], rows[:k + 1], strict=True):
        if not _applies(row):
            continue
        ok, after = sc.apply(tree, mail)
        if not ok:
            ok, after = sc.three_way(tree, mail)
        if not ok:
            after, _keys = sc.reuse(tree, mail)
        tree = after or tree
    return tree


def _table_at(sc: Scratch, names: list[str], mails: list[Path], pin_tree: str,
              commit: str, touched: list[str]) -> tuple[list[PatchReport], list[Path]]:
    """The dry run's table of the series on `commit`, upstream's renames since the pin followed, and
    the mails as tried there (their paths following the renames). Rename detection over the whole
    tree is the costly part of a commit (seconds on ggml's history): it runs only where a file the
    series touches (`touched`) is gone from the commit's tree."""
    tree = sc.git.out("rev-parse", f"{commit}^{{tree}}")
    present = set(sc.git.run("ls-tree", "-r", "-z", "--name-only", tree, "--", *touched).stdout.split("\0"))
    gone = [p for p in touched if p not in present]
    moved, followed = sc.follow(mails, scratch.renames(sc.git, pin_tree, tree) if gone else {})
    if sc.applies_all(tree, moved):
        rows = [PatchReport(name, dryrun.CLEAN) for name in names]
    else:
        rows = dryrun.table(sc, names, mails, tree, pin_tree, moved)
    return [dataclasses.replace(r, renamed=f) for r, f in zip(rows, followed, strict=True)], moved


def _changed(git: GitRepo, commit: str) -> list[tuple[str, str]]:
    """(status letter, path) of each file `commit` changes against its first parent (renames: both paths)."""
    fields = git.run("diff-tree", "-r", "-M", "--no-commit-id", "--name-status", "-z", f"{commit}^", commit
                     ).stdout.split("\0")
    out: list[tuple[str, str]] = []
    i = 0
    while i < len(fields) - 1:
        status = fields[i]
        if status[:1] in ("R", "C"):
            out += [(status[:1], fields[i + 1]), (status[:1], fields[i + 2])]
            i += 3
        else:
            out.append((status[:1], fields[i + 1]))
            i += 2
    return out


def _moves(git: GitRepo, commit: str, paths: set[str]) -> bool:
    """Does `commit` rename, move or delete one of `paths`?"""
    return any(s in ("R", "D") and p in paths for s, p in _changed(git, commit))


def _commit(git: GitRepo, commit: str, files: list[tuple[str, bytes, list[tuple[int, bytes]]]],
            row: PatchReport) -> Commit:
    mine = {p for p, _h, _l in files} | {r.split(" -> ")[-1] for r in row.renamed}
    changed = list(dict.fromkeys(p for _s, p in _changed(git, commit)))
    return Commit(commit, git.subject(commit), tuple(p for p in changed if p in mine) or tuple(changed))


def _history(git: GitRepo, urls: list[str], pin_commit: str, new: str, old: str) -> str:
    """Fetch NEW (and OLD) with the history since the pin into the scratch repository; NEW's id.

    The cache holds the pin at depth 1 (the scratch repository borrows its objects), and the pin is the only commit
    offered as what we have (`--negotiation-tip`), so only the commits after it come."""
    # only the pin is a boundary here: a newer commit the cache holds at depth 1 (a dry run or rebase
    # fetched it) would otherwise be taken for a commit without parents, and NEW not seen to descend
    # from the pin; without the mark its missing parents make git fetch them with the range
    atomic_write_text(git.path / "shallow", f"{pin_commit}\n")
    git.update_ref("refs/old", pin_commit)
    errors = []
    for url in urls:
        try:
            git.run("-c", "http.lowSpeedLimit=1000", "-c", "http.lowSpeedTime=60",
                    "-c", "core.alternateRefsCommand=true", "fetch", "--quiet", "--no-tags",
                    "--negotiation-tip=refs/old", url, f"+{new}:refs/canary/new",
                    *([f"+{old}:refs/canary/old"] if old and old != pin_commit else []),
                    env={"GIT_TERMINAL_PROMPT": "0"}, timeout=upstream.fetch_timeout())
            return git.out("rev-parse", "refs/canary/new^{commit}")
        except ProcessError as e:
            errors.append(f"{url}: {(e.stderr.strip().splitlines() or [str(e)])[0]}")
    with contextlib.suppress(ProcessError):
        # a commit id the scratch repository already holds (the pin itself)
        return git.out("rev-parse", f"{new}^{{commit}}")
    raise SourceError(f"cannot fetch {new} from the pin's git source: " + "; ".join(errors))


def max_tries(commits: int) -> int:
    """The bound the bisection keeps per patch: 2*ceil(log2(commits)), at least 1."""
    return max(1, 2 * math.ceil(math.log2(commits))) if commits > 1 else 1

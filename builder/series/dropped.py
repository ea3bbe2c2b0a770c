"""`patches/dropped`: the append-only log of the patches taken out of the series.

They are taken out by `bump --drop-fixed` (upstream fixed them) and by `drop N --reason WHY` (a
person's reason).

A patch leaves the series through a bump only when upstream fixed its bug, and the log says which,
where and by what evidence, so that a patch that comes back (a revert, a merge that resurrects
it) is caught by `patchset check`, and a maintainer can see why a fix is gone. The format is
documented in docs/upstream.md and in the header every new log starts with.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from builder import proc
from builder.errors import SeriesError
from builder.fsutil import atomic_write
from builder.gitrepo import ISOLATED
from builder.series.model import Finding, Series
from builder.series.scratch import patch_ids

NAME = "dropped"

FIXED_UPSTREAM = "fixed-upstream"
"""The patch's own test passes on the new upstream without the fix."""
MERGED = "merged"
"""An upstream commit between the pins has the patch's patch-id (its very diff)."""
ALREADY_UPSTREAM = "already-upstream"
"""The patch's diff applies in reverse on the new upstream (it has it), as rebase finds it."""
BY_HAND = "by-hand"
"""A person dropped it (`patchset drop N --reason WHY`); the evidence is their reason."""
WHY = (FIXED_UPSTREAM, MERGED, ALREADY_UPSTREAM, BY_HAND)

HEADER = f"""\
# Patches taken out of the series: upstream fixed their bug (`patchset bump --drop-fixed`), or a
# person dropped them and said why (`patchset drop N --reason WHY`).
# Append-only: patchset adds one line per dropped patch at the end and never rewrites one;
# `patchset check` reads it (docs/upstream.md). One record a line, five fields separated by tabs:
# patch	patch-id	upstream commit	why	evidence
# why: {FIXED_UPSTREAM} (its own test passes on upstream without the fix), {MERGED} (an upstream
# commit has its patch-id), {ALREADY_UPSTREAM} (its diff applies in reverse on upstream), {BY_HAND}
# (dropped by a person: the commit is the pin it was dropped on, the evidence their reason).
"""

_HEX40 = re.compile(r"[0-9a-f]{40}")
_NUMBER = re.compile(r"^\d+-")


@dataclass(frozen=True)
class DropRecord:
    """One patch taken out of the series."""

    patch: str
    """Its file name in the series when it was dropped (`0001-ggml-fix-x.patch`)."""
    patch_id: str
    """`git patch-id --stable` of its diff (40 hex)."""
    commit: str
    """The upstream commit that has the fix: the one with its patch-id, else the new pin; by hand:
    the pin it was dropped on (40 hex)."""
    why: str
    """fixed-upstream, merged, already-upstream or by-hand."""
    evidence: str
    """In words, one line: the cases that pass now, the patch-id match, the reverse apply."""

    def line(self) -> str:
        return "\t".join((self.patch, self.patch_id, self.commit, self.why, _one_line(self.evidence))) + "\n"


def _one_line(text: str) -> str:
    """Tabs and line breaks would split or end the record: each run of white space becomes one space."""
    return " ".join(text.split()) or "-"


def stem(patch: str) -> str:
    """The patch's name without its series number: a patch keeps it when the series is renumbered."""
    return _NUMBER.sub("", patch)


def log_file(patches_dir: Path) -> Path:
    return patches_dir / NAME


def parse(path: Path) -> tuple[list[tuple[int, DropRecord]], list[Finding]]:
    """The records of a log with their line numbers, and each malformed line; no log: nothing."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return [], []
    except UnicodeDecodeError as e:
        return [], [Finding(path, text_line(path.read_bytes(), e.start), "not UTF-8 text")]
    records: list[tuple[int, DropRecord]] = []
    findings: list[Finding] = []
    for n, raw in enumerate(text.splitlines(), 1):
        if not raw.strip() or raw.startswith("#"):
            continue
        problem = _problem(raw)
        if problem:
            findings.append(Finding(path, n, problem))
        else:
            records.append((n, DropRecord(*raw.split("\t"))))
    return records, findings


def text_line(data: bytes, offset: int) -> int:
    return data.count(b"\n", 0, offset) + 1


def _problem(raw: str) -> str:
    fields = raw.split("\t")
    if len(fields) != 5:
        return (f"a record has 5 fields separated by tabs (patch, patch-id, commit, why, evidence), "
                f"this line {len(fields)}")
    patch, pid, commit, why, evidence = fields
    if not patch.endswith(".patch") or "/" in patch or patch != patch.strip():
        return f"'{patch}' is not a patch file name"
    if not _HEX40.fullmatch(pid):
        return f"patch-id '{pid}' is not 40 hex digits"
    if not _HEX40.fullmatch(commit):
        return f"upstream commit '{commit}' is not 40 hex digits"
    if why not in WHY:
        return f"why '{why}' is not one of {', '.join(WHY)}"
    if not evidence.strip():
        return "the evidence is empty"
    return ""


def append(patches_dir: Path, records: list[DropRecord]) -> None:
    """The records added at the end of the log (made with its header when there is none): the
    earlier bytes are written back unchanged, and the whole file replaced atomically, so a kill
    leaves the old log or the new one. A damaged log is not added to (SeriesError, file:line)."""
    path = log_file(patches_dir)
    old = path.read_bytes() if path.exists() else HEADER.encode()
    _, findings = parse(path)
    if findings:
        raise SeriesError(f"{findings[0]}; not adding to a damaged log (fix the line, or restore it from git)")
    for r in records:  # a record the next reader would refuse would damage the log for every later bump
        problem = _problem(r.line().rstrip("\n"))
        if problem:
            raise SeriesError(f"{path}: not adding the record of {r.patch}: {problem}")
    if old and not old.endswith(b"\n"):
        old += b"\n"
    atomic_write(path, old + "".join(r.line() for r in records).encode())


def by_hand(patch: Path, pin_commit: str, reason: str) -> DropRecord:
    """The record of `patch` dropped by a person on the pin `pin_commit`, for `reason`."""
    if not reason.strip():
        raise SeriesError("--reason: say why the patch goes (one line, for patches/dropped)")
    pid = next(iter(patch_ids(patch.read_text(encoding="utf-8", errors="replace"))), "")
    return DropRecord(patch.name, pid, pin_commit, BY_HAND, reason)


def restore(patches_dir: Path, before: str | None) -> None:
    """The log as it was (`before`: its text, None: there was none), for a rolled-back or undone drop."""
    path = log_file(patches_dir)
    if before is None:
        path.unlink(missing_ok=True)
    elif not path.is_file() or path.read_text(encoding="utf-8", errors="replace") != before:
        atomic_write(path, before.encode())


def unlog_back(patches_dir: Path, names: list[str]) -> bool:
    """Remove the log's last record when it is a by-hand drop of a patch that is back in the series
    (`names`: an undone `drop --reason`); True when it did. The earlier bytes stay as they were."""
    path = log_file(patches_dir)
    records, findings = parse(path)
    if findings or not records:
        return False
    n, last = records[-1]
    if last.why != BY_HAND or stem(last.patch) not in {stem(name) for name in names}:
        return False
    lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
    rest = "".join(lines[:n - 1])
    if rest == HEADER:  # the drop made the log: it goes with its record
        path.unlink()
    else:
        atomic_write(path, rest.encode())
    return True


def series_patch_ids(series: Series) -> dict[str, str]:
    """patch-id -> patch name for each patch of the series, in one `git patch-id` run (each mail
    given a stand-in commit id, its index, to tell them apart: format-patch writes zeros)."""
    text = ""
    for i, p in enumerate(series.patches, 1):
        body = p.path.read_text(encoding="utf-8", errors="replace")
        if body.startswith("From "):
            body = body.split("\n", 1)[-1]
        text += f"From {i:040x} Mon Sep 17 00:00:00 2001\n" + body
    by_index = {int(c, 16): pid for pid, c in patch_ids(text).items()} if text else {}
    return {pid: series.patches[i - 1].name for i, pid in by_index.items() if 0 < i <= len(series.patches)}


def committed(patches_dir: Path) -> str | None:
    """The log as the last commit of the repository `patches/` is in holds it (HEAD); None when
    there is none (no repository, no commit, or the log not committed yet)."""
    r = proc.run(["git", "-C", str(patches_dir), "show", f"HEAD:./{NAME}"], env=ISOLATED, check=False)
    return r.stdout if r.returncode == 0 else None


def lint(patches_dir: Path, series: Series, before: str | None = None) -> list[Finding]:
    """Malformed lines of the log, each dropped patch that is in the series again (by its name
    without the series number, or by its patch-id), and, given the log as last committed
    (`before`), the first earlier line that is not as it was there: the log only grows."""
    path = log_file(patches_dir)
    records, findings = parse(path)
    if before is not None and path.is_file():
        now = path.read_text(encoding="utf-8", errors="replace").splitlines()
        changed = next((n for n, line in enumerate(before.splitlines(), 1) if n > len(now) or now[n - 1] != line),
                       None)
        if changed is not None:
            findings.append(Finding(path, changed, "a line of the last commit's log (HEAD) is changed or gone: the log "
                                    "is append-only (`git checkout HEAD -- patches/dropped` restores it; a record "
                                    "removed on purpose goes in a commit that says why)"))
    if not records:
        return findings
    stems = {stem(p.name): p.name for p in series.patches}
    ids = series_patch_ids(series)
    for n, r in records:
        back = stems.get(stem(r.patch)) or ids.get(r.patch_id)
        if back:
            how = "the same name" if stem(r.patch) in stems else "the same patch-id"
            findings.append(Finding(path, n, f"{r.patch} was dropped ({r.why} in {r.commit[:12]}) but "
                                    f"{back} is in the series ({how}): drop it again, or remove the record "
                                    "in a commit that says why"))
    return findings


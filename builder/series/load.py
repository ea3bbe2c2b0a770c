"""Loads and lints a patches directory: `patches/series`, each mail's facts (cached), `lint` and `load_series`."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import tempfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path, PurePosixPath

from builder import proc
from builder.errors import SeriesError
from builder.fsutil import atomic_write_text
from builder.project import default_cache_dir
from builder.series.model import UPSTREAM_STATES, Finding, Patch, Series, SeriesEntry
from builder.series.trailers import _line_of, meta_from_trailers, parse_trailers, trailer_block_findings

_SERIES_COMMENT = re.compile(r"(^|\s)#.*$")


def read_series_file(path: Path) -> tuple[list[SeriesEntry], list[Finding]]:
    """Entries in order, and the problems with the file's syntax."""
    entries: list[SeriesEntry] = []
    findings: list[Finding] = []
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return [], [Finding(path, 0, "series file not found")]
    seen: dict[str, int] = {}
    for n, raw in enumerate(text.splitlines(), 1):
        line = (_SERIES_COMMENT.sub("", raw) if "#" in raw else raw).strip()
        if not line:
            continue
        parts = line.split()
        name, opts = parts[0], parts[1:]
        if opts and opts != ["-p1"]:
            findings.append(Finding(path, n, f"unsupported option(s) {' '.join(opts)} (only -p1)"))
        if name.startswith("/") or ".." in name.split("/"):
            findings.append(Finding(path, n, f"'{name}' points outside patches/"))
            continue
        if name in seen:
            findings.append(Finding(path, n, f"duplicate entry '{name}' (first on line {seen[name]})"))
            continue
        seen[name] = n
        entries.append(SeriesEntry(name, n))
    return entries, findings


_DIFF_PATH_LINES = re.compile(r"^(diff --git |--- |\+\+\+ |rename from |rename to |copy from |copy to )(.*)$")


def _bad_paths(text: str, path: Path) -> tuple[list[str], list[Finding]]:
    """Paths the diff touches, and the ones that escape the tree, with their lines."""
    files: list[str] = []
    findings: list[Finding] = []
    in_diff = False
    for n, line in enumerate(text.splitlines(), 1):
        if line.startswith("diff --git "):
            in_diff = True
        if not in_diff:
            continue
        m = _DIFF_PATH_LINES.match(line)
        if not m:
            continue
        kind, rest = m.group(1), m.group(2)
        candidates = rest.split(" ") if kind == "diff --git " else [rest.split("\t")[0]]
        for c in candidates:
            if c == "/dev/null":
                continue
            stripped = c[2:] if c[:2] in ("a/", "b/") and kind in ("diff --git ", "--- ", "+++ ") else c
            p = PurePosixPath(stripped)
            if c.startswith("/") or p.is_absolute() or ".." in p.parts:
                findings.append(Finding(path, n, f"touches a path outside the tree: '{c}'"))
            elif (kind == "+++ " and stripped not in files) or (kind == "rename to " and stripped not in files):
                files.append(stripped)
    return files, findings


def _mailinfo(path: Path) -> tuple[dict[str, str], str]:
    """Parse a mail the way git am will: headers, and the commit message (subject + body)."""
    with tempfile.TemporaryDirectory(prefix="patchset-mailinfo-") as tmp:
        msg, patch = Path(tmp) / "msg", Path(tmp) / "patch"
        # -k: keep the subject exactly, as `git am -k` will
        r = proc.run(["git", "mailinfo", "-k", "--encoding=UTF-8", str(msg), str(patch)],
                     input_text=path.read_text(encoding="utf-8", errors="replace"), check=False)
        if r.returncode != 0:
            raise SeriesError(f"{path}: not a patch mail: {r.stderr.strip()}")
        headers: dict[str, str] = {}
        for line in r.stdout.splitlines():
            key, _, value = line.partition(": ")
            headers[key] = value
        body = msg.read_text(encoding="utf-8", errors="replace")
        has_patch = patch.stat().st_size > 0
    if not has_patch:
        raise SeriesError(f"{path}: holds no diff")
    subject = headers.get("Subject", "").strip()
    message = subject + ("\n\n" + body.strip() + "\n" if body.strip() else "\n")
    return headers, message


@dataclass(frozen=True)
class MailFacts:
    """What git's own parsers say about one mail's bytes: cached by content, so that the read-only
    verbs of a 400-patch series do not start three git processes per patch every time."""

    error: str = ""
    """Why git cannot use the mail at all ('' when it can): not a mail, no diff, unparseable diff."""
    error_stage: str = ""
    """mailinfo | apply: which parser refused (path checks come between the two, as git am does)."""
    subject: str = ""
    author: str = ""
    email: str = ""
    date: str = ""
    message: str = ""
    trailers: tuple[tuple[str, str], ...] = ()


# bump when MailFacts or the way it is computed changes: old cache entries are then ignored
_FACTS_VERSION = "1"


def _git_facts(text: str, path: Path) -> MailFacts:
    try:
        headers, message = _mailinfo(path)
    except SeriesError as e:
        return MailFacts(error=str(e).removeprefix(f"{path}: "), error_stage="mailinfo")
    # git's own parser decides whether the diff is well-formed
    r = proc.run(["git", "apply", "--numstat", "-"], input_text=text, check=False)
    if r.returncode != 0:
        first = (r.stderr.strip().splitlines() or ["git apply refused it"])[0]
        return MailFacts(error=f"not a parseable patch: {first}", error_stage="apply")
    return MailFacts(subject=headers.get("Subject", ""), author=headers.get("Author", ""),
                     email=headers.get("Email", ""), date=headers.get("Date", ""), message=message,
                     trailers=tuple(parse_trailers(message)))


def _facts_entry(cache_dir: Path, data: bytes) -> Path:
    key = hashlib.sha256(_FACTS_VERSION.encode() + b"\0" + data).hexdigest()
    return cache_dir / key[:2] / f"{key}.json"


def _uncached(mails: list[bytes | None], cache_dir: Path | None) -> int:
    """How many of these mails (None: a file that cannot be read) git would have to parse."""
    if cache_dir is None:
        return len(mails)
    return sum(data is not None and not _facts_entry(cache_dir, data).is_file() for data in mails)


def mail_facts(path: Path, data: bytes, cache_dir: Path | None) -> MailFacts:
    """Git's view of a mail, from the content-addressed cache when it has it."""
    text = data.decode("utf-8", errors="replace")
    if cache_dir is None:
        return _git_facts(text, path)
    entry = _facts_entry(cache_dir, data)
    try:
        raw = json.loads(entry.read_text(encoding="utf-8"))
        return MailFacts(**{**raw, "trailers": tuple(tuple(t) for t in raw["trailers"])})
    except (OSError, ValueError, TypeError, KeyError):
        pass  # not cached yet, or an entry we cannot read: compute it again
    facts = _git_facts(text, path)
    with contextlib.suppress(OSError):  # a read-only cache only costs speed
        atomic_write_text(entry, json.dumps(asdict(facts)) + "\n")
    return facts


def parse_patch(path: Path, index: int, patches_dir: Path, cache_dir: Path | None = None,
                strict: bool = False, data: bytes | None = None) -> tuple[Patch | None, list[Finding]]:
    """One patch file (`data`: its bytes, when already read); None with findings when it cannot be used at all."""
    if data is None:
        if not path.is_file():
            return None, [Finding(path, 0, "listed in the series but the file does not exist")]
        data = path.read_bytes()
    text = data.decode("utf-8", errors="replace")
    facts = mail_facts(path, data, cache_dir)
    if facts.error_stage == "mailinfo":
        return None, [Finding(path, 0, facts.error)]
    files, findings = _bad_paths(text, path)
    if findings:
        return None, findings
    if facts.error:
        return None, [Finding(path, 0, facts.error)]
    if not facts.subject:
        findings.append(Finding(path, 0, "has no Subject header"))
    meta, meta_findings = meta_from_trailers(list(facts.trailers), text, path, patches_dir)
    findings += meta_findings
    findings += trailer_block_findings(facts.message, facts.trailers, text, path, strict)
    if strict and not meta.origin:
        findings.append(Finding(path, _line_of(text, facts.subject) if facts.subject else 0,
                                "no Patchset-Origin trailer: say where the patch came from (--strict)"))
    if strict and meta.upstream_from != "Patchset-Upstream" and not any(
            k.lower() == "patchset-upstream" for k, _ in facts.trailers):
        findings.append(Finding(path, _line_of(text, "Patchset-Status:") or
                                (_line_of(text, facts.subject) if facts.subject else 0),
                                "no Patchset-Upstream trailer: say where the patch stands upstream "
                                f"({', '.join(UPSTREAM_STATES)}) (--strict)"))
    author = f"{facts.author} <{facts.email}>"
    return Patch(index, path.name, path, facts.subject, author, facts.date, facts.message, tuple(files),
                 meta), findings


def lint(patches_dir: Path, *, cache: bool = True, strict: bool = False) -> tuple[Series, list[Finding]]:
    """Everything wrong with the series, and the patches that could be parsed.

    With `cache`, git's view of each mail is kept by content in the user cache (`parsed/`);
    mails not cached yet are parsed in parallel. `strict` adds the checks of `check --strict`.
    """
    series_file = patches_dir / "series"
    entries, findings = read_series_file(series_file)
    cache_dir = default_cache_dir() / "parsed" if cache else None

    # each mail is read once: to see whether git must parse it, then to parse it
    mails = [_read_mail(patches_dir / e.name) for e in entries]

    def one(ie: tuple[int, SeriesEntry]) -> tuple[Patch | None, list[Finding]]:
        return parse_patch(patches_dir / ie[1].name, ie[0], patches_dir, cache_dir, strict, mails[ie[0] - 1])

    # threads only pay for themselves while git runs: reading cached facts is faster in one thread
    if _uncached(mails, cache_dir) > 1:
        with ThreadPoolExecutor(max_workers=min(8, 2 * (os.cpu_count() or 1))) as pool:
            parsed = list(pool.map(one, enumerate(entries, 1)))
    else:
        parsed = [one(ie) for ie in enumerate(entries, 1)]
    patches: list[Patch] = []
    for entry, (patch, found) in zip(entries, parsed, strict=True):
        missing = patch is None and not (patches_dir / entry.name).is_file()
        findings += ([Finding(series_file, entry.line, f"'{entry.name}' is listed but the file does not exist")]
                     if missing else found)
        if patch is not None:
            patches.append(patch)
    findings += depends_findings(patches)
    listed = {e.name for e in entries}
    mutations = {m for p in patches for m in p.meta.mutation}
    if patches_dir.is_dir():
        for path in sorted(patches_dir.rglob("*.patch")):
            rel = path.relative_to(patches_dir).as_posix()
            if rel not in listed and rel not in mutations and not rel.startswith("mutations/"):
                findings.append(Finding(path, 0, "patch file is not listed in the series"))
    return Series(series_file, tuple(patches)), findings


def depends_findings(patches: list[Patch]) -> list[Finding]:
    """A `Patchset-Depends` or `Patchset-Test-Depends` that names no patch of the series, or one that is not
    earlier; a patch named as both; and a patch to send upstream that needs a fork-only one."""
    by_name = {p.name: p for p in patches}
    found: list[Finding] = []
    for p in patches:
        if not p.meta.depends and not p.meta.test_depends:
            continue
        text = p.path.read_text(encoding="utf-8", errors="replace")
        for key, names in (("Patchset-Depends", p.meta.depends), ("Patchset-Test-Depends", p.meta.test_depends)):
            for name in names:
                line = _line_of(text, f"{key}: {name}") or _line_of(text, name)
                dep = by_name.get(name)
                if dep is None:
                    found.append(Finding(p.path, line, f"{key}: '{name}' is not a patch of the series"))
                elif dep.index >= p.index:
                    found.append(Finding(p.path, line, f"{key}: '{name}' is not earlier in the series "
                                                       f"(it is number {dep.index}, this patch {p.index})"))
                elif dep.meta.fork_only and not p.meta.fork_only:
                    found.append(Finding(p.path, line, f"{key}: '{name}' is fork-only (never sent upstream), so "
                                                       "this patch could not be sent without it: mark this one "
                                                       "fork-only too, or drop the need"))
                elif key == "Patchset-Test-Depends" and name in p.meta.depends:
                    found.append(Finding(p.path, line, f"{key}: '{name}' is also in Patchset-Depends: a code "
                                                       "dependency covers the test; keep one"))
    return found


def depends_closure(series: Series, patch: Patch) -> list[Patch]:
    """The earlier patches `patch` declares it needs, with theirs, in series order (unknown or
    later names are `check`'s to report and are left out here)."""
    by_name = {p.name: p for p in series.patches}
    seen: dict[str, Patch] = {}
    todo = list(patch.meta.depends)
    while todo:
        name = todo.pop()
        dep = by_name.get(name)
        if dep is None or dep.index >= patch.index or name in seen:
            continue
        seen[name] = dep
        todo += dep.meta.depends
    return sorted(seen.values(), key=lambda p: p.index)


def _read_mail(path: Path) -> bytes | None:
    try:
        return path.read_bytes() if path.is_file() else None
    except OSError:
        return None


def load_series(patches_dir: Path) -> Series:
    """The series, or SeriesError naming the first problem (with file and line)."""
    series, findings = lint(patches_dir)
    if findings:
        more = f" (and {len(findings) - 1} more; run `patchset check`)" if len(findings) > 1 else ""
        raise SeriesError(f"{findings[0]}{more}")
    return series

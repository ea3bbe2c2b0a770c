"""The patch series: `patches/series` (quilt/Debian format) and the format-patch mails it lists.

Per-patch metadata lives in the commit message as git trailers (`Patchset-*`), so it travels
with the commit through apply, refresh and rebase. `docs/series-format.md` documents them.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import shlex
import tempfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path, PurePosixPath

from builder import proc
from builder.errors import ProcessError, SeriesError
from builder.fsutil import atomic_write_text
from builder.project import default_cache_dir

BACKENDS = ("cpu", "cuda", "metal", "metal-replay", "metal-linux")
STATUSES = ("pending", "submitted", "merged", "fork-only")
"""The words of `Patchset-Status`, which `Patchset-Upstream` replaces (still read; `check` prints a
deprecation line)."""
UPSTREAM_STATES = ("not-sent", "sent", "merged", "rejected", "not-needed", "fork-only")
"""The words of `Patchset-Upstream`: where the patch stands upstream. `fork-only WHY`: kept in the fork and
never to be sent (export never packages it); proven, rebased, bumped and canaried like any other."""
FORK_ONLY = "fork-only"
# what each word must be followed by: a URL, a commit or URL, a reason, or nothing required
_UPSTREAM_NEEDS = {"sent": "url", "rejected": "url", "merged": "commit", "not-needed": "reason",
                   FORK_ONLY: "reason"}
# the old trailer's words in the new vocabulary (fork-only: kept in the fork, never to be sent)
_STATUS_AS_UPSTREAM = {"pending": ("not-sent", ""), "submitted": ("sent", ""), "merged": ("merged", ""),
                       "fork-only": ("not-sent", "fork-only")}
BEFORE_KINDS = ("test-fails", "build-fails", "crash")
DEFAULT_TEST_PATHS = ("tests",)
"""A patch's test part when it names none (`PatchMeta.test_part`)."""
TRAILER_PREFIX = "Patchset-"
KNOWN_TRAILERS = (
    "Patchset-Status", "Patchset-Backends", "Patchset-Test", "Patchset-Test-Paths",
    "Patchset-Before", "Patchset-Mutation", "Patchset-Hunk", "Patchset-Ack", "Patchset-Approval", "Patchset-Origin",
    "Patchset-Effect", "Patchset-Upstream", "Patchset-Depends", "Patchset-Test-Depends", "Patchset-Not-In-CI",
    "Patchset-Guard",
)
_SINGLE = {"Patchset-Status", "Patchset-Upstream", "Patchset-Backends", "Patchset-Test-Paths", "Patchset-Before",
           "Patchset-Origin"}


@dataclass(frozen=True)
class TestSpec:
    """One test command a patch declares: `tests/<program>.cpp` run with `args`."""

    __test__ = False  # not a pytest test class, whatever its name says

    program: str
    args: tuple[str, ...] = ()
    backends: tuple[str, ...] | None = None
    """Where this command runs; None: on every backend the patch declares."""

    def runs_on(self, backend: str, declared: tuple[str, ...]) -> bool:
        return backend in (self.backends if self.backends is not None else declared)

    def __str__(self) -> str:
        prefix = f"[{','.join(self.backends)}] " if self.backends is not None else ""
        return prefix + " ".join([self.program, *self.args])


@dataclass(frozen=True)
class NotInCI:
    """A `Patchset-Not-In-CI: PROGRAM ARGS: REASON` trailer: a test command of the patch that no
    CTest entry of upstream's tree runs, and why that is acceptable."""

    program: str
    args: tuple[str, ...]
    reason: str

    def matches(self, test: TestSpec) -> bool:
        return (self.program, self.args) == (test.program, test.args)


def _parse_not_in_ci(value: str) -> NotInCI:
    command, sep, reason = value.partition(": ")
    if not sep or not reason.strip():
        raise ValueError("expected 'PROGRAM ARGS: REASON' (the test command as Patchset-Test writes it, then why "
                         "upstream's CI does not run it)")
    try:
        words = shlex.split(command)
    except ValueError as e:
        raise ValueError(f"cannot split '{command}': {e}") from e
    if not words or not re.match(r"^[A-Za-z0-9_.-]+$", words[0]):
        raise ValueError("names no test program")
    return NotInCI(words[0], tuple(words[1:]), reason.strip())


_DEPENDS = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*\.patch$")


@dataclass(frozen=True)
class HunkRule:
    """A `Patchset-Hunk` trailer: a line range of a file (after the patch) that is its own unit for
    `verify --hunks`, or a range or function whose changes need no test (`exempt`, with the reason)."""

    file: str
    start: int = 0
    end: int = 0
    function: str = ""
    reason: str = ""
    """Why the changes need no test; empty for a split that is tested like any hunk."""

    @property
    def exempt(self) -> bool:
        return bool(self.reason)

    @property
    def location(self) -> str:
        """FILE:START-END, FILE:LINE or FILE:FUNCTION(), as the trailer writes it."""
        if self.function:
            return f"{self.file}:{self.function}()"
        return f"{self.file}:{self.start}" + (f"-{self.end}" if self.end != self.start else "")

    def __str__(self) -> str:
        return self.location + (f" exempt: {self.reason}" if self.reason else "")


_HUNK_RULE = re.compile(r"^(?P<file>[^\s:]+):(?:(?P<start>\d+)(?:-(?P<end>\d+))?|(?P<func>[A-Za-z_][\w:~]*)\(\))"
                        r"(?:\s+exempt:\s*(?P<reason>.*))?$")


def _parse_hunk_rule(value: str) -> HunkRule:
    m = _HUNK_RULE.match(value.strip())
    if not m:
        raise ValueError("expected FILE:START-END or FILE:FUNCTION(), optionally followed by `exempt: REASON`")
    file = m.group("file")
    pp = PurePosixPath(file)
    if pp.is_absolute() or ".." in pp.parts:
        raise ValueError(f"'{file}' is not a path inside the tree")
    reason = (m.group("reason") or "").strip()
    if m.group("reason") is not None and not reason:
        raise ValueError("`exempt:` needs a reason")
    if m.group("func"):
        if not reason:
            raise ValueError("a function can only be named to exempt its changes: add `exempt: REASON`")
        return HunkRule(file, function=m.group("func"), reason=reason)
    start = int(m.group("start"))
    end = int(m.group("end") or start)
    if start < 1 or end < start:
        raise ValueError(f"bad line range {start}-{end}")
    return HunkRule(file, start, end, reason=reason)


@dataclass(frozen=True)
class GuardRule:
    """A `Patchset-Guard` trailer: `PROGRAM CASE-PATTERN: REASON`. The test cases of PROGRAM whose
    `NAME(PARAMS)` the pattern matches (`*` matches any run of characters; everything else, `[` and
    `?` included, is itself) are regression guards: they pass without the fix too, on purpose."""

    program: str
    pattern: str
    reason: str

    def matches(self, program: str, case: str) -> bool:
        """Whether this rule declares `case` (`NAME(PARAMS)`) of `program` (a name or a command line)."""
        if program.split(" ", 1)[0] != self.program:
            return False
        return re.fullmatch(".*".join(re.escape(part) for part in self.pattern.split("*")), case) is not None

    def __str__(self) -> str:
        return f"{self.program} {self.pattern}: {self.reason}"


def _parse_guard(value: str) -> GuardRule:
    program, _, rest = value.strip().partition(" ")
    if not re.fullmatch(r"[A-Za-z0-9_.-]+", program):
        raise ValueError(f"'{program}' is not a test program name; expected `PROGRAM CASE-PATTERN: REASON`")
    pattern, sep, reason = rest.partition(": ")
    if not sep or not pattern.strip() or not reason.strip():
        raise ValueError("expected `PROGRAM CASE-PATTERN: REASON` (a pattern of `NAME(PARAMS)`, `*` for any text, "
                         "then `: ` and why the cases pass without the fix too)")
    return GuardRule(program, pattern.strip(), reason.strip())


@dataclass(frozen=True)
class PatchMeta:
    """What a patch's trailers say about it."""

    upstream: str = "not-sent"
    """Where the patch stands upstream: one of UPSTREAM_STATES (`Patchset-Upstream`)."""
    upstream_ref: str = ""
    """What follows the word: the pull-request URL (sent, rejected), the upstream commit or URL
    (merged), the reason (not-needed), or a note."""
    upstream_from: str = ""
    """The trailer that said it: `Patchset-Upstream`, the deprecated `Patchset-Status`, or '' (neither)."""
    backends: tuple[str, ...] = ()
    """Backends on which the known-positive proof can run."""
    tests: tuple[TestSpec, ...] = ()
    test_paths: tuple[str, ...] = ()
    """`Patchset-Test-Paths` as written (empty when absent); read `test_part` for the paths that apply."""
    test_in_tree: bool = False
    """`Patchset-Test-Paths: none`: the patch has no test part of its own (it fixes the test program
    itself), so its before tree is the tree it applies on."""
    before: str = "test-fails"
    mutation: tuple[str, ...] = ()
    """Paths of known-bad variants of the fix, relative to `patches/`; the test must catch each."""
    hunks: tuple[HunkRule, ...] = ()
    """`Patchset-Hunk` rules: finer splits of the fix's hunks and exemptions, for `verify --hunks`."""
    origin: str = ""
    """Where the patch came from: a pull-request URL (the fork's or upstream's) or a commit id."""
    effects: tuple[str, ...] = ()
    """The measured effect of the fix, or the test that shows it, one line each."""
    depends: tuple[str, ...] = ()
    """`Patchset-Depends`: file names of earlier patches of the series whose code this one needs (to apply
    or to build): export's branch carries them."""
    test_depends: tuple[str, ...] = ()
    """`Patchset-Test-Depends`: file names of earlier patches that only this patch's test needs (its code
    applies and builds without them): export names them in the facts and leaves them off the branch."""
    not_in_ci: tuple[NotInCI, ...] = ()
    """`Patchset-Not-In-CI`: test commands upstream's CI does not run, each with the reason."""
    guards: tuple[GuardRule, ...] = ()
    """`Patchset-Guard` rules: added test cases that pass without the fix too, declared as regression guards."""

    @property
    def fork_only(self) -> bool:
        """`Patchset-Upstream: fork-only WHY`: the fork keeps the patch and never sends it upstream."""
        return self.upstream == FORK_ONLY

    @property
    def status(self) -> str:
        """The former name of `upstream`, for readers written before `Patchset-Upstream`."""
        return self.upstream

    @property
    def test_part(self) -> tuple[str, ...]:
        """The paths of the patch's test part, the one answer every module uses: `Patchset-Test-Paths`,
        else DEFAULT_TEST_PATHS; none for `Patchset-Test-Paths: none` (the test is in the tree)."""
        return () if self.test_in_tree else (self.test_paths or DEFAULT_TEST_PATHS)

    @property
    def status_ref(self) -> str:
        """The former name of `upstream_ref`."""
        return self.upstream_ref

    def backends_for_tests(self) -> tuple[str, ...]:
        """Every backend on which at least one declared test runs."""
        found: list[str] = list(self.backends)
        for t in self.tests:
            for b in t.backends or ():
                if b not in found:
                    found.append(b)
        return tuple(found)


@dataclass(frozen=True)
class Patch:
    """One patch file of the series."""

    index: int
    name: str
    path: Path
    subject: str
    author: str
    date: str
    message: str
    """Subject and body as git am will commit them, trailers included."""
    files: tuple[str, ...]
    meta: PatchMeta


@dataclass(frozen=True)
class Finding:
    """One lint problem, located."""

    file: Path
    line: int
    message: str

    def __str__(self) -> str:
        return f"{self.file}:{self.line}: {self.message}" if self.line else f"{self.file}: {self.message}"


@dataclass(frozen=True)
class SeriesEntry:
    name: str
    line: int


@dataclass(frozen=True)
class Series:
    series_file: Path
    patches: tuple[Patch, ...] = field(default_factory=tuple)

    def by_name(self, name: str) -> Patch:
        for p in self.patches:
            if name in (p.name, str(p.index), f"{p.index:04d}") or p.name.startswith(f"{name}-"):
                return p
        raise SeriesError(f"{self.series_file}: no patch named '{name}'")


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


def _line_of(text: str, needle: str) -> int:
    for n, line in enumerate(text.splitlines(), 1):
        if needle in line:
            return n
    return 0


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


def parse_trailers(message: str) -> list[tuple[str, str]]:
    """The trailer block of a commit message, parsed by git itself."""
    try:
        r = proc.run(["git", "interpret-trailers", "--parse", "--no-divider"], input_text=message)
    except ProcessError as e:
        raise SeriesError(f"cannot parse trailers: {e}") from e
    out: list[tuple[str, str]] = []
    for line in r.stdout.splitlines():
        key, sep, value = line.partition(":")
        if sep:
            out.append((key.strip(), value.strip()))
    return out


_APPROVAL = re.compile(r"^(?:(?P<rule>[a-z0-9-]+)\s+)?(?P<url>https?://\S+)$")


def parse_approval(value: str) -> tuple[str, str]:
    """(rule, URL) of a `Patchset-Approval: [<rule>] <URL>` value; rule "" for every rule that needs one."""
    m = _APPROVAL.match(value.strip())
    if not m:
        raise ValueError("expected '[<rule>] <URL>': the address where a maintainer agreed (an issue or PR comment)")
    return m.group("rule") or "", m.group("url")


def _parse_test(value: str) -> TestSpec:
    backends: tuple[str, ...] | None = None
    m = re.match(r"^\[([^\]]*)\]\s*(.*)$", value)
    if m:
        backends = tuple(b.strip() for b in m.group(1).split(",") if b.strip())
        bad = [b for b in backends if b not in BACKENDS]
        if bad or not backends:
            raise ValueError(f"unknown backend(s) {', '.join(bad) or '(none)'} in [{m.group(1)}]")
        value = m.group(2)
    try:
        words = shlex.split(value)
    except ValueError as e:
        raise ValueError(f"cannot split '{value}': {e}") from e
    if not words:
        raise ValueError("names no program")
    if not re.match(r"^[A-Za-z0-9_.-]+$", words[0]):
        raise ValueError(f"'{words[0]}' is not a test program name (tests/<name>.cpp)")
    return TestSpec(words[0], tuple(words[1:]), backends)


def meta_from_trailers(
    trailers: list[tuple[str, str]], text: str, path: Path, patches_dir: Path
) -> tuple[PatchMeta, list[Finding]]:
    """Build the metadata; every malformed or unknown `Patchset-*` trailer is a finding."""
    findings: list[Finding] = []
    kw: dict = {}
    tests: list[TestSpec] = []
    mutations: list[str] = []
    hunks: list[HunkRule] = []
    seen: set[str] = set()

    def bad(key: str, value: str, why: str) -> None:
        findings.append(Finding(path, _line_of(text, f"{key}: {value}") or _line_of(text, key), f"{key}: {why}"))

    effects: list[str] = []
    depends: list[str] = []
    test_depends: list[str] = []
    not_in_ci: list[NotInCI] = []
    guards: list[GuardRule] = []
    for key, value in trailers:
        if not key.lower().startswith(TRAILER_PREFIX.lower()):
            continue
        canon = next((k for k in KNOWN_TRAILERS if k.lower() == key.lower()), None)
        if canon is None:
            bad(key, value, f"unknown trailer (known: {', '.join(KNOWN_TRAILERS)})")
            continue
        if canon in _SINGLE and canon in seen:
            bad(key, value, "given more than once")
            continue
        seen.add(canon)
        if canon in ("Patchset-Status", "Patchset-Upstream") and {"Patchset-Status", "Patchset-Upstream"} <= seen:
            bad(key, value, "Patchset-Status and Patchset-Upstream both given: keep only Patchset-Upstream")
        elif canon == "Patchset-Status":
            word, _, ref = value.partition(" ")
            if word not in STATUSES:
                bad(key, value, f"'{word}' is not one of {', '.join(STATUSES)}")
            elif word in ("submitted", "merged") and not ref.strip():
                bad(key, value, f"'{word}' needs a {'pull-request URL' if word == 'submitted' else 'commit'}")
            else:
                new, note = _STATUS_AS_UPSTREAM[word]
                kw.update(upstream=new, upstream_ref=(ref.strip() or note), upstream_from=canon)
        elif canon == "Patchset-Upstream":
            word, _, ref = value.partition(" ")
            why = _upstream_problem(word, ref.strip())
            if why:
                bad(key, value, why)
            else:
                kw.update(upstream=word, upstream_ref=ref.strip(), upstream_from=canon)
        elif canon == "Patchset-Backends":
            names = tuple(value.replace(",", " ").split())
            unknown = [b for b in names if b not in BACKENDS]
            if unknown or not names:
                bad(key, value, f"unknown backend(s) {', '.join(unknown) or '(none)'}; known: {', '.join(BACKENDS)}")
            else:
                kw["backends"] = names
        elif canon == "Patchset-Test":
            try:
                tests.append(_parse_test(value))
            except ValueError as e:
                bad(key, value, str(e))
        elif canon == "Patchset-Test-Paths" and value.strip() == "none":
            kw["test_in_tree"] = True
        elif canon == "Patchset-Test-Paths":
            paths = tuple(value.split())
            escaping = [p for p in paths if PurePosixPath(p).is_absolute() or ".." in PurePosixPath(p).parts]
            if escaping or not paths:
                bad(key, value, f"paths must be relative and inside the tree: {' '.join(escaping) or '(none)'}")
            else:
                kw["test_paths"] = paths
        elif canon == "Patchset-Before":
            if value not in BEFORE_KINDS:
                bad(key, value, f"'{value}' is not one of {', '.join(BEFORE_KINDS)}")
            else:
                kw["before"] = value
        elif canon == "Patchset-Ack":
            # `<rule> <reason>`: export checks the rule name against its rule table
            rule, _, reason = value.partition(" ")
            if not re.fullmatch(r"[a-z0-9-]+", rule) or not reason.strip():
                bad(key, value, "expected '<rule> <reason>' (a rule name of `patchset export`, then why)")
        elif canon == "Patchset-Approval":
            # `[<rule>] <URL>`: where a maintainer agreed to what a rule asks their approval for
            try:
                parse_approval(value)
            except ValueError as e:
                bad(key, value, str(e))
        elif canon == "Patchset-Mutation":
            mp = PurePosixPath(value)
            if mp.is_absolute() or ".." in mp.parts or not value:
                bad(key, value, "must be a path inside patches/")
            elif not (patches_dir / value).is_file():
                bad(key, value, f"mutation file {patches_dir / value} does not exist")
            elif value in mutations:
                bad(key, value, "the same mutation is named twice")
            else:
                mutations.append(value)
        elif canon == "Patchset-Hunk":
            try:
                hunks.append(_parse_hunk_rule(value))
            except ValueError as e:
                bad(key, value, str(e))
        elif canon == "Patchset-Origin":
            if not _ORIGIN.match(value):
                bad(key, value, "must be a URL (http:// or https://) or a commit id, with an optional note after it")
            else:
                kw["origin"] = value
        elif canon == "Patchset-Guard":
            try:
                guards.append(_parse_guard(value))
            except ValueError as e:
                bad(key, value, str(e))
        elif canon == "Patchset-Effect":
            if not value:
                bad(key, value, "is empty")
            else:
                effects.append(value)
        elif canon in ("Patchset-Depends", "Patchset-Test-Depends"):
            wanted = value.split()
            wrong = [n for n in wanted if not _DEPENDS.match(n)]
            into = depends if canon == "Patchset-Depends" else test_depends
            if wrong or not wanted:
                bad(key, value, f"expected the file name of an earlier patch of the series (NNNN-subject.patch), "
                                f"not '{' '.join(wrong) or value}'")
            else:
                into += [n for n in wanted if n not in into]
        elif canon == "Patchset-Not-In-CI":
            try:
                not_in_ci.append(_parse_not_in_ci(value))
            except ValueError as e:
                bad(key, value, str(e))
    return PatchMeta(tests=tuple(tests), mutation=tuple(mutations), hunks=tuple(hunks), effects=tuple(effects),
                     depends=tuple(depends), test_depends=tuple(test_depends), not_in_ci=tuple(not_in_ci),
                     guards=tuple(guards), **kw), findings


def _upstream_problem(word: str, ref: str) -> str:
    """Why a `Patchset-Upstream` value is malformed ('' when it is not)."""
    if word not in UPSTREAM_STATES:
        return f"'{word}' is not one of {', '.join(UPSTREAM_STATES)}"
    first = ref.split(maxsplit=1)[0] if ref else ""
    need = _UPSTREAM_NEEDS.get(word)
    if need == "url" and not re.match(r"^https?://\S+$", first):
        return f"'{word}' needs the pull request's URL (http:// or https://)"
    if need == "commit" and not _ORIGIN.match(first):
        return f"'{word}' needs the upstream commit id or a URL"
    if need == "reason" and not ref:
        if word == FORK_ONLY:
            return f"'{word}' needs a reason (why upstream will not take it, e.g. a rejected pull request)"
        return f"'{word}' needs a reason (for example the upstream commit that made it unnecessary)"
    return ""


def deprecations(series: Series) -> list[Finding]:
    """Trailers still read but replaced: each with what to write instead (not a problem of the series)."""
    found = []
    for p in series.patches:
        if p.meta.upstream_from == "Patchset-Status":
            text = p.path.read_text(encoding="utf-8", errors="replace")
            new = f"{p.meta.upstream} {p.meta.upstream_ref}".strip()
            found.append(Finding(p.path, _line_of(text, "Patchset-Status:"),
                                 f"Patchset-Status is deprecated: write `Patchset-Upstream: {new}` instead"))
    return found


# a pull request or commit page, or a bare commit id (7 to 40 hex digits); a note may follow
_ORIGIN = re.compile(r"^(https?://\S+|[0-9a-f]{7,40})(\s.*)?$")


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


_TRAILER_LIKE = re.compile(r"^([A-Za-z0-9][A-Za-z0-9-]*)\s*:\s")


def trailer_block_findings(message: str, trailers: tuple[tuple[str, str], ...], text: str, path: Path,
                           strict: bool) -> list[Finding]:
    """Lines of the message's last paragraph that look like trailers but that git did not read as any.

    git reads trailers only from a well-formed last paragraph: a wrapped value that starts in
    column 0, or a blank line inside the block, silently ends it, and every trailer above is
    lost. A `Patchset-*` line lost that way is always an error (its metadata would be ignored);
    any other lost trailer is one under --strict.
    """
    paragraphs = [p for p in re.split(r"\n\s*\n", message.strip()) if p.strip()]
    body = paragraphs[1:]  # the first paragraph is the subject
    parsed = {(k.lower(), v) for k, v in trailers}
    found: list[Finding] = []
    for n, block in enumerate(body, 1):
        for line in block.splitlines():
            m = _TRAILER_LIKE.match(line)
            if not m:
                continue
            key, value = m.group(1), line[m.end():].strip()
            if (key.lower(), value) in parsed or any(k.lower() == key.lower() and v.startswith(value)
                                                      for k, v in trailers):
                continue
            # a Patchset-* line anywhere in the body is meant as metadata; other keys only count
            # in the last paragraph, where git looks for the block (body prose may say "Note: ...")
            ours = key.lower().startswith(TRAILER_PREFIX.lower())
            if ours or (strict and n == len(body)):
                found.append(Finding(path, _line_of(text, line),
                                     f"'{key}:' is not read as a trailer by git: the trailer block is broken "
                                     "(a wrapped line starting in column 0, or a blank line inside the block)"))
    return found


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

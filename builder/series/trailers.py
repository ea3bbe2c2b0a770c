"""The `Patchset-*` trailers of a patch's commit message: parsing them into `PatchMeta` and their findings."""

from __future__ import annotations

import re
import shlex
from pathlib import Path, PurePosixPath

from builder import proc
from builder.errors import ProcessError, SeriesError
from builder.series.model import (
    BACKENDS,
    BEFORE_KINDS,
    FORK_ONLY,
    STATUSES,
    UPSTREAM_STATES,
    Finding,
    GuardRule,
    HunkRule,
    NotInCI,
    PatchMeta,
    Series,
    TestSpec,
)

# what each word must be followed by: a URL, a commit or URL, a reason, or nothing required
_UPSTREAM_NEEDS = {"sent": "url", "rejected": "url", "merged": "commit", "not-needed": "reason",
                   FORK_ONLY: "reason"}
# the old trailer's words in the new vocabulary (fork-only: kept in the fork, never to be sent)
_STATUS_AS_UPSTREAM = {"pending": ("not-sent", ""), "submitted": ("sent", ""), "merged": ("merged", ""),
                       "fork-only": ("not-sent", "fork-only")}
TRAILER_PREFIX = "Patchset-"
KNOWN_TRAILERS = (
    "Patchset-Status", "Patchset-Backends", "Patchset-Test", "Patchset-Test-Paths",
    "Patchset-Before", "Patchset-Mutation", "Patchset-Hunk", "Patchset-Ack", "Patchset-Approval", "Patchset-Origin",
    "Patchset-Effect", "Patchset-Upstream", "Patchset-Depends", "Patchset-Test-Depends", "Patchset-Not-In-CI",
    "Patchset-Guard",
)
_SINGLE = {"Patchset-Status", "Patchset-Upstream", "Patchset-Backends", "Patchset-Test-Paths", "Patchset-Before",
           "Patchset-Origin"}


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


def _parse_guard(value: str) -> GuardRule:
    program, _, rest = value.strip().partition(" ")
    if not re.fullmatch(r"[A-Za-z0-9_.-]+", program):
        raise ValueError(f"'{program}' is not a test program name; expected `PROGRAM CASE-PATTERN: REASON`")
    pattern, sep, reason = rest.partition(": ")
    if not sep or not pattern.strip() or not reason.strip():
        raise ValueError("expected `PROGRAM CASE-PATTERN: REASON` (a pattern of `NAME(PARAMS)`, `*` for any text, "
                         "then `: ` and why the cases pass without the fix too)")
    return GuardRule(program, pattern.strip(), reason.strip())


def _line_of(text: str, needle: str) -> int:
    for n, line in enumerate(text.splitlines(), 1):
        if needle in line:
            return n
    return 0


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

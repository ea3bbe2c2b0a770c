"""Upstream's contribution rules, checked on one patch.

Machine-readable rules come from the tree the patch goes to, read at run time: `.editorconfig`
(through the `editorconfig` package) with `.ecrc`'s exclusions, and `.clang-format` (run with the
`clang-format` wheel on the added lines only, reported as a diff, never applied). Rules that exist
only as prose come from `data/rules.toml`, each citing the file and section it comes from.
"""

from __future__ import annotations

import bisect
import dataclasses
import fnmatch
import hashlib
import json
import re
import tomllib
import unicodedata
from dataclasses import asdict, dataclass
from functools import cache
from importlib import metadata, resources
from pathlib import Path, PurePosixPath
from xml.etree import ElementTree

import clang_format
import editorconfig

from builder import proc
from builder.deliver.diffparse import FileDiff, Mail
from builder.errors import ProcessError
from builder.fsutil import atomic_write_text
from builder.gitrepo import GitRepo

ERROR = "error"
WARNING = "warning"


@cache
def rule_table() -> dict:
    """`data/rules.toml`: every prose rule with its severity and source."""
    return tomllib.loads(resources.files("builder.deliver").joinpath("data/rules.toml").read_text(encoding="utf-8"))


def rule_ids() -> tuple[str, ...]:
    return tuple(rule_table()["rules"])


@dataclass(frozen=True)
class RuleFinding:
    """One place where a patch breaks an upstream rule."""

    patch: str
    file: str
    """A path of the tree (for a diff line) or the series mail (for the commit message)."""
    line: int
    rule: str
    severity: str
    message: str
    source: str
    """Where upstream says so: file and section."""
    detail: str = ""
    """A diff (clang-format) or a list (declarations), shown under the finding."""
    acknowledged: str = ""
    """The patch's reason when it acknowledges this warning."""
    needs_maintainer: bool = False
    """Upstream asks for a maintainer's agreement (the rule's `approval`): an acknowledgement does
    not settle it, an approval does."""
    approved: str = ""
    """Where a maintainer agreed (the URL of a `Patchset-Approval` trailer)."""

    @property
    def blocking(self) -> bool:
        return self.severity == ERROR

    @property
    def needs_approval(self) -> bool:
        """Still waiting for a maintainer: shown as such, never an error."""
        return self.needs_maintainer and not self.approved and not self.blocking

    @property
    def settled(self) -> bool:
        """Nothing left for anyone to do: acknowledged by the submitter where that suffices, or approved."""
        return bool(self.approved) if self.needs_maintainer else bool(self.acknowledged)

    def __str__(self) -> str:
        where = f"{self.file}:{self.line}" if self.line else self.file
        ack = f" [acknowledged: {self.acknowledged}]" if self.acknowledged else ""
        if self.needs_approval:
            ack += " [needs approval: a maintainer's agreement, named by a Patchset-Approval trailer]"
        elif self.approved:
            ack += f" [approved: {self.approved}]"
        return f"{self.patch}: {where}: {self.severity} {self.rule}: {self.message} ({self.source}){ack}"


class TreeRules:
    """The machine-readable rule files of one tree, laid out in a temporary folder for the tools
    that find their configuration by walking up from a file (editorconfig, clang-format)."""

    def __init__(self, git: GitRepo, commit: str, tmp: Path) -> None:
        self.git = git
        self.commit = commit
        self.root = tmp / "tree"
        self.root.mkdir(parents=True, exist_ok=True)
        names = git.out("ls-tree", "-r", "--name-only", commit).splitlines()
        for name in names:
            if PurePosixPath(name).name in (".editorconfig", ".clang-format", "_clang-format", ".ecrc"):
                dest = self.root / name
                dest.parent.mkdir(parents=True, exist_ok=True)
                dest.write_bytes(self._show(commit, name))
        self.has_editorconfig = (self.root / ".editorconfig").exists()
        self.has_clang_format = any(self.root.rglob(".clang-format"))
        ecrc: dict = {}
        if (self.root / ".ecrc").exists():
            try:
                ecrc = json.loads((self.root / ".ecrc").read_text(encoding="utf-8"))
            except ValueError:
                ecrc = {}
        self.ec_exclude = [re.compile(p) for p in ecrc.get("Exclude", []) if isinstance(p, str)]
        self.ec_disabled = {k for k, v in (ecrc.get("Disable") or {}).items() if v}

    def _show(self, commit: str, path: str) -> bytes:
        return self.git.run("show", f"{commit}:{path}").stdout.encode("utf-8", "surrogateescape")

    def editorconfig(self, path: str) -> dict[str, str]:
        if not self.has_editorconfig or any(r.search(path) for r in self.ec_exclude):
            return {}
        try:
            return dict(editorconfig.get_properties(str(self.root / path)))
        except editorconfig.EditorConfigError:
            return {}


def _cite(rule: str) -> str:
    r = rule_table()["rules"][rule]
    return f"{r['source']}, {r['section']}"


def _finding(patch: str, file: str, line: int, rule: str, message: str, detail: str = "") -> RuleFinding:
    r = rule_table()["rules"][rule]
    return RuleFinding(patch, file, line, rule, r["severity"], message, _cite(rule), detail,
                       needs_maintainer=r.get("approval") == "maintainer")


def _is_cxx(path: str) -> bool:
    return PurePosixPath(path).suffix.lower() in rule_table()["rules"]["clang-format"]["extensions"]


# -- the rules ----------------------------------------------------------------------------------
def check_editorconfig(patch: str, f: FileDiff, tree: TreeRules) -> list[RuleFinding]:
    props = tree.editorconfig(f.path)
    if not props or f.is_deleted:
        return []
    out: list[RuleFinding] = []
    off = tree.ec_disabled
    style = props.get("indent_style")
    for ln in f.added():
        text = ln.text
        if props.get("end_of_line") == "lf" and text.endswith("\r") and "EndOfLine" not in off:
            out.append(_finding(patch, f.path, ln.number, "editorconfig", "CRLF line ending (end_of_line = lf)"))
        text = text.rstrip("\r")
        if props.get("trim_trailing_whitespace") == "true" and text != text.rstrip(" \t") \
                and "TrimTrailingWhitespace" not in off:
            out.append(_finding(patch, f.path, ln.number, "editorconfig", "trailing whitespace"))
        indent = text[: len(text) - len(text.lstrip(" \t"))]
        if "Indentation" not in off and text.strip():
            if style == "space" and "\t" in indent:
                out.append(_finding(patch, f.path, ln.number, "editorconfig",
                                    "tab in indentation (indent_style = space)"))
            elif style == "tab" and indent.startswith(" ") and not text.lstrip().startswith("*"):
                out.append(_finding(patch, f.path, ln.number, "editorconfig",
                                    "spaces in indentation (indent_style = tab)"))
    if f.new_lacks_final_newline and props.get("insert_final_newline") == "true" and "InsertFinalNewline" not in off:
        last = f.added()[-1].number if f.added() else 0
        out.append(_finding(patch, f.path, last, "editorconfig",
                            "no newline at end of file (insert_final_newline = true)"))
    return out


def _non_ascii(text: str) -> str:
    chars = dict.fromkeys(c for c in text if ord(c) > 127)
    return ", ".join(f"U+{ord(c):04X} {unicodedata.name(c, '?')}" for c in chars)


def check_ascii_diff(patch: str, f: FileDiff) -> list[RuleFinding]:
    return [_finding(patch, f.path, ln.number, "ascii",
                     f"non-ASCII character(s) in an added line: {_non_ascii(ln.text)}")
            for ln in f.added() if not ln.text.isascii()]


def mail_line_of(mail_lines: tuple[str, ...], text: str, upto: int) -> int:
    """The 1-based line of the mail (before its diff) that holds `text`; 0 when none does."""
    for i, ln in enumerate(mail_lines[:upto], 1):
        if text and text in ln:
            return i
    return 0


def check_message(patch: str, mail_file: str, mail: Mail, message: str) -> list[RuleFinding]:
    """The commit message as export sends it (subject + body, our trailers removed)."""
    out: list[RuleFinding] = []
    subject = message.split("\n", 1)[0]
    subject_line = next((i for i, ln in enumerate(mail.lines[: mail.diff_start], 1) if ln.startswith("Subject:")), 0)
    if not re.match(rule_table()["rules"]["subject"]["pattern"], subject):
        out.append(_finding(patch, mail_file, subject_line, "subject",
                            f"subject '{subject}' is not '<module> : <title>'"))
    for n, text in enumerate(message.splitlines(), 1):
        if not text.isascii():
            where = subject_line if n == 1 else (mail_line_of(mail.lines, text, mail.diff_start) or subject_line)
            out.append(_finding(patch, mail_file, where, "ascii",
                                f"non-ASCII character(s) in the commit message: {_non_ascii(text)}"))
    return out


def check_new_test_file(patch: str, f: FileDiff) -> list[RuleFinding]:
    prefixes = rule_table()["rules"]["new-test-file"]["paths"]
    if f.is_new and any(f.path.startswith(p) for p in prefixes):
        return [_finding(patch, f.path, 1, "new-test-file",
                         f"new file {f.path}: upstream asks for the maintainers' approval first")]
    return []


_NAME = re.compile(r"\b([A-Za-z_][A-Za-z0-9_]*)\s*\(")


def _declaration_at(lines: list[str], index: int, macros: tuple[str, ...]) -> str | None:
    """The name of the public declaration that line `index` (0-based) belongs to, if any."""
    start = index
    for _ in range(12):  # a declaration rarely spans more lines
        if start < 0:
            return None
        text = lines[start]
        if start != index and (text.rstrip().endswith((";", "}", "{")) or not text.strip()):
            return None
        if any(re.search(rf"\b{m}\b", text) for m in macros):
            joined = " ".join(lines[start: start + 4])
            after = joined.split(next(m for m in macros if re.search(rf"\b{m}\b", text)), 1)[1]
            m = _NAME.search(after)
            return m.group(1) if m else None
        start -= 1
    return None


def _file_lines(git: GitRepo, commit: str, path: str) -> list[str]:
    r = git.run("show", f"{commit}:{path}", check=False)
    return r.stdout.splitlines() if r.returncode == 0 else []


def check_public_header(patch: str, f: FileDiff, git: GitRepo, parent: str, head: str) -> list[RuleFinding]:
    conf = rule_table()["rules"]["public-api"]
    if not any(fnmatch.fnmatchcase(f.path, pat) for pat in conf["headers"]):
        return []
    macros = tuple(conf["api_macros"])
    new_lines = _file_lines(git, head, f.path) if not f.is_deleted else []
    old_lines = _file_lines(git, parent, f.old_path) if f.old_path else []
    added = {d for ln in f.added() if (d := _declaration_at(new_lines, ln.number - 1, macros))}
    removed = {d for ln in f.removed() if (d := _declaration_at(old_lines, ln.number - 1, macros))}
    parts = []
    for label, names in (("added", added - removed), ("changed", added & removed), ("removed", removed - added)):
        if names:
            parts.append(f"{label} {', '.join(sorted(names))}")
    first = f.added()[0].number if f.added() else (f.hunks[0].new_start if f.hunks else 1)
    what = "; ".join(parts) if parts else "no declaration changed (comments or other lines only)"
    found = _finding(patch, f.path, first, "public-api", f"public header changed: {what}")
    # upstream's bar is for additions: a new declaration waits for a maintainer; a changed signature
    # or a comment is the submitter's to explain, and an acknowledgement settles it
    return [dataclasses.replace(found, needs_maintainer=found.needs_maintainer and bool(added - removed))]


def module_of(path: str) -> str | None:
    conf = rule_table()["rules"]["one-fix"]
    if any(re.search(p, path) for p in conf["neutral"]):
        return None
    for pattern, repl in conf["modules"]:
        if re.match(pattern, path):
            return re.sub(pattern, repl, path)
    return path.split("/", 1)[0]


def check_modules(patch: str, mail_file: str, mail: Mail) -> list[RuleFinding]:
    seen: dict[str, FileDiff] = {}
    for f in mail.files:
        m = module_of(f.path)
        if m is not None and m not in seen:
            seen[m] = f
    if len(seen) < 2:
        return []
    listing = "; ".join(f"{m} ({f.path})" for m, f in seen.items())
    second = list(seen.values())[1]
    return [_finding(patch, mail_file, second.start + 1, "one-fix",
                     f"touches {len(seen)} modules: {listing}")]


_COMMENT = re.compile(r"^\s*(//+|/\*+|\*(?!/))\s?(.*)$")


def check_wrapped_comments(patch: str, f: FileDiff) -> list[RuleFinding]:
    """Runs of added comment lines where a sentence goes on on the next line."""
    out: list[RuleFinding] = []
    added = f.added()
    i = 0
    while i < len(added) - 1:
        a, b = added[i], added[i + 1]
        ma, mb = _COMMENT.match(a.text), _COMMENT.match(b.text)
        if ma and mb and b.number == a.number + 1:
            ta, tb = ma.group(2).rstrip().removesuffix("*/").rstrip(), mb.group(2).strip()
            if ta and tb and tb[0].islower() and not ta.endswith((".", ":", ";", "!", "?")):
                end = i + 1
                while end + 1 < len(added) and added[end + 1].number == added[end].number + 1 \
                        and _COMMENT.match(added[end + 1].text):
                    end += 1
                out.append(_finding(patch, f.path, a.number,
                                    "wrapped-comment",
                                    f"comment hard-wrapped over lines {a.number}-{added[end].number}: "
                                    "keep a sentence on one line"))
                i = end + 1
                continue
        i += 1
    return out


def _clang_format_exe() -> str:
    """The binary inside the clang-format wheel (not whatever clang-format is on PATH)."""
    return clang_format.get_executable("clang-format")


def _replacements(xml_text: str) -> list[tuple[int, int, bytes]]:
    """clang-format's `--output-replacements-xml`: (byte offset, length, new bytes) each."""
    root = ElementTree.fromstring(xml_text)
    return [(int(r.get("offset", 0)), int(r.get("length", 0)), (r.text or "").encode("utf-8"))
            for r in root.iter("replacement")]


def check_clang_format(patch: str, f: FileDiff, tree: TreeRules, head: str) -> list[RuleFinding]:
    """One finding per file: what clang-format would change in the added lines, as a diff.

    clang-format reports its edits as byte replacements (machine-readable), restricted with
    --lines to the added lines; an edit that touches no added line is not ours and not shown.
    """
    if f.is_deleted or not _is_cxx(f.path) or not f.added() or not tree.has_clang_format:
        return []
    content = tree.git.run("show", f"{head}:{f.path}").stdout.encode("utf-8", "surrogateescape")
    ranges: list[tuple[int, int]] = []
    for ln in f.added():
        if ranges and ranges[-1][1] == ln.number - 1:
            ranges[-1] = (ranges[-1][0], ln.number)
        else:
            ranges.append((ln.number, ln.number))
    target = tree.root / f.path
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_bytes(content)
    try:
        cmd = [_clang_format_exe(), "--style=file", "--fallback-style=none", "--output-replacements-xml",
               *[f"--lines={a}:{b}" for a, b in ranges], str(target)]
        edits = _replacements(proc.run(cmd, timeout=300).stdout)
    except (ProcessError, ElementTree.ParseError) as err:
        return [_finding(patch, f.path, 0, "clang-format", f"clang-format could not run: {err}")]
    finally:
        target.unlink(missing_ok=True)
    if not edits:
        return []
    starts = [0]
    for i, b in enumerate(content):
        if b == 0x0A:
            starts.append(i + 1)

    def line_at(offset: int) -> int:  # 1-based line holding byte `offset`
        return bisect.bisect_right(starts, offset)

    # edits whose lines touch or overlap form one change, shown as the old and new lines
    groups: list[list[tuple[int, int, bytes]]] = []
    for edit in sorted(edits):
        first = line_at(edit[0])
        if groups and first <= line_at(groups[-1][-1][0] + max(groups[-1][-1][1] - 1, 0)):
            groups[-1].append(edit)
        else:
            groups.append([edit])
    added = {ln.number for ln in f.added()}
    diff: list[str] = []
    lines_shown: list[int] = []
    for g in groups:
        lo = line_at(g[0][0])
        hi = max(line_at(o + max(n - 1, 0)) for o, n, _ in g)
        if not set(range(lo, hi + 1)) & added:
            continue
        a, b = starts[lo - 1], starts[hi] if hi < len(starts) else len(content)
        old = content[a:b]
        new = bytearray()
        pos = a
        for o, n, text in g:
            new += content[pos:o] + text
            pos = o + n
        new += content[pos:b]
        diff.append(f"@@ {f.path}:{lo} @@")
        diff += ["-" + x for x in old.decode("utf-8", "replace").splitlines()]
        diff += ["+" + x for x in bytes(new).decode("utf-8", "replace").splitlines()]
        lines_shown.append(lo)
    if not lines_shown:
        return []
    where = ", ".join(str(n) for n in lines_shown[:8]) + (" ..." if len(lines_shown) > 8 else "")
    return [_finding(patch, f.path, lines_shown[0], "clang-format",
                     f"clang-format would change {len(lines_shown)} place(s) of the added lines, at line(s) {where} "
                     "(not applied)", "\n".join(diff))]


def check_patch(patch: str, mail_file: str, series_mail: Mail, mail: Mail, message: str, tree: TreeRules,
                parent: str, head: str, acks: dict[str, str],
                approvals: dict[str, str] | None = None) -> list[RuleFinding]:
    """Every finding for one patch, acknowledged and approved warnings marked.

    `approvals`: rule -> URL where a maintainer agreed ("" as the rule: every rule that needs one).

    `series_mail` is the patch file of the series (message findings point into it: that is where
    the message is edited); `mail` is the exported llama.cpp-layout mail, whose diff is that of
    `parent`..`head` (diff findings carry the line numbers of `head`'s files).
    """
    out = check_message(patch, mail_file, series_mail, message)
    for f in mail.files:
        out += check_editorconfig(patch, f, tree)
        out += check_ascii_diff(patch, f)
        out += check_new_test_file(patch, f)
        out += check_public_header(patch, f, tree.git, parent, head)
        if _is_cxx(f.path) or PurePosixPath(f.path).suffix in (".m", ".mm", ".metal"):
            out += check_wrapped_comments(patch, f)
        out += check_clang_format(patch, f, tree, head)
    out += check_modules(patch, mail_file, series_mail)
    known = rule_ids()
    approvals = approvals or {}
    for rule in acks:
        if rule not in known:
            out.append(RuleFinding(patch, mail_file, 0, rule, ERROR, f"acknowledges an unknown rule '{rule}' "
                                   f"(known: {', '.join(known)})", "data/rules.toml"))
    for rule in approvals:
        if rule and rule not in known:
            out.append(RuleFinding(patch, mail_file, 0, rule, ERROR, f"an approval names an unknown rule '{rule}' "
                                   f"(known: {', '.join(known)})", "data/rules.toml"))
    result = []
    for found in out:
        if found.severity == WARNING and found.rule in acks:
            found = dataclasses.replace(found, acknowledged=acks[found.rule])  # noqa: PLW2901
        if found.severity == WARNING and found.needs_maintainer:
            url = approvals.get(found.rule) or approvals.get("", "")
            if url:
                found = dataclasses.replace(found, approved=url)  # noqa: PLW2901
        result.append(found)
    # the message first (it is read first), then by file and line
    return sorted(result, key=lambda f: (f.file != mail_file, f.file, f.line, f.rule))


def fingerprint() -> str:
    """What the findings depend on besides the patch and the tree: our rules and the tools' versions."""
    h = hashlib.sha256()
    h.update(Path(__file__).read_bytes())
    h.update(resources.files("builder.deliver").joinpath("data/rules.toml").read_bytes())
    for dist in ("clang-format", "editorconfig"):
        try:
            h.update(f"{dist}={metadata.version(dist)}".encode())
        except metadata.PackageNotFoundError:
            h.update(dist.encode())
    return h.hexdigest()


def save_findings(path: Path, findings: list[RuleFinding]) -> None:
    atomic_write_text(path, json.dumps([asdict(f) for f in findings], indent=1) + "\n")


def load_findings(path: Path) -> list[RuleFinding] | None:
    try:
        return [RuleFinding(**d) for d in json.loads(path.read_text(encoding="utf-8"))]
    except (OSError, ValueError, TypeError):
        return None

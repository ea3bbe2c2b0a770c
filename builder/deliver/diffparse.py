"""A `git format-patch` mail split into its parts, with line numbers.

One small walker instead of a library (unidiff was considered): the ggml layout rewrites the
header lines of each file's diff in place and the rules need the mail's own line numbers, so
the parser must know exactly which lines are headers and which are hunk bodies (a removed line
`-- x` reads as `--- x` inside a hunk, and must never be taken for a header). Hunks are walked
by their line counts, as git apply does.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_HUNK = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")


@dataclass(frozen=True)
class Line:
    """One added or removed line: its number in the new (added) or old (removed) file."""

    number: int
    text: str
    """Without the leading +/- and the newline (a CR before it is kept)."""
    mail_line: int
    """1-based line of the mail that holds it."""


@dataclass(frozen=True)
class Hunk:
    old_start: int
    new_start: int
    added: tuple[Line, ...]
    removed: tuple[Line, ...]
    mail_line: int


@dataclass(frozen=True)
class FileDiff:
    """The diff of one file: `start`..`end` (0-based, end exclusive) are its lines in the mail,
    `header_end` the first line after its header (its first `@@`, or `end`)."""

    old_path: str | None
    new_path: str | None
    start: int
    header_end: int
    end: int
    hunks: tuple[Hunk, ...]
    new_lacks_final_newline: bool = False
    """The diff ends the new file with `\\ No newline at end of file`."""
    last_added_mail_line: int = 0

    @property
    def path(self) -> str:
        return self.new_path or self.old_path or ""

    @property
    def is_new(self) -> bool:
        return self.old_path is None

    @property
    def is_deleted(self) -> bool:
        return self.new_path is None

    def added(self) -> list[Line]:
        return [ln for h in self.hunks for ln in h.added]

    def removed(self) -> list[Line]:
        return [ln for h in self.hunks for ln in h.removed]


@dataclass(frozen=True)
class Mail:
    lines: tuple[str, ...]
    """The mail's lines, line endings kept: joined they give the mail back byte for byte."""
    diff_start: int
    """Index of the first `diff --git` line (len(lines) when there is none)."""
    files: tuple[FileDiff, ...]

    def text(self) -> str:
        return "".join(self.lines)


def _strip_prefix(path: str) -> str | None:
    path = path.rstrip("\n").split("\t")[0]
    if path == "/dev/null":
        return None
    return path[2:] if path[:2] in ("a/", "b/") else path


def parse(text: str) -> Mail:
    lines = tuple(text.splitlines(keepends=True))
    n = len(lines)
    diff_start = next((i for i, ln in enumerate(lines) if ln.startswith("diff --git ")), n)
    files: list[FileDiff] = []
    i = diff_start
    while i < n:
        if not lines[i].startswith("diff --git "):
            i += 1
            continue
        start = i
        parts = lines[i].rstrip("\n").split(" ")
        old_path = _strip_prefix(parts[2]) if len(parts) >= 4 else None
        new_path = _strip_prefix(parts[3]) if len(parts) >= 4 else None
        i += 1
        while i < n and not lines[i].startswith(("@@ ", "diff --git ")):
            ln = lines[i]
            if ln.startswith("--- "):
                old_path = _strip_prefix(ln[4:])
            elif ln.startswith("+++ "):
                new_path = _strip_prefix(ln[4:])
            elif ln.startswith("new file mode"):
                old_path = None
            elif ln.startswith("deleted file mode"):
                new_path = None
            i += 1
        header_end = i
        hunks: list[Hunk] = []
        lacks_newline = False
        last_added = 0
        while i < n and lines[i].startswith("@@ "):
            m = _HUNK.match(lines[i])
            if not m:
                break
            hunk_line = i + 1
            old_no, new_no = int(m.group(1)), int(m.group(3))
            old_left = int(m.group(2)) if m.group(2) is not None else 1
            new_left = int(m.group(4)) if m.group(4) is not None else 1
            added: list[Line] = []
            removed: list[Line] = []
            last = ""
            i += 1
            while i < n and (old_left > 0 or new_left > 0 or lines[i].startswith("\\")):
                ln = lines[i]
                body = ln[1:].removesuffix("\n")  # a CR stays: the rules report it
                if ln.startswith("\\"):
                    if last in ("+", " "):
                        lacks_newline = True
                elif ln.startswith("+"):
                    added.append(Line(new_no, body, i + 1))
                    last_added = i + 1
                    new_no += 1
                    new_left -= 1
                    last = "+"
                elif ln.startswith("-"):
                    removed.append(Line(old_no, body, i + 1))
                    old_no += 1
                    old_left -= 1
                    last = "-"
                else:  # context (an empty line is a context line whose space was stripped)
                    old_no += 1
                    new_no += 1
                    old_left -= 1
                    new_left -= 1
                    last = " "
                i += 1
            hunks.append(Hunk(int(m.group(1)), int(m.group(3)), tuple(added), tuple(removed), hunk_line))
        # binary patches and anything else up to the next file belong to this file
        while i < n and not lines[i].startswith("diff --git "):
            i += 1
        files.append(FileDiff(old_path, new_path, start, header_end, i, tuple(hunks), lacks_newline, last_added))
    return Mail(lines, diff_start, tuple(files))

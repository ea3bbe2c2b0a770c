"""What leaves the machine is clean: the one checker of its text, and the cleaners that make text so.

One checker for PR packages, committed evidence and docs.

Clean means: no absolute path of the machine that wrote it, no `.patchset/` path (our git-ignored
state folder), no `Patchset-` trailer name (our internal metadata), no Python repr of a record
(`['a']`, `{'k': 1}`, `PosixPath(...)`, `None` in a table cell), and every Markdown table valid
GitHub Markdown (a header row, a separator row, the same number of cells in every row).
A patch mail's diff and a range-diff are upstream's code, and JSON's brackets are JSON: only their
paths and names are checked there, not their brackets.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

# an absolute path of two or more parts, not part of a URL, a relative path or a word
_ABS_PATH = re.compile(r"(?<![\w/.:~\-\]>)])(/(?:[\w.+@-]+/)+[\w.+@-]*)")
# paths that name no machine: fine anywhere
_UNIVERSAL = ("/dev/null", "/dev/stdout", "/dev/stderr", "/usr/bin/env")
_STATE = re.compile(r"\.patchset[/\\]")
_TRAILER = re.compile(r"\bPatchset-[A-Z][\w-]*")
_REPRS = (
    re.compile(r"\[\s*'[^'\n]*'\s*[,\]]"),                  # ['a', ...]
    re.compile(r"\(\s*'[^'\n]*',\s*(?:'[^'\n]*'\s*)?[,)]"),  # ('a',) / ('a', 'b')
    re.compile(r"\{\s*'[\w-]+'\s*:"),                        # {'key': ...}
    re.compile(r"\b(?:Posix|Windows)?Path\('"),              # PosixPath('...')
    re.compile(r"<[\w.]+ object at 0x[0-9a-f]+>"),
    re.compile(r"(?:^|[\s|:=(,])(\[\]|\{\}|\(\))\s*(?=$|[|,])"),  # an empty list/dict/tuple as a value
    re.compile(r"\|\s*None\s*(?=\|)"),                      # None in a table cell
)
_SEPARATOR_CELL = re.compile(r"^\s*:?-{3,}:?\s*$")


@dataclass(frozen=True)
class Problem:
    file: str
    line: int
    what: str

    def __str__(self) -> str:
        return f"{self.file}:{self.line}: {self.what}"


# -- cleaners ------------------------------------------------------------------------------------
# `<anything>/.patchset/build/<folder>`: a build folder of ours -> `build` (what upstream's docs call it)
_STATE_BUILD = re.compile(r"(?:[^\s'\"`(=]*/)?\.patchset/build/[^/\s'\"`)]+")
# `<anything>/.patchset/<area>/<tree>/`: a source tree of ours (verify's worktree, the work repository)
_STATE_TREE = re.compile(r"(?:[^\s'\"`(=]*/)?\.patchset/(?:verify|work|worktrees|replay)/[^/\s'\"`)]+/")
_STATE_ANY = re.compile(r"(?:[^\s'\"`(=]*/)?\.patchset/(?:[^/\s'\"`)]+/)*")


def relative(text: str, roots: Iterable[Path] = ()) -> str:
    """`text` with the paths of this machine made relative to the tree they name: a file of one of
    our trees (`/tmp/x/.patchset/verify/src/tests/a.cpp`) or under a given root becomes
    `tests/a.cpp`, our build folder `build`, any other absolute path its file name."""
    text = _STATE_BUILD.sub("build", text)
    text = _STATE_TREE.sub("", text)
    text = _STATE_ANY.sub("", text)
    for root in sorted((str(r).rstrip("/") + "/" for r in roots), key=len, reverse=True):
        if root != "/":
            text = text.replace(root, "")

    def _short(m: re.Match[str]) -> str:
        path = m.group(1)
        if path in _UNIVERSAL:
            return path
        return os.path.basename(path.rstrip("/")) or path

    return _ABS_PATH.sub(_short, text)


# "(Patchset-Hunk FILE:main())" at the end of a reason: our trailer, nobody else's business
_TRAILER_NOTE = re.compile(r"\s*\(Patchset-[\w-]+\b.*\)\s*$")


def drop_trailer_notes(text: str) -> str:
    """`text` without a closing note that names one of our trailers."""
    return _TRAILER_NOTE.sub("", text)


def cell(text: str, limit: int = 0) -> str:
    """`text` as one Markdown table cell: one line, pipes escaped, at most `limit` characters."""
    one = re.sub(r"\s+", " ", text).strip()
    if limit and len(one) > limit:
        one = one[: limit - 3].rstrip() + "..."
    return re.sub(r"(?<!\\)\|", r"\\|", one)


def table(header: list[str], rows: list[list[str]]) -> list[str]:
    """A valid GitHub Markdown table (every cell made one line with its pipes escaped)."""
    out = ["| " + " | ".join(cell(h) for h in header) + " |", "|" + "|".join(" --- " for _ in header) + "|"]
    for r in rows:
        cells = [cell(c) for c in r] + [""] * (len(header) - len(r))
        out.append("| " + " | ".join(cells[: len(header)]) + " |")
    return out


# -- the checker ---------------------------------------------------------------------------------
def _cells(row: str) -> list[str]:
    """The cells of a Markdown table row (escaped pipes are not separators)."""
    body = row.strip()
    body = body.removeprefix("|")
    if body.endswith("|") and not body.endswith("\\|"):
        body = body[:-1]
    return re.split(r"(?<!\\)\|", body)


def _tables(lines: list[str]) -> list[tuple[int, list[str]]]:
    """(first line number, rows) of each run of table rows outside code fences."""
    found: list[tuple[int, list[str]]] = []
    fence = False
    current: list[str] = []
    start = 0
    for n, line in enumerate([*lines, ""], 1):
        stripped = line.strip()
        if stripped.startswith("```"):
            fence = not fence
        is_row = not fence and stripped.startswith("|")
        if is_row:
            if not current:
                start = n
            current.append(stripped)
        elif current:
            found.append((start, current))
            current = []
    return found


def table_problems(name: str, text: str) -> list[Problem]:
    out: list[Problem] = []
    for start, rows in _tables(text.splitlines()):
        width = len(_cells(rows[0]))
        if len(rows) < 2 or not all(_SEPARATOR_CELL.match(c) for c in _cells(rows[1])):
            out.append(Problem(name, start + 1 if len(rows) > 1 else start,
                               "Markdown table without a separator row (| --- |) under its header"))
            continue
        for i, row in enumerate(rows[1:], 1):
            if len(_cells(row)) != width:
                out.append(Problem(name, start + i, f"Markdown table row with {len(_cells(row))} cells, "
                                                    f"its header has {width}"))
    return out


def _code_lines(name: str, lines: list[str]) -> set[int]:
    """Line numbers (1-based) that hold upstream's code: a mail's diff, a range-diff's body."""
    base = os.path.basename(name)
    if base.startswith("range-diff"):
        return set(range(1, len(lines) + 1))
    if base.endswith(".patch"):
        first = next((i for i, ln in enumerate(lines) if ln.startswith("diff --git ")), len(lines))
        return {i + 1 for i in range(first, len(lines)) if lines[i][:1] in ("+", "-", " ", "")
                and not lines[i].startswith(("+++ ", "--- "))}
    return set()


def problems(name: str, text: str) -> list[Problem]:
    """Everything unclean in one file's text, one problem per line and kind."""
    lines = text.splitlines()
    code = _code_lines(name, lines)
    out: list[Problem] = []
    for n, line in enumerate(lines, 1):
        if _STATE.search(line):
            out.append(Problem(name, n, "a path into the state folder .patchset/"))
        paths = [m.group(1) for m in _ABS_PATH.finditer(line) if m.group(1) not in _UNIVERSAL]
        if paths:
            out.append(Problem(name, n, f"an absolute local path: {paths[0]}"))
        m = _TRAILER.search(line)
        if m:
            out.append(Problem(name, n, f"an internal trailer name: {m.group(0)}"))
        if n not in code and not name.endswith(".json"):  # JSON's [] and {} are JSON
            hit = next((r.search(line) for r in _REPRS if r.search(line)), None)
            if hit:
                out.append(Problem(name, n, f"a Python repr: {hit.group(0).strip()}"))
    if name.endswith(".md"):
        out += table_problems(name, text)
    return sorted(out, key=lambda p: p.line)


def check_tree(folder: Path, relative_to: Path | None = None) -> list[Problem]:
    """The problems of every text file under `folder`, named relative to `relative_to` (default
    `folder`)."""
    base = relative_to or folder
    out: list[Problem] = []
    for f in sorted(p for p in folder.rglob("*") if p.is_file()):
        try:
            text = f.read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError):
            continue
        out += problems(f.relative_to(base).as_posix(), text)
    return out

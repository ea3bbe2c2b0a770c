"""`upstream/hold`: upstream commits and tags known to be bad, which no pin may name.

One entry a line: a commit id (7 to 40 hex digits) or a tag, then why; a line starting with `#` is a comment.
The fork's scheduled bump (`.github/workflows/bump.yml`) skips held releases, and `patchset pin`
refuses to write a pin for one.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from builder.errors import InputError
from builder.upstream.pin import Pin


@dataclass(frozen=True)
class Hold:
    ref: str
    """A commit id (or its first 7+ hex digits) or a tag."""
    reason: str
    line: int


_ENTRY = re.compile(r"^(\S+)\s+(\S.*)$")


def load_holds(path: Path) -> list[Hold]:
    """The entries of a hold file ([] when there is none); InputError naming the line of a bad one."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return []
    holds = []
    for n, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):  # a reason may cite an issue: `#` only starts a comment line
            continue
        m = _ENTRY.match(line)
        if not m:
            raise InputError(f"{path}:{n}: expected '<commit or tag> <reason>'")
        holds.append(Hold(m.group(1), m.group(2).strip(), n))
    return holds


def held(holds: list[Hold], pin: Pin) -> Hold | None:
    """The entry that holds `pin`'s commit or tag, if any."""
    for h in holds:
        if (re.fullmatch(r"[0-9a-f]{7,40}", h.ref) and pin.commit.startswith(h.ref)) or (pin.tag and h.ref == pin.tag):
            return h
    return None

"""A llama.cpp-shaped mail rewritten for the standalone ggml repository.

The mapping is data (`data/ggml-layout.toml`), applied to the paths of diff headers only, never
to hunk bodies or the message. A file that has no place in ggml is refused, or dropped when the
caller asks for it; a mail left with no file is an error.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from functools import cache
from importlib import resources

from builder.deliver import diffparse
from builder.errors import InputError

LAYOUTS = ("llama.cpp", "ggml")


@cache
def ggml_table() -> dict:
    text = resources.files("builder.deliver").joinpath("data/ggml-layout.toml").read_text(encoding="utf-8")
    return tomllib.loads(text)


def map_path(path: str) -> str | None:
    """The ggml path of a llama.cpp path, or None when the file has no place in ggml."""
    for entry in ggml_table()["map"]:
        src, dst = entry["from"], entry["to"]
        if src.endswith("/") and path.startswith(src):
            return dst + path[len(src):]
        if path == src:
            return dst
    return None


def is_llama_only(path: str) -> bool:
    return any(path == p or (p.endswith("/") and path.startswith(p)) for p in ggml_table()["llama_only"])


@dataclass(frozen=True)
class LayoutResult:
    mail: str
    dropped: tuple[str, ...]
    """llama.cpp paths whose diffs were left out (`--drop-non-ggml`)."""


def _rewrite_header_line(line: str, old: str | None, new: str | None) -> str:
    """Replace the paths in one header line; the line's other bytes stay as they are."""
    end = "\n" if line.endswith("\n") else ""
    body = line.removesuffix("\n")
    if body.startswith("diff --git "):
        a, b = body[len("diff --git "):].split(" ", 1)
        a = "a/" + (map_path(a[2:]) or a[2:]) if a.startswith("a/") else a
        b = "b/" + (map_path(b[2:]) or b[2:]) if b.startswith("b/") else b
        return f"diff --git {a} {b}{end}"
    for prefix, side in (("--- a/", old), ("+++ b/", new), ("rename from ", old), ("rename to ", new),
                         ("copy from ", old), ("copy to ", new)):
        if body.startswith(prefix) and side is not None:
            rest = body[len(prefix):]
            path, tab, tail = rest.partition("\t")
            mapped = map_path(path)
            return f"{prefix}{mapped or path}{tab}{tail}{end}"
    return line


def to_ggml(mail_text: str, name: str, drop_non_ggml: bool = False) -> LayoutResult:
    """Rewrite `mail_text` (the mail of patch `name`) for ggml-org/ggml."""
    mail = diffparse.parse(mail_text)
    foreign = [f for f in mail.files if any(p is not None and map_path(p) is None for p in (f.old_path, f.new_path))]
    if foreign and not drop_non_ggml:
        listing = ", ".join(f"{f.path} ({'llama.cpp only' if is_llama_only(f.path) else 'not in ggml'})"
                            for f in foreign)
        raise InputError(f"{name}: cannot go to ggml as it is: it changes {listing}; "
                         "use --drop-non-ggml to leave those out")
    if len(foreign) == len(mail.files):
        raise InputError(f"{name}: nothing is left for ggml: every file it changes is llama.cpp's "
                         f"({', '.join(f.path for f in foreign)})")
    out = list(mail.lines[: mail.diff_start])
    for f in mail.files:
        if f in foreign:
            continue
        out += [_rewrite_header_line(ln, f.old_path, f.new_path) for ln in mail.lines[f.start: f.header_end]]
        out += mail.lines[f.header_end: f.end]
    return LayoutResult("".join(out), tuple(f.path for f in foreign))

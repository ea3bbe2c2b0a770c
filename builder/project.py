"""Where things live: the project's committed files and the git-ignored folders beside them."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from builder.errors import InputError

DEFAULT_PIN = Path("upstream") / "llama.cpp.toml"


@dataclass(frozen=True)
class Project:
    """The paths one patchset invocation works with."""

    root: Path
    """The project checkout: holds `patches/`, `upstream/` and the state folder."""
    pin_file: Path
    """The pin in use (default `upstream/llama.cpp.toml`)."""
    state_dir: Path
    """Git-ignored working state: work repository, build folders, evidence (default `.patchset/`)."""
    cache_dir: Path
    """Downloads and the cached upstream repository, shared between projects (`$PATCHSET_CACHE`)."""

    @property
    def patches_dir(self) -> Path:
        return self.root / "patches"

    @property
    def series_file(self) -> Path:
        return self.patches_dir / "series"

    @property
    def work_repo(self) -> Path:
        return self.state_dir / "work" / "llama.cpp"

    @property
    def build_root(self) -> Path:
        return self.state_dir / "build"

    @property
    def evidence_dir(self) -> Path:
        return self.state_dir / "evidence"

    @property
    def lock_file(self) -> Path:
        return self.state_dir / "lock"


def default_cache_dir() -> Path:
    """`$PATCHSET_CACHE`, else the user cache directory (XDG), else ~/.cache."""
    if env := os.environ.get("PATCHSET_CACHE"):
        return Path(env)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "patchset"


def find_root(start: Path) -> Path:
    """The nearest folder at or above `start` that holds `patches/series` or `upstream/`."""
    for d in (start, *start.parents):
        if (d / "patches" / "series").is_file() or (d / DEFAULT_PIN).is_file():
            return d
    raise InputError(f"{start}: not inside a patchset project (no patches/series or {DEFAULT_PIN} above it)")


def load_project(
    root: Path | None = None,
    pin_file: Path | None = None,
    state_dir: Path | None = None,
    cache_dir: Path | None = None,
) -> Project:
    """Resolve the project's paths from explicit arguments, environment and defaults."""
    root = (root or find_root(Path.cwd())).resolve()
    if pin_file is None:
        pin_file = root / DEFAULT_PIN
    if state_dir is None:
        state_dir = Path(os.environ["PATCHSET_STATE"]) if "PATCHSET_STATE" in os.environ else root / ".patchset"
    return Project(
        root=root,
        pin_file=pin_file.resolve(),
        state_dir=state_dir.resolve(),
        cache_dir=(cache_dir or default_cache_dir()).resolve(),
    )

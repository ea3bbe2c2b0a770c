"""Where things live: the project's committed files and the git-ignored folders beside them."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, replace
from pathlib import Path

from builder.errors import InputError

DEFAULT_PIN = Path("upstream") / "llama.cpp.toml"
_SERIES_NAME = re.compile(r"^[a-z0-9][a-z0-9-]*$")


def series_paths(root: Path, name: str) -> tuple[Path, Path]:
    """(the patches folder, the pin file) of a series: `patches/` and `upstream/llama.cpp.toml` for the
    main one (name ""), `patches-NAME/` and `upstream/NAME.toml` for a second one (e.g. `bindings`)."""
    if not name:
        return root / "patches", root / DEFAULT_PIN
    return root / f"patches-{name}", root / "upstream" / f"{name}.toml"


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
    series_name: str = ""
    """Which series: "" for the main one (`patches/` on llama.cpp), else a second series of the same
    project on its own upstream (`--series bindings`: `patches-bindings/` on llama-cpp-python)."""

    @property
    def patches_dir(self) -> Path:
        return series_paths(self.root, self.series_name)[0]

    @property
    def series_file(self) -> Path:
        return self.patches_dir / "series"

    @property
    def work_repo(self) -> Path:
        return self.state_dir / "work" / (self.series_name or "llama.cpp")

    @property
    def build_root(self) -> Path:
        return self.state_dir / "build" / self.series_name if self.series_name else self.state_dir / "build"

    @property
    def platform_cache(self) -> Path:
        """CMake's compiler detection, kept for new build folders (builder/compile/platformseed.py):
        `$PATCHSET_PLATFORM_CACHE`, else `cmake-platform` in the cache."""
        env = os.environ.get("PATCHSET_PLATFORM_CACHE")
        return Path(env) if env else self.cache_dir / "cmake-platform"

    @property
    def verify_dir(self) -> Path:
        """verify's worktree (`src`) and logs: one per series, since each series' trees are commits of its
        own work repository."""
        return self.state_dir / f"verify-{self.series_name}" if self.series_name else self.state_dir / "verify"

    @property
    def evidence_dir(self) -> Path:
        return self.state_dir / f"evidence-{self.series_name}" if self.series_name else self.state_dir / "evidence"

    def series(self, name: str) -> Project:
        """The same project addressing another of its series ("" the main one)."""
        if name and not _SERIES_NAME.match(name):
            raise InputError(f"'{name}' is not a series name (lower-case letters, digits and '-')")
        return replace(self, series_name=name, pin_file=series_paths(self.root, name)[1].resolve())

    def second_series(self) -> list[str]:
        """The names of the project's other series: every `patches-NAME/series` beside `patches/`."""
        return sorted(p.parent.name[len("patches-"):] for p in self.root.glob("patches-*/series")
                      if _SERIES_NAME.match(p.parent.name[len("patches-"):]))

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
    series: str = "",
) -> Project:
    """Resolve the project's paths from explicit arguments, environment and defaults.

    `series`: a second series of the project by name (`patches-NAME/series`, pin `upstream/NAME.toml`)."""
    root = (root or find_root(Path.cwd())).resolve()
    if series and not _SERIES_NAME.match(series):
        raise InputError(f"'{series}' is not a series name (lower-case letters, digits and '-')")
    patches_dir, series_pin = series_paths(root, series)
    if series and not (patches_dir / "series").is_file():
        raise InputError(f"{patches_dir / 'series'}: no series '{series}' in {root} "
                         f"(a second series has its own patches-{series}/series and pin upstream/{series}.toml)")
    if pin_file is None:
        pin_file = series_pin
    if state_dir is None:
        state_dir = Path(os.environ["PATCHSET_STATE"]) if "PATCHSET_STATE" in os.environ else root / ".patchset"
    return Project(
        root=root,
        pin_file=pin_file.resolve(),
        state_dir=state_dir.resolve(),
        cache_dir=(cache_dir or default_cache_dir()).resolve(),
        series_name=series,
    )

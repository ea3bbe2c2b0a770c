"""Shared helpers for the benchmark scripts: a throwaway project copy and a timer."""

from __future__ import annotations

import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

ROOT = Path(__file__).resolve().parent.parent
T = TypeVar("T")


def cpu_now() -> float:
    """CPU seconds (user + system) of this process and of the children it has waited for."""
    total = 0.0
    for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN):
        r = resource.getrusage(who)
        total += r.ru_utime + r.ru_stime
    return total


def timed(fn: Callable[[], T]) -> tuple[float, T]:
    start = time.perf_counter()
    value = fn()
    return time.perf_counter() - start, value


def scratch_project(base: Path) -> Path:
    """A copy of this project's committed pin and series, with its own state folder."""
    dest = base / "project"
    shutil.copytree(ROOT / "upstream", dest / "upstream")
    shutil.copytree(ROOT / "patches", dest / "patches")
    return dest


def applied_project(base: Path, cache: str | None):  # -> builder.project.Project
    """`scratch_project` in `base`, loaded with its own state folder and the series applied on the pin
    (fetched from `cache`, a PATCHSET_CACHE, else into a temporary one in `base`)."""
    sys.path.insert(0, str(ROOT))
    from builder.project import load_project  # noqa: PLC0415 (the scripts put the project on sys.path first)
    from builder.series.apply import apply  # noqa: PLC0415

    root = scratch_project(base)
    project = load_project(root=root, state_dir=root / ".patchset", cache_dir=Path(cache) if cache else base / "cache")
    apply(project)
    return project


def patchset(project: Path, *args: str, env: dict[str, str] | None = None) -> float:
    """Run the CLI as a user would (a new process each time); returns the wall time."""
    full_env = {**os.environ, **(env or {})}
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "builder.cli", "--project", str(project), *args], check=True,
                   env=full_env, stdout=subprocess.DEVNULL)
    return time.perf_counter() - start


def tempdir(prefix: str) -> Path:
    return Path(tempfile.mkdtemp(prefix=prefix))


def row(label: str, seconds: float, target: str = "") -> str:
    return f"{label:<44} {seconds:8.2f} s   {target}"

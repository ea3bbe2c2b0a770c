"""What pyproject.toml promises holds for the code: the oldest Python it admits runs it."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _min_python() -> tuple[int, ...]:
    spec = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["requires-python"]
    m = re.fullmatch(r">=\s*(\d+(?:\.\d+)*)", spec.strip())
    assert m, f"requires-python '{spec}': expected a plain lower bound"
    return tuple(int(x) for x in m.group(1).split("."))


def test_requires_python_admits_no_version_without_the_tar_filter() -> None:
    # tarfile's extraction filters (filter="data", PEP 706) arrived in 3.11.4; before it,
    # extract() fails with a TypeError on every archive
    uses_filter = any('filter="data"' in p.read_text() for p in (ROOT / "builder").rglob("*.py"))
    assert uses_filter
    assert _min_python() >= (3, 11, 4)

"""The wheel carries every file of the package that is not Python: `pip install .` (the README's way)
installs no source tree, so a CMake file, C source or template the package-data patterns miss is absent
at run time (the minimal project's preload library and metal-linux's sources once were)."""

from __future__ import annotations

import glob
import subprocess
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_every_file_the_package_reads_is_in_its_package_data() -> None:
    patterns = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]["builder"]
    # what setuptools takes: each pattern globbed in the package folder
    shipped = {p for pattern in patterns for p in glob.glob(pattern, root_dir=ROOT / "builder")}
    tracked = subprocess.run(["git", "ls-files", "builder"], cwd=ROOT, capture_output=True, text=True,
                             check=True).stdout.splitlines()
    assert tracked
    missing = [f for f in tracked if not f.endswith(".py") and f.removeprefix("builder/") not in shipped]
    assert not missing, f"not in [tool.setuptools.package-data] of pyproject.toml: {missing}"

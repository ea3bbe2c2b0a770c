"""`patchset init`: a new project for another fork or pin: the pin (written by the pin writer
from the upstream's own bytes), an empty series, the CI workflow and the ignore file."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from builder import __version__
from builder.errors import InputError
from builder.fsutil import atomic_write_text
from builder.progress import ProgressSink
from builder.project import DEFAULT_PIN
from builder.series.refresh import write_series
from builder.upstream.pin import dump_pin
from builder.upstream.pinwrite import PinRequest, make_pin

WORKFLOW = """\
# The series on its pin, on every push: lint, apply, patches/ as refresh writes them, build, test and prove
# every patch on the CPU (`patchset all`). Written by `patchset init`; PATCHSET_REQUIREMENT says where
# this project's patchset comes from.
name: patchset

on:
  push:
  pull_request:
  workflow_dispatch:

permissions:
  contents: read

env:
  PATCHSET_REQUIREMENT: "patchset==%(version)s"
  PATCHSET_CACHE: ${{ github.workspace }}/.ci-cache/pin

jobs:
  series:
    runs-on: ubuntu-24.04
    timeout-minutes: 120
    steps:
      - uses: actions/checkout@v5
      - uses: actions/setup-python@v6
        with:
          python-version: "3.11"
      - name: pinned upstream (verified again on use)
        uses: actions/cache@v5
        with:
          path: .ci-cache/pin
          key: pin-${{ hashFiles('upstream/llama.cpp.toml') }}
      - name: install
        run: python -m pip install "$PATCHSET_REQUIREMENT"
      - name: the series is well-formed
        run: patchset check --strict
      - name: the series applies on the pin, patches/ is what refresh writes
        run: |
          patchset apply
          patchset refresh --check
      - name: build, test and prove every patch
        run: patchset all --backend cpu
"""

GITIGNORE = ".patchset/\n"


@dataclass(frozen=True)
class InitResult:
    root: Path
    written: tuple[Path, ...]
    commit: str
    tag: str


def init(root: Path, req: PinRequest, cache_dir: Path, progress: ProgressSink | None = None) -> InitResult:
    """Start a project in `root` (made if missing); refuses a folder that already holds one."""
    pin_file = root / DEFAULT_PIN
    series = root / "patches" / "series"
    for f in (pin_file, series):
        if f.exists():
            raise InputError(f"{f}: {root} already holds a patchset project; nothing written")
    result = make_pin(cache_dir, req, progress)
    written = []
    atomic_write_text(pin_file, dump_pin(result.pin))
    written.append(pin_file)
    series.parent.mkdir(parents=True, exist_ok=True)
    write_series(series.parent, [])
    written.append(series)
    workflow = root / ".github" / "workflows" / "patchset.yml"
    if not workflow.exists():
        atomic_write_text(workflow, WORKFLOW % {"version": __version__})
        written.append(workflow)
    ignore = root / ".gitignore"
    text = ignore.read_text(encoding="utf-8") if ignore.is_file() else ""
    if ".patchset/" not in text.split():
        atomic_write_text(ignore, text + ("" if not text or text.endswith("\n") else "\n") + GITIGNORE)
        written.append(ignore)
    return InitResult(root, tuple(written), result.pin.commit, result.pin.tag or "")

"""atomic_write: whole files only, and the mode a plain write would give."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from builder.fsutil import atomic_write, atomic_write_text


def _mode(p: Path) -> int:
    return stat.S_IMODE(p.stat().st_mode)


def test_new_file_gets_the_umask_mode_not_mkstemps_0600(tmp_path: Path) -> None:
    old = os.umask(0o022)
    try:
        atomic_write_text(tmp_path / "out" / "provenance.json", "{}\n")
    finally:
        os.umask(old)
    f = tmp_path / "out" / "provenance.json"
    assert f.read_text() == "{}\n"
    assert _mode(f) == 0o644
    assert [p.name for p in f.parent.iterdir()] == ["provenance.json"]


def test_replaced_file_keeps_its_mode(tmp_path: Path) -> None:
    f = tmp_path / "run.sh"
    f.write_text("old\n")
    f.chmod(0o755)
    atomic_write(f, b"new\n")
    assert f.read_bytes() == b"new\n"
    assert _mode(f) == 0o755

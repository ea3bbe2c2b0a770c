"""The subprocess runner's streamed mode."""

from __future__ import annotations

import sys
import time
from pathlib import Path

from builder import proc


def test_stream_timeout_kills_a_program_that_hangs_with_its_output_open(tmp_path: Path) -> None:
    # a test program that deadlocks keeps its stdout open: the timeout must not wait for it to close
    hang = "print('started', flush=True); import time; time.sleep(60)"
    start = time.monotonic()
    r = proc.stream([sys.executable, "-c", hang], log_file=tmp_path / "log", timeout=2)
    assert time.monotonic() - start < 30
    assert r.returncode < 0 and "started" in r.stdout
    assert (tmp_path / "log").read_text().endswith(f"# exit {r.returncode}\n")


def test_stream_without_timeout_waits_for_the_end(tmp_path: Path) -> None:
    r = proc.stream([sys.executable, "-c", "import time; time.sleep(0.5); print('done')"], log_file=tmp_path / "log",
                    timeout=30)
    assert r.returncode == 0 and r.stdout == "done\n"

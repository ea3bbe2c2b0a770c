"""Progress off a terminal (CI logs, a pipe): ninja's counts as lines at each tenth and the last, and a
line while a step runs with nothing to say; on a terminal rich draws a bar instead (not tested here)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from test_build import make_tree, spec

from builder.compile.cmakebuild import build
from builder.console import CliProgress


def test_counts_off_a_terminal_are_printed_at_each_tenth_and_always_the_last(
        capsys: pytest.CaptureFixture[str]) -> None:
    p = CliProgress(plain_every_s=3600, heartbeat_s=3600)
    p.begin("building cpu/minimal", 97)
    for done in range(1, 98):
        p.update(done, 97)
    p.end()
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "building cpu/minimal ..."
    counts = [int(m.group(1)) for ln in lines if (m := re.fullmatch(r"  building cpu/minimal: \[(\d+)/97\]", ln))]
    # the first count, the first past each tenth, and the last
    assert counts == [1, 10, 20, 30, 39, 49, 59, 68, 78, 88, 97], lines


def test_a_build_off_a_terminal_prints_ninjas_counts_and_says_a_quiet_step_still_runs(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    tree = make_tree(tmp_path / "tree")
    # a heartbeat of 50 ms: CMake's configure says nothing to the progress for longer than that
    r = build(spec(tree, tmp_path / "build"), CliProgress(heartbeat_s=0.05))
    assert r.ok and r.steps
    out = capsys.readouterr().out
    counts = re.findall(r"^  building cpu/minimal: \[(\d+)/(\d+)\]$", out, re.M)
    assert counts and counts[-1] == (str(r.steps), str(r.steps)), out
    assert re.search(r"^  configuring cpu/minimal: still running, \d+ s$", out, re.M), out

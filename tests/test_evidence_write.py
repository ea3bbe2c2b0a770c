"""The evidence's two files are never of two runs (issue 47 point 9): builder/prove/evidence.py writes
what it says it writes, in that order."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from builder.prove import evidence as ev


def _record(outcome: str, **extra: object) -> ev.Evidence:
    return ev.Evidence("0001-x.patch", "x : y", "cpu", outcome, f"the {outcome} run", {"commit": "abc"}, (), "key",
                       created=f"2026-12-04T00:00:0{len(outcome) % 10}Z", **extra)  # type: ignore[arg-type]


def test_a_record_that_cannot_be_written_leaves_the_earlier_pair(tmp_path: Path) -> None:
    jpath, mpath = ev.write(tmp_path, _record("proven"))
    earlier = (jpath.read_bytes(), mpath.read_bytes())
    # a value JSON cannot hold: the write fails after the Markdown was made
    broken = _record("not proven", holds={"why": "x", "checked": object()})
    with pytest.raises(TypeError):
        ev.write(tmp_path, broken)
    assert (jpath.read_bytes(), mpath.read_bytes()) == earlier


def test_the_pair_is_of_one_run(tmp_path: Path) -> None:
    ev.write(tmp_path, _record("proven"))
    jpath, mpath = ev.write(tmp_path, _record("not proven"))
    assert json.loads(jpath.read_text())["outcome"] == "not proven"
    assert mpath.read_text().startswith("# 0001-x.patch on cpu: not proven")

"""One jobserver for every ninja of a run: ninja really takes its jobs from the pool.

A synthetic build.ninja whose every edge is a wrapper that records its start and end; two ninjas
run at once on one pool of 3 slots never run more than 3 edges together, and two ninjas with a
`-j` of their own (no pool) run more: the count can tell them apart.
"""

from __future__ import annotations

import threading
from pathlib import Path

from builder import proc
from builder.compile.jobserver import Jobserver
from builder.compile.toolchain import find_tool

EDGES = 8


def _tree(root: Path, times: Path) -> None:
    wrapper = root / "cc.sh"
    wrapper.write_text(f'#!/bin/sh\necho "s $(date +%s.%N)" >> {times}\nsleep 0.4\n'
                       f'echo "e $(date +%s.%N)" >> {times}\ntouch "$1"\n')
    wrapper.chmod(0o755)
    rules = [f"rule cc\n  command = {wrapper} $out\n"] + [f"build o{i}: cc\n" for i in range(EDGES)]
    root.mkdir(exist_ok=True)
    (root / "build.ninja").write_text("".join(rules))


def _most_at_once(times: Path) -> int:
    marks = (line.split() for line in times.read_text().splitlines())
    events = sorted((float(t), 1 if k == "s" else -1) for k, t in marks)
    now = most = 0
    for _, step in events:
        now += step
        most = max(most, now)
    return most


def _two_ninjas(tmp_path: Path, env: dict[str, str] | None, jobs: list[str]) -> int:
    times = tmp_path / "times"
    ninja = find_tool("ninja").path
    threads = []
    for name in ("a", "b"):
        tree = tmp_path / name
        tree.mkdir()
        _tree(tree, times)
        threads.append(threading.Thread(target=proc.stream, args=([ninja, "-C", str(tree), *jobs],),
                                        kwargs={"log_file": tmp_path / f"{name}.log", "env": env}))
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert all((tmp_path / n / f"o{i}").exists() for n in "ab" for i in range(EDGES))
    return _most_at_once(times)


def test_ninjas_on_one_pool_never_exceed_it(tmp_path: Path) -> None:
    with Jobserver(3) as pool:
        most = _two_ninjas(tmp_path, {"MAKEFLAGS": pool.makeflags}, [])
    # each ninja's implicit job plus the 2 tokens: 4 at most; and the pool is used (more than one each)
    assert 2 < most <= 4


def test_ninjas_with_a_slot_taken_by_the_lanes(tmp_path: Path) -> None:
    # the scheduler's lanes hold a slot each while their ninja runs: the ninja's implicit job is that slot
    with Jobserver(3) as pool, pool.slot(), pool.slot():
        most = _two_ninjas(tmp_path, {"MAKEFLAGS": pool.makeflags}, [])
    assert 2 <= most <= 3


def test_without_the_pool_they_oversubscribe(tmp_path: Path) -> None:
    # the control: the count above would see ninjas that ignore the pool
    assert _two_ninjas(tmp_path, None, ["-j3"]) > 3


def test_slots_block_until_one_is_given_back() -> None:
    with Jobserver(2) as pool:
        got: list[str] = []

        def third() -> None:
            with pool.slot():
                got.append("third")

        with pool.slot(), pool.slot():
            t = threading.Thread(target=third)
            t.start()
            t.join(0.3)
            assert got == []
        t.join(2)
        assert got == ["third"]


def test_test_programs_run_one_at_a_time() -> None:
    # a lane's test program (every core's threads) never runs beside another lane's
    with Jobserver(3) as pool:
        got: list[str] = []

        def other_lane() -> None:
            with pool.slot(), pool.alone():
                got.append("other")

        with pool.slot(), pool.alone():
            t = threading.Thread(target=other_lane)
            t.start()
            t.join(0.3)
            assert got == []
        t.join(2)
        assert got == ["other"]

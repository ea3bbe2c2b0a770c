"""canary --build / --test: the first commit where each patch stops building, or its test stops passing
with its fix, while its text still applies; on the calc tree (builds in seconds), by bisection over
that predicate."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from helpers import Proj, Upstream, json_document

from builder.cli import main
from builder.prove.canary_check import checker
from builder.prove.treebuild import lane_build_dir, lane_src
from builder.series.canary import KIND_BUILD, KIND_TEST, CanaryReport, canary
from tests.test_bump import CALC_C, CALC_H, NAMES, make_mini

COMMITS = 12
TEST_BREAK, BUILD_BREAK = 4, 8
"""The commits (1-based, after the pin) where upstream makes calc_one return 2 (patch 2's test, which
multiplies by it, fails with the fix; every text still applies), and drops calc_sub's declaration from
calc.h (patch 1's test program no longer compiles; calc.c, which the patch changes, is untouched)."""

HEADER = CALC_H.replace("int calc_sub(int a, int b);\n",
                        "int calc_sub(int a, int b);\nint calc_mul(int a, int b);\nint calc_one(void);\n")


@pytest.fixture
def history(tmp_path: Path, up: Upstream, cache_dir: Path) -> tuple[Proj, list[str]]:
    mini = make_mini(tmp_path, up, cache_dir)
    ids = []
    calc, header = CALC_C, HEADER
    for i in range(1, COMMITS + 1):
        files: dict[str, str | bytes | None] = {f"notes/n{i}.txt": f"note {i}\n"}
        if i == TEST_BREAK:
            calc = calc.replace("int calc_one(void) { return 1; }", "int calc_one(void) { return 2; }")
            files["ggml/src/calc.c"] = calc
        elif i == BUILD_BREAK:
            header = header.replace("int calc_sub(int a, int b);\n", "")
            files["ggml/include/calc.h"] = header
        ids.append(mini.upstream.advance(files, f"upstream change {i}\n"))
    return mini, ids


def test_canary_build_and_test_find_the_first_commit_that_breaks_each_patch_beyond_its_text(
        history: tuple[Proj, list[str]], capsys: pytest.CaptureFixture[str]) -> None:
    mini, ids = history
    parent = dict(zip(ids, [mini.upstream.commit, *ids], strict=False))

    # text checks see nothing: every patch applies everywhere
    assert canary(mini.project, ids[-1]).broken == ()

    built = canary(mini.project, ids[-1], check=checker(mini.project, "cpu", test=False, jobs=2), checked="build")
    assert [(p.patch, p.broken_at.id if p.broken_at else None, p.kind) for p in built.patches] == [
        (NAMES[0], ids[BUILD_BREAK - 1], KIND_BUILD), (NAMES[1], None, "")]
    assert "tests/test-sub.cpp" in built.patches[0].why
    assert built.newest_whole == ids[BUILD_BREAK - 2]

    capsys.readouterr()
    assert main(["--project", str(mini.root), "canary", "--range", f"..{ids[-1]}", "--test", "-j", "2",
                 "--json"]) == 3
    data = json_document(capsys.readouterr().out)
    got = [(p["patch"], p["broken_at"]["commit"], p["class"]) for p in data["patches"]]
    assert got == [(NAMES[0], ids[BUILD_BREAK - 1], KIND_BUILD), (NAMES[1], ids[TEST_BREAK - 1], KIND_TEST)]
    assert "test-mul" in data["patches"][1]["why"]
    assert data["newest_whole"]["commit"] == ids[TEST_BREAK - 2]
    assert data["checked"] == "test"
    # bisection over the predicate: within the bound per patch, the parent of each commit found tried
    # and surviving, and far fewer trees built than a scan's commits x patches
    bound = 2 * math.ceil(math.log2(COMMITS))
    for p in data["patches"]:
        assert p["tries"] <= bound
        assert p["last_good"] == parent[p["broken_at"]["commit"]]
    assert data["builds"] < COMMITS * len(NAMES) / 2


@pytest.mark.parametrize("lanes", [2, 3])
def test_canary_in_lanes_finds_what_one_lane_finds(history: tuple[Proj, list[str]], lanes: int) -> None:
    """A bisection round tries as many commits as the check has lanes, each tree in a lane's own worktree and
    build folder on one jobserver: the same commits are found as one commit a round finds (issue 44)."""
    mini, ids = history

    def found(report: CanaryReport) -> list[tuple[str, str | None, str, str]]:
        return [(p.patch, p.broken_at.id if p.broken_at else None, p.kind, p.last_good) for p in report.patches]

    one = canary(mini.project, ids[-1], check=checker(mini.project, "cpu", test=True, jobs=2, lanes=1),
                 checked="test")
    assert not lane_src(mini.project, 1).exists()
    check = checker(mini.project, "cpu", test=True, jobs=2 * lanes, lanes=lanes)
    assert check.lanes == lanes
    many = canary(mini.project, ids[-1], check=check, checked="test")
    assert found(many) == found(one) == [(NAMES[0], ids[BUILD_BREAK - 1], KIND_BUILD, ids[BUILD_BREAK - 2]),
                                         (NAMES[1], ids[TEST_BREAK - 1], KIND_TEST, ids[TEST_BREAK - 2])]
    assert many.newest_whole == one.newest_whole == ids[TEST_BREAK - 2]
    # the later lanes built in folders of their own
    for lane in range(1, lanes):
        assert (lane_src(mini.project, lane) / "ggml").is_dir()
        assert lane_build_dir(mini.project, "cpu", lane).is_dir()

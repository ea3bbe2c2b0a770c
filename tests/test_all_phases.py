"""`patchset all`: on a machine without Metal, which backend proves a patch whose proof needs Metal
(the replay, where the patch declares it), read from real patches of this project's series; and the
schema of `all --json` that docs/all.md documents."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from builder.compile.toolchain import CcacheStats
from builder.orchestrate.phases import SCHEMA, AllReport, Phase
from builder.prove.backends_here import stand_in
from builder.series.load import load_series

PATCHES = Path(__file__).resolve().parent.parent / "patches"


def test_the_replay_stands_in_for_metal_where_the_patch_declares_it() -> None:
    series = load_series(PATCHES)
    # patches 1 and 5: Metal, the replay and metal-linux
    metal = [p for p in series.patches if p.meta.backends[:2] == ("metal", "metal-replay")]
    cpu = [p for p in series.patches if "cpu" in p.meta.backends]
    assert metal and cpu
    linux = ["cpu", "metal-replay"]
    for p in metal:
        assert stand_in(p, "cpu", linux) == "metal-replay", p.name
        # a Mac proves it on Metal itself; a machine without the replay cannot stand in
        assert stand_in(p, "cpu", ["cpu", "metal", "metal-replay"]) is None
        assert stand_in(p, "cpu", ["cpu"]) is None
        # asked for the replay itself, nothing stands in
        assert stand_in(p, "metal-replay", linux) is None
        # where metal-linux's toolchain is built, the tree's own Metal host code is the better stand-in
        assert stand_in(p, "cpu", [*linux, "metal-linux"]) == "metal-linux", p.name
    for p in cpu:
        # a cpu patch is proven on cpu; on the replay it is `needs`, with nothing to stand in
        assert stand_in(p, "cpu", linux) is None
        assert stand_in(p, "metal-replay", linux) is None


def test_a_metal_only_patch_has_no_stand_in() -> None:
    p = next(p for p in load_series(PATCHES).patches if "metal" in p.meta.backends)
    only_metal = dataclasses.replace(p, meta=dataclasses.replace(p.meta, backends=("metal",)))
    assert stand_in(only_metal, "cpu", ["cpu", "metal-replay"]) is None


def _documented(marker: str) -> set[str]:
    text = (PATCHES.parent / "docs" / "all.md").read_text()
    block = text.split(f"<!-- {marker} -->", 1)[1].split(f"<!-- /{marker} -->", 1)[0]
    return {line.split("`")[1] for line in block.splitlines() if line.startswith("| `")}


def test_the_json_schema_in_the_docs_is_the_one_written() -> None:
    phase = Phase("verify", 1.5, True, "why", CcacheStats(1, 2), patch="p", backend="cpu", outcome="proven",
                  evidence="e.md")
    report = AllReport("cpu", (phase,), 2.0, CcacheStats(1, 2))
    doc = report.to_json({"programs": []})
    assert doc["schema"] == SCHEMA
    assert set(doc) == _documented("all-json-keys")
    assert set(doc["phases"][0]) == _documented("all-json-phase-keys")
    assert doc["reused"] == {"phases": 1, "of": 1, "evidence": 1}
    assert doc["ccache"] == {"hits": 2, "misses": 4} and doc["verify_ccache"] == {"hits": 1, "misses": 2}

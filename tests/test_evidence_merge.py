"""`patchset evidence update --from` on top of evidence a local verify committed: a device or CI shard's run
of some patches keeps the committed records of the others while they hold (tests/test_evidence_cmd.py has
the one-patch cases)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from test_evidence_cmd import device_verify_output, evidence
from test_verify import project_dir, verified  # noqa: F401  (the fixtures: a series verify ran on)

from builder.deliver import committed
from builder.series.load import load_series


def test_a_shard_of_one_patch_keeps_what_a_local_run_committed_for_the_others(
        verified, tmp_path: Path) -> None:  # noqa: F811
    project = verified[0]
    root = tmp_path / "proj"
    for d in ("patches", "upstream"):
        shutil.copytree(project.root / d, root / d)
    shutil.copytree(project.evidence_dir, root / ".patchset" / "evidence")
    names = [p.name for p in load_series(root / "patches").patches]
    first = names[0].removesuffix(".patch")
    # this machine verified the patches after the first (`verify 2 3 ...`)
    proof = json.loads((root / ".patchset" / "evidence" / first / "cpu.json").read_text())
    shutil.rmtree(root / ".patchset" / "evidence" / first)
    assert evidence(root, "update")[0] == 0
    docs = root / "docs" / "evidence"
    local = json.loads((docs / "cpu" / "verify.json").read_text())["patches"]
    assert first not in local and len(local) >= 2, local
    # another machine (a CI shard, a clone without this one's .patchset/) proves the first, on these bytes
    shutil.rmtree(root / ".patchset")
    shard = device_verify_output(tmp_path / "shard", {first: proof}, patches=[
        {"name": n, "sha256": committed.sha256_file(root / "patches" / n)} for n in names])
    code, out = evidence(root, "update", "--from", str(shard))
    assert code == 0, out
    merged = json.loads((docs / "cpu" / "verify.json").read_text())["patches"]
    assert set(merged) == {first, *local}, set(local) - set(merged)
    entry = json.loads((docs / "MANIFEST.json").read_text())["files"]["cpu/verify.json"]
    assert sorted(entry["proves"]) == sorted(f"{s}.patch" for s in (first, *local))
    assert evidence(root, "check")[0] == 0

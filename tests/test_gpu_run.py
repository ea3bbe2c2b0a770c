"""tools/gpu/run.sh's verify step (issue 47 point 9): the evidence is copied as verify.json only from a
verify that finished. The script's own functions (`note`, `step`, `verify_step`) are cut out of it and run
by bash with a stand-in for patchset: one that finishes (exit 6, as on a machine without Metal) and one
that runs past the deadline."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import REPO_ROOT

SCRIPT = REPO_ROOT / "tools" / "gpu" / "run.sh"


def functions(text: str, *names: str) -> str:
    """The definitions of `names` in a bash script (from `name() {` to the `}` that starts a line)."""
    out = []
    for name in names:
        m = re.search(rf"^{name}\(\) \{{.*?^\}}\n", text, re.M | re.S)
        assert m, f"run.sh defines no {name}()"
        out.append(m.group(0))
    return "".join(out)


def run_verify_step(tmp_path: Path, patchset: str, deadline: int) -> tuple[int, Path, str]:
    root, out = tmp_path / "root", tmp_path / "out"
    (root / ".patchset" / "evidence" / "0001-x").mkdir(parents=True)
    (root / ".patchset" / "evidence" / "0001-x" / "cpu.json").write_text('{"outcome": "proven"}')
    out.mkdir()
    fake = tmp_path / "patchset"
    fake.write_text(f"#!/bin/sh\n{patchset}\n")
    fake.chmod(0o755)
    text = SCRIPT.read_text()
    prelude = re.search(r"^last_finished=.*\n", text, re.M)  # what the functions read besides the above
    script = "\n".join([
        "set -uo pipefail", f"root={root}", f"out={out}", f"log={tmp_path / 'log.txt'}", f"ledger={tmp_path / 'l.tsv'}",
        f"py={sys.executable}", f"ps={fake}", "backend=cpu", "arch=()", 'verify_patches=""', "status=0",
        f"deadline={deadline}", "start=$(date +%s)", prelude.group(0) if prelude else "",
        functions(text, "note", "step", "verify_step"), "verify_step", 'echo "status=$status"'])
    bash = shutil.which("bash") or "/bin/bash"
    r = subprocess.run([bash, "-c", script], capture_output=True, text=True, timeout=120, check=False)
    assert r.returncode == 0, r.stderr
    return int(r.stdout.strip().splitlines()[-1].removeprefix("status=")), out / "verify.json", r.stdout


def test_the_evidence_of_a_verify_that_finished_is_copied(tmp_path: Path) -> None:
    status, verify_json, _ = run_verify_step(tmp_path, "exit 6", deadline=60)
    assert status == 1  # a verify that did not exit 0 fails the run, its evidence is still what it made
    assert json.loads(verify_json.read_text())["patches"] == {"0001-x": {"outcome": "proven"}}


@pytest.mark.parametrize("deadline", [8, 3], ids=["stopped at the deadline", "skipped"])
def test_the_evidence_of_a_verify_that_did_not_finish_is_not_copied(tmp_path: Path, deadline: int) -> None:
    status, verify_json, said = run_verify_step(tmp_path, "sleep 30", deadline=deadline)
    assert status == 1
    assert not verify_json.exists()
    assert "verify: did not finish: no verify.json" in said

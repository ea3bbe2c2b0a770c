"""The rules take "proven" only as verify decides it (issue 47 point 4): a before tree whose runs were
stopped at their time limit, with no proof case, is `cannot tell` in verify and refused as proof."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_evidence_cmd import PATCH, STEM, device_verify_output, evidence, proj, record  # noqa: F401  (proj: a fixture)
from test_export_evidence import verified  # noqa: F401  (the fixture: a project proven by verify)

from builder.deliver import committed


def _timed_out(data: dict, *, field: bool) -> dict:
    """verify's proof of the patch with its before run a time-out (as testrun records one: killed, -9,
    one failing `timeout(...)` line) and no proof case; `field`: with `timed_out` (else as evidence made
    before the field existed)."""
    def stopped(t: dict) -> dict:
        out = {**t, "returncode": -9, "signal": None, "verdict": "failed", "passed": 0, "failed": 1,
               "failing": ["test-add: timeout(limit=60s): stopped after 60s (time limit)"]}
        if field:
            out["timed_out"] = True
        else:
            out.pop("timed_out", None)
        return out
    return {**data, "cases": [], "steps": [{**s, "tests": [stopped(t) for t in s["tests"]]} if s["tree"] == "before"
                                           else s for s in data["steps"]]}


@pytest.mark.parametrize("field", [True, False], ids=["timed_out", "older-evidence"])
def test_a_proof_whose_before_runs_timed_out_is_refused(proj: Path, tmp_path: Path, field: bool) -> None:  # noqa: F811
    sha = committed.sha256_file(proj / "patches" / PATCH)
    folder = device_verify_output(tmp_path / "out", {STEM: _timed_out(record(proj), field=field)},
                                  patches=[{"name": PATCH, "sha256": sha}])
    code, out = evidence(proj, "update", "--from", str(folder))
    assert code == 2, out
    assert out[-1].startswith(f"error: {folder / 'verify.json'}: {PATCH}: refused: proven with no proof case and no "
                             "crash that Patchset-Before: crash declares (test-add stopped at its time limit)"), out


def test_a_proof_case_still_proves_beside_a_time_out(proj: Path, tmp_path: Path) -> None:  # noqa: F811
    """Evidence with a proof case is read as before, with or without `timed_out` in its runs."""
    data = record(proj)
    assert any(c["role"] == "proof" for c in data["cases"])
    assert all("timed_out" in t for s in data["steps"] for t in s["tests"])
    older = {**data, "steps": [{**s, "tests": [{k: v for k, v in t.items() if k != "timed_out"} for t in s["tests"]]}
                               for s in data["steps"]]}
    sha = committed.sha256_file(proj / "patches" / PATCH)
    folder = device_verify_output(tmp_path / "out", {STEM: older}, patches=[{"name": PATCH, "sha256": sha}])
    assert evidence(proj, "update", "--from", str(folder))[0] == 0

"""docs/backends.md: generated from the committed evidence, hand-written text beside it kept."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest

from builder.cli import main
from builder.errors import InputError
from builder.prove import backends_doc
from builder.series.load import load_series

ROOT = Path(__file__).resolve().parent.parent


def test_committed_backends_md_is_a_fresh_generation() -> None:
    doc = ROOT / "docs" / "backends.md"
    text = doc.read_text(encoding="utf-8")
    fresh = backends_doc.generate(load_series(ROOT / "patches"), ROOT / "docs" / "evidence", doc.parent)
    assert backends_doc.current_block(text) == fresh, (
        "docs/backends.md is stale: run `patchset verify --report --markdown` and commit it")


def _project(tmp_path: Path) -> Path:
    root = tmp_path / "proj"
    for d in ("patches", "upstream"):
        shutil.copytree(ROOT / d, root / d)
    return root


def _run_record(backend: str, gpu: str = "") -> dict:
    return {"format": "patchset-device-run/1", "date": "2026-11-30T04:00:00Z", "backend": backend,
            "host": {"platform": "Linux-x", "machine": "x86_64", "python": "3.12.3", "cpus": 16}, "gpu": gpu,
            "nvcc": "Build cuda_13.0", "pin": {"tag": "b11312", "commit": "0c1e570"},
            "patches": [{"name": "0001-a.patch", "sha256": "ab" * 32}],
            "steps": [{"step": "build", "exit": 0, "seconds": 271, "command": "patchset build --backend cuda"}]}


def test_generated_from_evidence_files_and_hand_text_kept(tmp_path: Path) -> None:
    root = _project(tmp_path)
    series = load_series(root / "patches")
    cuda = root / "docs" / "evidence" / "cuda"
    cuda.mkdir(parents=True)
    (cuda / "run-main.json").write_text(json.dumps(_run_record("cuda", "NVIDIA H200, 580.159.04, 143771 MiB")))
    stem = series.patches[3].name.removesuffix(".patch")
    (cuda / "verify.json").write_text(json.dumps({"format": "patchset-verify-evidence/1", "backend": "cuda",
                                                 "patches": {stem: {"outcome": "needs metal",
                                                                    "created": "2026-11-30T04:05:00Z"}}}))
    (cuda / "sweep-a.json").write_text(json.dumps({
        "format": "patchset-sweep/1", "mode": "test", "ops": ["^A"], "regressions": 0,
        "counts": {"compared": 120, "newly passing": 2, "only in the patched tree": 5},
        "trees": {"other": {"unsplittable_crashes": []}, "patched": {"unsplittable_crashes": []}}}))
    doc = root / "docs" / "backends.md"
    doc.write_text("# Backends\n\nhand-written intro\n\n## Metal replay\n\nnotes by hand\n")

    assert main(["--project", str(root), "verify", "--report", "--markdown"]) == 0
    text = doc.read_text()
    assert text.startswith("# Backends\n\nhand-written intro\n\n## Metal replay\n\nnotes by hand\n")
    block = backends_doc.current_block(text)
    assert block is not None
    row4 = next(line for line in block.splitlines() if line.startswith("| 4 |"))
    assert "needs metal (2026-11-30)" in row4
    assert "not run" in row4  # metal: no evidence committed
    assert "NVIDIA H200, 16 cores" in block
    assert ("| 2026-11-30T04:00:00Z | NVIDIA H200, 16 cores | build | `patchset build --backend cuda` | 0 | 271 |"
            in block)
    assert "| a | test | ^A | 120 | 0 | 2 | 0 | 0 | 0 | 5 | 0 |" in block
    assert "[verify.json](evidence/cuda/verify.json)" in block
    assert ".github/workflows/metal.yml" in block

    # hand edits around the block survive a regeneration; the block itself is replaced
    doc.write_text("intro changed\n" + text.replace("| 4 |", "| 4 (edited) |") + "\nmore notes\n")
    assert backends_doc.write(series, root / "docs" / "evidence", doc)
    again = doc.read_text()
    assert again.startswith("intro changed\n") and again.endswith("\nmore notes\n")
    assert backends_doc.current_block(again) == block
    assert not backends_doc.write(series, root / "docs" / "evidence", doc)  # nothing to change: untouched


def test_broken_markers_are_refused_with_the_line(tmp_path: Path) -> None:
    doc = tmp_path / "backends.md"
    text = f"title\n{backends_doc.END}\n{backends_doc.BEGIN}\n"
    with pytest.raises(InputError, match=r"backends.md:2: "):
        backends_doc.splice(text, "x\n", doc)
    with pytest.raises(InputError, match=r"backends.md:3: "):
        backends_doc.splice(f"{backends_doc.BEGIN}\n{backends_doc.END}\n{backends_doc.BEGIN}\n", "x\n", doc)


def test_unreadable_evidence_names_the_file(tmp_path: Path) -> None:
    folder = tmp_path / "evidence" / "cuda"
    folder.mkdir(parents=True)
    (folder / "run-main.json").write_text("{not json")
    with pytest.raises(InputError, match=r"run-main\.json"):
        backends_doc.load_evidence(tmp_path / "evidence")


def test_a_cell_says_when_its_evidence_is_for_an_older_revision_of_the_patch(tmp_path: Path) -> None:
    root = _project(tmp_path)
    series = load_series(root / "patches")
    p3, p4 = series.patches[2], series.patches[3]
    cpu = root / "docs" / "evidence" / "cpu"
    cpu.mkdir(parents=True)
    run = _run_record("cpu", "NVIDIA H200, 580.159.04, 143771 MiB")
    run["steps"].append({"step": "verify", "exit": 0, "seconds": 100, "command": "patchset verify --backend cpu"})
    run["patches"] = [{"name": p3.name, "sha256": hashlib.sha256(p3.path.read_bytes()).hexdigest()},
                      {"name": p4.name, "sha256": "cd" * 32}]
    (cpu / "run-main.json").write_text(json.dumps(run))
    (cpu / "verify.json").write_text(json.dumps({"format": "patchset-verify-evidence/1", "backend": "cpu", "patches": {
        p.name.removesuffix(".patch"): {"outcome": "proven", "created": "2026-11-30T04:05:00Z"} for p in (p3, p4)}}))
    block = backends_doc.generate(series, root / "docs" / "evidence", root / "docs")
    rows = {line.split(" | ")[0]: line for line in block.splitlines() if line.startswith("| ")}
    assert "proven (2026-11-30) |" in rows["| 3"]
    assert "proven (2026-11-30; older revision `cdcdcdcdcdcd`)" in rows["| 4"]
    # a CPU run on the GPU machine is named by its CPU, not by the GPU beside it
    assert "x86_64 CPU, 16 cores (the NVIDIA H200 machine)" in block


def test_markdown_without_report_is_an_error_and_writes_nothing(tmp_path: Path,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    root = _project(tmp_path)
    assert main(["--project", str(root), "verify", "--markdown"]) != 0
    err = capsys.readouterr().err
    assert "--markdown needs --report" in err and len(err.strip().splitlines()) == 1
    assert not (root / "docs" / "backends.md").exists()

"""`patchset offline run` (builder/orchestrate/offline.py): its steps parsed and bad ones refused before
anything runs; each command under what is left of the deadline (skipped near it, exit 124 when stopped
at it) with a stand-in for patchset that finishes or hangs; verify's evidence copied as verify.json only
from a verify that finished (issue 47 point 9); and a real run of the CLI's fetch, apply and verify on a
proven project whose record and verify.json `patchset evidence update --from` takes."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
from helpers import Proj, run_patchset
from test_export_evidence import verified  # noqa: F401  (the fixture: a project proven by verify)

from builder.cli import main
from builder.deliver import carry, committed
from builder.errors import InputError
from builder.orchestrate import offline
from builder.project import Project
from builder.upstream.fetch import export_bundle
from builder.upstream.pin import load_pin


def test_steps_are_parsed_and_a_bad_one_is_refused_before_anything_runs(
        proj: Proj, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    steps = offline.parse_steps(["main", "verify", "sweep:a-e:^A,^B", "sweep:every:all", "wheel"])
    assert [(s.kind, s.name, s.ops) for s in steps] == [
        ("main", "", ""), ("verify", "", ""), ("sweep", "a-e", "^A,^B"), ("sweep", "every", "all"), ("wheel", "", "")]
    for bad, said in [("mian", "unknown step 'mian'"), ("sweep:x", "sweep:NAME:OPS"), ("sweep::A", "sweep:NAME:OPS"),
                      ("sweep:a/b:A", "sweep:NAME:OPS")]:
        with pytest.raises(InputError, match=said):
            offline.parse_steps(["main", bad])
    with pytest.raises(InputError, match="name at least one step"):
        offline.parse_steps([])
    # the record's name: the committed evidence's metal-replay sweep record was named so by run.sh
    assert offline.run_label("sweep:cpy-dup-cont:CPY,DUP,CONT") == "sweep_cpy-dup-cont_CPY_DUP_CONT"
    assert offline.run_label("sweep:" + "x" * 50 + ":all") == "sweep_" + "x" * 34

    # through the CLI: exit 2, one line, nothing run or written
    out, folder = tmp_path / "out", tmp_path / "carry"
    folder.mkdir()
    assert main(["--project", str(proj.root), "offline", "run", "--carry", str(folder), "--out", str(out),
                 "verify", "mian"]) == 2
    assert "unknown step 'mian'" in capsys.readouterr().err
    assert main(["--project", str(proj.root), "offline", "run", "--carry", str(folder), "--out", str(out),
                 "verify"]) == 2
    assert "no carry folder" in capsys.readouterr().err
    assert not out.exists()


def runner(project: Project, tmp_path: Path, script: str, deadline: float) -> offline.Runner:
    """A runner whose patchset is a stand-in shell script, on `project` with verify's evidence of one patch."""
    ev = project.evidence_dir / "0001-x"
    ev.mkdir(parents=True)
    (ev / "cpu.json").write_text('{"outcome": "proven"}')
    (project.evidence_dir / "0001-x" / "cuda.json").write_text('{"outcome": "needs cpu"}')
    fake = tmp_path / "patchset"
    fake.write_text(f"#!/bin/sh\necho stand-in \"$@\"\n{script}\n")
    fake.chmod(0o755)
    out = tmp_path / "out"
    out.mkdir()
    options = offline.Options(backend="cpu", carry=tmp_path / "carry", out=out, deadline=deadline)
    return offline.Runner(project, options, "patchset offline run --backend cpu verify", patchset=(str(fake),),
                          say=lambda line: None)


def test_the_evidence_of_a_verify_that_finished_is_copied(proj: Proj, tmp_path: Path) -> None:
    r = runner(proj.project, tmp_path, "exit 6", deadline=60)
    r.verify_step()
    assert r.status == 1  # a verify that did not exit 0 fails the run; its evidence is still what it made
    assert json.loads((r.out / "verify.json").read_text()) == {
        "format": "patchset-verify-evidence/1", "backend": "cpu", "patches": {"0001-x": {"outcome": "proven"}}}
    assert [(s.step, s.exit, s.command) for s in r.ledger] == [("verify", 6, "patchset verify --backend cpu")]
    log = (r.out / "log.txt").read_text()
    assert "== verify: patchset verify --backend cpu (at most 60s)" in log and "stand-in verify --backend cpu" in log
    assert "== verify: exit 6 in 0s" in log


@pytest.mark.parametrize(("deadline", "exit_code"), [(7, 124), (5, None)], ids=["stopped at the deadline", "skipped"])
def test_the_evidence_of_a_verify_that_did_not_finish_is_not_copied(proj: Proj, tmp_path: Path, deadline: int,
                                                                    exit_code: int | None) -> None:
    r = runner(proj.project, tmp_path, "sleep 30", deadline=deadline)
    r.verify_step()
    assert r.status == 1
    assert not (r.out / "verify.json").exists()
    assert [(s.step, s.exit) for s in r.ledger] == [("verify", exit_code)]
    assert r.ledger[0].seconds == (deadline if exit_code else 0)
    log = (r.out / "log.txt").read_text()
    assert "verify: did not finish: no verify.json" in log
    assert ("skipped, deadline reached" in log) == (exit_code is None)

    # the record says what ran and how: a skipped step's exit is null
    record = json.loads(r.write_record("verify").read_text())
    assert record["format"] == "patchset-device-run/1" and record["backend"] == "cpu"
    assert record["steps"] == [{"step": "verify", "exit": exit_code, "seconds": r.ledger[0].seconds,
                                "command": "patchset verify --backend cpu"}]
    pin = load_pin(proj.project.pin_file)
    assert record["pin"] == {"name": "llama.cpp", "tag": pin.tag, "commit": pin.commit, "tree": pin.tree}
    assert [p["name"] for p in record["patches"]] == proj.series()
    assert record["patches"][0]["sha256"] == committed.sha256_file(proj.patches / proj.series()[0])
    assert set(record) >= {"date", "invocation", "host", "gpu", "nvcc", "compiler", "project_commit",
                           "carry_manifest_sha256"}


def test_a_later_step_is_skipped_once_the_deadline_is_near(proj: Proj, tmp_path: Path) -> None:
    r = runner(proj.project, tmp_path, "sleep 2", deadline=7)
    assert r.ok("first", r.ps("x"))
    assert r.step("second", r.ps("y")) is None  # 5 s left of 7 after 2: not started
    assert [(s.step, s.exit) for s in r.ledger] == [("first", 0), ("second", None)]
    assert r.status == 1


def test_a_run_on_a_proven_project_is_taken_by_evidence_update(verified: Project,  # noqa: F811
                                                                tmp_path: Path) -> None:
    root = verified.root
    folder = root / ".cudabuild"
    folder.mkdir()
    export_bundle(verified.cache_dir, load_pin(verified.pin_file), folder / carry.BUNDLE)
    carry.write_manifest(folder)
    (root / "docs").mkdir(exist_ok=True)
    (root / "docs" / "patches.md").write_text(f"# Patches\n\n{committed.COUNTS_BEGIN}\n{committed.COUNTS_END}\n")
    out = tmp_path / "out"
    env = {**os.environ, "PATCHSET_CACHE": str(verified.cache_dir)}
    r = run_patchset("--project", str(root), "offline", "run", "--backend", "cpu", "--carry", str(folder),
                     "--out", str(out), "verify", env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    assert sorted(p.name for p in out.iterdir()) == ["log.txt", "run-verify.json", "verify.json"]
    record = json.loads((out / "run-verify.json").read_text())
    assert record["invocation"] == "patchset offline run --backend cpu --carry .cudabuild verify"
    assert [(s["step"], s["exit"]) for s in record["steps"]] == [("fetch", 0), ("apply", 0), ("verify", 0)]
    assert record["steps"][0]["command"] == "patchset fetch --bundle .cudabuild/llama.cpp.bundle"
    assert record["carry_manifest_sha256"] == committed.sha256_file(folder / carry.MANIFEST)
    stem = "0001-calc-add-adds"
    assert json.loads((out / "verify.json").read_text())["patches"][stem]["outcome"] == "proven"

    # back here, in a checkout of the same project without the run's state: what the run wrote is taken
    here = tmp_path / "here"
    for d in ("patches", "upstream", "docs"):
        shutil.copytree(root / d, here / d)
    u = run_patchset("--project", str(here), "evidence", "update", "--from", str(out), env=env)
    assert u.returncode == 0, u.stdout + u.stderr
    assert "left out: log.txt: no run record names it (logs are not committed)" in u.stdout + u.stderr
    docs = here / "docs" / "evidence"
    assert sorted(p.relative_to(docs).as_posix() for p in docs.rglob("*") if p.is_file()) == [
        "MANIFEST.json", "cpu/run-verify.json", "cpu/verify.json"]
    manifest = json.loads((docs / "MANIFEST.json").read_text())["files"]
    assert manifest["cpu/run-verify.json"]["command"] == record["invocation"]
    assert manifest["cpu/verify.json"]["command"] == "patchset verify --backend cpu"
    assert manifest["cpu/verify.json"]["proves"] == [f"{stem}.patch"]
    assert json.loads((docs / "cpu" / "verify.json").read_text())["patches"][stem]["outcome"] == "proven"
    assert run_patchset("--project", str(here), "evidence", "check", env=env).returncode == 0

"""`patchset offline run` (builder/orchestrate/offline.py): its steps parsed and bad ones refused before
anything runs; each command under what is left of the deadline (skipped near it, exit 124 when stopped
at it) with a stand-in for patchset that finishes or hangs; verify's evidence copied as verify.json only
from a verify that finished (issue 47 point 9); and a real run of the CLI's fetch, apply and verify on a
proven project whose record and verify.json `patchset evidence update --from` takes."""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import zipfile
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


def test_verify_json_holds_the_patches_this_verify_ran_on_alone(proj: Proj, tmp_path: Path) -> None:
    """A machine kept between runs still has an earlier run's evidence of another patch: this run's verify.json,
    which its record says `verify ... 2` made, holds patch 2's only (the H200 runs of 2026-12-05 had patch 4's
    evidence of the run before in the run of patch 3)."""
    r = runner(proj.project, tmp_path, "exit 0", deadline=60)
    first, second = (n.removesuffix(".patch") for n in proj.series()[:2])
    for stem in (first, second):
        (proj.project.evidence_dir / stem).mkdir(parents=True, exist_ok=True)
        (proj.project.evidence_dir / stem / "cpu.json").write_text(f'{{"outcome": "proven", "of": "{stem}"}}')
    r.options = dataclasses.replace(r.options, verify_patches=("2",))
    r.verify_step()
    assert json.loads((r.out / "verify.json").read_text())["patches"] == {second: {"outcome": "proven", "of": second}}
    assert r.ledger[-1].command == "patchset verify --backend cpu 2"


def test_evidence_update_takes_from_a_verify_json_the_patches_its_command_ran_on(proj: Proj) -> None:
    """An output of an earlier run (or of run.sh, which copied every record there) holds records of patches its
    recorded verify did not run on: `evidence update --from` takes those of the command's patches only."""
    from builder.deliver.committed_update import verified_patches  # noqa: PLC0415
    from builder.series.load import load_series  # noqa: PLC0415

    series = load_series(proj.project.patches_dir)
    stems = [n.removesuffix(".patch") for n in proj.series()]
    assert verified_patches("patchset verify --backend cuda --cuda-arch 90 3", series) == {stems[2]}
    assert verified_patches(f"patchset verify --backend cpu --hunks 1 {proj.series()[1]}", series) == set(stems[:2])
    # every patch, or a command it does not know the shape of: every record, as before
    assert verified_patches("patchset verify --backend cuda --cuda-arch 90", series) is None
    assert verified_patches("patchset verify --backend cuda --plan 3", series) is None
    assert verified_patches("patchset build --backend cuda", series) is None


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
    # a second run into the same folder would replace this one's record: refused before anything runs
    kept = {p.name: p.read_bytes() for p in out.iterdir()}
    again = run_patchset("--project", str(root), "offline", "run", "--backend", "cpu", "--carry", str(folder),
                         "--out", str(out), "main", "verify", env=env)
    assert again.returncode == 2 and f"{out / 'verify.json'}: written by an earlier run" in again.stderr, again.stderr
    assert {p.name: p.read_bytes() for p in out.iterdir()} == kept

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


def test_each_step_runs_the_commands_it_always_ran(proj: Proj, tmp_path: Path) -> None:
    """The commands of `main` and a sweep on CUDA, after the installs a wrapper recorded; a build that
    fails skips that step's test and verify, and the next step still runs."""
    boot = tmp_path / "boot.tsv"
    boot.write_text("install\t0\t3\tpython -m pip install --no-index -r .cudabuild/requirements.txt\n")
    r = runner(proj.project, tmp_path, 'case "$1" in build) [ -e "$0.built" ] || { touch "$0.built"; exit 2; } ;; esac',
               deadline=60)
    r = offline.Runner(proj.project, dataclasses.replace(r.options, backend="cuda", workers=4,
                                                         verify_patches=("3", "4"), bootstrap=boot),
                       r.invocation, patchset=r.patchset, say=r.say)
    third = proj.series()[2].removesuffix(".patch")  # verify's evidence of patch 3 (the series has no patch 4)
    (proj.project.evidence_dir / third).mkdir(parents=True)
    (proj.project.evidence_dir / third / "cuda.json").write_text('{"outcome": "proven"}')
    assert r.run(offline.parse_steps(["main", "sweep:a-b:^A,^B", "main"])) == 1
    out = r.options.out
    assert [(s.step, s.exit, s.command) for s in r.ledger] == [
        ("install", 0, "python -m pip install --no-index -r .cudabuild/requirements.txt"),
        ("fetch", 0, f"patchset fetch --bundle {tmp_path}/carry/llama.cpp.bundle"),
        ("apply", 0, "patchset apply"),
        ("build", 2, "patchset build --backend cuda --cuda-arch 90"),
        ("sweep-a-b", 0, "patchset test --against upstream --backend cuda --mode test --ops '^A,^B' --workers 4 "
                         f"--cuda-arch 90 --json {out}/sweep-a-b.json"),
        ("build", 0, "patchset build --backend cuda --cuda-arch 90"),
        ("test", 0, f"patchset test --backend cuda --json {out}/test.json"),
        ("verify", 0, "patchset verify --backend cuda --cuda-arch 90 3 4")]
    assert r.left() <= 57  # the installs counted against the deadline
    # of the patches verify ran on alone (0001-x's evidence there is of another run)
    assert json.loads((out / "verify.json").read_text())["patches"] == {third: {"outcome": "proven"}}
    # the record's steps read back as evidence update reads them: the files each command wrote
    from builder.deliver.committed_update import _outputs  # noqa: PLC0415
    made = _outputs(json.loads(r.write_record("main").read_text()))
    assert set(made) == {"sweep-a-b.json", "test.json", "verify.json"}


def stand_in_bindings(folder: Path) -> Path:
    """A wheel of a `llama_cpp` that answers what the wheel step asks of the real one."""
    info = "llama_cpp_python-0.0.1.dist-info"
    files = {
        "llama_cpp/__init__.py": '__version__ = "0.0.1"\ndef llama_supports_gpu_offload():\n    return False\n'
                                 "def llama_backend_init():\n    pass\n"
                                 'def llama_print_system_info():\n    return b"CPU : stand-in"\n',
        "llama_cpp/patchset.py": 'import json\nprint(json.dumps({"patchset": "stand-in"}))\n',
        "llama_cpp/lib/libllama.so": "",
        f"{info}/METADATA": "Metadata-Version: 2.1\nName: llama_cpp_python\nVersion: 0.0.1\n",
        f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"}
    files[f"{info}/RECORD"] = "".join(f"{f},,\n" for f in [*files, f"{info}/RECORD"])
    whl = folder / "llama_cpp_python-0.0.1-py3-none-any.whl"
    with zipfile.ZipFile(whl, "w") as z:
        for f, text in files.items():
            z.writestr(f, text)
    return whl


def test_the_wheel_step_installs_the_wheel_with_no_index_and_imports_it_from_an_empty_folder(
        proj: Proj, tmp_path: Path) -> None:
    whl = stand_in_bindings(tmp_path)
    # the stand-in patchset's `wheel` puts the wheel into its --out, as `patchset wheel` does
    r = runner(proj.project, tmp_path, 'while [ $# -gt 1 ]; do [ "$1" = --out ] && out=$2; shift; done; '
                                       f'mkdir -p "$out" && cp {whl} "$out/"', deadline=120)
    (r.options.carry / "wheels").mkdir(parents=True)
    (r.options.carry / "wheel").mkdir()
    (r.options.carry / carry.BINDINGS_SDIST).write_bytes(b"sdist")
    (r.options.carry / carry.BINDINGS_SHA256).write_text("ab" * 32 + "\n")
    r.wheel_step()
    assert r.status == 0, (r.out / "log.txt").read_text()
    assert [(s.step, s.exit) for s in r.ledger] == [("wheel", 0), ("wheel-venv", 0), ("wheel-install", 0),
                                                    ("wheel-check", 0)]
    assert r.ledger[0].command == (f"patchset wheel --backend cpu --sdist {r.options.carry}/wheel/bindings.tar.gz "
                                   f"--sdist-sha256 {'ab' * 32} --out .patchset/dist-cpu")
    assert json.loads((r.out / "wheel-provenance.json").read_text()) == {"patchset": "stand-in"}
    check = (r.out / "wheel-check.txt").read_text().splitlines()
    assert check[0].startswith("== wheel-check: .patchset/wheel-venv/bin/python wheel_check.py (at most ")
    assert "libraries: ['libllama.so']" in check and "system info: CPU : stand-in" in check
    assert check[-2].startswith("== wheel-check: exit 0 in ") and check[-1].endswith(f" {whl.name}")
    from builder.deliver.committed_update import _outputs  # noqa: PLC0415
    assert set(_outputs(json.loads(r.write_record("wheel").read_text()))) == {"wheel-provenance.json",
                                                                             "wheel-check.txt"}


def test_a_bad_bootstrap_record_is_refused_naming_its_line(proj: Proj, tmp_path: Path) -> None:
    boot = tmp_path / "boot.tsv"
    boot.write_text("install\t0\t3\tpython -m pip install x\ninstall-patchset\tzero\t1\tpython -m pip\n")
    options = offline.Options(backend="cpu", carry=tmp_path, out=tmp_path / "out", bootstrap=boot)
    with pytest.raises(InputError, match=rf"^{boot}:2: not NAME<TAB>EXIT<TAB>SECONDS<TAB>COMMAND$"):
        offline.Runner(proj.project, options, "patchset offline run verify")
    assert not (tmp_path / "out").exists()

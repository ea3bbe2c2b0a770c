"""The host-side Metal replay on the real pin and series: `verify --backend metal-replay` proves patch 5
(the Metal ACC/SET fix) as it is shipped, trailers and mutation included; `patchset test --backend
metal-replay` runs ACC, SET and CPY on the patched tree, and the same harness builds and passes against
the pristine pin. Slow (two builds of ggml with the replay): marked integration.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
from helpers import copy_real_project

from builder.compile import backends as backendmod
from builder.compile import cmakebuild as buildmod
from builder.compile import testrun
from builder.compile.replay import read_trace
from builder.gitrepo import GitRepo
from builder.project import Project
from builder.prove import kernel_models
from builder.prove.pipeline import build_dir, run_tests
from builder.prove.trees import checkout_detached
from builder.prove.verify import verify
from builder.series.apply import apply
from builder.series.load import load_series
from builder.series.model import Patch
from builder.words import NOT_PROVEN, PROVEN

pytestmark = pytest.mark.integration

REPO_ROOT = Path(__file__).resolve().parent.parent
MUTATION = "mutations/metal-cpy-impl-one-block-per-row.patch"
REPLAY_TEST = ("test-backend-ops", ("test", "-o", "ACC,SET"))


def acc_set_patch(patches_dir: Path) -> Patch:
    found = [p for p in load_series(patches_dir).patches
             if "ggml/src/ggml-metal/ggml-metal-ops.cpp" in p.files and "tests/test-backend-ops.cpp" in p.files
             and any("ACC,SET" in t.args for t in p.meta.tests)]
    assert len(found) == 1, [p.name for p in found]
    return found[0]


@pytest.fixture(scope="module")
def project(real_project: Project) -> Project:
    """The session's copy of the real project (conftest.py): after test_integration_build.py (and
    test_integration_verify_cpu.py), ggml-cpu and the test programs of the patched tree and of the pin come
    from the compiler cache."""
    return real_project


def test_verify_proves_patch_5_as_shipped_on_the_replay(project: Project) -> None:
    patch = acc_set_patch(project.patches_dir)
    # the shipped patch, byte for byte: its own trailers name the replay, its test and its mutation
    assert patch.name.startswith("0005-metal-fix-ACC-and-SET")
    assert patch.path.read_bytes() == (REPO_ROOT / "patches" / patch.name).read_bytes()
    assert "metal-replay" in patch.meta.backends
    replay_tests = [(t.program, t.args) for t in patch.meta.tests if t.runs_on("metal-replay", patch.meta.backends)]
    assert replay_tests == [REPLAY_TEST]
    assert MUTATION in patch.meta.mutation
    report = verify(project, [patch.name], ["metal-replay"], jobs=2)
    (v,) = report.verdicts
    assert v.outcome == PROVEN, v.reason
    assert "the mutation" in v.reason and "is caught" in v.reason
    data = json.loads(v.evidence_json.read_text())
    assert data["note"].startswith("host-side replay, not a run on Apple hardware")
    assert "not a run on Apple hardware" in v.evidence_md.read_text()
    steps = {s["tree"]: s for s in data["steps"]}
    assert [steps[k]["verdict"] for k in ("before", "after", "mutation")] == ["fails", "passes", "fails"]

    # before: exactly the wide cases fail (the ACC ones and the SET ones that copy src0)
    (before,) = steps["before"]["tests"]
    assert before["command"].endswith("-b MTL0-REPLAY")
    failing = before["failing"]
    assert failing and all(("4096" in f or "2048" in f) and ("ACC(" in f or "SET(" in f) for f in failing)
    assert any("ACC(" in f for f in failing) and any("SET(" in f for f in failing)
    assert before["passed"] > 0
    # and its recorded dispatch grids show the uncovered tail: one 1024-thread threadgroup per 4096-wide row
    short = [d for d in read_trace(Path(before["trace"])) if d.short]
    assert short and all(d.threads == (1024, 1, 1) and d.cols == (0, 1023) and d.row_len == 4096 for d in short)
    assert {d.op for d in short} == {"ACC", "SET"}
    assert any("left stale" in n and "4096-wide rows" in n for n in before["notes"])

    (after,) = steps["after"]["tests"]
    assert after["failed"] == 0 and after["passed"] == before["passed"] + before["failed"]
    assert not [d for d in read_trace(Path(after["trace"])) if d.short]

    # the mutation: the copy dispatches one threadgroup per row again
    (mut,) = steps["mutation"]["tests"]
    assert mut["failed"] > 0
    assert [d for d in read_trace(Path(mut["trace"])) if d.short]


def test_verify_checks_the_kernel_models_against_the_tree_it_proves_on(project: Project, tmp_path: Path) -> None:
    """Issue 47 point 9: the proof above ran the stand-in's self-test on its after tree (the models hold for
    the pin's kernels); a tree whose copy kernel changed under its model is named, as verify then says."""
    patch = acc_set_patch(project.patches_dir)
    verify(project, [patch.name], ["metal-replay"], jobs=2)  # reused from the test above, or made here
    bin_dir = project.build_root / "verify-metal-replay-minimal" / "bin"
    selftest = backendmod.profile("metal-replay").selftest or ""
    work = GitRepo(project.work_repo)
    pin = work.out("rev-parse", "upstream^{commit}")
    assert kernel_models.stale_models(bin_dir, selftest, work, pin, tmp_path / "pin", timeout=60) == ()
    # the pin with the copy kernel's column block taken from the row instead of tgpig[0]/ne01: a commit made
    # with a temporary index (the work repository's own index and tree are left alone)
    shader = "ggml/src/ggml-metal/kernels/quantize.metal"  # as in the test below
    text = work.run("show", f"{pin}:{shader}").stdout
    assert "tgpig[0]/args.ne01" in text
    blob = work.run("hash-object", "-w", "--stdin", input_text=text.replace("tgpig[0]/args.ne01",
                                                                           "tgpig[0]%args.ne01", 1)).stdout.strip()
    index = {"GIT_INDEX_FILE": str(tmp_path / "index")}
    work.run("read-tree", pin, env=index)
    work.run("update-index", "--cacheinfo", f"100644,{blob},{shader}", env=index)
    tree = work.run("write-tree", env=index).stdout.strip()
    drifted = work.run("commit-tree", tree, "-p", pin, "-m", "a kernel changed under its model").stdout.strip()
    stale = kernel_models.stale_models(bin_dir, selftest, work, drifted, tmp_path / "drifted", timeout=60)
    assert stale and all("MODEL_SOURCE" in line and "kernel_cpy_" in line for line in stale), stale
    assert any("changed since the model was written" in line for line in stale), stale


def test_patchset_test_on_the_patched_tree(project: Project) -> None:
    report = run_tests(project, "metal-replay", ops=["ACC", "SET", "CPY"])
    by_program = {p.program: p for p in report.programs}
    assert set(by_program) == {"test-backend-ops", "patchset-replay-selftest"}
    ops = by_program["test-backend-ops"]
    assert ops.verdict == testrun.PASSED, ops.failing_lines()
    seen = {c.name for c in ops.cases if c.status == testrun.PASS}
    assert seen == {"ACC", "SET", "CPY"}
    assert [c for c in ops.cases if c.name == "ACC" and "4096" in c.params and c.status == testrun.PASS]
    # quantized copies have no kernel model: reported as not supported, not compared
    assert [c for c in ops.cases if "q4_0" in c.params and c.status == testrun.SKIP]
    assert ops.notes and "0 wrote fewer elements" in ops.notes[0]
    selftest = by_program["patchset-replay-selftest"]
    assert selftest.verdict == testrun.PASSED
    names = {c.name for c in selftest.cases}
    assert names == {"CPY_MODEL", "BIN_MODEL", "MODEL_SOURCE"}


def test_a_failed_lookup_fails_only_its_own_graph(project: Project, tmp_path: Path) -> None:
    """The buffer lookup cases of test-backend-ops on the series' tree (patch 1's assert, made a failure status by
    the fork-only patch 6), built with the replay: a tensor in a CPU buffer or in no buffer fails the graph instead
    of crashing in the tree's own buffer lookup, the next graph of the backend succeeds, and a tensor of no bytes
    fails nothing."""
    apply(project)  # a no-op after the other tests here; this one also runs alone
    spec = buildmod.BuildSpec(source=project.work_repo, build_dir=project.build_root / "metal-replay-minimal",
                              backend="metal-replay", programs=("test-backend-ops",), jobs=2)
    result = buildmod.build(spec)
    assert result.ok, f"{result.first_error} (log {result.log})"
    inv = testrun.Invocation("test-backend-ops", ("test", "-o", "ADD,CONCAT", "-p", "buffer=", "-b", "MTL0-REPLAY"),
                             trace_env="GGML_METAL_REPLAY_TRACE")
    r = testrun.run_program(result.bin_dir, inv, tmp_path / "lookup.log")
    assert r.verdict == testrun.PASSED, r.failing_lines()
    assert {(c.name, c.params) for c in r.cases if c.status == testrun.PASS} == \
        {("ADD", "buffer=none"), ("ADD", "buffer=cpu"), ("CONCAT", "buffer=empty")}


def _drift_copy_kernel(project: Project, tmp_path: Path) -> None:
    """Patch 5 of `project` also changes the copy kernel's text under its model (its column block taken from
    the row instead of tgpig[0]/ne01): a diff section appended to the patch file."""
    shader = "ggml/src/ggml-metal/kernels/quantize.metal"
    apply(project)
    repo = GitRepo(project.work_repo)
    text = repo.run("show", f"upstream:{shader}").stdout
    assert "tgpig[0]/args.ne01" in text
    for side, body in (("a", text), ("b", text.replace("tgpig[0]/args.ne01", "tgpig[0]%args.ne01", 1))):
        (tmp_path / side / shader).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / side / shader).write_text(body)
    diff = subprocess.run(["git", "-C", str(tmp_path), "diff", "--no-index", "--no-prefix", f"a/{shader}",
                           f"b/{shader}"], capture_output=True, text=True, check=False).stdout
    assert diff.startswith(f"diff --git a/{shader} b/{shader}\n"), diff[:200]
    mail = acc_set_patch(project.patches_dir).path
    mail.write_text(mail.read_text() + diff)


def test_a_proof_on_a_stale_kernel_model_cannot_tell(real_pin_cache: Path, tmp_path: Path) -> None:
    """Issue 47 point 9: a tree whose copy kernel changed under the stand-in's model is not proven on it
    (before, verify proved patch 5 on the replay whatever the shaders said)."""
    project = copy_real_project(tmp_path / "project", real_pin_cache)
    _drift_copy_kernel(project, tmp_path / "diff")
    patch = acc_set_patch(project.patches_dir)
    (v,) = verify(project, [patch.name], ["metal-replay"], jobs=2).verdicts
    assert v.outcome == NOT_PROVEN, v.reason
    assert v.reason.startswith("cannot tell: the metal-replay stand-in's kernel models do not match this tree's "
                               "kernels (") and "kernel_cpy_" in v.reason, v.reason


def test_the_same_harness_builds_and_passes_on_the_pin(project: Project, tmp_path: Path) -> None:
    apply(project)  # a no-op after the other tests here; this one also runs alone
    work = GitRepo(project.work_repo)
    # the pin where `patchset sweep` checks it out (its CPU build compiled the same files there: the compiler
    # cache has them), built in a folder of its own (the patched tree's stays as the other tests left it)
    pin_src = project.state_dir / "against" / "upstream"
    checkout_detached(work, pin_src, work.out("rev-parse", "upstream^{commit}"))
    try:
        spec = buildmod.BuildSpec(source=pin_src, build_dir=build_dir(project, "metal-replay", "against-upstream"),
                                  backend="metal-replay", programs=("test-backend-ops",), jobs=2)
        result = buildmod.build(spec)
        assert result.ok, f"{result.first_error} (log {result.log})"
        log_dir = tmp_path / "logs"
        prof = backendmod.profile("metal-replay")
        ops = testrun.run_program(result.bin_dir, testrun.Invocation(
            "test-backend-ops", ("test", "-o", "ACC,SET,CPY", "-b", prof.device), trace_env=prof.trace_env),
            log_dir / "ops.log")
        assert ops.verdict == testrun.PASSED, ops.failing_lines()
        assert not [c for c in ops.cases if "4096" in c.params]  # the pin has no wide cases
        check = testrun.Invocation(prof.selftest or "", ("--tree", str(pin_src)))
        selftest = testrun.run_program(result.bin_dir, check, log_dir / "selftest.log")
        assert selftest.verdict == testrun.PASSED
        # nothing was patched into the tree
        assert GitRepo(pin_src).out("status", "--porcelain", "--untracked-files=all") == ""

        # a kernel that changes under its model is noticed: the copy kernel with its column block taken from the
        # row instead of tgpig[0]/ne01
        drifted = tmp_path / "drifted"
        shutil.copytree(pin_src / "ggml" / "src" / "ggml-metal", drifted / "ggml" / "src" / "ggml-metal")
        shader = drifted / "ggml" / "src" / "ggml-metal" / "kernels" / "quantize.metal"
        text = shader.read_text()
        assert "tgpig[0]/args.ne01" in text
        shader.write_text(text.replace("tgpig[0]/args.ne01", "tgpig[0]%args.ne01", 1))
        check = testrun.Invocation(prof.selftest or "", ("--tree", str(drifted)))
        drift = testrun.run_program(result.bin_dir, check, log_dir / "drift.log")
        assert drift.verdict == testrun.FAILED
        bad = [c for c in drift.cases if c.status == testrun.FAIL]
        assert bad and all(c.name == "MODEL_SOURCE" and "kernel_cpy_" in c.params for c in bad)
        assert all("changed since the model was written" in c.detail for c in bad)
    finally:
        work.run("worktree", "remove", "--force", str(pin_src))

"""`rebase --dry-run --fixed-upstream` on the real pin and series (issue 23): upstream moves on with its own
fix of patch 5's bug (the Metal ACC and SET copy of src0 for wide rows), written differently from ours
(tests/data/fixed-upstream: the hand-rolled dispatch covers every column block, no shared helper), first for
ACC only, then for SET too. Patch 5's own test (`test-backend-ops test -o ACC,SET` on the host-side Metal
replay) decides: partly fixed, with exactly the SET cases left, then fixed, while the text says conflict.
The same history then merges patch 2 as is and fixes patch 3's bug its own way (issue 30's scenario): patch 2
fixed and merged as that commit, patch 3 partly fixed, on the CPU, in the same dry run as patch 5.

Kept cheap (CI time): the check builds in verify's folders, and this module shares the session's project
(`real_project`, conftest.py) with test_integration_build and test_integration_replay, compiling relative to
it (CCACHE_BASEDIR), so the replay's ggml and test-backend-ops are built once for the modules; the
replay builds only test-backend-ops, and each later tree recompiles ggml-metal-ops.cpp alone. Slow all
the same (one cold build of the replay, whichever module comes first): marked integration.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import NamedTuple

import pytest
from helpers import UPSTREAM_FIXES, json_document, pin_toml, real_pin_moved_on

from builder.cli import main
from builder.compile.cmakebuild import BuildResult
from builder.orchestrate.bump_plan import upstream_fixed
from builder.project import Project
from builder.prove.backends_here import available_backends
from builder.series.dryrun import CANNOT_TELL, FIXED, NOT_FIXED, PARTLY_FIXED, RebaseReport
from builder.upstream import fetch as upstream
from builder.upstream.pin import load_pin

pytestmark = pytest.mark.integration


class Moved(NamedTuple):
    project: Path
    pin: Path
    """The pin as a commit of the moved upstream's history (for `merged as`)."""
    acc: Path
    """Upstream with its own fix of patch 5's bug for ACC."""
    both: Path
    """... and for SET."""
    merged: Path
    """... and patch 2 merged as is."""
    fixed: Path
    """... and its own fix of patch 3's bug."""
    unrelated: Path
    """The pin and a commit that touches none of our bugs."""

# the cases patch 5 adds that fail without its fix on the replay (docs/evidence/metal-replay): the ACC ones and
# the SET ones that copy src0 (not in place)
ACC_CASES = [
    "test-backend-ops ACC(type=f32,ne_a=[4096,2,1,1],ne_b=[1024,1,1,1],stride_dim=-1)",
    "test-backend-ops ACC(type=f32,ne_a=[4096,3,1,1],ne_b=[4096,1,1,1],stride_dim=-1)",
    "test-backend-ops ACC(type=f32,ne_a=[4096,1,2,1],ne_b=[2048,1,2,1],stride_dim=1)",
]
SET_CASES = [
    "test-backend-ops SET(type_src=f32,type_dst=f32,ne=[2048,2,1,1],dim=1,inplace=0)",
    "test-backend-ops SET(type_src=f32,type_dst=f32,ne=[2048,1,1,1],dim=2,inplace=0)",
    "test-backend-ops SET(type_src=i32,type_dst=i32,ne=[2048,2,1,1],dim=1,inplace=0)",
]


@pytest.fixture(scope="module")
def moved(real_project: Project, real_pin_cache: Path, real_cpu_build: BuildResult,
          tmp_path_factory: pytest.TempPathFactory) -> Moved:
    """Upstream moving on from the pin, in one history (one set of builds for the modules' checks): its own fix
    of patch 5's bug for ACC, then for SET, then patch 2 merged as is, then its own fix of patch 3's bug; and,
    apart, a commit that touches none of our bugs.

    The cache holds the pin as upstream's own commit (read from the source archive, its parents absent).
    Upstream here is made on that commit, so the pin with this upstream as its git source has the history
    `merged as` reads.

    After the session's CPU build of the series (`real_cpu_build`), as a user's check comes after `patchset
    build`: each tree takes the head's comments, so the objects it shares with the head come from the compiler
    cache (two cold builds of the same objects at once were twice the CPU)."""
    assert real_cpu_build.ok, real_cpu_build.failure
    if "metal-replay" not in available_backends():
        pytest.skip("the host-side Metal replay needs a C++ compiler")
    base = tmp_path_factory.mktemp("fixed-upstream")
    patch2 = next(real_project.patches_dir.glob("0002-*.patch"))
    acc, both, merged, fixed = real_pin_moved_on(
        real_pin_cache, base / "upstream", [UPSTREAM_FIXES / "metal-acc-wide-rows.patch",
                                            UPSTREAM_FIXES / "metal-set-wide-rows.patch", patch2,
                                            UPSTREAM_FIXES / "ggml-opt-eval-realloc.patch"])
    (unrelated,) = real_pin_moved_on(real_pin_cache, base / "unrelated", [UPSTREAM_FIXES / "readme-unrelated.patch"])
    pin = load_pin(real_project.pin_file)
    real = upstream.fetch(real_pin_cache, pin).commit
    assert real == pin.commit
    old = base / "pin.toml"
    old.write_text(pin_toml(real, pin.tree, [{"kind": "git", "url": (base / "upstream" / "upstream.git").as_uri()}],
                            repository=pin.repository, tag=pin.tag or None, date=pin.date))
    return Moved(real_project.root, old, acc, both, merged, fixed, unrelated)


def dry_run(project: Path, onto: Path, capsys: pytest.CaptureFixture[str], *extra: str, rc: int = 3,
            pin: Path | None = None) -> dict[str, dict]:
    """The `--json` rows of `rebase --dry-run --fixed-upstream`, by patch number (from `pin` when given)."""
    got_rc = main(["--project", str(project), *(["--pin", str(pin)] if pin else []), "rebase", "--onto", str(onto),
                   "--dry-run", "--fixed-upstream", "--json",
               *extra])
    captured = capsys.readouterr()
    assert captured.out, captured.err
    rows = {r["patch"][:4]: r for r in json_document(captured.out)["patches"]}
    assert got_rc == rc  # 3: patch 5's diff no longer applies, upstream changed its lines
    return rows


def verdicts(rows: dict[str, dict]) -> dict[str, tuple[str, str, list[str], list[str]]]:
    return {k: (r["outcome"], r["fixed_upstream"]["verdict"], r["fixed_upstream"]["still_failing"],
                r["fixed_upstream"]["now_passing"]) for k, r in rows.items()}


def test_upstream_fixing_our_bugs_its_own_way_and_merging_patch_2(
        moved: Moved, real_pin_cache: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Every backend as by default: each patch on the first backend of its proof that this machine has. Patch 5
    `fixed upstream`; patch 2 `fixed upstream` and merged as upstream's commit; patch 3 `partly fixed upstream`
    with the cases of its ALLOC_FAILED contract left (issue 30's scenario); `--drop-fixed` would drop 2 and 5."""
    monkeypatch.setenv("PATCHSET_CACHE", str(real_pin_cache))

    rows = dry_run(moved.project, moved.fixed, capsys, pin=moved.pin)

    got = verdicts(rows)
    # controlled: every case failed on the old pin (the control) and passes here, in each run
    assert got["0005"][:3] == ("conflict", FIXED, [])
    assert sorted(got["0005"][3]) == sorted(ACC_CASES + SET_CASES)
    assert "[metal-replay]" in rows["0005"]["fixed_upstream"]["evidence"]
    # patch 2: upstream's third commit is its diff; its tests (test-opt, test-llama-archs --opt) pass there in every
    # run and fail by behaviour on the old pin, the control
    assert rows["0002"]["merged_as"] == load_pin(moved.merged).commit
    assert got["0002"][1] == FIXED, rows["0002"]["fixed_upstream"]
    # patch 3: its test part (test-alloc's and test-opt's cases) on upstream's fix; the control is the old pin with
    # patch 2, where every case below failed. The text: patch 2 conflicts (upstream changed its lines since), patch 3
    # depends on it
    assert got["0003"][1] == PARTLY_FIXED, rows["0003"]["fixed_upstream"]
    assert got["0003"][2] == SCHEDULER_CASE
    assert sorted(got["0003"][3]) == sorted(FIXED_ANOTHER_WAY), got["0003"][3]
    assert "merged_as" not in rows["0003"]
    assert (got["0002"][0], got["0003"][0]) == ("conflict", "depends")
    # patch 1's proof names metal-replay, so its test runs on the replay here; upstream did not touch the
    # buffer lookup: never fixed (its test crashes without the fix before it prints a case: the check may not tell)
    assert got["0001"][0] == "clean" and got["0001"][1] in (NOT_FIXED, CANNOT_TELL), rows["0001"]["fixed_upstream"]
    # no answer here, and why: patch 4 fixes the test program itself
    assert got["0004"][:2] == ("clean", CANNOT_TELL)
    assert "Patchset-Test-Paths: none" in rows["0004"]["fixed_upstream"]["evidence"]
    # bump --drop-fixed would leave out patches 2 and 5, and stops on patch 3 (a person keeps what is left of it)
    checked = RebaseReport.from_json({"old": "", "new": "", "dry_run": True, "patches": list(rows.values())})
    partly, fixed_there, unsure = upstream_fixed(checked)
    assert ([p.patch[:4] for p in partly], sorted(p.patch[:4] for p in fixed_there), unsure) == (
        ["0003"], ["0002", "0005"], [])
    # nothing left behind that leaves the machine with a local path
    assert str(moved.project) not in json.dumps(rows)


def test_upstream_fixing_acc_only_is_partly_fixed_with_the_set_cases_left(
        moved: Moved, real_pin_cache: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    """On the replay only (`--backend`): the patches whose proof runs elsewhere say so."""
    project, acc = moved.project, moved.acc
    monkeypatch.setenv("PATCHSET_CACHE", str(real_pin_cache))

    rows = dry_run(project, acc, capsys, "--backend", "metal-replay")

    got = verdicts(rows)
    assert got["0005"] == ("conflict", PARTLY_FIXED, SET_CASES, ACC_CASES)
    for k, on in (("0002", "cpu"), ("0003", "cpu, cuda")):
        assert got[k] == ("clean", CANNOT_TELL, [], [])
        assert rows[k]["fixed_upstream"]["evidence"] == f"the proof runs on {on}, not on metal-replay"


def test_upstream_moving_on_without_touching_the_bug_is_not_fixed(
        moved: Moved, real_pin_cache: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A README commit: every patch still applies, and patch 5's wide cases all still fail without its fix."""
    project, unrelated = moved.project, moved.unrelated
    monkeypatch.setenv("PATCHSET_CACHE", str(real_pin_cache))

    rows = dry_run(project, unrelated, capsys, "--backend", "metal-replay", rc=0)

    outcome, verdict, still, passing = verdicts(rows)["0005"]
    assert (outcome, verdict, passing) == ("clean", NOT_FIXED, [])
    assert sorted(still) == sorted(ACC_CASES + SET_CASES)


# -- issue 30's scenario: patch 2 merged upstream as is, patch 3's bug fixed there another way ----------------
# upstream's own fix of patch 3's bug (tests/data/fixed-upstream/ggml-opt-eval-realloc.patch): ggml_opt_eval allocates
# a static graph again before it computes, in ggml-opt.cpp only (no header changes: libllama's objects are the
# patched tree's, from the compiler cache). test-opt's cases accept an eval that computes its own graph as well as
# one that fails with GGML_STATUS_ALLOC_FAILED, so they pass there; the scheduler, which upstream left as it was,
# still computes another graph than the one it is given: test-alloc's case is what is left of the patch.
OPT = "test-opt test_{}(high_level=no, subtest={}, optimizer={})"
FIXED_ANOTHER_WAY = [OPT.format("opt_other_alloc", t, o) for o in ("adamw", "sgd")
                     for t in ("eval_after_other_alloc", "step_after_other_alloc")]
SCHEDULER_CASE = ["test-alloc test_sched_graph_not_allocated()"]

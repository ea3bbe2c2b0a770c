"""bump: a new upstream lands only when the series rebases, builds, sweeps and proves on it.

On a small tree laid out like llama.cpp (the calc library of test_cli_pipeline) with two bugs and a
series of two fixes, each with its own test program: one new upstream per outcome.
"""

from __future__ import annotations

import dataclasses
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers import Proj, Upstream, fsck_clean, git, make_project, make_upstream

from builder.cli import main
from builder.errors import LockError
from builder.orchestrate.bump import bump as bump_lib
from builder.orchestrate.bump import scratch_project
from builder.orchestrate.bump_plan import BumpOptions
from builder.prove.backends_here import available_backends
from builder.series.apply import apply
from builder.series.rebase import rebase
from builder.upstream.pin import load_pin
from tests.test_cli_pipeline import CALC_H, UPSTREAM, program
from tests.test_faults import KILLED, Scenario, _points, consistent, kill_and_rerun, observe, reference_run

# apart enough that a change to one function is not in the context of a fix to the next one
GAP = "/*\n *\n *\n */\n"
CALC_C = ('#include "calc.h"\nint calc_add(int a, int b) { return a + b; }\n' + GAP
          + "int calc_sub(int a, int b) { return a + b; }\n" + GAP
          + "int calc_mul(int a, int b) { return calc_add(a, b); }\n" + GAP
          + "int calc_one(void) { return 1; }\n")
SUB_FIX = CALC_C.replace("calc_sub(int a, int b) { return a + b; }", "calc_sub(int a, int b) { return a - b; }")
MUL_FIX = SUB_FIX.replace("calc_mul(int a, int b) { return calc_add(a, b); }",
                          "calc_mul(int a, int b) { return a * b; }")
TEST_SUB = program("SUB", "calc_sub(5, 3)", 2)
# patch 2's test also goes through calc_one: an upstream that breaks calc_one breaks it
TEST_MUL = program("MUL", "calc_mul(3, 3) * calc_one()", 9)


def trailers(program_name: str) -> str:
    return (f"\n\nPatchset-Status: pending\nPatchset-Backends: cpu\nPatchset-Test: {program_name}\n"
            f"Patchset-Test-Paths: tests/{program_name}.cpp\n")


SERIES = [
    ({"ggml/src/calc.c": SUB_FIX, "tests/test-sub.cpp": TEST_SUB}, "calc : sub subtracts" + trailers("test-sub")),
    ({"ggml/src/calc.c": MUL_FIX, "tests/test-mul.cpp": TEST_MUL}, "calc : mul multiplies" + trailers("test-mul")),
]
NAMES = ["0001-calc-sub-subtracts.patch", "0002-calc-mul-multiplies.patch"]


MINI_H = CALC_H.replace("int calc_sub(int a, int b);\n",
                        "int calc_sub(int a, int b);\nint calc_mul(int a, int b);\nint calc_one(void);\n")
"""The mini tree's ggml/include/calc.h."""


def make_mini(base: Path, up: Upstream, cache_dir: Path,
              patches: list[tuple[dict[str, str | bytes | None], str]] | None = None) -> Proj:
    """The calc tree as the pin, the two-patch series (or `patches`), applied."""
    c0 = up.advance({**UPSTREAM, "ggml/include/calc.h": MINI_H, "ggml/src/calc.c": CALC_C,
                     "src/a.c": None, "src/b.c": None, "tests/test-x.c": None}, "calc\n")
    proj = make_project(base, dataclasses.replace(up, commit=c0, tree=up.tree_of(c0)), cache_dir,
                        patches=SERIES if patches is None else patches)
    assert patches is not None or proj.series() == NAMES
    apply(proj.project)
    return proj


@pytest.fixture
def mini(tmp_path: Path, up: Upstream, cache_dir: Path) -> Proj:
    return make_mini(tmp_path, up, cache_dir)


def state(proj: Proj) -> dict[str, object]:
    """What a failed bump must leave exactly as it was: patches/, the pin, the work repository's refs."""
    return {"patches": proj.snapshot(), "pin": proj.project.pin_file.read_bytes(),
            "refs": proj.wgit("for-each-ref", "--format=%(refname) %(objectname)"),
            "head": proj.wgit("symbolic-ref", "HEAD"), "status": proj.wgit("status", "--porcelain")}


def bump(proj: Proj, onto: str) -> int:
    return main(["--project", str(proj.root), "bump", "--onto", onto, "-j", "2", "--confirm", "0"])


def reports(proj: Proj) -> list[Path]:
    return sorted(proj.project.state_dir.glob("bump-*.md"))


def test_a_passing_bump_moves_pin_patches_and_work_repo(mini: Proj, capsys: pytest.CaptureFixture[str]) -> None:
    old = load_pin(mini.project.pin_file)
    old_text = mini.project.pin_file.read_bytes()
    # upstream moves on: lines above the fixes, so every patch lands on other blob ids
    new = mini.upstream.advance({"ggml/src/calc.c": "/* calc */\n" + CALC_C, "README": "calc 2\n"}, "calc: note\n")
    before = mini.snapshot()

    assert bump(mini, new) == 0, capsys.readouterr()
    out = capsys.readouterr().out
    assert "patches/ updated" in out

    pin = load_pin(mini.project.pin_file)
    assert (pin.commit, pin.tree) == (new, mini.upstream.tree_of(new))
    assert mini.series() == NAMES
    after = mini.snapshot()
    # rewritten on the new upstream: other line numbers and blob ids
    assert set(after) == set(before)
    assert all(after[n] != before[n] for n in NAMES)
    # the work repository is where `rebase` would have left it, and nothing is left to refresh
    assert mini.wgit("rev-parse", "upstream") == new
    assert mini.wgit("rev-list", "--count", "upstream..patched") == "2"
    assert mini.wgit("symbolic-ref", "HEAD") == "refs/heads/patched"
    assert main(["--project", str(mini.root), "refresh", "--check"]) == 0
    assert not (mini.root / ".patches.bump-new").exists() and not (mini.root / ".patches.bump-old").exists()
    [report] = reports(mini)
    assert report.name == f"bump-{old.tag}-{new[:7]}.md"
    text = report.read_text()
    assert "every stage passed" in text
    for name in NAMES:
        assert f"| {name} | clean |" in text or f"| {name} | 3-way |" in text
        assert f"| {name} | cpu | proven |" in text
    assert "case(s) compared" in text and "| newly failing | 0 |" in text
    # its proofs are the project's now: verify finds nothing to prove again
    capsys.readouterr()
    assert main(["--project", str(mini.root), "verify", "--backend", "cpu", "-j", "2"]) == 0
    assert capsys.readouterr().out.count("evidence reused") == 2
    # `undo` takes the bump back: the pin, patches/ and the work repository as they were
    assert main(["--project", str(mini.root), "undo"]) == 0
    assert "before bump" in capsys.readouterr().out
    assert mini.project.pin_file.read_bytes() == old_text and mini.snapshot() == before
    assert mini.wgit("rev-parse", "upstream") == old.commit
    assert main(["--project", str(mini.root), "refresh", "--check"]) == 0


def test_a_fork_only_patch_is_carried_and_proven_like_any_other(tmp_path: Path, up: Upstream, cache_dir: Path,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    fork_only = "calc : mul multiplies" + trailers("test-mul").replace(
        "Patchset-Status: pending", "Patchset-Upstream: fork-only upstream wants mul gone")
    mini = make_mini(tmp_path, up, cache_dir, patches=[SERIES[0], (SERIES[1][0], fork_only)])
    new = mini.upstream.advance({"ggml/src/calc.c": "/* calc */\n" + CALC_C}, "calc: note\n")

    assert bump(mini, new) == 0, capsys.readouterr()
    assert mini.series() == NAMES
    assert "Patchset-Upstream: fork-only upstream wants mul gone" in (mini.patches / NAMES[1]).read_text()
    [report] = reports(mini)
    assert f"| {NAMES[1]} | cpu | proven |" in report.read_text()


def failing_bump(mini: Proj, capsys: pytest.CaptureFixture[str], code: int,
                 files: dict[str, str | bytes | None], message: str) -> tuple[str, str, str]:
    """Bump onto a new upstream commit of `files`, which must fail with exit `code` and leave pin,
    patches/ and the work repository exactly as they were: (the commit, the output, the report)."""
    new = mini.upstream.advance(files, message)
    before = state(mini)
    assert bump(mini, new) == code
    out = capsys.readouterr().out
    assert state(mini) == before
    [report] = reports(mini)
    text = report.read_text()
    assert "nothing in the project was changed" in text
    return new, out, text


def test_a_bump_that_breaks_a_patch_changes_nothing_and_names_it(
        mini: Proj, capsys: pytest.CaptureFixture[str]) -> None:
    # upstream changes calc_one, which patch 2's test relies on: the sweep sees that test fail with
    # the series on the new upstream
    _, out, text = failing_bump(mini, capsys, 1, {"ggml/src/calc.c": CALC_C.replace("{ return 1; }", "{ return 2; }")},
                                "calc: one is two\n")
    assert f"failed at sweep ({NAMES[1]})" in out and "test-mul" in out
    assert "FAILED at sweep" in text
    assert "| new case failing | 1 |" in text and "| newly failing | 0 |" in text
    assert "regression: test-mul CPU MUL(want=9): None -> fail" in text


def test_a_patch_upstream_fixed_its_own_way_stops_the_bump_and_is_named(
        mini: Proj, capsys: pytest.CaptureFixture[str]) -> None:
    # upstream's calc_add now multiplies: calc_mul (which calls it) is right without patch 2, whose
    # test passes without it on the new upstream. Before the fixed-upstream check this was found at
    # the end, by verify (exit 4, not proven); now before anything builds, by the patch's own test
    _, out, text = failing_bump(mini, capsys, 5, {"ggml/src/calc.c": CALC_C.replace(
        "calc_add(int a, int b) { return a + b; }", "calc_add(int a, int b) { return a * b; }")}, "calc: add\n")
    out = " ".join(out.split())
    assert f"failed at rebase ({NAMES[1]})" in out
    # its evidence: the test that ran without the fix, and that it passed
    assert f"upstream fixed {NAMES[1]}: fixed-upstream" in out and "test-mul passed (1 passed, 0 failed)" in out
    assert NAMES[0] + ":" not in out.split("upstream fixed", 1)[1]
    assert "--drop-fixed" in out
    assert "FAILED at rebase (fixed upstream)" in text
    assert f"| 1 | {NAMES[0]} | clean | not fixed upstream |" in text
    assert f"| 2 | {NAMES[1]} | clean | fixed upstream |" in text
    assert "## Build\n\n(not run)" in text


def test_a_bump_whose_tree_does_not_build_changes_nothing(mini: Proj, capsys: pytest.CaptureFixture[str]) -> None:
    # upstream drops calc_one, which patch 2's test program calls
    header = (mini.upstream.src / "ggml/include/calc.h").read_text()
    _, out, text = failing_bump(mini, capsys, 1, {
        "ggml/include/calc.h": header.replace("int calc_one(void);\n", ""),
        "ggml/src/calc.c": CALC_C.replace("int calc_one(void) { return 1; }\n", "")}, "calc: no one\n")
    assert f"failed at build ({NAMES[1]})" in out and "test-mul.cpp" in out
    assert "FAILED at build (failed)" in text and "## Sweep (patched against the new upstream)\n\n(not run)" in text


def test_a_conflict_stops_with_exit_3_changes_nothing_and_says_what_to_do(
        mini: Proj, capsys: pytest.CaptureFixture[str]) -> None:
    # upstream rewrites the line patch 1 fixes (still wrong)
    new, out, text = failing_bump(mini, capsys, 3, {"ggml/src/calc.c": CALC_C.replace(
        "calc_sub(int a, int b) { return a + b; }", "calc_sub(int a, int b) { return b + a; }")}, "calc: sub\n")
    assert "failed at rebase" in out and NAMES[0] in out
    assert f"patchset rebase --onto {new}" in out and "Nothing was changed" in out
    assert "FAILED at rebase (conflict)" in text
    # the project's own work repository was never in a rebase: `rebase --onto` can start there
    assert not (mini.work / ".git" / "rebase-apply").exists()
    assert git(mini.work, "status", "--porcelain") == ""

    # what it says to do: resolve with rebase, then bump onto the same commit, which checks the
    # rebased series (a rebase onto the pinned commit: the pin is kept as it is) and writes the report
    assert f"then check the result with `patchset bump --onto {new}`" in out
    assert main(["--project", str(mini.root), "rebase", "--onto", new]) == 3
    (mini.work / "ggml/src/calc.c").write_text(CALC_C.replace("calc_sub(int a, int b) { return a + b; }",
                                                              "calc_sub(int a, int b) { return a - b; }"))
    mini.wgit("add", "ggml/src/calc.c")
    assert main(["--project", str(mini.root), "rebase", "--continue"]) == 0
    pinned, rebased = mini.project.pin_file.read_bytes(), mini.snapshot()
    capsys.readouterr()
    assert bump(mini, new) == 0, capsys.readouterr()
    assert (mini.project.pin_file.read_bytes(), mini.snapshot()) == (pinned, rebased)
    assert "every stage passed" in (mini.project.state_dir / f"bump-{new[:7]}-{new[:7]}.md").read_text()


def bump_scenario(tmp_path: Path, files: dict[str, str | bytes | None] | None = None) -> tuple[Scenario, str]:
    """The mini project in a fault-injection scenario, to bump onto a new upstream of `files` (by
    default one that passes)."""
    up = make_upstream(tmp_path)
    s = Scenario(tmp_path, up, ())
    make_mini(s.live, up, s.cache)
    new = up.advance(files or {"ggml/src/calc.c": "/* calc */\n" + CALC_C}, "calc: note\n")
    # one job slot, so verify runs one lane: with two, which lane folder takes which patch varies, and a folder
    # that changes its llama programs configures again, so the number of points varies by one from run to run
    s.args = ("bump", "--onto", new, "-j", "1", "--confirm", "0")
    s.save()
    return s, new


def test_a_bump_killed_after_its_commit_point_is_finished_by_the_next(tmp_path: Path) -> None:
    """SIGKILL while the work repository is moved (pin and patches/ switched already): the next
    bump finishes the switch, and the project is what a run never killed leaves."""
    s, new = bump_scenario(tmp_path)
    ref = reference_run(s)
    assert ref.outcome.returncode == 0
    # the work repository's move is among its last subprocesses: checkout, update-ref (x3), then the
    # undo ref; killed between two update-refs of the move
    point = [i for i, label in enumerate(ref.points, 1)
             if label.endswith("[update-ref]") and ref.points[i - 2].endswith("[update-ref]")][-1]
    rc, out, killed = s.traced_run(tmp_path / "killed-trace", PATCHSET_FAULT_KILL_AT=str(point))
    assert rc == KILLED, out
    # killed there: the switch is sequential, whatever the sweep's threads did before it
    assert max(killed) == point and killed[point].endswith("[update-ref]"), killed
    assert load_pin(s.root / "upstream" / "llama.cpp.toml").commit == new
    assert (s.root / ".patchset" / "bump" / "journal.json").exists()
    rc, out = s.run()
    assert rc == 0 and "finished the interrupted bump" in out, out
    assert observe(s, rc) == ref.outcome
    consistent(s)
    assert not (s.root / ".patchset" / "bump" / "journal.json").exists()


def test_a_pin_fetched_from_git_with_history_can_be_moved_on(tmp_path: Path, up: Upstream, cache_dir: Path) -> None:
    """The pin's commit has parents the cache never fetched (depth 1); a commit two further on is
    fetched, and the work repository, which borrows the cache's objects, stays whole (fsck)."""
    c1 = up.advance({"README": "one\n"}, "one\n")
    proj = make_project(tmp_path, dataclasses.replace(up, commit=c1, tree=up.tree_of(c1)), cache_dir)
    apply(proj.project)
    up.advance({"README": "two\n"}, "two\n")
    c3 = up.advance({"README": "three\n"}, "three\n")
    rebase(proj.project, c3)
    assert proj.wgit("rev-parse", "upstream") == c3
    fsck_clean(proj.work)


def test_bad_input_is_refused_before_anything_runs(mini: Proj, capsys: pytest.CaptureFixture[str]) -> None:
    before = state(mini)
    assert bump(mini, "not-a-commit") == 2
    assert "no tag or branch 'not-a-commit'" in capsys.readouterr().err
    new = mini.upstream.advance({"README": "calc 2\n"}, "README\n")
    assert main(["--project", str(mini.root), "bump", "--onto", new, "--mode", "grad", "--workers", "4"]) == 2
    assert "test mode only" in capsys.readouterr().err
    assert state(mini) == before and reports(mini) == []
    assert not (mini.project.state_dir / "bump" / "scratch").exists()


@pytest.mark.integration
def test_a_bump_killed_at_many_points(tmp_path: Path) -> None:
    """Six points spread over the whole bump (every point with PATCHSET_FAULT_ALL=1): killed in a
    stage, the project is untouched and the next bump does it all again; killed in the switch, the
    next bump finishes it."""
    s, _ = bump_scenario(tmp_path)
    ref = reference_run(s)
    # the sweep runs two trees at once: the order of their points varies from run to run (not their number)
    kill_and_rerun(s, ref, _points(len(ref.points)))


class _HoldScratchLockAtTheSweepsTests:
    """A progress sink that, when the sweep starts its first test program (the scratch project's
    lock is free then, and the sweep takes it no more), has another process take that lock and keep
    it until `release`: the verify stage after the sweep finds it held."""

    def __init__(self, lock_file: Path, flags: Path) -> None:
        self.lock_file, self.ready, self.keep = lock_file, flags / "ready", flags / "keep"
        self.holder: subprocess.Popen[bytes] | None = None

    def begin(self, label: str, total: int | None = None) -> None:
        if self.holder is not None or label.startswith(("configuring", "building")) or " [" in label:
            return
        self.keep.touch()
        script = ("import pathlib, sys, time\nfrom builder.locking import project_lock\n"
                  "with project_lock(pathlib.Path(sys.argv[1]), 0, purpose='test'):\n"
                  "    pathlib.Path(sys.argv[2]).touch()\n"
                  "    while pathlib.Path(sys.argv[3]).exists():\n        time.sleep(0.05)\n")
        self.holder = subprocess.Popen([sys.executable, "-c", script, str(self.lock_file), str(self.ready),
                                        str(self.keep)])
        deadline = time.monotonic() + 60
        while not self.ready.exists():
            assert self.holder.poll() is None and time.monotonic() < deadline, "the holder never took the lock"
            time.sleep(0.05)

    def note(self, text: str) -> None:
        pass

    def lane(self) -> _HoldScratchLockAtTheSweepsTests:
        return self

    def update(self, completed: int, total: int | None = None, detail: str = "") -> None:
        pass

    def end(self) -> None:
        pass

    def release(self) -> int | None:
        self.keep.unlink(missing_ok=True)
        return self.holder.wait(timeout=60) if self.holder is not None else None


def test_a_lock_held_during_verify_is_a_lock_error_not_a_patch_not_proven(
        mini: Proj, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # another process in the scratch project says nothing about the patches on the new upstream:
    # the bump stops with the lock's error (naming the holder), not with "not proven" (exit 4)
    new = mini.upstream.advance({"ggml/src/calc.c": "/* calc */\n" + CALC_C}, "calc: note\n")
    before = state(mini)
    monkeypatch.setenv("PATCHSET_LOCK_TIMEOUT", "0.5")
    sink = _HoldScratchLockAtTheSweepsTests(scratch_project(mini.project).lock_file, tmp_path)
    try:
        with pytest.raises(LockError) as ei:
            bump_lib(mini.project, BumpOptions(onto=new, jobs=2, confirm=0), sink)
    finally:
        code = sink.release()
    assert code == 0 and sink.holder is not None
    assert f"patchset test (pid {sink.holder.pid}" in str(ei.value)
    assert state(mini) == before and reports(mini) == []


def test_a_patch_that_needs_a_backend_this_machine_lacks_is_named_and_exits_6(
        tmp_path: Path, up: Upstream, cache_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The bump moves (all else passed), but the report and the output name the patch not proven on
    this machine, and the exit status says so: 6, from bump and from verify alike."""
    missing = next((b for b in ("metal", "cuda") if b not in available_backends()), None)
    if missing is None:
        pytest.skip("this machine has every backend")
    files, msg = SERIES[0]
    proj = make_mini(tmp_path, up, cache_dir, patches=[
        (files, msg.replace("Patchset-Backends: cpu\n", f"Patchset-Backends: {missing}\n"))])
    [name] = proj.series()
    new = proj.upstream.advance({"README": "calc 2\n"}, "readme\n")

    assert bump(proj, new) == 6
    out = " ".join(capsys.readouterr().out.split())
    assert f"not proven on this machine: {name} (needs {missing})" in out
    assert load_pin(proj.project.pin_file).commit == new
    text = reports(proj)[0].read_text()
    assert f"- not proven on this machine: {name}" in text and f"- {name}: needs {missing}" in text

    assert main(["--project", str(proj.root), "verify", "--backend", "cpu"]) == 6
    assert f"not proven on this machine: {name} (needs {missing})" in " ".join(capsys.readouterr().out.split())

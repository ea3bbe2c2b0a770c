"""One patch's verdict on one backend: from the evidence that still holds, else from its trees built and run.

Each job in a class of its own: the trees (`trees.TreeMaker`), building and testing one tree
(`treebuild.TreeBuilder`, which also reads the compile database), each hunk of a fix reverted
(`hunkrun.HunkRunner`), the keys and dependency records of the evidence (`proofkeys.ProofKeys`);
`Verifier` decides each patch's verdict from what they found (the reason from the cases:
builder/prove/case_verdict.py).
"""

from __future__ import annotations

import copy
import dataclasses
import os
import tempfile
import time
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path

from builder import words
from builder.compile import backends as backendmod
from builder.compile import testrun
from builder.compile.toolchain import find_ccache
from builder.progress import NullProgress, ProgressSink
from builder.project import Project
from builder.prove import affected, cases, evidence_rules, kernel_models, pytests, runner, schedule
from builder.prove import evidence as ev
from builder.prove import hunks as hk
from builder.prove import plan as plan_mod
from builder.prove.backends_here import available_backends
from builder.prove.case_verdict import Runs, _case_verdict, _first, _flaky, _guard_note
from builder.prove.hunkrun import HunkRunner
from builder.prove.proofkeys import ProofKeys
from builder.prove.schedule import FirstBuilds
from builder.prove.treebuild import TreeBuilder
from builder.prove.trees import Trees, make_trees
from builder.prove.verdicts import PatchVerdict
from builder.series.load import load_series
from builder.series.model import Patch, TestSpec
from builder.series.workrepo import WorkRepo
from builder.upstream.fetch import Fetched, fetch
from builder.upstream.pin import Pin, load_pin
from builder.words import BUILD_FAILED, CANNOT_TELL, NOT_PROVEN, PROVEN, REGRESSED

HUNK_TEST_TIMEOUT_MIN_S = 30.0
"""The least time a test gets on a tree with one hunk reverted (else 20x its own time on the after tree)."""


class Verifier:
    """Each patch's verdict on a backend: from the evidence on disk when it still holds, else from
    its trees built and tested (TreeBuilder, HunkRunner), recorded as evidence (ProofKeys)."""

    def __init__(self, project: Project, progress: ProgressSink | None = None, reuse: bool = True,
                 jobs: int | None = None, cuda_arch: str | None = None, *,
                 timeout: float | None = testrun.DEFAULT_TIMEOUT_S, hunks: bool = False,
                 confirm: int = words.CONFIRM_RUNS, lanes: int | None = None) -> None:
        self.project = project
        self.confirm = max(1, confirm)
        """How many runs confirm what decides on each tree (`verify --confirm N`): the after tree's every case,
        the failing cases of the mutation and before trees."""
        self.lanes = lanes
        """How many lanes prove patches at once (None: as many as the chains, cores and memory allow;
        1: one after another, as before the scheduler)."""
        self.jobs = jobs
        self.hunks = hunks
        """Also revert each hunk of the fix on its own (`verify --hunks`)."""
        self.progress = progress or NullProgress()
        self.reuse = reuse
        self.pin: Pin = load_pin(project.pin_file)
        self.series = load_series(project.patches_dir)
        self.fetched: Fetched = fetch(project.cache_dir, self.pin, progress)
        self.work = WorkRepo(project.work_repo)
        self.work.attach_upstream(self.fetched, self.pin)
        self.builder = TreeBuilder(project, self.work, self.series, self.progress, jobs=jobs, cuda_arch=cuda_arch,
                                   timeout=timeout)
        self.hunk_runner = HunkRunner(self.builder, self.progress, confirm=self.confirm)
        self.keys = ProofKeys(project, self.work, self.builder.inputs,
                              library=lambda backend: self.builder.library(backend).tree,
                              here=available_backends, timeout=timeout, confirm=self.confirm)
        self.reproved_because: dict[tuple[str, str], str] = {}
        """(patch, backend) -> why an earlier proof no longer holds."""

    def in_lane(self, lane: int, jobserver: str | None,
                test_gate: Callable[[], AbstractContextManager[object]] = nullcontext,
                first_builds: FirstBuilds | None = None,
                idle: Callable[[], AbstractContextManager[object]] = nullcontext) -> Verifier:
        """This verifier in the scheduler's `lane`: its own TreeBuilder (worktree and build folders)
        and HunkRunner; the series, the trees' keys and what builds read are shared. Its progress is its
        own (`ProgressSink.lane`: lines off a terminal; silent on one, where lanes at once would garble one
        progress bar, and their verdicts are reported as they finish)."""
        other = copy.copy(self)
        other.progress = self.progress.lane()
        other.builder = self.builder.for_lane(lane, jobserver, other.progress, test_gate, first_builds, idle)
        other.hunk_runner = HunkRunner(other.builder, other.progress, confirm=self.confirm)
        return other

    def plan(self, pairs: list[tuple[Patch, str]], trees: dict[int, Trees], command: str = "verify",
             steps: tuple[plan_mod.Node, ...] = (), beside: bool = False) -> plan_mod.Plan:
        """What proving each patch of `pairs` on its backend will build and run (nothing is built; evidence whose key
        still holds builds nothing; an earlier proof that may carry over is planned as proven again). `steps` (`all`'s
        build and test) come first, or run `beside` the chains: then only the chain whose tree is the work tree's
        waits for them (it builds in the build's folder)."""
        here = available_backends()
        costs = plan_mod.Costs(self.work.git, self.project.evidence_dir, self.project.build_root)
        chains: list[plan_mod.Chain] = []
        settled: list[plan_mod.Settled] = []
        after_steps = tuple(n.id for n in steps[-1:])
        for patch, backend in pairs:
            tests = self._tests(patch, backend)
            old = ev.load(self.project.evidence_dir, patch.name, backend) if self.reuse else None
            declared = patch.meta.backends
            if old is not None and not old.reused and old.key == self.keys.key(
                    patch, trees[patch.index], backend, tests) and (old.hunks_checked or not self.hunks):
                settled.append(plan_mod.Settled(patch.name, backend, f"the evidence of {old.created} holds "
                                                f"({old.outcome}): same trees"))
            elif backend in declared and backend not in here:
                settled.append(plan_mod.Settled(patch.name, backend, f"no {backend} backend on this machine"))
            elif not tests:
                settled.append(plan_mod.Settled(patch.name, backend, f"the patch declares no test for {backend}"))
            else:
                needs = " ".join(b for b in declared if b not in here) or " ".join(declared)
                waits = after_steps if not beside or self.builder.is_work_tree(trees[patch.index].after) else ()
                chains.append(plan_mod.chain(patch, trees[patch.index], backend, tests,
                                             proves=backend in declared, needs=needs, hunks=self.hunks,
                                             costs=costs, after_steps=waits))
        chains.sort(key=lambda c: -c.cost_s)
        slots = self.jobs or os.cpu_count() or 1
        return plan_mod.Plan(command, self.lanes_for(len(chains)), slots, tuple(chains), tuple(settled), steps,
                             beside=beside)

    def lanes_for(self, chains: int) -> int:
        """How many lanes prove `chains` chains (schedule.lanes_for: the trees run tests between their builds)."""
        return schedule.lanes_for(chains, self.jobs, self.lanes, shared_objects=find_ccache() is not None,
                                  with_tests=True)

    def make_trees(self) -> dict[int, Trees]:
        return make_trees(self.work.git, self.fetched.commit, self.series, self.project.patches_dir)

    # -- one patch on one backend ------------------------------------------------------------------
    def settled(self, patch: Patch, trees: Trees, backend: str) -> PatchVerdict | None:
        """The verdict of the evidence on disk when it still answers for these trees (the same
        trees, or an earlier proof whose test programs read no file that changed); else None."""
        if not self.reuse:
            return None
        tests = self._tests(patch, backend)
        key = self.keys.key(patch, trees, backend, tests)
        old = ev.load(self.project.evidence_dir, patch.name, backend)
        if old is None or old.reused:
            return None
        jpath, mpath = ev.paths(self.project.evidence_dir, patch.name, backend)
        # evidence with the hunk table also answers a plain run; a --hunks run needs the table
        # "cannot tell" says what a run could not find out: it is run again, never reused as a result
        # (a `needs X` verdict's key holds the missing X: once X is here, the key differs)
        if old.key == key and (old.hunks_checked or not self.hunks) and not old.reason.startswith(CANNOT_TELL):
            said = _holds_reason(old) if old.holds else old.reason
            reason = f"{said} (evidence reused from the run of {old.created}: trees unchanged)"
            return PatchVerdict(patch.name, backend, old.outcome, reason, True, jpath, mpath, old.hunks,
                                carried=bool(old.holds))
        if old.outcome != PROVEN:
            return None
        if not old.depends:
            self.reproved_because[(patch.name, backend)] = \
                "the earlier evidence does not record what its test programs were built from"
            return None
        if self.hunks or old.hunks_checked:
            # the reverted trees also compile files outside the test programs (-fsyntax-only)
            self.reproved_because[(patch.name, backend)] = "the hunk table is proven only on the trees it was made on"
            return None
        named = trees.named()
        now = {name: self.keys.tree_blobs(commit) for name, commit in named}
        held = affected.check(old.depends, self.keys.depends_now(patch, backend, tests), now,
                              tuple(old.depends.get("programs", ())))
        if not held.holds:
            self.reproved_because[(patch.name, backend)] = held.why
            return None
        git = self.work.git
        carried = dataclasses.replace(old, key=key, holds={
            "why": held.why, "checked": _now(), "pin": self.pin.commit,
            "trees": {name: git.tree_of(commit) for name, commit in named}})
        jpath, mpath = ev.write(self.project.evidence_dir, carried)
        return PatchVerdict(patch.name, backend, PROVEN, _holds_reason(carried), True, jpath, mpath, carried.hunks,
                            carried=True)

    def prove_patch(self, patch: Patch, trees: Trees, backend: str) -> PatchVerdict:
        """Build and run every tree of the patch on `backend` and write the evidence."""
        meta = patch.meta
        here = available_backends()
        tests = self._tests(patch, backend)
        key = self.keys.key(patch, trees, backend, tests)
        steps: list[ev.Step] = []
        hunk_results: list[hk.HunkResult] = []
        case_rows: list[dict] = []
        if backend not in meta.backends:
            missing = [b for b in meta.backends if b not in here] or list(meta.backends)
            outcome = words.needs(missing) if meta.backends else NOT_PROVEN
            reason = (f"the failing-before half can only run on {', '.join(meta.backends)}"
                      if meta.backends else "the patch declares no backend for its proof")
            if tests:
                after = self.builder.run_tree("after", trees.after, patch, backend, tests)
                steps.append(after)
                if after.verdict != words.TREE_PASSES:
                    outcome, reason = REGRESSED, f"its tests do not pass on {backend} with the fix ({after.verdict})"
                else:
                    reason += f"; with the fix its {backend} tests pass"
        elif backend not in here:
            outcome, reason = words.needs([backend]), f"no {backend} backend on this machine"
        elif not tests:
            outcome, reason = NOT_PROVEN, f"the patch declares no test for {backend}"
        else:
            outcome, reason = self._prove(patch, trees, backend, tests, steps, hunk_results, case_rows)
            stale = self._stale_models(trees.after, backend) if outcome == PROVEN else ()
            if stale:
                # a proof on a stand-in is a proof of its kernel models too: models of another upstream prove nothing
                outcome, reason = NOT_PROVEN, (f"{CANNOT_TELL}: the {backend} stand-in's kernel models do not match "
                                               f"this tree's kernels ({_first(stale)}); {reason}")
        evidence = ev.Evidence(
            patch.name, patch.subject, backend, outcome, reason,
            {"name": self.pin.name, "tag": self.pin.tag, "commit": self.pin.commit, "tree": self.pin.tree,
             "source": self.fetched.source},
            tuple(steps), key, self.keys.host_info(), _now(),
            note=backendmod.profile(backend).note,
            hunks=tuple(dataclasses.asdict(h) for h in hunk_results), hunks_checked=bool(hunk_results),
            cases=tuple(case_rows), conditions=self.keys.conditions(patch, backend, tests),
            declared=evidence_rules.declared(patch, backend),
            depends=self.keys.depends(patch, trees, backend, tests) if outcome == PROVEN and steps else {},
        )
        # a verdict with no steps says so in its file ("nothing was run here"): the report table
        # must show every patch and backend that was asked for
        jpath, mpath = ev.write(self.project.evidence_dir, evidence)
        because = self.reproved_because.get((patch.name, backend))
        if because:
            reason += f" (re-proven: {because})"
        return PatchVerdict(patch.name, backend, outcome, reason, False, jpath, mpath, evidence.hunks)

    def _stale_models(self, commit: str, backend: str) -> tuple[str, ...]:
        """On a Metal stand-in: why its kernel models do not hold for `commit` (kernel_models), else ()."""
        selftest = backendmod.profile(backend).selftest
        if not selftest or self.builder.last_build is None:
            return ()
        bin_dir = self.builder.last_build[0] / "bin"
        if not (bin_dir / selftest).exists():
            return (f"its self-test {selftest} was not built",)
        with tempfile.TemporaryDirectory(prefix="patchset-models-") as tmp:
            return kernel_models.stale_models(bin_dir, selftest, self.work.git, commit, Path(tmp),
                                              timeout=self.builder.timeout)

    # -- the verdict from the trees ------------------------------------------------------------------
    @staticmethod
    def _tests(patch: Patch, backend: str) -> list[TestSpec]:
        return [t for t in patch.meta.tests if t.runs_on(backend, patch.meta.backends)]

    def _prove(self, patch: Patch, trees: Trees, backend: str, tests: list[TestSpec],
               steps: list[ev.Step], hunk_results: list[hk.HunkResult], case_rows: list[dict]) -> tuple[str, str]:
        meta = patch.meta
        # after first: the trees are visited from the head of the series down, and each patch's
        # after tree is the one closest to the tree built last
        after = self.builder.run_tree("after", trees.after, patch, backend, tests, confirm=self.confirm,
                                      decide=runner.EVERY)
        after_runs, after_more = list(self.builder.last_results), self.builder.last_confirm
        steps.append(after)
        python = any(pytests.is_python(t) for t in tests)
        if not after.build_ok:
            if python:
                return BUILD_FAILED, f"with the fix the test does not load ({_first(after.build_errors)})"
            return BUILD_FAILED, "the after tree (with the fix) fails to build"
        if after.verdict != words.TREE_PASSES:
            return REGRESSED, f"the test does not pass with the fix ({after.verdict})"
        unsteady = _flaky(after_runs, after_more)
        if unsteady:
            return NOT_PROVEN, (f"{words.FLAKY}: with the fix the test does not pass in every one of {self.confirm} "
                                f"runs ({unsteady})")
        if self.hunks and not python:
            # (a Python patch's hunks are not reverted one by one: --hunks reads a C/C++ compile database)
            # the reverted trees are each one hunk away from the after tree just built
            # a reverted hunk can make a test hang (a missing return is undefined behaviour): each test
            # gets a generous multiple of its own time on the after tree, and a hang counts as caught
            hunk_results += self.hunk_runner.run(patch, trees, backend, tests, hunk_test_limits(after.tests))
        for name, commit in zip(meta.mutation, trees.mutations, strict=True):
            mut = dataclasses.replace(self.builder.run_tree("mutation", commit, patch, backend, tests,
                                                            confirm=self.confirm), label=name)
            steps.append(mut)
            if not mut.build_ok:
                return BUILD_FAILED, f"the mutation tree ({name}) fails to build"
            if mut.verdict != words.TREE_FAILS:
                return NOT_PROVEN, f"the mutation {name} is not caught: the test {mut.verdict} with it"
            # caught only by a failure seen in every run: a case that fails in one run of three catches nothing
            found = [runner.steady_failures(r, m) for r, m in zip(self.builder.last_results,
                                                                   self.builder.last_confirm, strict=True)]
            if not any(steady for steady, _ in found):
                flips = "; ".join(f"`{c}` {how}" for _, flaky in found for c, how in flaky.items())
                return NOT_PROVEN, (f"the mutation {name} is not caught: no failure with it is seen in every one "
                                    f"of {self.confirm} runs ({flips or 'none repeats'})")
        before = self.builder.run_tree("before", trees.before, patch, backend, tests, confirm=self.confirm)
        before_runs, before_more = list(self.builder.last_results), self.builder.last_confirm
        steps.insert(0, before)
        if before.verdict == words.BUILD_FAILED_STEP:
            return BUILD_FAILED, "the before tree fails to build outside the patch's test files"
        if before.verdict == words.BUILD_FAILS and meta.before != "build-fails":
            if python:
                return BUILD_FAILED, (f"without the fix the test does not load ({_first(before.build_errors)}): a "
                                      "name the tree lacks is not a test of behaviour; make the test fail on what "
                                      "the fix changes, or, if it tests API the patch adds, say "
                                      "`Patchset-Before: build-fails`")
            return BUILD_FAILED, ("the before tree fails to compile in the test files; if the test uses API the "
                                  "patch adds, say `Patchset-Before: build-fails`")
        if before.verdict == words.TREE_PASSES:
            return NOT_PROVEN, "the test passes without the fix: it does not guard it"
        if before.verdict == words.TREE_NOTHING:
            return NOT_PROVEN, f"the test checked nothing on {backend} without the fix"
        if before.verdict == words.BUILD_FAILS:
            how = (f"the test does not load, as the patch declares ({_first(before.build_errors)})" if python
                   else "the test fails to compile in its test files only")
        else:
            rows, parent_note = self._case_table(patch, trees, backend, tests, (before_runs, before_more),
                                                 (after_runs, after_more), steps)
            case_rows += [r.as_dict() for r in cases.recorded(rows)]
            how, why_not = _case_verdict(meta.before, rows, before_runs, before_more)
            if why_not:
                return NOT_PROVEN, why_not
            how += _guard_note(rows) + parent_note
        mut_note = ""
        if meta.mutation:
            mut_note = f"; the mutation{'s' if len(meta.mutation) > 1 else ''} {', '.join(meta.mutation)} " \
                       f"{'are' if len(meta.mutation) > 1 else 'is'} caught"
        unguarded = [h for h in hunk_results if h.outcome == hk.UNGUARDED]
        if unguarded:
            where = ", ".join(f"{h.file}:{h.lines}" for h in unguarded)
            return NOT_PROVEN, (f"without the fix {how}, but with the fix {len(unguarded)} hunk(s) can be "
                                f"reverted and the tests still pass: {where}")
        hunk_note = f"; {hk.summarize([dataclasses.asdict(h) for h in hunk_results])}" if hunk_results else ""
        return PROVEN, f"without the fix {how}; with it the test passes{mut_note}{hunk_note}"

    def _case_table(self, patch: Patch, trees: Trees, backend: str, tests: list[TestSpec], before: Runs, after: Runs,
                    steps: list[ev.Step]) -> tuple[list[cases.Case], str]:
        """Every case of the patch's test commands on the before and after trees, with its scope
        (from a run of the parent tree where the patch changes a program's source) and role; and a
        note for the reason when the parent tree could not say which cases are new."""
        git = self.work.git
        changed = set(git.out("diff", "--name-only", trees.parent, trees.before).split()) \
            if trees.before != trees.parent else set()
        new = {str(t) for t in tests if git.blob(trees.parent, pytests.test_file(t)) is None}
        # a program whose source the patch leaves alone prints the same cases on the parent tree,
        # unless the test part changes something else it may include (a header of tests/)
        touched = [t for t in tests if str(t) not in new and changed and (
            pytests.test_file(t) in changed or any(not (c.startswith("tests/") and c.endswith(".cpp"))
                                                   for c in changed))]
        parent: dict[str, testrun.ProgramResult] = {}
        note = ""
        if touched:
            step = self.builder.run_tree("parent", trees.parent, patch, backend, touched, record_inputs=False)
            steps.append(step)
            if step.build_ok:
                parent = {str(t): r for t, r in zip(touched, self.builder.last_results, strict=True)}
            else:
                note = "; which cases the patch adds is not known (the parent tree's test programs do not build)"
        rows: list[cases.Case] = []
        for t, b, b_more, a, a_more in zip(tests, *before, *after, strict=True):
            command = " ".join([b.program, *b.args])
            rows += cases.table(command, b, a, parent.get(str(t)), patch.meta.guards, new_program=str(t) in new,
                                before_more=b_more, after_more=a_more)
        return rows, note



def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def _holds_reason(e: ev.Evidence) -> str:
    return f"earlier proof holds: {e.holds.get('why')}, {e.created}"


def hunk_test_limits(after_tests: tuple[dict, ...]) -> dict[str, float]:
    """Each test command's time limit on a tree with one hunk reverted: 20x its own time on the after
    tree (a slow program beside it does not raise it), at least HUNK_TEST_TIMEOUT_MIN_S."""
    return {t["command"]: max(HUNK_TEST_TIMEOUT_MIN_S, 20 * t["duration_s"]) for t in after_tests}

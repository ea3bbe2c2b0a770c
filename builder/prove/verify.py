"""Known-positive proof of each patch: its tests fail without the fix and pass with it.

For patch k: before = pin + patches 1..k-1 + only patch k's test paths; after = pin + 1..k;
mutation = after + the patch's known-bad variant. The trees are made with git plumbing in a
temporary index (the user's work tree and patches/ are never touched). A patch's trees are checked
out one after another into one verify worktree and built in one build folder per backend, so
switching trees recompiles only the files that differ; independent patches are proven at once in
lanes of their own (builder/prove/schedule.py), on one jobserver, longest first (builder/prove/plan.py).

Each job in a class of its own: the trees (`trees.TreeMaker`), building and testing one tree
(`treebuild.TreeBuilder`, which also reads the compile database), each hunk of a fix reverted
(`hunkrun.HunkRunner`), the keys and dependency records of the evidence (`proofkeys.ProofKeys`);
`Verifier` decides each patch's verdict from what they found.
"""

from __future__ import annotations

import copy
import dataclasses
import itertools
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from pathlib import Path

from builder import words
from builder.compile import backends as backendmod
from builder.compile import objc_toolchain, testrun
from builder.compile.jobserver import Jobserver
from builder.fsutil import remove_half_written
from builder.locking import project_lock
from builder.progress import NullProgress, ProgressSink
from builder.project import Project, default_cache_dir
from builder.prove import affected, cases, evidence_rules, kernel_models, pytests, runner, schedule
from builder.prove import evidence as ev
from builder.prove import hunks as hk
from builder.prove import plan as plan_mod
from builder.prove.hunkrun import HunkRunner
from builder.prove.proofkeys import ProofKeys
from builder.prove.treebuild import TreeBuilder
from builder.prove.trees import Trees, make_trees
from builder.series.load import load_series
from builder.series.model import Patch, TestSpec
from builder.series.workrepo import WorkRepo
from builder.upstream.fetch import Fetched, fetch
from builder.upstream.pin import Pin, load_pin
from builder.words import BUILD_FAILED, CANNOT_TELL, NEEDS, NOT_PROVEN, PROVEN, REGRESSED

OUTCOMES: tuple[tuple[str, str], ...] = (
    (PROVEN, "in every one of the confirming runs (`--confirm N`, default 3): the after tree passes every test; "
             "every mutation tree fails in at least one case (or program) that fails in each run; and the before tree "
             "either fails to compile in the test paths only (with `Patchset-Before: build-fails`) or has at least "
             "one proof case: a case that fails there in each run (a FAIL, or the case a program crashed in, as its "
             "output shows) and passes on the after tree in each run. With `Patchset-Before: crash` a before-tree "
             "program killed by a signal also proves, when it crashes at the same site (the case it crashed in, or "
             "the last one it finished) in each run. With `--hunks`, no hunk is unguarded"),
    (NOT_PROVEN, "the test passes or checks nothing on the before tree; no case fails there and passes on the after "
                 "tree (the failing cases are skipped or absent after, or the program crashed outside any case the "
                 "after tree passes); a mutation is not caught; a hunk is unguarded; or what decides differs "
                 "between the confirming runs (the reason says `flaky (N of M runs)`). When a before-tree program "
                 "was stopped at its time limit and no case proves, the reason starts with `cannot tell`: a time-out "
                 "is never proof; so does a proof on a Metal stand-in whose kernel models do not match the tree's "
                 "kernels (its self-test, `patchset-replay-selftest --tree`)"),
    (REGRESSED, "the after tree's tests do not pass"),
    (BUILD_FAILED, "a tree fails to build where it should not (outside the test paths, or the after or mutation tree)"),
    (f"{NEEDS} BACKEND", "the proof needs a backend this machine does not have; never counted as proven. When the "
                         "patch declares tests for this machine's backend, they are still run on the after tree and "
                         "must pass (else: regressed)"),
)
"""Each outcome of verify per patch and backend, and exactly what it means (the table of docs/verify.md)."""


def markdown_table(rows: tuple[tuple[str, str], ...], head: tuple[str, str]) -> str:
    """A two-column Markdown table (docs/verify.md's outcome and case-role tables)."""
    lines = [f"| {head[0]} | {head[1]} |", "| --- | --- |"]
    lines += [f"| {a} | {b} |" for a, b in rows]
    return "\n".join(lines) + "\n"


HUNK_TEST_TIMEOUT_MIN_S = 30.0
"""The least time a test gets on a tree with one hunk reverted (else 20x its own time on the after tree)."""

def available_backends() -> list[str]:
    """Backends this machine can build and run."""
    found = ["cpu"]
    if shutil.which("nvcc") and shutil.which("nvidia-smi"):
        found.append("cuda")
    if sys.platform == "darwin":
        found.append("metal")
    # the host-side Metal replay needs only a C++ compiler (docs/backends.md)
    if sys.platform in backendmod.profile("metal-replay").platforms and any(
            shutil.which(c) for c in ("c++", "g++", "clang++")):
        found.append("metal-replay")
    # the tree's Metal host code on patchset's Metal stand-in: clang and a built Objective-C toolchain
    if (sys.platform in backendmod.profile("metal-linux").platforms and shutil.which("clang")
            and objc_toolchain.find_built(default_cache_dir()) is not None):
        found.append("metal-linux")
    return found


STAND_INS = ("metal-linux", "metal-replay")
"""The backends that stand in for Metal on a machine without it, best first: the tree's own Metal host
code on patchset's Objective-C stand-in (where its toolchain is built), else the host-side replay."""


def stand_in(patch: Patch, backend: str, here: list[str] | None = None) -> str | None:
    """The backend that proves `patch` on this machine when `backend` cannot: the best of STAND_INS
    that the patch declares in Patchset-Backends and this machine has, on a machine without Metal.
    None when `backend` is one the patch's proof runs on, or nothing here can stand in (the patch
    then stays `needs ...`)."""
    here = available_backends() if here is None else here
    declared = patch.meta.backends
    if backend in declared or "metal" in here or backend in STAND_INS:
        return None
    return next((b for b in STAND_INS if b in declared and b in here), None)


@dataclass(frozen=True)
class PatchVerdict:
    patch: str
    backend: str
    outcome: str
    reason: str
    reused: bool
    evidence_json: Path | None
    evidence_md: Path | None
    hunks: tuple[dict, ...] = ()
    """`--hunks`: the per-hunk results (as in the evidence JSON)."""
    carried: bool = False
    """True when an earlier proof still holds for these trees (nothing was built or run)."""
    seconds: float = 0.0
    """Wall time this verdict took in this run (reading the evidence, or building and running its trees)."""


@dataclass(frozen=True)
class VerifyReport:
    verdicts: tuple[PatchVerdict, ...]

    @property
    def ok(self) -> bool:
        return all(v.outcome == PROVEN or words.is_needs(v.outcome) for v in self.verdicts)

    @property
    def regressed(self) -> bool:
        return any(v.outcome in (REGRESSED, BUILD_FAILED) for v in self.verdicts)

    @property
    def not_proven_here(self) -> tuple[str, ...]:
        """The patches proven on no backend of this run, with a `needs X` verdict on one: not proven
        on this machine (their proof runs only on a backend it lacks)."""
        proven = {v.patch for v in self.verdicts if v.outcome == PROVEN}
        return tuple(dict.fromkeys(v.patch for v in self.verdicts
                                   if words.is_needs(v.outcome) and v.patch not in proven))

    def needs_of(self, patch: str) -> str:
        """What a patch not proven here needs, in words (`needs metal`)."""
        return "; ".join(dict.fromkeys(v.outcome for v in self.verdicts
                                       if v.patch == patch and words.is_needs(v.outcome)))


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
                test_gate: Callable[[], AbstractContextManager[object]] = nullcontext) -> Verifier:
        """This verifier in the scheduler's `lane`: its own TreeBuilder (worktree and build folders)
        and HunkRunner; the series, the trees' keys and what builds read are shared. Its progress is its
        own (`ProgressSink.lane`: lines off a terminal; silent on one, where lanes at once would garble one
        progress bar, and their verdicts are reported as they finish)."""
        other = copy.copy(self)
        other.progress = self.progress.lane()
        other.builder = self.builder.for_lane(lane, jobserver, other.progress, test_gate)
        other.hunk_runner = HunkRunner(other.builder, other.progress, confirm=self.confirm)
        return other

    def plan(self, pairs: list[tuple[Patch, str]], trees: dict[int, Trees], command: str = "verify",
             steps: tuple[plan_mod.Node, ...] = ()) -> plan_mod.Plan:
        """What proving each patch of `pairs` on its backend will build and run (nothing is built; evidence whose key
        still holds builds nothing; an earlier proof that may carry over is planned as proven again)."""
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
                chains.append(plan_mod.chain(patch, trees[patch.index], backend, tests,
                                             proves=backend in declared, needs=needs, hunks=self.hunks,
                                             costs=costs, after_steps=after_steps))
        chains.sort(key=lambda c: -c.cost_s)
        slots = self.jobs or os.cpu_count() or 1
        return plan_mod.Plan(command, schedule.lanes_for(len(chains), self.jobs, self.lanes), slots, tuple(chains),
                             tuple(settled), steps)

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



Runs = tuple[list[testrun.ProgramResult], tuple[tuple[testrun.ProgramResult, ...], ...]]
"""The tests' first runs on a tree, and each test's confirming runs (TreeBuilder.last_confirm)."""


def _flaky(first: list[testrun.ProgramResult], more: tuple[tuple[testrun.ProgramResult, ...], ...]) -> str:
    """What failed in some runs of a tree and not in others, in words ('' when nothing did)."""
    return "; ".join(f"`{c}` {how}" for r, m in zip(first, more, strict=True)
                     for c, how in runner.steady_failures(r, m)[1].items())


def _first(lines: tuple[str, ...]) -> str:
    return lines[0] + (f"; and {len(lines) - 1} more" if len(lines) > 1 else "") if lines else "no detail"


def _names(rows: list[cases.Case], limit: int = 3) -> str:
    shown = ", ".join(f"`{r.case}`" for r in rows[:limit])
    return shown + (f" and {len(rows) - limit} more" if len(rows) > limit else "")


def _case_verdict(declared: str, rows: list[cases.Case], before_runs: list[testrun.ProgramResult],
                  before_more: tuple[tuple[testrun.ProgramResult, ...], ...] = ()) -> tuple[str, str]:
    """(how the test fails without the fix, '') when the cases prove the patch, else ('', why not).

    Proof is a case that fails before and passes after, in every run (`before_more`: the before tree's
    confirming runs; a case that flips is flaky, never proof). A program stopped at its time limit proves
    nothing (cannot tell); a crash proves inside the case the program was in when it crashed (as its
    output shows) when the after tree passes that case, or anywhere with `Patchset-Before: crash`."""
    proof = [r for r in rows if r.role == cases.PROOF]
    flaky = [r for r in rows if r.role == cases.FLAKY]
    more = before_more or tuple(() for _ in before_runs)
    # a declared crash counts only at its site (the case it crashed in, or the last one it finished), the same in
    # every run: a crash elsewhere in another run is not the one declared
    signalled = [(r, m) for r, m in zip(before_runs, more, strict=True) if r.signal_name]
    crashed = [r for r, m in signalled if all(x.signal_name and x.crash_site == r.crash_site for x in m)]
    unsteady = [f"{r.program} ({r.signal_name} {r.crash_site}; then " + ", ".join(
        f"{x.signal_name} {x.crash_site}" if x.signal_name else x.verdict for x in m) + ")"
                for r, m in signalled if r not in crashed]
    timed_out = [r for r in before_runs if r.timed_out]
    flaky_note = f"; flaky, not part of the proof: {_flaky_names(flaky)}" if flaky else ""
    if proof:
        crash_cases = [r for r in proof if r.before == cases.CRASH]
        how = f"the test fails in {len(proof)} case(s) that pass with it ({_names(proof)})"
        if crash_cases:
            how += f"; the program crashed in {_names(crash_cases)}"
        if timed_out:
            how += f"; {', '.join(r.program for r in timed_out)} stopped at its time limit (not part of the proof)"
        return how + flaky_note, ""
    if declared == "crash" and crashed:
        n = 1 + max(len(m) for _, m in signalled)
        runs = f" in each of {n} runs" if n > 1 else ""
        return (f"{', '.join(f'{r.program} crashes ({r.signal_name}) {r.crash_site}' for r in crashed)}{runs}, "
                "as the patch declares"), ""
    if declared == "crash" and unsteady:
        return "", (f"{words.FLAKY}: without the fix the test does not crash at one site in every run: "
                    f"{'; '.join(unsteady)}")
    if flaky:
        return "", (f"no case fails in every run without the fix and passes in every run with it: "
                    f"{_flaky_names(flaky)}")
    if timed_out:
        r = timed_out[0]
        where = next((f" in `{c.case}`" for c in rows if c.before == cases.TIMEOUT and c.command.startswith(r.program)),
                     "")
        return "", (f"cannot tell: without the fix {r.program} stopped at its time limit{where}, and no case "
                    "failed there that passes with the fix")
    if crashed:
        r = crashed[0]
        where = next((f"`{c.case}`" for c in rows if c.before == cases.CRASH), "")
        inside = f"in {where}, which the after tree does not pass" if where else "outside any case it printed"
        return "", (f"without the fix {r.program} crashes ({r.signal_name}) {inside}: a crash proves only inside a "
                    "case the after tree runs and passes, or where the patch declares that its before tree crashes")
    if declared == "crash":
        return "", "the patch declares that its before tree crashes, but without the fix no test program crashes"
    failing = [r for r in rows if r.before == cases.FAIL]
    if failing:
        return "", (f"no case fails without the fix and passes with it: those failing without it "
                    f"({_names(failing)}) do not pass with it")
    return "", "no case fails without the fix and passes with it (the before tree fails with no failing case)"


def _flaky_names(rows: list[cases.Case], limit: int = 3) -> str:
    shown = ", ".join(f"`{r.case}` {r.runs.split(':', 1)[0]}" for r in rows[:limit])
    return shown + (f" and {len(rows) - limit} more" if len(rows) > limit else "")


def _guard_note(rows: list[cases.Case]) -> str:
    guards = [r for r in rows if r.role == cases.GUARD]
    if not guards:
        return ""
    return (f"; {len(guards)} added case(s) pass without the fix too ({_names(guards)}): guard cases, not part of "
            "the proof (declare them as guards in the patch's trailers)")


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def _holds_reason(e: ev.Evidence) -> str:
    return f"earlier proof holds: {e.holds.get('why')}, {e.created}"


def hunk_test_limits(after_tests: tuple[dict, ...]) -> dict[str, float]:
    """Each test command's time limit on a tree with one hunk reverted: 20x its own time on the after
    tree (a slow program beside it does not raise it), at least HUNK_TEST_TIMEOUT_MIN_S."""
    return {t["command"]: max(HUNK_TEST_TIMEOUT_MIN_S, 20 * t["duration_s"]) for t in after_tests}


def verify(project: Project, names: list[str] | None = None, backends: list[str] | None = None,
           progress: ProgressSink | None = None, reuse: bool = True, jobs: int | None = None,
           cuda_arch: str | None = None, *, timeout: float | None = testrun.DEFAULT_TIMEOUT_S,
           hunks: bool = False, confirm: int = words.CONFIRM_RUNS, lanes: int | None = None,
           on_verdict: Callable[[PatchVerdict], None] | None = None,
           also: Mapping[str, list[str]] | None = None) -> VerifyReport:
    """Prove `names` (default: every patch) on `backends`, and the patches `also` names on its backends
    (`all`'s stand-ins), all in one schedule; `on_verdict` gets each verdict as soon as it and every one
    before it in series order are known."""
    # verify writes the work repository (refs, its worktree) and .patchset/: one process at a time
    with project_lock(project.lock_file, purpose="verify"):
        return _verify(Verifier(project, progress, reuse, jobs, cuda_arch, timeout=timeout, hunks=hunks,
                                confirm=confirm, lanes=lanes), names, backends, on_verdict, also)


def plan(project: Project, names: list[str] | None = None, backends: list[str] | None = None, *,
         reuse: bool = True, jobs: int | None = None, hunks: bool = False, lanes: int | None = None,
         command: str = "verify", steps: tuple[plan_mod.Node, ...] = (),
         also: Mapping[str, list[str]] | None = None) -> plan_mod.Plan:
    """The plan `verify` with these arguments would run (`verify --plan`): the trees are made (git
    objects and refs only), nothing is built."""
    with project_lock(project.lock_file, purpose="verify --plan"):
        v = Verifier(project, None, reuse, jobs, timeout=None, hunks=hunks, lanes=lanes)
        pairs = _pairs(v, names, _backends(backends), also)
        return v.plan(pairs, v.make_trees(), command, steps)


def _pairs(v: Verifier, names: list[str] | None, backends: list[str],
           also: Mapping[str, list[str]] | None) -> list[tuple[Patch, str]]:
    """Each patch and backend to prove, in series order (then the backends' order)."""
    chosen = [v.series.by_name(n) for n in names] if names else list(v.series.patches)
    extra = {(n, b) for b, ns in (also or {}).items() for n in ns}
    order = [*backends, *(also or {})]
    pairs = [(p, b) for p in v.series.patches for b in order
             if (p in chosen and b in backends) or (p.name, b) in extra]
    return pairs


def _backends(backends: list[str] | None) -> list[str]:
    backends = backends or list(available_backends())
    for backend in backends:
        backendmod.profile(backend)
    return backends


def _verify(v: Verifier, names: list[str] | None, backends: list[str] | None,
            on_verdict: Callable[[PatchVerdict], None] | None = None,
            also: Mapping[str, list[str]] | None = None) -> VerifyReport:
    pairs = _pairs(v, names, _backends(backends), also)
    # an evidence file whose write a kill cut short (a lane's, while another lane was killed) is never read
    remove_half_written(v.project.evidence_dir)
    trees = v.make_trees()
    # from the head of the series down: neighbouring trees differ least, so each switch of the
    # one verify worktree recompiles little
    plan = list(reversed(pairs))
    series_order = [(p.name, b) for p, b in pairs]
    report = schedule.InOrder(series_order, on_verdict)
    verdicts = []
    # first what the evidence on disk still answers (nothing built), so that no build makes a
    # program ahead for a patch whose proof holds
    todo = []
    for patch, backend in plan:
        start = time.perf_counter()
        done = v.settled(patch, trees[patch.index], backend)
        if done:
            verdicts.append(dataclasses.replace(done, seconds=time.perf_counter() - start))
            report.add((patch.name, backend), verdicts[-1])
        else:
            todo.append((patch, backend))
    lanes = schedule.lanes_for(len(todo), v.jobs, v.lanes)
    if lanes == 1:
        for i, (patch, backend) in enumerate(todo):
            v.builder.later = [(trees[p.index], tuple(t.program for t in p.meta.tests
                                                      if t.runs_on(b, p.meta.backends)))
                               for p, b in todo[i + 1:] if b == backend]
            v.builder.position = f"patch {i + 1}/{len(todo)}"
            start = time.perf_counter()
            proved = v.prove_patch(patch, trees[patch.index], backend)
            verdicts.append(dataclasses.replace(proved, seconds=time.perf_counter() - start))
            report.add((patch.name, backend), verdicts[-1])
    else:
        verdicts += _in_lanes(v, todo, trees, lanes, report)
    order = {key: n for n, key in enumerate(series_order)}
    return VerifyReport(tuple(sorted(verdicts, key=lambda x: order[(x.patch, x.backend)])))


def _in_lanes(v: Verifier, todo: list[tuple[Patch, str]], trees: dict[int, Trees], lanes: int,
              report: schedule.InOrder) -> list[PatchVerdict]:
    """The patches of `todo` proven in `lanes` lanes at once, the longest chains first, every build on
    one jobserver of the run's job slots (builder/prove/schedule.py)."""
    by_key = {(p.name, b): (p, b) for p, b in todo}
    planned = v.plan(todo, trees)
    chains = [by_key.pop((c.patch, c.backend)) for c in planned.chains if (c.patch, c.backend) in by_key]
    # what builds no tree (`needs cuda`, no test for the backend) last: it takes no time
    chains += by_key.values()
    started = itertools.count(1)  # the patches' count as lanes start them (next() is atomic: lanes are threads)
    with Jobserver(v.jobs or os.cpu_count() or 1) as pool:
        verifiers: dict[int, Verifier] = {}

        def prove(lane: int, job: tuple[Patch, str]) -> PatchVerdict:
            if lane not in verifiers:
                verifiers[lane] = v.in_lane(lane, pool.makeflags, pool.alone)
            patch, backend = job
            verifiers[lane].builder.position = f"patch {next(started)}/{len(todo)}"
            start = time.perf_counter()
            proved = verifiers[lane].prove_patch(patch, trees[patch.index], backend)
            return dataclasses.replace(proved, seconds=time.perf_counter() - start)

        def done(i: int, verdict: PatchVerdict) -> None:
            report.add((verdict.patch, verdict.backend), verdict)

        return schedule.run_lanes(chains, lanes, prove, pool=pool, done=done)


def report_table(project: Project) -> list[tuple[str, dict[str, str]]]:
    """Outcome per patch and backend from the evidence on disk (for `verify --report`), with the
    hunk summary where `--hunks` ran (e.g. `not proven (hunks 7/8 caught, 1 unguarded)`)."""
    series = load_series(project.patches_dir)
    rows = []
    for p in series.patches:
        cells = {}
        for b in backendmod.PROFILES:
            e = ev.load(project.evidence_dir, p.name, b)
            if e is not None:
                cells[b] = recorded_outcome(e.outcome, e.hunks, e.hunks_checked)
        rows.append((p.name, cells))
    return rows


def recorded_outcome(outcome: str, hunks: tuple[dict, ...] | list[dict], hunks_checked: bool) -> str:
    """The words of one evidence record as `verify --report` prints them: its outcome, with the hunk
    summary where `--hunks` ran (`patchset report --html` shows the same words)."""
    return outcome + (f" ({hk.summarize(hunks)})" if hunks_checked else "")

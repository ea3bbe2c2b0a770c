"""Known-positive proof of each patch: its tests fail without the fix and pass with it.

For patch k: before = pin + patches 1..k-1 + only patch k's test paths; after = pin + 1..k;
mutation = after + the patch's known-bad variant. The trees are made with git plumbing in a
temporary index (the user's work tree and patches/ are never touched). A patch's trees are checked
out one after another into one verify worktree and built in one build folder per backend, so
switching trees recompiles only the files that differ; independent patches are proven at once in
lanes of their own (builder/prove/schedule.py), on one jobserver, longest first (builder/prove/plan.py).

This module runs the proof over the series: which patches on which backends, the evidence that
still holds first (nothing built), the rest in one lane or several; each patch's verdict is
`Verifier`'s (builder/prove/verifier.py), and what it answers is builder/prove/verdicts.py's.
"""

from __future__ import annotations

import dataclasses
import itertools
import os
import time
from collections.abc import Callable, Mapping

from builder import words
from builder.compile import backends as backendmod
from builder.compile import testrun
from builder.compile.jobserver import Jobserver
from builder.fsutil import remove_half_written
from builder.locking import project_lock
from builder.progress import ProgressSink
from builder.project import Project
from builder.prove import plan as plan_mod
from builder.prove import schedule
from builder.prove.backends_here import available_backends
from builder.prove.trees import Trees
from builder.prove.verdicts import PatchVerdict, VerifyReport
from builder.prove.verifier import Verifier
from builder.series.model import Patch


def verify(project: Project, names: list[str] | None = None, backends: list[str] | None = None,
           progress: ProgressSink | None = None, reuse: bool = True, jobs: int | None = None,
           cuda_arch: str | None = None, *, timeout: float | None = testrun.DEFAULT_TIMEOUT_S,
           hunks: bool = False, confirm: int = words.CONFIRM_RUNS, lanes: int | None = None,
           on_verdict: Callable[[PatchVerdict], None] | None = None,
           also: Mapping[str, list[str]] | None = None, beside: schedule.Beside | None = None) -> VerifyReport:
    """Prove `names` (default: every patch) on `backends`, and the patches `also` names on its backends
    (`all`'s stand-ins), all in one schedule; `on_verdict` gets each verdict as soon as it and every one
    before it in series order are known. `beside` runs at once with the proofs, on their jobserver (`all`'s
    patched build and tests: schedule.Beside); it has ended when this returns."""
    # verify writes the work repository (refs, its worktree) and .patchset/: one process at a time
    with project_lock(project.lock_file, purpose="verify"):
        return _verify(Verifier(project, progress, reuse, jobs, cuda_arch, timeout=timeout, hunks=hunks,
                                confirm=confirm, lanes=lanes), names, backends, on_verdict, also, beside)


def plan(project: Project, names: list[str] | None = None, backends: list[str] | None = None, *,
         reuse: bool = True, jobs: int | None = None, hunks: bool = False, lanes: int | None = None,
         command: str = "verify", steps: tuple[plan_mod.Node, ...] = (),
         also: Mapping[str, list[str]] | None = None, beside: bool = False) -> plan_mod.Plan:
    """The plan `verify` with these arguments would run (`verify --plan`): the trees are made (git
    objects and refs only), nothing is built."""
    with project_lock(project.lock_file, purpose="verify --plan"):
        v = Verifier(project, None, reuse, jobs, timeout=None, hunks=hunks, lanes=lanes)
        pairs = _pairs(v, names, _backends(backends), also)
        return v.plan(pairs, v.make_trees(), command, steps, beside)


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
            also: Mapping[str, list[str]] | None = None, beside: schedule.Beside | None = None) -> VerifyReport:
    pairs = _pairs(v, names, _backends(backends), also)
    # an evidence file whose write a kill cut short (a lane's, while another lane was killed) is never read;
    # nor a lane build folder's record, whichever lane builds there next (or none)
    remove_half_written(v.project.evidence_dir)
    for folder in v.project.build_root.glob("verify-*"):
        remove_half_written(folder, below=False)
    trees = v.make_trees()
    # the files other trees differ in by comments only are compiled as the series head has them (the
    # patched build's version): every lane's build then finds those objects in the compiler cache
    v.builder.reference = trees[max(trees)].after if trees else None
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
    lanes = v.lanes_for(len(todo))
    if beside is not None:
        v.builder.beside = beside
        verdicts += _in_lanes(v, todo, trees, lanes, report, beside)
    elif lanes == 1:
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
              report: schedule.InOrder, beside: schedule.Beside | None = None) -> list[PatchVerdict]:
    """The patches of `todo` proven in `lanes` lanes at once, the longest chains first, every build on
    one jobserver of the run's job slots (builder/prove/schedule.py); `beside` in a thread of its own on
    the same jobserver, ahead of the lanes' first builds on its backend."""
    by_key = {(p.name, b): (p, b) for p, b in todo}
    planned = v.plan(todo, trees)
    chains = [by_key.pop((c.patch, c.backend)) for c in planned.chains if (c.patch, c.backend) in by_key]
    # what builds no tree (`needs cuda`, no test for the backend) last: it takes no time
    chains += by_key.values()
    started = itertools.count(1)  # the patches' count as lanes start them (next() is atomic: lanes are threads)
    first_builds = schedule.FirstBuilds()
    if beside is not None:
        beside.attach(first_builds, v.builder.head_keys(beside.backend))
    with Jobserver(v.jobs or os.cpu_count() or 1, lanes + (beside is not None)) as pool:
        verifiers: dict[int, Verifier] = {}

        def prove(lane: int, job: tuple[Patch, str]) -> PatchVerdict:
            if lane not in verifiers:
                verifiers[lane] = v.in_lane(lane, pool.makeflags, pool.alone, first_builds, pool.lend)
            patch, backend = job
            verifiers[lane].builder.position = f"patch {next(started)}/{len(todo)}"
            start = time.perf_counter()
            proved = verifiers[lane].prove_patch(patch, trees[patch.index], backend)
            return dataclasses.replace(proved, seconds=time.perf_counter() - start)

        def done(i: int, verdict: PatchVerdict) -> None:
            report.add((verdict.patch, verdict.backend), verdict)

        return schedule.run_lanes(chains, lanes, prove, pool=pool, done=done, beside=beside)

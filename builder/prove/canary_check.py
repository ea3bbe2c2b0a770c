"""`canary --build` / `--test`: an upstream commit's tree with the series up to a patch, built and tested.

Does that tree still build, and does the patch's test still pass there with its fix?

The check `builder.series.canary` bisects over where text checks pass: for patch k at a commit, the
commit's tree with the patches 1..k that apply there (as the dry run carries them) is checked out into
verify's own source folder (`.patchset/verify/src`, only the files that differ rewritten:
`trees.checkout_tree`) and built in verify's build folder of the backend, ggml and the patch's test
programs only; with `--test` the patch's tests for that backend run on it and must pass. Built,
run and judged by verify's one runner (`runner.run_tree`): a program that does not load is a tree
that does not build, never a test that fails. The compiler cache and the build folder are shared with verify, so a
tree one file away from the last one built recompiles that file.
With lanes (`--lanes`, or as many as the cores, memory and a compiler cache allow: the scheduler's
rule, `schedule.lanes_for`) a bisection round checks that many commits at once, each tree in a lane's
own worktree and build folder (verify's `src-N`, `verify-BACKEND-minimal-N`), every build on one
jobserver of `--jobs` slots, a test program on its lane's slot (runner.gated; a GPU backend's one at a
time) (builder/prove/schedule.py).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext

from builder import words
from builder.compile import cmakebuild as buildmod
from builder.compile import testrun
from builder.compile.jobserver import Jobserver
from builder.compile.toolchain import find_ccache
from builder.errors import InputError
from builder.gitrepo import GitRepo
from builder.progress import NullProgress, ProgressSink
from builder.project import Project
from builder.prove import runner, schedule
from builder.prove.backends_here import available_backends
from builder.prove.treebuild import lane_build_dir, lane_src
from builder.prove.trees import checkout_tree
from builder.series.canary import KIND_BUILD, KIND_TEST
from builder.series.model import Patch


class Checker:
    """The tree check canary bisects with (`__call__`: one tree, in the first lane's folders) and `many`:
    several trees at once in `lanes` lanes on one jobserver."""

    def __init__(self, project: Project, backend: str, test: bool, progress: ProgressSink, jobs: int | None,
                 timeout: float | None, confirm: int, lanes: int) -> None:
        self.project, self.backend, self.test, self.progress = project, backend, test, progress
        self.jobs, self.timeout, self.confirm, self.lanes = jobs, timeout, confirm, lanes

    def __call__(self, git: GitRepo, patch: Patch, tree: str) -> tuple[str, str]:
        return self._check(git, patch, tree, 0, self.progress, None, nullcontext)

    def many(self, git: GitRepo, patch: Patch, trees: list[str]) -> list[tuple[str, str]]:
        """Each of `trees` checked, in up to `lanes` lanes at once (the results in the order of `trees`)."""
        lanes = min(self.lanes, len(trees))
        with Jobserver(self.jobs or os.cpu_count() or 1, lanes) as pool:
            sinks: dict[int, ProgressSink] = {}

            def work(lane: int, tree: str) -> tuple[str, str]:
                sink = sinks.setdefault(lane, self.progress.lane())
                return self._check(git, patch, tree, lane, sink, pool.makeflags, pool.alone)

            return schedule.run_lanes(trees, lanes, work, pool=pool)

    def _check(self, git: GitRepo, patch: Patch, tree: str, lane: int, sink: ProgressSink, jobserver: str | None,
               gate: Callable[[], AbstractContextManager[object]]) -> tuple[str, str]:
        project, backend, confirm, timeout = self.project, self.backend, self.confirm, self.timeout
        tests = [t for t in patch.meta.tests if t.runs_on(backend, patch.meta.backends)]
        programs = tuple(dict.fromkeys(t.program for t in tests))
        src = lane_src(project, lane)
        # each lane its own index (what checkout_tree compares the folder with) and logs
        suffix = f"-{lane}" if lane else ""
        checkout_tree(git, src, project.state_dir / "canary" / f"index{suffix}", tree)
        spec = buildmod.BuildSpec(source=src, build_dir=lane_build_dir(project, backend, lane), backend=backend,
                                  targets="minimal", programs=programs, build_targets=programs,
                                  jobs=None if jobserver else self.jobs, platform_cache=project.platform_cache,
                                  jobserver=jobserver)
        logs = project.state_dir / "canary" / "logs" / (patch.name.removesuffix(".patch") + suffix)
        label = f"canary: {patch.name} [{backend}]"
        run = runner.run_tree([spec], src, tests if self.test else [], backend, patch.meta.test_part,
                              lambda i, inv: logs / f"{i}-{inv.program}.log", timeout=timeout, progress=sink,
                              label=label, gate=gate)
        if not run.built:
            return KIND_BUILD, run.errors[0]
        if not self.test or not tests:
            return "", ""  # a patch without a test here: only its build is checked
        if run.verdict == words.TREE_PASSES:
            return "", ""
        # a break is what fails in every run: the failing cases run again, back to back on this build
        more = runner.confirm(run, tests, backend, confirm, runner.FAILING,
                              lambda i, k, inv: logs / f"{i}-{inv.program}-run{k}.log", timeout=timeout, progress=sink,
                              label=label, gate=gate)
        found = [runner.steady_failures(r, m) for r, m in zip(run.results, more, strict=True)]
        if run.verdict == words.TREE_FAILS and not any(steady for steady, _ in found):
            return "", ""  # flaky: no failure repeats in every run
        said = "; ".join(f"{t} {r.verdict} ({r.passed} passed, {r.failed} failed)" for t, r in zip(tests, run.results,
                                                                                                  strict=True))
        return KIND_TEST, said + (f"; failing in each of {confirm} runs" if confirm > 1 else "")


def checker(project: Project, backend: str = "cpu", test: bool = False, progress: ProgressSink | None = None,
            jobs: int | None = None, timeout: float | None = testrun.DEFAULT_TIMEOUT_S,
            confirm: int = words.CONFIRM_RUNS, lanes: int | None = None) -> Checker:
    """The tree check canary bisects with: ('', '') when the tree builds (and with `test`, the patch's
    tests pass on it), else (KIND_BUILD, the first compiler error) or (KIND_TEST, what failed in every one
    of `confirm` runs: a case that fails in some runs only is flaky, and no break). `lanes`: trees checked
    at once a bisection round (default: the scheduler's rule for the cores, memory and compiler cache)."""
    if backend not in available_backends():
        raise InputError(f"--backend {backend}: not on this machine (here: {', '.join(available_backends())})")
    # a bisection round has as many commits to try as it is given lanes: the job slots bound them, not the chains
    slots = jobs or os.cpu_count() or 1
    width = schedule.lanes_for(slots, jobs, lanes, shared_objects=find_ccache() is not None)
    return Checker(project, backend, test, progress or NullProgress(), jobs, timeout, confirm, width)

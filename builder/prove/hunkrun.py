"""`verify --hunks`: each unit of a fix reverted on its own, and what the tests say of each."""

from __future__ import annotations

from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from builder import words
from builder.compile import testrun
from builder.progress import ProgressSink
from builder.prove import hunks as hk
from builder.prove import runner
from builder.prove.runner import Limits, limit_of
from builder.prove.treebuild import TreeBuilder, lane_syntax_tree
from builder.prove.trees import Trees, checkout_detached
from builder.series.model import Patch, TestSpec


class HunkRunner:
    """Reverts each unit of a fix in turn, checks that the tree compiles, builds it and runs the tests."""

    def __init__(self, builder: TreeBuilder, progress: ProgressSink, *, confirm: int = 1) -> None:
        self.builder = builder
        self.confirm = confirm
        """Runs that confirm a catch: a reverted hunk is caught by a failure seen in every one (verify's --confirm)."""
        self.work = builder.work
        self.progress = progress
        # one per lane of the scheduler, as the lane's worktree
        self.syntax_tree = lane_syntax_tree(builder.project, builder.lane)

    def run(self, patch: Patch, trees: Trees, backend: str, tests: list[TestSpec],
            timeout: Limits = None) -> list[hk.HunkResult]:
        """Each unit of the fix reverted on its own, right after the after tree was built.

        Compiling files on their own (`-fsyntax-only`) needs no build folder, so it runs beside the
        builds, in a worktree of its own (`.patchset/verify/syntax`), one file at a time: first the
        checks that decide (llama's own sources, which the test build does not compile), then, from
        the last unit back, the pre-checks of units of the build (a header recompiles all its
        users; its pre-check compiles the fix's and the tests' sources only). A pre-check that
        fails makes the unit "not built" without a build; one that passes decides nothing. The
        builds wait for a header's pre-check, not for a source's (one recompiled file is as quick
        to say)."""
        git = self.work.git
        maker = hk.RevertMaker(git, trees.after)
        units = hk.fix_units(git, trees.parent, trees.after, patch, maker.lines)
        hk.check_rules(patch, units, maker)
        fix_files = list(dict.fromkeys(u.file for u in units))
        db = self.builder.compile_db()
        results: list[hk.HunkResult] = []
        todo: list[_HunkJob] = []
        for n, unit in enumerate(hk.order(units), 1):
            why = hk.exemption(unit, patch.meta.hunks, maker.lines(unit.file))
            if why:
                results.append(hk.result(unit, hk.EXEMPT, why))
                continue
            commit = maker.commit(unit, f"verify: {patch.name} without {unit.label}")
            git.update_ref(f"refs/patchset/verify/{patch.index:04d}/hunk-{n}", commit)
            # a file the test build does not compile (llama's own sources) is compiled on its own
            required = hk.syntax_units(unit, fix_files, patch.meta.test_part)
            pre = [] if required or db is None else hk.precheck_files(unit, fix_files, patch.meta.test_part, db)
            todo.append(_HunkJob(n, unit, commit, tuple(required or pre), bool(required)))
        syntax_tree = self.syntax_tree
        pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="patchset-syntax")
        try:
            submitted = [j for j in todo if j.required] + [j for j in reversed(todo) if j.files and not j.required]
            futures: dict[int, Future[list[str]]] = {
                j.n: pool.submit(self._syntax_errors, syntax_tree, j.commit, j.files, db) for j in submitted}
            deferred = []
            for job in todo:
                fut = futures.get(job.n)
                if job.required and fut is not None and not fut.done():
                    deferred.append(job)  # decided by its check: after the others
                    continue
                if fut is not None and not fut.done() and not hk.is_header(job.unit.file):
                    fut.cancel()  # one source recompiled: the build is as quick to say
                    fut = None
                # a header's users all recompile: its pre-check (the fix's and tests' sources) is waited for
                errors = fut.result() if fut is not None else []
                results.append(self._hunk_tree(patch, backend, tests, timeout, job, len(units), errors))
            for job in deferred:
                hunk = self.builder.label(patch, backend, "hunk")
                self.progress.begin(f"{hunk} {job.n}/{len(units)} {job.unit.label}: compiling", None)
                errors = futures[job.n].result()
                self.progress.end()
                results.append(self._hunk_tree(patch, backend, tests, timeout, job, len(units), errors))
        finally:
            pool.shutdown(wait=True, cancel_futures=True)
        # back in the source order of the patch for the evidence
        rank = {(u.file, u.hunk, u.part): i for i, u in enumerate(units)}
        return sorted(results, key=lambda r: rank[(r.file, r.hunk, r.part)])

    def _syntax_errors(self, tree: Path, commit: str, files: tuple[str, ...], db: hk.CompileDb | None) -> list[str]:
        """(In the syntax thread.) `files` of `commit` compiled on their own in the worktree at `tree`."""
        checkout_detached(self.work.git, tree, commit)
        return list(hk.relative(hk.syntax_check(tree, list(files), db=db), tree))

    def _hunk_tree(self, patch: Patch, backend: str, tests: list[TestSpec], timeout: Limits, job: _HunkJob,
                   total: int, errors: list[str]) -> hk.HunkResult:
        """The outcome of one reverted tree: not built when `errors` (its files compiled on their
        own), else what its build and tests say."""
        unit, commit = job.unit, job.commit
        if errors:
            return hk.result(unit, hk.NOT_BUILT, "does not compile", errors=tuple(errors[:10]), commit=commit)
        hunk = self.builder.label(patch, backend, "hunk")
        self.progress.begin(f"{hunk} {job.n}/{total} {unit.label}: building", None)
        self.progress.end()
        step = self.builder.run_tree(f"hunk-{job.n}", commit, patch, backend, tests, timeout, record_inputs=False,
                                     confirm=self.confirm)
        if not step.build_ok:
            return hk.result(unit, hk.NOT_BUILT, "does not build",
                             errors=hk.relative(step.build_errors[:10], self.builder.src), commit=commit,
                             build_duration_s=step.build_duration_s)
        # a tree that did not build ran no test: only a built one has runs to confirm
        found = [runner.steady_failures(r, m) for r, m in zip(self.builder.last_results, self.builder.last_confirm,
                                                               strict=True)]
        failing = tuple(line for t in step.tests for line in t.get("failing", ()))
        if step.verdict == words.TREE_FAILS and not any(steady for steady, _ in found):
            flips = "; ".join(f"`{c}` {how}" for _, flaky in found for c, how in flaky.items())
            outcome, reason = hk.UNGUARDED, f"it builds and the tests fail in some runs only: {flips}"
        elif step.verdict == words.TREE_FAILS:
            how = [f"{t['command'].split()[0]}: " + _how_it_failed(t, limit_of(timeout, t["command"]))
                   for t in step.tests if t["verdict"] != testrun.PASSED]
            outcome, reason = hk.CAUGHT, f"the tests fail ({'; '.join(how)})"
        else:
            outcome, reason = hk.UNGUARDED, ("it builds and the tests pass" if step.verdict == words.TREE_PASSES
                                              else f"it builds and the tests: {step.verdict}")
        return hk.result(unit, outcome, reason, failing=failing[:20], commit=commit,
                         build_duration_s=step.build_duration_s, tests=step.tests)


@dataclass(frozen=True)
class _HunkJob:
    """One reverted tree of `verify --hunks`, and the files to compile on their own for it."""

    n: int
    unit: hk.Unit
    commit: str
    files: tuple[str, ...]
    required: bool
    """The files are outside the test build: their check decides whether the tree compiles."""


def _how_it_failed(test: dict, timeout: float | None) -> str:
    # a run stopped at its limit has no signal of its own (the runner killed its process group): its
    # record says `timed_out` (older records: returncode -9, no signal, at least the limit's time)
    stopped = test.get("timed_out") or (test.get("signal") is None and test.get("returncode") == -9
                                        and timeout is not None and test["duration_s"] >= timeout)
    if stopped:
        return f"did not finish in {timeout:.0f}s (killed)" if timeout is not None else "did not finish (killed)"
    if test.get("signal"):
        return f"killed by {test['signal']}"
    return f"exit {test['returncode']}, {test['failed']} failed"


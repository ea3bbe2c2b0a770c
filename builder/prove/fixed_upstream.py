"""Whether upstream fixed a patch: its own failing-before test, run on the new upstream without the fix.

Text cannot tell a merged fix from a conflicting one: upstream rarely takes a fix byte for byte,
and often edits the same lines later. Our patches carry tests that fail without the fix, so a
move to a new upstream (`rebase --dry-run --fixed-upstream`, `rebase --fixed-upstream`) builds,
for each patch, the tree verify calls "before" on the NEW upstream: the new base with the earlier
patches that still apply there, plus only the patch's test part (`Patchset-Test-Paths`), and runs
the patch's tests on it:

- the control: the same test part on the OLD pin (exactly verify's before tree), built and run in
  the same check on the same backend. Only cases seen failing there count: a case is fixed when it
  failed on the old pin and passes on the new upstream. When one looks fixed, each tree's tests run
  again, back to back on its build (`confirm` runs in all, words.CONFIRM_RUNS unless asked), and the
  case must fail in every run on the old pin and pass in every run on the new upstream: a flaky case
  (`flaky (N of M runs)`) makes it `cannot tell`;
- every case that failed on the old pin is fixed, and none fails on the new upstream: `fixed
  upstream`; some, the others still failing on both: `partly fixed upstream`, listing the cases
  that still fail (what is left of the patch); none: `not fixed upstream`;
- `cannot tell`, with why: the test passes on the old pin too (it does not show the bug here), a
  case is flaky, fails only on the new upstream or is not run there, the test part does not apply
  or does not build, the tests check nothing (`testrun.tree_verdict`, verify's rule), or the
  backend is not on this machine. For `Patchset-Before: build-fails` the control is the old pin's
  compile error in the test paths: a test part that compiles on the new upstream and passes in
  every run is `fixed upstream`.

The trees are checked out one after another into verify's own source folder (`.patchset/verify/src`,
switched with `read-tree -u`, which rewrites only the files that differ) and built in verify's build
folder of the backend (`.patchset/build/verify-<backend>-minimal`): the old pin's tree of a patch is
exactly verify's before tree, and the new one differs from it only where upstream moved, so after a
verify (or a check) only those files recompile. A CMake build folder is bound to one source folder: with
a folder of its own the check compiled every file once more after a verify, and ccache could not help
(the absolute source paths differ in what it hashes; `benchmarks/fixed_upstream.py` measures both).
Verify finds its worktree changed and checks its own tree out again (`trees.checkout_detached`), which
also rewrites only the files that differ. Like verify's trees, each tree takes the series head's version of
the files that differ from it in comments and whitespace only (`trees.tree_with_comments_of`): the same code,
compiled alike, so the objects `patchset build` made are found in the compiler cache (patch 3's one line of
comment in ggml-backend.h, which every object of ggml and llama includes, compiled all of them again).
"""

from __future__ import annotations

from dataclasses import dataclass

from builder import words
from builder.compile import cmakebuild as buildmod
from builder.compile import testrun
from builder.progress import NullProgress, ProgressSink
from builder.project import Project
from builder.prove import runner
from builder.prove.backends_here import available_backends
from builder.prove.trees import checkout_tree, tree_with_comments_of
from builder.series.dryrun import Check, Moved, UpstreamFix
from builder.series.model import Patch, TestSpec
from builder.words import CANNOT_TELL, FIXED, NOT_FIXED, PARTLY_FIXED


@dataclass(frozen=True)
class _Run:
    """The patch's tests on one tree without the fix."""

    built: bool
    errors: tuple[str, ...] = ()
    only_tests: bool = False
    """The build failed, and only in the patch's test paths."""
    failing: tuple[str, ...] = ()
    """`program case(params)` of each failing case (`program: the program failed` when it named none)."""
    passing: tuple[str, ...] = ()
    """The cases seen passing, and `program: the program failed` of each program that passed as a whole."""
    verdict: str = testrun.TREE_NOTHING
    """The tree's verdict by verify's rule (`testrun.tree_verdict`)."""
    stopped: tuple[str, ...] = ()
    """The programs that did not run to their end (killed by a signal, or stopped at the time limit): the
    cases after the one they stopped in were not run."""
    summary: str = ""

    @property
    def checked(self) -> bool:
        return self.verdict != testrun.TREE_NOTHING


def checker(project: Project, backend: str | tuple[str, ...] | None = None, progress: ProgressSink | None = None,
            jobs: int | None = None, timeout: float | None = testrun.DEFAULT_TIMEOUT_S,
            confirm: int = words.CONFIRM_RUNS) -> Check:
    """The check `dryrun.dry_run` runs on what it made: a verdict per patch. Each patch is tested on
    the first backend of its `Patchset-Backends` (where its proof runs) that this machine has, among
    `backend` (one, or several in order) when given."""
    def check(moved: Moved) -> dict[str, UpstreamFix]:
        return _Checker(project, backend, progress or NullProgress(), jobs, timeout, moved, confirm).run()
    return check


class _Checker:
    def __init__(self, project: Project, backend: str | tuple[str, ...] | None, progress: ProgressSink,
                 jobs: int | None, timeout: float | None, moved: Moved, confirm: int = words.CONFIRM_RUNS) -> None:
        self.project, self.progress, self.jobs, self.timeout = project, progress, jobs, timeout
        self.confirm = max(2, confirm)
        """The runs of each tree before a case counts as fixed (at least two: a flaky case is never fixed)."""
        self.backends = (backend,) if isinstance(backend, str) else backend
        self.moved = moved
        self.root = project.state_dir / "upstream-check"
        self.src = project.state_dir / "verify" / "src"
        """Verify's worktree (see the module docstring); this check's own index says what it last wrote there."""
        self.index = self.root / "index"
        self.here = available_backends()
        self._targets: dict[str, str] = {}
        """Per tree, what is checked out for it (`_checkout`)."""
        self._runs: dict[tuple[str, str, str], list[_Run]] = {}
        """(patch, backend, tree) -> its runs, in order: the old and the new tree of a patch are one when
        upstream did not change what the test part is built from."""

    def run(self) -> dict[str, UpstreamFix]:
        out: dict[str, UpstreamFix] = {}
        for k, patch in enumerate(self.moved.patches):
            backend, why_not = self._backend_for(patch)
            if not backend:
                out[patch.name] = UpstreamFix(CANNOT_TELL, evidence=why_not)
            elif patch.meta.test_in_tree:
                out[patch.name] = UpstreamFix(CANNOT_TELL, evidence="the patch fixes the test program itself "
                                              "(Patchset-Test-Paths: none): it has no test part to run alone")
            else:
                tests = [t for t in patch.meta.tests if t.runs_on(backend, patch.meta.backends)]
                out[patch.name] = self._one(k, patch, backend, tests)
        return out

    def _backend_for(self, patch: Patch) -> tuple[str, str]:
        """(the backend to test the patch on, '') or ('', why none). Only a backend of the patch's
        proof counts: on the others its test passes without the fix (a Metal fix on the CPU)."""
        proof = patch.meta.backends
        reasons = []
        asked = [b for b in self.backends if b in proof] or list(self.backends[:1]) if self.backends else list(proof)
        for b in asked:
            if b not in self.here:
                reasons.append(f"backend {b} is not on this machine")
            elif b not in proof:
                reasons.append(f"the proof runs on {', '.join(proof) or 'no backend'}, not on {b}")
            elif not any(t.runs_on(b, proof) for t in patch.meta.tests):
                reasons.append(f"no test of the patch runs on {b}")
            else:
                return b, ""
        return "", "; ".join(reasons) or "the patch names no backend (Patchset-Backends)"

    def _one(self, k: int, patch: Patch, backend: str, tests: list[TestSpec]) -> UpstreamFix:
        """The verdict, controlled: a case is fixed upstream only when it failed without the fix on the
        old pin and passes on the new upstream, on this backend, in every one of `confirm` runs of
        each tree (the old pin's tree is verify's before tree)."""
        earlier = sum(1 for r in self.moved.report.patches[:k] if r.outcome in ("clean", "3-way"))
        old_at = self.moved.old_commit[:12]
        where = f"[{backend}] the test part on {self.moved.new_commit[:12]} with {earlier} earlier patch(es)"
        tree = self._test_part(self.moved.new_bases[k], patch)
        if tree is None:
            return UpstreamFix(CANNOT_TELL, evidence=f"the test part does not apply on {self.moved.new_commit[:12]}")
        new = self._run(tree, patch, backend, tests, "new")
        if not new.built:
            if patch.meta.before == "build-fails" and new.only_tests:
                return UpstreamFix(NOT_FIXED, evidence=f"{where} still fails to compile in the test paths "
                                   f"(Patchset-Before: build-fails): {'; '.join(new.errors[:3])}")
            return UpstreamFix(CANNOT_TELL, evidence=f"{where} does not build: {'; '.join(new.errors[:3])}")
        if not new.checked:
            return UpstreamFix(CANNOT_TELL, evidence=f"{where}: the tests check nothing ({new.summary})")
        # a case that passes may be one upstream fixed: the runs that confirm it now, while this tree is built
        news = self._runs_of(tree, patch, backend, tests, "new") if new.passing else [new]
        # the control: the same test part on the old pin, where verify saw it fail
        old_tree = self._test_part(self.moved.old_bases[k], patch)
        old = self._run(old_tree, patch, backend, tests, "old") if old_tree else _Run(False)
        said = f"{where}: {new.summary}; on {old_at}"
        if not old.built:
            if patch.meta.before == "build-fails" and old.only_tests:
                # the declared before-evidence: without the fix the test part does not compile
                return self._compiled_now(news, where,
                                          f"on {old_at} the test part fails to compile in the test paths "
                                          f"(Patchset-Before: build-fails): {'; '.join(old.errors[:1])}")
            return UpstreamFix(CANNOT_TELL, still_failing=new.failing,
                               evidence=f"{said} the test part does not build without the fix, so no run there "
                               "shows the bug (run `patchset verify`)")
        if not old.checked:
            return UpstreamFix(CANNOT_TELL, still_failing=new.failing,
                               evidence=f"{said} the tests check nothing ({old.summary})")
        if not old.failing:
            return UpstreamFix(CANNOT_TELL, still_failing=new.failing,
                               evidence=f"{said}: {old.summary}: passes on the old pin too: the test does not show "
                               "the bug here")
        evidence = f"{said}: {old.summary}"
        if not any(c in new.passing for c in old.failing):
            still = tuple(c for c in new.failing if c in old.failing)
            return UpstreamFix(NOT_FIXED, still_failing=still, evidence=evidence + _only_new(new, old))
        # something looks fixed: each tree run again, back to back, before a case counts
        olds = self._runs_of(old_tree or "", patch, backend, tests, "old")
        flaky = {**_flaky(news), **_flaky(olds)}
        if flaky:
            said = "; ".join(f"{c} {how}" for c, how in flaky.items())
            return UpstreamFix(CANNOT_TELL, evidence=f"{evidence}; {said}: passed in one run on one tree and failed "
                               "in another: a flaky test does not show whether upstream fixed the bug")
        evidence += f" (each tree run {self.confirm} times, the same cases failing)"
        unreached = _unreached(new, old)
        still = tuple(c for c in new.failing if c in old.failing or c in unreached)
        passing = tuple(c for c in old.failing if c in new.passing)
        other = [c for c in new.failing if c not in old.failing and c not in unreached]
        if unreached:
            evidence += f"; still failing, not reached on the old pin (its run stopped before them): " \
                f"{', '.join(unreached)}"
        unseen = [c for c in old.failing if c not in new.passing and c not in new.failing]
        if other or unseen:
            why = "; ".join(filter(None, [f"failing only on the new upstream: {', '.join(other)}" if other else "",
                                          f"not run on the new upstream: {', '.join(unseen)}" if unseen else ""]))
            return UpstreamFix(CANNOT_TELL, still, passing, f"{evidence}; {why}")
        return UpstreamFix(PARTLY_FIXED if still else FIXED, still, passing, evidence)

    def _compiled_now(self, news: list[_Run], where: str, control: str) -> UpstreamFix:
        """A `build-fails` patch whose test part compiles on the new upstream: fixed when its tests pass
        there in every run (the API the patch changes is upstream's now, and its behaviour checked)."""
        new = news[0]
        if new.failing:
            return UpstreamFix(NOT_FIXED, still_failing=new.failing,
                               evidence=f"{where}: now builds, and fails: {new.summary}; {control}")
        flaky = _flaky(news)
        if flaky or any(r.verdict != testrun.TREE_PASSES for r in news):
            return UpstreamFix(CANNOT_TELL, evidence=f"{where}: {'; '.join(r.summary for r in news)}: not the same "
                               f"in each of {self.confirm} runs; {control}")
        return UpstreamFix(FIXED, evidence=f"{where}: {new.summary} (run {self.confirm} times); {control}")

    def _test_part(self, base: str, patch: Patch) -> str | None:
        """`base` plus only the patch's test paths (as verify's before tree), 3-way where needed; None when
        they do not apply there."""
        git = self.moved.git
        env = {"GIT_INDEX_FILE": str(self.moved.git.path / "test-part-index")}
        include = [a for p in patch.meta.test_part for a in (f"--include={p}",
                                                                              f"--include={p.rstrip('/')}/*")]
        git.run("read-tree", base, env=env)
        if git.run("apply", "--cached", "--check", "--reverse", *include, str(patch.path), env=env,
                   check=False).returncode == 0:
            return base  # upstream took the test part too: its tree is the one to run
        for flags in ((), ("--3way",)):
            git.run("read-tree", base, env=env)
            r = git.run("apply", "--cached", "--whitespace=nowarn", *flags, *include, str(patch.path), env=env,
                        check=False)
            if r.returncode == 0 and not git.run("ls-files", "--unmerged", env=env).stdout:
                return git.out("write-tree", env=env)
        return None

    def _checkout(self, tree: str) -> None:
        """Make `src` hold exactly `tree`, with the series head's version of its files that differ from it in
        comments only (the same code: what `patchset build` compiled is found in the compiler cache); only the
        files that differ from what is there are rewritten."""
        if tree not in self._targets:
            self._targets[tree] = tree_with_comments_of(self.moved.git, tree, self.moved.head or None)[0]
        checkout_tree(self.moved.git, self.src, self.index, self._targets[tree])

    def _run(self, tree: str, patch: Patch, backend: str, tests: list[TestSpec], kind: str) -> _Run:
        """The first run of the tests on `tree`."""
        return self._runs_of(tree, patch, backend, tests, kind, 1)[0]

    def _runs_of(self, tree: str, patch: Patch, backend: str, tests: list[TestSpec], kind: str,
                 n: int | None = None) -> list[_Run]:
        """The first `n` runs of the tests on `tree` (built once: the runs after the first only run the
        programs again, on the build of the tree checked out last)."""
        n = self.confirm if n is None else n
        runs = self._runs.setdefault((patch.name, backend, tree), [])
        while len(runs) < n:
            if runs and not runs[0].built:
                return runs * n
            runs.append(self._build_and_run(tree, patch, backend, tests, kind, len(runs) + 1))
        return runs[:n]

    def _build_and_run(self, tree: str, patch: Patch, backend: str, tests: list[TestSpec], kind: str,
                       attempt: int) -> _Run:
        self._checkout(tree)
        programs = tuple(dict.fromkeys(t.program for t in tests))
        spec = buildmod.BuildSpec(source=self.src, build_dir=self.project.build_root /
                                  f"verify-{backend}-minimal", backend=backend, targets="minimal",
                                  programs=programs, build_targets=programs, jobs=self.jobs,
                                  platform_cache=self.project.platform_cache)
        logs = self.root / "logs" / patch.name.removesuffix(".patch") / backend
        # verify's runner and rule: every compiler error read (each placed in the tree: the report may leave
        # the machine, in the bump's pull request), and a program that does not load is a tree not built
        run = runner.run_tree([spec], self.src, tests, backend, patch.meta.test_part,
                              lambda i, inv: logs / f"{kind}-{i}-{inv.program}-{attempt}.log",
                              timeout=self.timeout, progress=self.progress,
                              label=f"{patch.name} [{backend}] {kind} upstream, without the fix")
        if not run.built:
            return _Run(False, run.errors, run.only_tests)
        failing: list[str] = []
        passing: list[str] = []
        summaries = []
        stopped: list[str] = []
        for t, r in zip(tests, run.results, strict=True):
            cases = [f"{t.program} {c.case_id}" for c in r.cases if c.status in (testrun.FAIL, testrun.CRASH)]
            whole = f"{t.program}: the program failed"
            if not cases and r.verdict in (testrun.FAILED, testrun.CRASHED):
                cases = [whole]
            failing += [c for c in cases if c not in failing]
            passing += [c for c in (f"{t.program} {c.case_id}" for c in r.cases if c.status == testrun.PASS)
                        if c not in passing and c not in failing]
            if r.verdict == testrun.PASSED:
                passing.append(whole)
            if r.stopped:
                stopped.append(t.program)
            how = f"{r.signal_name or f'exit {r.returncode}'}, " if r.verdict in (testrun.FAILED, testrun.CRASHED) \
                and not r.failed else ""
            summaries.append(f"{t} {r.verdict} ({how}{r.passed} passed, {r.failed} failed)")
        return _Run(True, failing=tuple(failing), passing=tuple(c for c in passing if c not in failing),
                    verdict=run.verdict, summary="; ".join(summaries), stopped=tuple(stopped))


def _flaky(runs: list[_Run]) -> dict[str, str]:
    """The cases that failed in one of `runs` (of one tree) and not in another: `flaky (N of M runs)` each."""
    failing = [set(r.failing) for r in runs if r.built]
    if len(failing) < 2:
        return {}
    return {c: words.flaky(sum(c in f for f in failing), len(failing))
            for r in runs for c in r.failing if any(c not in f for f in failing)}


def _unreached(new: _Run, old: _Run) -> list[str]:
    """The cases that fail on the new upstream and that the old pin's run never reached: their program stopped
    there (a crash, the time limit) before them, and they were neither failing nor passing there. What is left of
    the patch, not a case that fails only on the new upstream: the old run says nothing of them either way."""
    return [c for c in new.failing if c not in old.failing and c not in old.passing
            and c.split(" ", 1)[0] in old.stopped and not c.endswith(": the program failed")]


def _only_new(new: _Run, old: _Run) -> str:
    other = [c for c in new.failing if c not in old.failing]
    return f"; failing only on the new upstream: {', '.join(other)}" if other else ""

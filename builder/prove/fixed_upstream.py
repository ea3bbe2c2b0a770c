"""Did upstream fix it? Each patch's own failing-before test, run on the new upstream without the fix.

Text cannot tell a merged fix from a conflicting one: upstream rarely takes a fix byte for byte,
and often edits the same lines later. Our patches carry tests that fail without the fix, so a
move to a new upstream (`rebase --dry-run --fixed-upstream`, `rebase --fixed-upstream`) builds,
for each patch, the tree verify calls "before" on the NEW upstream: the new base with the earlier
patches that still apply there, plus only the patch's test part (`Patchset-Test-Paths`), and runs
the patch's tests on it:

- every case passes: `fixed upstream`;
- some fail: the same tree on the OLD pin (exactly verify's before tree) says which cases failed
  there; those that pass now were fixed upstream. None: `not fixed upstream`; some:
  `partly fixed upstream`, listing the cases that still fail (what is left of the patch);
- the test part does not apply or does not build there, the test checks nothing, or the backend
  is not on this machine: `cannot tell`, with why.

The trees are checked out one after another into verify's own source folder (`.patchset/verify/src`,
switched with `read-tree -u`, which rewrites only the files that differ) and built in verify's build
folder of the backend (`.patchset/build/verify-<backend>-minimal`): the old pin's tree of a patch is
exactly verify's before tree, and the new one differs from it only where upstream moved, so after a
verify (or a check) only those files recompile. A CMake build folder is bound to one source folder: with
a folder of its own the check compiled every file once more after a verify, and ccache could not help
(the absolute source paths differ in what it hashes; `benchmarks/fixed_upstream.py` measures both).
Verify finds its worktree changed and checks its own tree out again (`trees.checkout_detached`), which
also rewrites only the files that differ.
"""

from __future__ import annotations

from dataclasses import dataclass

from builder.build import cmakebuild as buildmod
from builder.build import testrun
from builder.progress import NullProgress, ProgressSink
from builder.project import Project
from builder.prove import hunks as hk
from builder.prove.treebuild import tree_path
from builder.prove.verify import available_backends
from builder.series.dryrun import CANNOT_TELL, FIXED, NOT_FIXED, PARTLY_FIXED, Check, Moved, UpstreamFix
from builder.series.model import Patch, TestSpec


@dataclass(frozen=True)
class _Run:
    """The patch's tests on one tree without the fix."""

    built: bool
    errors: tuple[str, ...] = ()
    only_tests: bool = False
    """The build failed, and only in the patch's test paths."""
    failing: tuple[str, ...] = ()
    """`program case(params)` of each failing case (or `program: exit N` when it named none)."""
    checked: bool = True
    """False when no program checked anything."""
    summary: str = ""


def checker(project: Project, backend: str | None = None, progress: ProgressSink | None = None,
            jobs: int | None = None, timeout: float | None = testrun.DEFAULT_TIMEOUT_S) -> Check:
    """The check `dryrun.dry_run` runs on what it made: a verdict per patch. Each patch is tested on
    `backend`, or (None) on the first backend of its `Patchset-Backends` (where its proof runs) that
    this machine has."""
    def check(moved: Moved) -> dict[str, UpstreamFix]:
        return _Checker(project, backend, progress or NullProgress(), jobs, timeout, moved).run()
    return check


class _Checker:
    def __init__(self, project: Project, backend: str | None, progress: ProgressSink, jobs: int | None,
                 timeout: float | None, moved: Moved) -> None:
        self.project, self.backend, self.progress, self.jobs, self.timeout = project, backend, progress, jobs, timeout
        self.moved = moved
        self.root = project.state_dir / "upstream-check"
        self.src = project.state_dir / "verify" / "src"
        """Verify's worktree (see the module docstring); this check's own index says what it last wrote there."""
        self.index = self.root / "index"
        self.here = available_backends()
        self._runs: dict[tuple[str, str, str], _Run] = {}
        """(patch, backend, tree) -> its run: the old and the new tree of a patch are one when
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
        for b in [self.backend] if self.backend else list(proof):
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
        earlier = sum(1 for r in self.moved.report.patches[:k] if r.outcome in ("clean", "3-way"))
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
        if not new.failing:
            return UpstreamFix(FIXED, evidence=f"{where}: {new.summary}")
        old_tree = self._test_part(self.moved.old_bases[k], patch)
        old = self._run(old_tree, patch, backend, tests, "old") if old_tree else _Run(False)
        if not old.built or not old.failing:
            if patch.meta.before == "build-fails":
                return UpstreamFix(NOT_FIXED, still_failing=new.failing,
                                   evidence=f"{where}: now builds, and fails: {new.summary}")
            said = "does not build" if not old.built else "does not fail"
            return UpstreamFix(CANNOT_TELL, still_failing=new.failing,
                               evidence=f"{where}: {new.summary}; on {self.moved.old_commit[:12]} the test part "
                               f"{said} without the fix either (run `patchset verify`)")
        still = tuple(c for c in new.failing if c in old.failing)
        passing = tuple(c for c in old.failing if c not in new.failing)
        other = [c for c in new.failing if c not in old.failing]
        evidence = (f"{where}: {new.summary}; on {self.moved.old_commit[:12]}: {old.summary}"
                    + (f"; failing only on the new upstream: {', '.join(other)}" if other else ""))
        if not passing:
            return UpstreamFix(NOT_FIXED, still_failing=still, evidence=evidence)
        return UpstreamFix(PARTLY_FIXED if still else FIXED, still, passing, evidence)

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
        """Make `src` hold exactly `tree`: only the files that differ are rewritten."""
        git = self.moved.git
        env = {"GIT_INDEX_FILE": str(self.index)}
        work = f"--work-tree={self.src}"
        self.src.mkdir(parents=True, exist_ok=True)
        self.index.parent.mkdir(parents=True, exist_ok=True)
        if git.run(work, "read-tree", "--reset", "-u", tree, env=env, check=False).returncode != 0:
            # an index of another run that git cannot read: write every file again
            self.index.unlink(missing_ok=True)
            git.run(work, "read-tree", "--reset", "-u", tree, env=env)
        # files of a tree verify checked out there that this one lacks: not in this index, so left behind
        others = git.run(work, "ls-files", "-z", "--others", env=env).stdout
        for rel in filter(None, others.split("\0")):
            (self.src / rel).unlink(missing_ok=True)

    def _run(self, tree: str, patch: Patch, backend: str, tests: list[TestSpec], kind: str) -> _Run:
        key = (patch.name, backend, tree)
        if key not in self._runs:
            self._runs[key] = self._build_and_run(tree, patch, backend, tests, kind)
        return self._runs[key]

    def _build_and_run(self, tree: str, patch: Patch, backend: str, tests: list[TestSpec], kind: str) -> _Run:
        self._checkout(tree)
        programs = tuple(dict.fromkeys(t.program for t in tests))
        spec = buildmod.BuildSpec(source=self.src, build_dir=self.project.build_root /
                                  f"verify-{backend}-minimal", backend=backend, targets="minimal",
                                  programs=programs, build_targets=programs, jobs=self.jobs)
        self.progress.begin(f"{patch.name} [{backend}] {kind} upstream, without the fix: building", None)
        result = buildmod.build(spec)
        self.progress.end()
        if not result.ok:
            err = result.first_error
            # the file as a path of the tree: the report may leave the machine (the bump's pull request)
            rel = tree_path(err.file, self.src, spec.build_dir) if err else ""
            errors = (f"{rel}:{err.line}: {err.message}",) if err else ("the build failed (see its log)",)
            only = err is not None and hk.in_paths(rel, patch.meta.test_part)
            return _Run(False, errors, only)
        failing: list[str] = []
        summaries = []
        checked = False
        logs = self.root / "logs" / patch.name.removesuffix(".patch") / backend
        for i, t in enumerate(tests, 1):
            inv = _invocation(t, backend)
            self.progress.begin(f"{patch.name} [{backend}] {kind} upstream: {inv.program}", None)
            r = testrun.run_program(result.bin_dir, inv, logs / f"{kind}-{i}-{inv.program}.log", timeout=self.timeout)
            self.progress.end()
            cases = [f"{t.program} {c.case_id}" for c in r.cases if c.status in (testrun.FAIL, testrun.CRASH)]
            if not cases and r.verdict in (testrun.FAILED, testrun.CRASHED):
                cases = [f"{t.program}: {r.signal_name or f'exit {r.returncode}'}"]
            failing += [c for c in cases if c not in failing]
            checked = checked or r.verdict != testrun.NOTHING
            summaries.append(f"{t} {r.verdict} ({r.passed} passed, {r.failed} failed)")
        return _Run(True, failing=tuple(failing), checked=checked, summary="; ".join(summaries))


def _invocation(t: TestSpec, backend: str) -> testrun.Invocation:
    """How verify runs a test on a backend: test-backend-ops gets the backend's device."""
    prof = buildmod.profile(backend)
    args = (*t.args, "-b", prof.device) if t.program == "test-backend-ops" and "-b" not in t.args else t.args
    return testrun.Invocation(t.program, tuple(args), trace_env=prof.trace_env)


"""Known-positive proof of each patch: its tests fail without the fix and pass with it.

For patch k: before = pin + patches 1..k-1 + only patch k's test paths; after = pin + 1..k;
mutation = after + the patch's known-bad variant. The trees are made with git plumbing in a
temporary index (the user's work tree and patches/ are never touched), checked out one after
another into one verify worktree, and built in one build folder per backend, so switching
trees recompiles only the files that differ.
"""

from __future__ import annotations

import dataclasses
import shutil
import sys
import tempfile
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from builder.build import cmakebuild as buildmod
from builder.build import testrun
from builder.build.toolchain import find_tool
from builder.errors import ProcessError, SeriesError
from builder.fsutil import sha256_file
from builder.gitrepo import COMMITTER, ISOLATED, GitRepo
from builder.locking import project_lock
from builder.pipeline import programs_for
from builder.progress import NullProgress, ProgressSink
from builder.project import Project
from builder.prove import affected
from builder.prove import evidence as ev
from builder.prove import hunks as hk
from builder.series.model import Patch, Series, TestSpec, load_series
from builder.series.workrepo import WorkRepo
from builder.upstream.fetch import Fetched, fetch
from builder.upstream.pin import Pin, load_pin

PROVEN = "proven"
NOT_PROVEN = "not proven"
REGRESSED = "regressed"
BUILD_FAILED = "build failed"
NEEDS = "needs"  # followed by the backend names

HUNK_TEST_TIMEOUT_MIN_S = 30.0
"""The least time a test gets on a tree with one hunk reverted (else 20x its time on the after tree)."""

_DATE = {"GIT_AUTHOR_DATE": "2000-01-01T00:00:00Z", "GIT_COMMITTER_DATE": "2000-01-01T00:00:00Z",
         "GIT_AUTHOR_NAME": "patchset verify", "GIT_AUTHOR_EMAIL": "verify@patchset.invalid"}


def available_backends() -> list[str]:
    """Backends this machine can build and run."""
    found = ["cpu"]
    if shutil.which("nvcc") and shutil.which("nvidia-smi"):
        found.append("cuda")
    if sys.platform == "darwin":
        found.append("metal")
    # the host-side Metal replay needs only a C++ compiler (docs/backends.md)
    if sys.platform in buildmod.profile("metal-replay").platforms and any(
            shutil.which(c) for c in ("c++", "g++", "clang++")):
        found.append("metal-replay")
    return found


@dataclass(frozen=True)
class Trees:
    before: str
    after: str
    mutations: tuple[str, ...]
    parent: str = ""
    """The after tree of the previous patch (the pin for the first): what the patch applies on."""

    def named(self) -> list[tuple[str, str]]:
        """(name, commit) of each proof tree: before, after, mutation, mutation-2, ..."""
        refs = [("before", self.before), ("after", self.after)]
        return refs + [("mutation" if i == 1 else f"mutation-{i}", c) for i, c in enumerate(self.mutations, 1)]


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


@dataclass(frozen=True)
class VerifyReport:
    verdicts: tuple[PatchVerdict, ...]

    @property
    def ok(self) -> bool:
        return all(v.outcome == PROVEN or v.outcome.startswith(NEEDS) for v in self.verdicts)

    @property
    def regressed(self) -> bool:
        return any(v.outcome in (REGRESSED, BUILD_FAILED) for v in self.verdicts)


class TreeMaker:
    """Builds the before/after/mutation commits of each patch with plumbing only."""

    def __init__(self, git: GitRepo, base: str, tmp: Path) -> None:
        self.git = git
        self.base = base
        self.tmp = tmp

    def commit(self, parent: str, mail: Path, message: str, include: tuple[str, ...] = ()) -> str:
        index = self.tmp / "index"
        index.unlink(missing_ok=True)
        env = {**ISOLATED, **COMMITTER, **_DATE, "GIT_INDEX_FILE": str(index)}
        self.git.run("read-tree", parent, env=env)
        args = ["apply", "--cached", "--whitespace=nowarn"]
        for p in include:
            args += [f"--include={p}", f"--include={p.rstrip('/')}/*"]
        try:
            self.git.run(*args, str(mail), env=env)
        except ProcessError as e:
            raise SeriesError(f"{mail.name}: does not apply on {parent[:12]} ({e.stderr.strip()}); "
                              "run `patchset apply` to see and resolve the conflict") from e
        tree = self.git.out("write-tree", env=env)
        if include and tree == self.git.tree_of(parent):
            raise SeriesError(
                f"{mail.name}: Patchset-Test-Paths ({' '.join(include)}) match no file the patch changes")
        return self.git.out("commit-tree", tree, "-p", parent, "-m", message, env=env)

    def for_series(self, series: Series, patches_dir: Path) -> dict[int, Trees]:
        trees: dict[int, Trees] = {}
        prev = self.base
        for p in series.patches:
            if p.meta.test_in_tree or not p.meta.tests:
                # a fix to the test program itself: before is the tree it applies on; a patch with no
                # test has no before tree to run (a fork's series is mostly such patches)
                before = prev
            else:
                before = self.commit(prev, p.path, f"verify: before {p.name}", p.meta.test_paths or ("tests",))
            after = self.commit(prev, p.path, f"verify: after {p.name}")
            mutations = tuple(self.commit(after, patches_dir / m, f"verify: mutation {m}") for m in p.meta.mutation)
            trees[p.index] = Trees(before, after, mutations, prev)
            for kind, c in trees[p.index].named():
                self.git.update_ref(f"refs/patchset/verify/{p.index:04d}/{kind}", c)
            prev = after
        return trees


def checkout_detached(git: GitRepo, path: Path, commit: str) -> None:
    """Make `path` a worktree of `git` with exactly `commit` checked out (detached, clean).

    One worktree per purpose, switched from tree to tree: a switch rewrites only the files that
    differ, so the build folder beside it recompiles only those.
    """
    if not (path / ".git").exists():
        if path.exists():
            shutil.rmtree(path)
        git.run("worktree", "prune")
        path.parent.mkdir(parents=True, exist_ok=True)
        git.run("worktree", "add", "--detach", "--force", str(path), commit)
        return
    wt = GitRepo(path)
    if wt.rev("HEAD") != commit or wt.is_dirty():
        wt.run("checkout", "--quiet", "--detach", "--force", commit)
        wt.run("clean", "-fdxq")


def _needs_full(source: Path, program: str) -> bool:
    """A test that includes llama's own headers cannot build against ggml alone."""
    f = source / "tests" / f"{program}.cpp"
    if not f.exists():
        return False
    text = f.read_text(errors="replace")
    return '#include "llama' in text or '#include "common.h"' in text


def _invocation(t: TestSpec, backend: str) -> testrun.Invocation:
    args = list(t.args)
    prof = buildmod.profile(backend)
    if t.program == "test-backend-ops" and "-b" not in args:
        args += ["-b", prof.device]
    return testrun.Invocation(t.program, tuple(args), trace_env=prof.trace_env)


class Verifier:
    def __init__(self, project: Project, progress: ProgressSink | None = None, reuse: bool = True,
                 jobs: int | None = None, cuda_arch: str | None = None, *,
                 timeout: float | None = testrun.DEFAULT_TIMEOUT_S, hunks: bool = False) -> None:
        self.project = project
        self.timeout = timeout
        self.cuda_arch = cuda_arch
        self.hunks = hunks
        """Also revert each hunk of the fix on its own (`verify --hunks`)."""
        self.progress = progress or NullProgress()
        self.reuse = reuse
        self.jobs = jobs
        self.pin: Pin = load_pin(project.pin_file)
        self.series = load_series(project.patches_dir)
        self.fetched: Fetched = fetch(project.cache_dir, self.pin, progress)
        self.work = WorkRepo(project.work_repo)
        self.work.attach_upstream(self.fetched, self.pin)
        self.root = project.state_dir / "verify"
        self.src = self.root / "src"
        self._checked_out: str | None = None
        self._host: dict | None = None
        self.later: list[tuple[Trees, tuple[str, ...]]] = []
        """Trees and test programs of the jobs still to come: what a build may make for them too."""
        self.inputs: dict[str, tuple[str, ...] | None] = {}
        """Per commit built: the files of the tree its test programs were built from (None: ninja
        could not say; empty: the build failed)."""
        self._blobs: dict[str, dict[str, str]] = {}
        self.reproved_because: dict[tuple[str, str], str] = {}
        """(patch, backend) -> why an earlier proof no longer holds."""
        self.last_build: tuple[Path, Path] | None = None
        """(build folder, tree) of the last tree built."""

    # -- trees ---------------------------------------------------------------------------------
    def make_trees(self) -> dict[int, Trees]:
        with tempfile.TemporaryDirectory(prefix="patchset-verify-") as tmp:
            return TreeMaker(self.work.git, self.fetched.commit, Path(tmp)).for_series(
                self.series, self.project.patches_dir)

    def checkout(self, commit: str) -> None:
        if self._checked_out != commit:
            checkout_detached(self.work.git, self.src, commit)
        self._checked_out = commit

    # -- one tree --------------------------------------------------------------------------------
    def _is_work_tree(self, commit: str) -> bool:
        """True when the work repository has exactly `commit`'s tree checked out, with no edits."""
        git = self.work.git
        return git.rev("HEAD") is not None and git.tree_of("HEAD") == git.tree_of(commit) and not git.is_dirty()

    def run_tree(self, kind: str, commit: str, patch: Patch, backend: str, tests: list[TestSpec],
                 timeout: float | None = None, *, record_inputs: bool = True) -> ev.Step:
        """Build `commit` and run `tests` on it; `timeout` limits each test program (default: verify's).

        `record_inputs`: ask ninja which files the programs were built from (for carrying the proof
        over to a later tree; a tree with one hunk reverted is never carried over)."""
        # the tree `patchset build` built already (the after tree of the last patch, usually):
        # its own build folder and flags, so nothing is compiled again (a CUDA build is minutes)
        reuse = self._is_work_tree(commit)
        if not reuse:
            self.checkout(commit)
        src = self.work.path if reuse else self.src
        programs = tuple(dict.fromkeys(t.program for t in tests))
        targets = "full" if any(_needs_full(src, p) for p in programs) else "minimal"
        present = tuple(p for p in programs if (src / "tests" / f"{p}.cpp").exists()) or programs
        spec = buildmod.BuildSpec(
            source=src, build_dir=self.project.build_root / f"verify-{backend}-{targets}", backend=backend,
            targets=targets, programs=present, jobs=self.jobs, build_targets=present, cuda_arch=self.cuda_arch,
        )
        if reuse:
            # the programs `patchset build` configured, less defaults a tree without them (a test's
            # mini-upstream) cannot configure
            mine = tuple(p for p in programs_for(src, self.series) if (src / "tests" / f"{p}.cpp").exists())
            spec = dataclasses.replace(spec, build_dir=self.project.build_root / f"{backend}-{targets}",
                                       programs=mine if targets == "minimal" else present)
        extra = self._shared_programs(commit, present) if targets == "minimal" and not reuse else ()
        self.progress.begin(f"{patch.name} [{backend}] {kind}: building", None)
        used = spec if reuse else dataclasses.replace(spec, programs=present + extra, build_targets=present + extra)
        result = buildmod.build(used)
        if extra and not result.ok:
            # a program built ahead for a later tree must not decide this tree's verdict
            used = spec
            result = buildmod.build(used)
        self.progress.end()
        command = f"cmake --build {used.build_dir} --target {' '.join(buildmod.ninja_targets(used))}"
        tree_id = self.work.git.tree_of(commit)
        # a tree that fails to compile (a before tree with `Patchset-Before: build-fails`) read the
        # files the other trees' programs were built from, in its own version: () adds none
        if record_inputs:
            self.inputs[commit] = affected.program_inputs(used.build_dir, src, present) if result.ok else ()
        self.last_build = (used.build_dir, src)
        if not result.ok:
            errors = _compiler_errors(result.log)
            only_tests = bool(errors) and all(_in_paths(e, patch.meta.test_paths, src) for e in errors)
            return ev.Step(kind, commit, tree_id, False, command, result.duration_s, tuple(errors[:20]), only_tests,
                           verdict="build-fails" if only_tests else "build-failed")
        runs = []
        any_fail = False
        all_pass = True
        log_dir = self.project.state_dir / "verify" / "logs" / patch.name.removesuffix(".patch") / backend
        for i, t in enumerate(tests, 1):
            inv = _invocation(t, backend)
            self.progress.begin(f"{patch.name} [{backend}] {kind}: {inv.program}", None)
            r = testrun.run_program(result.bin_dir, inv, log_dir / f"{kind}-{i}-{inv.program}.log",
                                    timeout=self.timeout if timeout is None else timeout)
            self.progress.end()
            runs.append({"command": " ".join([inv.program, *inv.args]), "returncode": r.returncode,
                         "signal": r.signal_name, "verdict": r.verdict, "passed": r.passed, "failed": r.failed,
                         "skipped": r.skipped, "duration_s": round(r.duration_s, 3), "log": str(r.log),
                         "failing": r.failing_lines()[:50], "notes": list(r.notes),
                         "trace": str(r.trace) if r.trace else None})
            any_fail = any_fail or r.verdict in (testrun.FAILED, testrun.CRASHED)
            all_pass = all_pass and r.verdict == testrun.PASSED
        verdict = "fails" if any_fail else ("passes" if all_pass else "nothing checked")
        return ev.Step(kind, commit, tree_id, True, command, result.duration_s, tests=tuple(runs), verdict=verdict)

    def _shared_programs(self, commit: str, own: tuple[str, ...]) -> tuple[str, ...]:
        """Test programs a later job needs whose source is the same in this tree.

        Built in the same run as this tree's own programs they share its two cores (a lone
        test-backend-ops.cpp takes ~28 s on one), and ninja has nothing left to do for them
        when the later tree comes, unless the libraries changed in between.
        """
        git = self.work.git
        found: list[str] = []
        for trees, programs in self.later:
            for program in programs:
                if program in own or program in found:
                    continue
                path = f"tests/{program}.cpp"
                here = git.blob(commit, path)
                later = (trees.before, trees.after, *trees.mutations)
                if here and any(git.blob(c, path) == here for c in later):
                    found.append(program)
        return tuple(found)

    # -- one patch on one backend ------------------------------------------------------------------
    def settled(self, patch: Patch, trees: Trees, backend: str) -> PatchVerdict | None:
        """The verdict of the evidence on disk when it still answers for these trees (the same
        trees, or an earlier proof whose test programs read no file that changed); else None."""
        if not self.reuse:
            return None
        tests = self._tests(patch, backend)
        key = self._key(patch, trees, backend, tests)
        old = ev.load(self.project.evidence_dir, patch.name, backend)
        if old is None or old.reused:
            return None
        jpath, mpath = ev.paths(self.project.evidence_dir, patch.name, backend)
        # evidence with the hunk table also answers a plain run; a --hunks run needs the table
        if old.key == key and (old.hunks_checked or not self.hunks):
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
        now = {name: self._tree_blobs(commit) for name, commit in named}
        held = affected.check(old.depends, self._depends_now(patch, backend, tests), now,
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
        key = self._key(patch, trees, backend, tests)
        steps: list[ev.Step] = []
        hunk_results: list[hk.HunkResult] = []
        if backend not in meta.backends:
            missing = [b for b in meta.backends if b not in here] or list(meta.backends)
            outcome = f"{NEEDS} {' '.join(missing)}" if meta.backends else NOT_PROVEN
            reason = (f"the failing-before half can only run on {', '.join(meta.backends)}"
                      if meta.backends else "the patch declares no backend for its proof")
            if tests:
                after = self.run_tree("after", trees.after, patch, backend, tests)
                steps.append(after)
                if after.verdict != "passes":
                    outcome, reason = REGRESSED, f"its tests do not pass on {backend} with the fix ({after.verdict})"
                else:
                    reason += f"; with the fix its {backend} tests pass"
        elif backend not in here:
            outcome, reason = f"{NEEDS} {backend}", f"no {backend} backend on this machine"
        elif not tests:
            outcome, reason = NOT_PROVEN, f"the patch declares no test for {backend}"
        else:
            outcome, reason = self._prove(patch, trees, backend, tests, steps, hunk_results)
        evidence = ev.Evidence(
            patch.name, patch.subject, backend, outcome, reason,
            {"name": self.pin.name, "tag": self.pin.tag, "commit": self.pin.commit, "tree": self.pin.tree,
             "source": self.fetched.source},
            tuple(steps), key, self._host_info(), _now(),
            note=buildmod.profile(backend).note,
            hunks=tuple(dataclasses.asdict(h) for h in hunk_results), hunks_checked=bool(hunk_results),
            depends=self._depends(patch, trees, backend, tests) if outcome == PROVEN and steps else {},
        )
        # a verdict with no steps says so in its file ("nothing was run here"): the report table
        # must show every patch and backend that was asked for
        jpath, mpath = ev.write(self.project.evidence_dir, evidence)
        because = self.reproved_because.get((patch.name, backend))
        if because:
            reason += f" (re-proven: {because})"
        return PatchVerdict(patch.name, backend, outcome, reason, False, jpath, mpath, evidence.hunks)

    # -- what a proof depended on ------------------------------------------------------------------
    @staticmethod
    def _tests(patch: Patch, backend: str) -> list[TestSpec]:
        return [t for t in patch.meta.tests if t.runs_on(backend, patch.meta.backends)]

    def _tree_blobs(self, commit: str) -> dict[str, str]:
        if commit not in self._blobs:
            self._blobs[commit] = affected.blobs(self.work.git, commit)
        return self._blobs[commit]

    def _depends_now(self, patch: Patch, backend: str, tests: list[TestSpec]) -> dict[str, Any]:
        """What a proof of the patch depends on besides the files of its trees."""
        return {
            "patch_sha256": sha256_file(patch.path),
            "mutations": {m: sha256_file(self.project.patches_dir / m) for m in patch.meta.mutation},
            "static": affected.static_digest({**self._inputs(patch, backend, tests),
                                              "compiler": self._host_info().get("compiler")}),
        }

    def _depends(self, patch: Patch, trees: Trees, backend: str, tests: list[TestSpec]) -> dict:
        """The evidence's record of every file the proven trees' test programs were built from;
        empty when ninja could not say for one of them (then the proof is never carried over)."""
        named = trees.named()
        inputs = [self.inputs.get(commit) for _, commit in named]
        if any(i is None for i in inputs) or not self.inputs.get(trees.after):
            return {}
        paths = sorted({p for i in inputs for p in i or ()})
        files = {name: {p: self._tree_blobs(commit).get(p) for p in paths} for name, commit in named}
        return {**self._depends_now(patch, backend, tests),
                "programs": list(dict.fromkeys(t.program for t in tests)), "trees": [n for n, _ in named],
                "files": affected.record(files)}

    def _prove(self, patch: Patch, trees: Trees, backend: str, tests: list[TestSpec],
               steps: list[ev.Step], hunk_results: list[hk.HunkResult]) -> tuple[str, str]:
        meta = patch.meta
        # after first: the trees are visited from the head of the series down, and each patch's
        # after tree is the one closest to the tree built last
        after = self.run_tree("after", trees.after, patch, backend, tests)
        steps.append(after)
        if not after.build_ok:
            return BUILD_FAILED, "the after tree (with the fix) fails to build"
        if after.verdict != "passes":
            return REGRESSED, f"the test does not pass with the fix ({after.verdict})"
        if self.hunks:
            # the reverted trees are each one hunk away from the after tree just built
            # a reverted hunk can make a test hang (a missing return is undefined behaviour): its tests
            # get a generous multiple of the after tree's time, and a hang counts as caught
            took = sum(t["duration_s"] for t in after.tests)
            hunk_results += self.run_hunks(patch, trees, backend, tests, max(HUNK_TEST_TIMEOUT_MIN_S, 20 * took))
        for name, commit in zip(meta.mutation, trees.mutations, strict=True):
            mut = dataclasses.replace(self.run_tree("mutation", commit, patch, backend, tests), label=name)
            steps.append(mut)
            if not mut.build_ok:
                return BUILD_FAILED, f"the mutation tree ({name}) fails to build"
            if mut.verdict != "fails":
                return NOT_PROVEN, f"the mutation {name} is not caught: the test {mut.verdict} with it"
        before = self.run_tree("before", trees.before, patch, backend, tests)
        steps.insert(0, before)
        if before.verdict == "build-failed":
            return BUILD_FAILED, "the before tree fails to build outside the patch's test files"
        if before.verdict == "build-fails" and meta.before != "build-fails":
            return BUILD_FAILED, ("the before tree fails to compile in the test files; if the test uses API the "
                                  "patch adds, say `Patchset-Before: build-fails`")
        if before.verdict == "passes":
            return NOT_PROVEN, "the test passes without the fix: it does not guard it"
        if before.verdict == "nothing checked":
            return NOT_PROVEN, f"the test checked nothing on {backend} without the fix"
        how = "fails to compile in its test files only" if before.verdict == "build-fails" else "fails"
        mut_note = ""
        if meta.mutation:
            mut_note = f"; the mutation{'s' if len(meta.mutation) > 1 else ''} {', '.join(meta.mutation)} " \
                       f"{'are' if len(meta.mutation) > 1 else 'is'} caught"
        unguarded = [h for h in hunk_results if h.outcome == hk.UNGUARDED]
        if unguarded:
            where = ", ".join(f"{h.file}:{h.lines}" for h in unguarded)
            return NOT_PROVEN, (f"without the fix the test {how}, but with the fix {len(unguarded)} hunk(s) can be "
                                f"reverted and the tests still pass: {where}")
        hunk_note = f"; {hk.summarize([dataclasses.asdict(h) for h in hunk_results])}" if hunk_results else ""
        return PROVEN, f"without the fix the test {how}; with it the test passes{mut_note}{hunk_note}"

    # -- each hunk of the fix on its own ----------------------------------------------------------------
    def run_hunks(self, patch: Patch, trees: Trees, backend: str, tests: list[TestSpec],
                  timeout: float | None = None) -> list[hk.HunkResult]:
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
        db = self._compile_db()
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
            required = hk.syntax_units(unit, fix_files, patch.meta.test_paths)
            pre = [] if required or db is None else hk.precheck_files(unit, fix_files, patch.meta.test_paths, db)
            todo.append(_HunkJob(n, unit, commit, tuple(required or pre), bool(required)))
        syntax_tree = self.root / "syntax"
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
                self.progress.begin(f"{patch.name} [{backend}] hunk {job.n}/{len(units)} {job.unit.label}: "
                                    "compiling", None)
                errors = futures[job.n].result()
                self.progress.end()
                results.append(self._hunk_tree(patch, backend, tests, timeout, job, len(units), errors))
        finally:
            pool.shutdown(wait=True, cancel_futures=True)
        # back in the source order of the patch for the evidence
        rank = {(u.file, u.hunk, u.part): i for i, u in enumerate(units)}
        return sorted(results, key=lambda r: rank[(r.file, r.hunk, r.part)])

    def _compile_db(self) -> hk.CompileDb | None:
        """The compilation database of the build folder the after tree was just built in."""
        if self.last_build is None:
            return None
        build_dir, src = self.last_build
        return hk.CompileDb.read(find_tool("ninja").path, build_dir, src)

    def _syntax_errors(self, tree: Path, commit: str, files: tuple[str, ...], db: hk.CompileDb | None) -> list[str]:
        """(In the syntax thread.) `files` of `commit` compiled on their own in the worktree at `tree`."""
        checkout_detached(self.work.git, tree, commit)
        return list(hk.relative(hk.syntax_check(tree, list(files), db=db), tree))

    def _hunk_tree(self, patch: Patch, backend: str, tests: list[TestSpec], timeout: float | None, job: _HunkJob,
                   total: int, errors: list[str]) -> hk.HunkResult:
        """The outcome of one reverted tree: not built when `errors` (its files compiled on their
        own), else what its build and tests say."""
        unit, commit = job.unit, job.commit
        if errors:
            return hk.result(unit, hk.NOT_BUILT, "does not compile", errors=tuple(errors[:10]), commit=commit)
        self.progress.begin(f"{patch.name} [{backend}] hunk {job.n}/{total} {unit.label}: building", None)
        self.progress.end()
        step = self.run_tree(f"hunk-{job.n}", commit, patch, backend, tests, timeout, record_inputs=False)
        if not step.build_ok:
            return hk.result(unit, hk.NOT_BUILT, "does not build",
                             errors=hk.relative(step.build_errors[:10], self.src), commit=commit,
                             build_duration_s=step.build_duration_s)
        failing = tuple(line for t in step.tests for line in t.get("failing", ()))
        if step.verdict == "fails":
            how = [f"{t['command'].split()[0]}: " + _how_it_failed(t, timeout)
                   for t in step.tests if t["verdict"] != testrun.PASSED]
            outcome, reason = hk.CAUGHT, f"the tests fail ({'; '.join(how)})"
        else:
            outcome, reason = hk.UNGUARDED, ("it builds and the tests pass" if step.verdict == "passes"
                                              else f"it builds and the tests: {step.verdict}")
        return hk.result(unit, outcome, reason, failing=failing[:20], commit=commit,
                         build_duration_s=step.build_duration_s, tests=step.tests)

    def _key(self, patch: Patch, trees: Trees, backend: str, tests: list[TestSpec]) -> str:
        git = self.work.git
        return affected.static_digest({
            **self._inputs(patch, backend, tests),
            "before": git.tree_of(trees.before), "after": git.tree_of(trees.after),
            "mutation": [git.tree_of(m) for m in trees.mutations] or None,
        })

    @staticmethod
    def _inputs(patch: Patch, backend: str, tests: list[TestSpec]) -> dict[str, object]:
        """What a proof depends on besides its trees and the compiler."""
        return {"backend": backend, "tests": [str(t) for t in tests], "meta": asdict(patch.meta),
                "cmake": (buildmod.MINIMAL_CMAKE_DIR / "CMakeLists.txt").read_text(),
                "harness": buildmod.harness_digest(backend)}

    def _host_info(self) -> dict:
        if self._host is None:
            self._host = ev.host_info()
        return self._host


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def _holds_reason(e: ev.Evidence) -> str:
    return f"earlier proof holds: {e.holds.get('why')}, {e.created}"


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
    if test.get("signal") == "SIGKILL" and timeout is not None and test["duration_s"] >= timeout:
        return f"did not finish in {timeout:.0f}s (killed)"
    if test.get("signal"):
        return f"killed by {test['signal']}"
    return f"exit {test['returncode']}, {test['failed']} failed"


def _compiler_errors(log: Path) -> list[str]:
    errors = []
    lines = log.read_text(errors="replace").splitlines()
    for line in lines:
        m = buildmod._ERROR.match(line)
        if m:
            errors.append(f"{m.group('file')}:{m.group('line')}: {m.group('msg').strip()}")
    if not errors:
        # the linker has no file:line form: name the symbol it could not find
        errors = [line.strip() for line in lines if "undefined reference to" in line]
    return errors


def _in_paths(error: str, test_paths: tuple[str, ...], src: Path) -> bool:
    file = error.split(":", 1)[0]
    try:
        rel = Path(file).resolve().relative_to(src.resolve()).as_posix()
    except ValueError:
        rel = file
    return any(rel == p or rel.startswith(p.rstrip("/") + "/") for p in test_paths)


def verify(project: Project, names: list[str] | None = None, backends: list[str] | None = None,
           progress: ProgressSink | None = None, reuse: bool = True, jobs: int | None = None,
           cuda_arch: str | None = None, *, timeout: float | None = testrun.DEFAULT_TIMEOUT_S,
           hunks: bool = False) -> VerifyReport:
    # verify writes the work repository (refs, its worktree) and .patchset/: one process at a time
    with project_lock(project.lock_file, purpose="verify"):
        return _verify(Verifier(project, progress, reuse, jobs, cuda_arch, timeout=timeout, hunks=hunks), names,
                       backends)


def _verify(v: Verifier, names: list[str] | None, backends: list[str] | None) -> VerifyReport:
    chosen = [v.series.by_name(n) for n in names] if names else list(v.series.patches)
    trees = v.make_trees()
    backends = backends or list(available_backends())
    for backend in backends:
        buildmod.profile(backend)
    # from the head of the series down: neighbouring trees differ least, so each switch of the
    # one verify worktree recompiles little
    plan = [(patch, backend) for patch in reversed(chosen) for backend in backends]
    verdicts = []
    # first what the evidence on disk still answers (nothing built), so that no build makes a
    # program ahead for a patch whose proof holds
    todo = []
    for patch, backend in plan:
        done = v.settled(patch, trees[patch.index], backend)
        if done:
            verdicts.append(done)
        else:
            todo.append((patch, backend))
    for i, (patch, backend) in enumerate(todo):
        v.later = [(trees[p.index], tuple(t.program for t in p.meta.tests if t.runs_on(b, p.meta.backends)))
                   for p, b in todo[i + 1:] if b == backend]
        verdicts.append(v.prove_patch(patch, trees[patch.index], backend))
    order = {(p.name, b): n for n, (p, b) in enumerate((p, b) for p in chosen for b in backends)}
    return VerifyReport(tuple(sorted(verdicts, key=lambda x: order[(x.patch, x.backend)])))


def report_table(project: Project) -> list[tuple[str, dict[str, str]]]:
    """Outcome per patch and backend from the evidence on disk (for `verify --report`), with the
    hunk summary where `--hunks` ran (e.g. `not proven (hunks 7/8 caught, 1 unguarded)`)."""
    series = load_series(project.patches_dir)
    rows = []
    for p in series.patches:
        cells = {}
        for b in buildmod.PROFILES:
            e = ev.load(project.evidence_dir, p.name, b)
            if e is not None:
                cells[b] = e.outcome + (f" ({hk.summarize(e.hunks)})" if e.hunks_checked else "")
        rows.append((p.name, cells))
    return rows

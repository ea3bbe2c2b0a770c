"""Building one proof tree and running the patch's tests on it, in the verify worktree.

The trees of a lane (builder/prove/schedule.py) are checked out one after another into its
worktree (`.patchset/verify/src`, `src-1`, ...) and built in its build folder per backend
(`verify-cpu-minimal`, `verify-cpu-minimal-1`, ...), so switching trees recompiles only the files
that differ, and lanes share objects through the compiler cache; the
tree `patchset build` built already is built in its own folder instead. What each build read
(ninja's record) is kept for the proof's evidence.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path

from builder import words
from builder.compile import cmakebuild as buildmod
from builder.compile import testrun
from builder.compile.toolchain import find_tool
from builder.errors import InputError
from builder.progress import ProgressSink
from builder.project import Project
from builder.prove import affected, pytests, runner
from builder.prove import evidence as ev
from builder.prove import hunks as hk
from builder.prove.pipeline import programs_for
from builder.prove.runner import Limits, limit_of
from builder.prove.schedule import Beside, FirstBuilds
from builder.prove.trees import Trees, checkout_detached, library_sources, with_comments_of
from builder.series.model import Patch, Series, TestSpec
from builder.series.workrepo import WorkRepo

LLAMA_SIDE = (*buildmod.LLAMA_PATHS, "ggml/include")
"""The folders of a tree that a minimal build compiles libllama and llama-common from: llama's own and
ggml's public headers (ggml's sources give libraries that are linked, not compiled into them)."""


def lane_src(project: Project, lane: int) -> Path:
    """The verify worktree of a lane: `src` for the first (the one a sequential run uses), `src-N` after."""
    return project.verify_dir / ("src" if lane == 0 else f"src-{lane}")


def lane_build_dir(project: Project, backend: str, lane: int) -> Path:
    """The build folder of a lane's trees on `backend` (`verify-cpu-minimal`, `verify-cpu-minimal-1`, ...)."""
    return project.build_root / (f"verify-{backend}-minimal" + (f"-{lane}" if lane else ""))


def lane_syntax_tree(project: Project, lane: int) -> Path:
    """The worktree a lane compiles single files in for the hunk checks (`syntax`, `syntax-1`, ...)."""
    return project.state_dir / "verify" / ("syntax" + (f"-{lane}" if lane else ""))


class TreeBuilder:
    """Builds proof trees and runs tests on them; remembers what each build read."""

    def __init__(self, project: Project, work: WorkRepo, series: Series, progress: ProgressSink, *,
                 jobs: int | None, cuda_arch: str | None, timeout: float | None, lane: int = 0,
                 jobserver: str | None = None) -> None:
        self.project = project
        self.work = work
        self.series = series
        self.progress = progress
        self.jobs = jobs
        self.cuda_arch = cuda_arch
        self.timeout = timeout
        """The limit of each test program unless run_tree is given one."""
        self.lane = lane
        """The scheduler's lane (builder/prove/schedule.py): its own worktree and build folders."""
        self.jobserver = jobserver
        """MAKEFLAGS of the run's jobserver, which every build joins (None: `jobs` of its own)."""
        self.test_gate: Callable[[], AbstractContextManager[object]] = nullcontext
        """Held around each run of a test program that sees every core (runner.gated): in lanes, one
        such program at a time (ggml's threads wait for each other spinning: two at once run many times slower)."""
        self.first_builds: FirstBuilds | None = None
        """Shared by a run's lanes: the lane's first build waits for another lane's first build of the same
        library sources (library_key), whose objects it then finds in the compiler cache."""
        self.idle: Callable[[], AbstractContextManager[object]] = nullcontext
        """Held while the lane waits for another build (its job slot back in the pool: Jobserver.lend)."""
        self.beside: Beside | None = None
        """The patched tree's build beside the lanes (`all`): a tree that reuses its folder waits for its end."""
        self.src = lane_src(project, lane)
        self._checked_out: str | None = None
        self.kept: tuple[str, ...] = ()
        """The files of the tree checked out last that differ from the one before only in comments and
        whitespace: what the build folder compiled from them before is kept (trees.checkout_detached)."""
        self.reference: str | None = None
        """The tree whose objects the compiler cache holds (the series head, which `patchset build` compiled):
        each tree is checked out with its version of the files that differ from it in comments and whitespace
        only (trees.with_comments_of), so every lane compiles them alike."""
        self.theirs: tuple[str, ...] = ()
        """Those files of the tree checked out last (compiled in the reference's version)."""
        self._targets: dict[str, tuple[str, tuple[str, ...]]] = {}
        """Per commit, what `target` checks out for it (shared by the lanes: each tree is lexed once)."""
        self.later: list[tuple[Trees, tuple[str, ...]]] = []
        """Trees and test programs of the jobs still to come: what a build may make for them too."""
        self.inputs: dict[str, tuple[str, ...] | None] = {}
        """Per commit built: the files of the tree its test programs were built from (None: ninja
        could not say; empty: the build failed)."""
        self.last_build: tuple[Path, Path] | None = None
        """(build folder, tree) of the last tree built."""
        self.last_results: list[testrun.ProgramResult] = []
        """What each test program of the last tree run printed, case by case (one per test, in order)."""
        self.last_confirm: tuple[tuple[testrun.ProgramResult, ...], ...] = ()
        """Per test of the last tree run, its confirming runs (run_tree's `confirm`; none where nothing of it
        decided)."""
        self._llama_sides: dict[str, tuple[str | None, ...]] = {}
        self._libraries: dict[str, pytests.Library] = {}
        self.position = ""
        """Where the run stands, named in every progress label ("patch 3/7"; empty: not said)."""

    def for_lane(self, lane: int, jobserver: str | None, progress: ProgressSink,
                 test_gate: Callable[[], AbstractContextManager[object]] = nullcontext,
                 first_builds: FirstBuilds | None = None,
                 idle: Callable[[], AbstractContextManager[object]] = nullcontext) -> TreeBuilder:
        """A builder like this one in the scheduler's `lane` (its own worktree and build folders), joining
        `jobserver`; what builds read and the libraries found are shared with this one (the evidence's
        keys read them)."""
        other = TreeBuilder(self.project, self.work, self.series, progress, jobs=self.jobs, cuda_arch=self.cuda_arch,
                            timeout=self.timeout, lane=lane, jobserver=jobserver)
        other.inputs = self.inputs
        other._libraries = self._libraries
        other.reference = self.reference
        other._targets = self._targets
        other.test_gate = test_gate
        other.first_builds = first_builds
        other.idle = idle
        other.beside = self.beside
        return other

    def library_key(self, commit: str, backend: str, programs: tuple[str, ...], src: Path | None = None
                    ) -> tuple[str, ...]:
        """What the libraries of `commit`'s build on `backend` are compiled from (trees.library_sources),
        and llama's side (LLAMA_SIDE) when a program links libllama (its source read in `src`, else the lane's
        tree): two trees with the same key compile the same objects."""
        llama = any(buildmod.links_llama(src or self.src, p) for p in programs)
        side = tuple(str(i) for i in self._llama_side(commit)) if llama else ()
        return (*side, *library_sources(self.work.git, commit, backend))

    def head_keys(self, backend: str) -> tuple[tuple[str, ...], ...]:
        """The library keys (library_key) a build of the reference tree makes on `backend` with every test program
        of the series: the patched tree's build beside the lanes (`all`) is their first build."""
        if self.reference is None:
            return ()
        programs = programs_for(self.work.path, self.series, backend)
        return tuple(dict.fromkeys((self.library_key(self.reference, backend, ()),
                                    self.library_key(self.reference, backend, programs, self.work.path))))

    def label(self, patch: Patch, backend: str, kind: str) -> str:
        """What progress calls a tree's step: the run's position, the patch, its backend and the tree."""
        return f"{self.position + ': ' if self.position else ''}{patch.name} [{backend}] {kind}"

    def target(self, commit: str) -> tuple[str, tuple[str, ...]]:
        """What is checked out for `commit`: it with the reference's comments (trees.with_comments_of), and the files
        they change."""
        if commit not in self._targets:
            self._targets[commit] = with_comments_of(self.work.git, commit, self.reference)
        return self._targets[commit]

    def checkout(self, commit: str) -> None:
        target, self.theirs = self.target(commit)
        self.kept = checkout_detached(self.work.git, self.src, target) if self._checked_out != target else ()
        self._checked_out = target

    # -- one tree --------------------------------------------------------------------------------
    def is_work_tree(self, commit: str) -> bool:
        """True when the work repository has exactly `commit`'s tree checked out, with no edits."""
        git = self.work.git
        return git.rev("HEAD") is not None and git.tree_of("HEAD") == git.tree_of(commit) and not git.is_dirty()

    def run_tree(self, kind: str, commit: str, patch: Patch, backend: str, tests: list[TestSpec],
                 timeout: Limits = None, *, record_inputs: bool = True, confirm: int = 1,
                 decide: str = runner.FAILING) -> ev.Step:
        """Build `commit` and run `tests` on it; `timeout` limits each test program (default: verify's),
        or each test command its own (a mapping by command line, as the evidence records it).

        `record_inputs`: ask ninja which files the programs were built from (for carrying the proof
        over to a later tree; a tree with one hunk reverted is never carried over). `confirm`: run what
        decides on the tree (`decide`: runner.EVERY case, or the FAILING ones) that many times in all, back
        to back on its build (`last_confirm`; each test's record lists them as `runs`)."""
        self.last_results = []
        self.last_confirm = tuple(() for _ in tests)
        python = [t for t in tests if pytests.is_python(t)]
        if python:
            if len(python) != len(tests):
                raise InputError(f"{patch.name}: declares Python tests and test programs together; a patch of a "
                                 "Python package tests with `python FILE`, one of llama.cpp with programs")
            return self._run_python(kind, commit, patch, backend, tests, timeout, record_inputs=record_inputs)
        # the tree `patchset build` built already (the after tree of the last patch, usually):
        # its own build folder and flags, so nothing is compiled again (a CUDA build is minutes)
        reuse = self.is_work_tree(commit)
        if reuse and self.beside is not None:
            self.beside.wait_built(self.idle)
        self.kept, self.theirs = (), ()
        if not reuse:
            self.checkout(commit)
        src = self.work.path if reuse else self.src
        programs = tuple(dict.fromkeys(t.program for t in tests))
        # the minimal build: a test that includes llama's headers gets libllama and llama-common there
        present = tuple(p for p in programs if (src / "tests" / f"{p}.cpp").exists()) or programs
        spec = buildmod.BuildSpec(
            source=src, build_dir=lane_build_dir(self.project, backend, self.lane), backend=backend,
            targets="minimal", programs=present, jobs=self.jobs, build_targets=present, cuda_arch=self.cuda_arch,
            platform_cache=self.project.platform_cache, jobserver=self.jobserver,
        )
        if reuse:
            # the programs `patchset build` configured, less defaults a tree without them (a test's
            # mini-upstream) cannot configure
            mine = tuple(p for p in programs_for(src, self.series) if (src / "tests" / f"{p}.cpp").exists())
            # and the work tree's commit and tree, as `patchset build` records them (`patchset test` checks them)
            spec = dataclasses.replace(spec, build_dir=self.project.build_root / f"{backend}-minimal", programs=mine,
                                       source_commit=self.work.git.out("rev-parse", "HEAD"),
                                       source_tree=self.work.worktree_tree())
        extra = self._shared_programs(commit, present) if not reuse else ()
        # a program built ahead for a later tree must not decide this tree's verdict: without it on failure
        specs = [spec] if reuse or not extra else [
            dataclasses.replace(spec, programs=present + extra, build_targets=present + extra), spec]
        log_dir = self._log_dir(patch, backend)
        # a lane's first build: after another lane's of the same libraries, from the compiler cache
        first: AbstractContextManager[object] = nullcontext()
        if self.first_builds is not None and self.last_build is None and not reuse:
            self.compile_ahead(specs[0], commit, backend)
            first = self.first_builds.first(self.library_key(self.target(commit)[0], backend, present), backend,
                                            self.idle)
        with first:
            run = runner.run_tree(specs, src, tests, backend, patch.meta.test_part,
                                  lambda i, inv: log_dir / f"{kind}-{i}-{inv.program}.log",
                                  timeout=self.timeout if timeout is None else timeout, progress=self.progress,
                                  label=self.label(patch, backend, kind), gate=self.test_gate)
        build_dir = run.build_dir or spec.build_dir
        # a tree that fails to compile (a before tree with `Patchset-Before: build-fails`) read the
        # files the other trees' programs were built from, in its own version: () adds none
        if record_inputs:
            self.inputs[commit] = affected.program_inputs(build_dir, src, present) if run.bin_dir else ()
        self.last_build = (build_dir, src)
        self.last_results = list(run.results)
        if confirm > 1:
            self.last_confirm = runner.confirm(
                run, tests, backend, confirm, decide,
                lambda i, k, inv: log_dir / f"{kind}-{i}-{inv.program}-run{k}.log",
                timeout=self.timeout if timeout is None else timeout, progress=self.progress,
                label=self.label(patch, backend, kind), gate=self.test_gate)
        return self._step(kind, commit, run)

    def compile_ahead(self, spec: buildmod.BuildSpec, commit: str, backend: str) -> None:
        """While the lane's first build waits for the libraries of the build beside the lanes (`all` on 8 job
        slots or more): compile the objects of the tree's test programs whose source is not the series head's
        (that build makes the head's), each version in one lane only. A failure here is left to the build after."""
        if self.first_builds is None or self.reference is None or not self.first_builds.waits_ahead(backend):
            return
        git = self.work.git
        target = self.target(commit)[0]
        mine = []
        for program in spec.build_targets:
            blob = git.blob(target, f"tests/{program}.cpp")
            if blob is None or blob == git.blob(self.reference, f"tests/{program}.cpp"):
                continue
            if self.first_builds.claim((backend, program, blob)):
                mine.append(program)
        if mine:
            buildmod.build(dataclasses.replace(spec, objects_of=tuple(mine)), self.progress)

    def _step(self, kind: str, commit: str, run: runner.TreeRun) -> ev.Step:
        """The evidence's record of one tree's run."""
        tree_id = self.work.git.tree_of(commit)
        if not run.built:
            return ev.Step(kind, commit, tree_id, False, run.command, run.build_duration_s, run.errors[:20],
                           run.only_tests, verdict=run.verdict, reference_comments=self.theirs)
        runs = tuple({**_run_record(r), **({"runs": [_confirm_record(m) for m in more]} if more else {})}
                     for r, more in zip(run.results, self.last_confirm, strict=True))
        return ev.Step(kind, commit, tree_id, True, run.command, run.build_duration_s, tests=runs, verdict=run.verdict,
                       comment_only=self.kept, reference_comments=self.theirs)

    def _log_dir(self, patch: Patch, backend: str) -> Path:
        return self.project.verify_dir / "logs" / patch.name.removesuffix(".patch") / backend

    def library(self, backend: str) -> pytests.Library:
        """The built library the Python tests of this run use (found once per backend)."""
        if backend not in self._libraries:
            self._libraries[backend] = pytests.find_library(self.project, backend)
        return self._libraries[backend]

    def _run_python(self, kind: str, commit: str, patch: Patch, backend: str, tests: list[TestSpec],
                    timeout: Limits, *, record_inputs: bool) -> ev.Step:
        """A tree of a Python package: checked out (never the user's work tree: the library is linked
        into it), nothing compiled, every test run against the one built library (pytests)."""
        lib = self.library(backend)
        self.checkout(commit)
        pytests.place_library(self.src, lib)
        if record_inputs:
            # which files a Python test read is not recorded: such a proof is never carried over to
            # another tree (equal trees still reuse it)
            self.inputs[commit] = None
        self.last_build = None
        command = f"nothing to build: the library {lib.describe()}"
        runs = []
        for i, t in enumerate(tests, 1):
            inv = testrun.Invocation(t.program, t.args)
            self.progress.begin(f"{self.label(patch, backend, kind)}: {inv.command}", None)
            with self.test_gate():
                r = pytests.run(self.src, lib, inv, self._log_dir(patch, backend) / f"{kind}-{i}-python.log",
                                self.timeout if timeout is None else limit_of(timeout, inv.command))
            self.progress.end()
            self.last_results.append(r)
            runs.append(_run_record(r))
        tree_id = self.work.git.tree_of(commit)
        missing = pytests.does_not_load(self.last_results)
        if missing:
            return ev.Step(kind, commit, tree_id, False, command, 0.0, tuple(missing[:20]), True, tests=tuple(runs),
                           verdict=words.BUILD_FAILS)
        verdict = testrun.tree_verdict(str(run["verdict"]) for run in runs)
        return ev.Step(kind, commit, tree_id, True, command, 0.0, tests=tuple(runs), verdict=verdict)

    def _shared_programs(self, commit: str, own: tuple[str, ...]) -> tuple[str, ...]:
        """Test programs a later job needs whose source is the same in this tree.

        Built in the same run as this tree's own programs they share its two cores (a lone
        test-backend-ops.cpp takes ~21 s on one), and ninja has nothing left to do for them
        when the later tree comes, unless the libraries changed in between. A program that links
        libllama is built ahead only for a later tree with the same llama side (LLAMA_SIDE): every
        unit of libllama includes ggml's headers, so one line more in one of them (patch 3's
        comments in ggml-opt.h) compiles all of it again for that tree, and what was built here
        for it is never used.
        """
        git = self.work.git
        found: list[str] = []
        for trees, programs in self.later:
            for program in programs:
                if program in own or program in found:
                    continue
                path = f"tests/{program}.cpp"
                here = git.blob(commit, path)
                later = [c for c in (trees.before, trees.after, *trees.mutations) if here and git.blob(c, path) == here]
                if later and buildmod.links_llama(self.src, program):
                    mine = self._llama_side(self.target(commit)[0])
                    later = [c for c in later if self._llama_side(self.target(c)[0]) == mine]
                if later:
                    found.append(program)
        return tuple(found)

    def _llama_side(self, commit: str) -> tuple[str | None, ...]:
        """The ids of the folders of `commit` that libllama and llama-common are compiled from (LLAMA_SIDE)."""
        if commit not in self._llama_sides:
            self._llama_sides[commit] = tuple(self.work.git.blob(commit, p) for p in LLAMA_SIDE)
        return self._llama_sides[commit]

    # -- the compile database ------------------------------------------------------------------------
    def compile_db(self) -> hk.CompileDb | None:
        """The compilation database of the build folder the after tree was just built in."""
        if self.last_build is None:
            return None
        build_dir, src = self.last_build
        # the compiler of a minimal build sees the tree through the folder's link
        seen = build_dir / buildmod.TREE_LINK
        return hk.CompileDb.read(find_tool("ninja").path, build_dir, seen if seen.is_symlink() else src)


def _confirm_record(r: testrun.ProgramResult) -> dict:
    """One confirming run of a test command (run_tree's `confirm`), as the evidence records it."""
    return {"command": " ".join([r.program, *r.args]), "returncode": r.returncode, "signal": r.signal_name,
            **({"crash_site": r.crash_site} if r.crash_site else {}),
            "timed_out": r.timed_out, "verdict": r.verdict, "failing": sorted(runner.failing_ids(r)),
            "duration_s": round(r.duration_s, 3), "log": str(r.log)}


def _run_record(r: testrun.ProgramResult) -> dict:
    """One test command's run as the evidence records it."""
    return {"command": " ".join([r.program, *r.args]), "returncode": r.returncode,
            "signal": r.signal_name, "timed_out": r.timed_out, "verdict": r.verdict, "passed": r.passed,
            "failed": r.failed, "skipped": r.skipped, "duration_s": round(r.duration_s, 3), "log": str(r.log),
            "failing": r.failing_lines()[:50], "notes": list(r.notes),
            "trace": str(r.trace) if r.trace else None, **({"resumed": list(r.resumed)} if r.resumed else {}),
            **({"crash_site": r.crash_site} if r.crash_site else {})}

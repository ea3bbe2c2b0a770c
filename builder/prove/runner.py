"""The one tree runner: build a tree, run a patch's tests on it, and judge it by one rule.

verify (`treebuild.TreeBuilder`, and `--hunks` through it), the fixed-upstream check
(`fixed_upstream`, which `rebase --fixed-upstream` and `bump` run) and `canary --build/--test`
(`canary_check`) each build a tree and say what it shows; they all call `run_tree` here and read
its record (`TreeRun`), so a tree means the same to each of them:

- the build failed: every compiler error of its log is read, each placed in the tree (`tree_path`);
  the tree `fails to compile in the test paths` (`build-fails`) only when there is at least one
  and every one is in the patch's test paths; a build killed at its time limit never is;
- a program the dynamic loader could not start (exit 127, nothing printed: `did not load`) means
  the tree did not build (`build-failed`), never a failed test and never "nothing checked";
- a program that crashes inside a case is run again past it (`caseselect.run_past_crashes`, where the
  program selects cases), so every case has an outcome and the crashing one fails;
- else the programs' verdicts together (`testrun.tree_verdict`): `fails` when one failed or
  crashed, `passes` when each passed, else `nothing checked`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from pathlib import Path

from builder import words
from builder.compile import backends as backendmod
from builder.compile import caseselect, testrun
from builder.compile import cmakebuild as buildmod
from builder.progress import ProgressSink, Within
from builder.prove import hunks as hk
from builder.series.model import TestSpec

Limits = float | Mapping[str, float] | None
"""The time limit of each test program run on a tree: one for all, or one per command line."""


def limit_of(limits: Limits, command: str) -> float | None:
    return limits.get(command) if isinstance(limits, Mapping) else limits


def invocation(t: TestSpec, backend: str) -> testrun.Invocation:
    """How a test runs on a backend: test-backend-ops gets the backend's device, each program the
    backend's trace variable and the cores it is shown (backends.cores_shown)."""
    args = list(t.args)
    prof = backendmod.profile(backend)
    if t.program == "test-backend-ops" and "-b" not in args:
        args += ["-b", prof.device]
    return testrun.Invocation(t.program, tuple(args), trace_env=prof.trace_env,
                              cores=backendmod.cores_shown(backend))


@dataclass(frozen=True)
class TreeRun:
    """One tree built and its tests run, judged (the module docstring's rule)."""

    built: bool
    """The build succeeded and every program loaded."""
    command: str
    """The build command, as the evidence shows it."""
    build_duration_s: float
    verdict: str
    """words.TREE_FAILS, TREE_PASSES, TREE_NOTHING, BUILD_FAILS or BUILD_FAILED_STEP."""
    errors: tuple[str, ...] = ()
    """Why it did not build: every compiler error (`file:line: message`, the file a path of the tree), the
    time limit it was killed at, or the programs that did not load."""
    only_tests: bool = False
    """It failed to compile, and every error is in the patch's test paths."""
    results: tuple[testrun.ProgramResult, ...] = ()
    """One per test, in order (empty when the build failed)."""
    bin_dir: Path | None = None
    build_dir: Path | None = None
    build_log: Path | None = None


LogOf = Callable[[int, testrun.Invocation], Path]
"""Where the log of the i-th test (from 1) goes."""
Gate = Callable[[], AbstractContextManager[object]]
"""Held around each run of a test program that sees every core (TreeBuilder.test_gate)."""


def gated(inv: testrun.Invocation, gate: Gate) -> AbstractContextManager[object]:
    """The gate around one program's run: a program shown a few cores runs on its lane's job slot beside
    the others; one that sees every core (a GPU backend's) runs alone (`gate`)."""
    return nullcontext() if inv.cores is not None else gate()


def run_tree(specs: Sequence[buildmod.BuildSpec], src: Path, tests: list[TestSpec], backend: str,
             test_part: tuple[str, ...], log_of: LogOf, *, timeout: Limits, progress: ProgressSink,
             label: str, gate: Gate = nullcontext) -> TreeRun:
    """Build the tree checked out at `src` with the first of `specs` (each later one is tried when the one
    before failed: a build that also made programs ahead for later trees, then the tree's own), run
    `tests` on it, and judge it; `gate` is held around each run of a test program that sees every core
    (`gated`)."""
    progress.begin(f"{label}: building", None)
    spec = specs[0]
    # ninja's count moves this step's (CI logs see `[N/M]` lines, a terminal one bar)
    result = buildmod.build(spec, Within(progress))
    for later in specs[1:]:
        if result.ok:
            break
        spec, result = later, buildmod.build(later, Within(progress))
    progress.end()
    command = f"cmake --build {spec.build_dir} --target {' '.join(buildmod.ninja_targets(spec))}"
    if not result.ok:
        # a build killed at its time limit failed, whatever it had compiled: never "in the test files only"
        errors = [result.failure] if result.timed_out_s is not None else compiler_errors(result.log, src,
                                                                                         spec.build_dir)
        only_tests = bool(errors) and all(hk.in_paths(e.split(":", 1)[0], test_part) for e in errors)
        return TreeRun(False, command, result.duration_s,
                       words.BUILD_FAILS if only_tests else words.BUILD_FAILED_STEP,
                       tuple(errors or ["the build failed (see its log)"]), only_tests, build_dir=spec.build_dir,
                       build_log=result.log)
    results = []
    for i, t in enumerate(tests, 1):
        inv = invocation(t, backend)
        progress.begin(f"{label}: {inv.program}", None)
        with gated(inv, gate):
            results.append(caseselect.run_past_crashes(result.bin_dir, inv, log_of(i, inv),
                                                    limit_of(timeout, inv.command)))
        progress.end()
    return judge(command, result.duration_s, tuple(results), result.bin_dir, spec.build_dir, result.log)


def judge(command: str, duration_s: float, results: tuple[testrun.ProgramResult, ...], bin_dir: Path | None = None,
          build_dir: Path | None = None, build_log: Path | None = None) -> TreeRun:
    """The record of a built tree from its programs' runs (a program that did not load: the tree did not build)."""
    not_loaded = [r for r in results if r.verdict == words.NOT_LOADED]
    if not_loaded:
        # the loader's part of the link failed (a shared build leaves missing symbols to it): the tree did not
        # build, whatever its tests would say; never a test that fails
        loader = tuple(f"{r.program}: did not load (exit {r.returncode}, the dynamic loader's): "
                       f"{r.last_lines[-1].strip() if r.last_lines else 'no output'}" for r in not_loaded)
        return TreeRun(False, command, duration_s, words.BUILD_FAILED_STEP, loader, False, results, bin_dir,
                       build_dir, build_log)
    return TreeRun(True, command, duration_s, testrun.tree_verdict(r.verdict for r in results), (), False, results,
                   bin_dir, build_dir, build_log)


def compiler_errors(log: Path, src: Path, build_dir: Path) -> list[str]:
    """Every compiler error of a build log, each file named as a path of the tree `src` where it is one."""
    errors = []
    lines = log.read_text(errors="replace").splitlines()
    for i, line in enumerate(lines):
        m = buildmod._ERROR.match(line)
        if m:
            errors.append(f"{tree_path(m.group('file'), src, build_dir)}:{m.group('line')}: {m.group('msg').strip()}")
        m = buildmod._CMAKE_ERROR.match(line)
        if m:
            msg = lines[i + 1].strip() if i + 1 < len(lines) else ""
            errors.append(f"{tree_path(m.group('file'), src, build_dir)}:{m.group('line')}: {msg or 'CMake error'}")
    if not errors:
        # the linker has no file:line form: name the symbol it could not find
        errors = [line.strip() for line in lines if "undefined reference to" in line]
    return errors


def tree_path(file: str, src: Path, build_dir: Path) -> str:
    """The compiler's `file` as a path of the tree `src`: absolute, or relative to the build folder
    it ran in (ccache's base_dir gives such paths; not relative to this process's cwd), else taken
    as a path of the tree already."""
    try:
        return (build_dir / file).resolve().relative_to(src.resolve()).as_posix()
    except ValueError:
        return file


EVERY, FAILING = "every", "failing"
"""What decides on a tree, and so what its confirming runs run again: every case (a tree that must pass:
the whole of each program), or its failing cases (a tree that must fail: only the programs that failed,
narrowed to the cases that failed where the program selects cases)."""

ConfirmLogOf = Callable[[int, int, testrun.Invocation], Path]
"""Where the log of the i-th test's k-th run (from 2) goes."""


def confirm(run: TreeRun, tests: list[TestSpec], backend: str, runs: int, decide: str, log_of: ConfirmLogOf, *,
            timeout: Limits, progress: ProgressSink, label: str,
            gate: Gate = nullcontext) -> tuple[tuple[testrun.ProgramResult, ...], ...]:
    """Runs 2..`runs` of what decides on the built tree `run` (`decide`: EVERY or FAILING), back to back on
    its build: per test, its further runs (none where nothing of it decides)."""
    if not run.built or run.bin_dir is None or runs < 2:
        return tuple(() for _ in tests)
    out: list[tuple[testrun.ProgramResult, ...]] = []
    for i, (t, first) in enumerate(zip(tests, run.results, strict=True), 1):
        if decide == FAILING and first.verdict not in (words.FAILED, words.CRASHED):
            out.append(())
            continue
        inv = invocation(t, backend)
        limit = limit_of(timeout, inv.command)  # the limits are kept by the test's own command line
        only = None
        # a crash between cases is confirmed by the whole program: a narrowed run would not reach its site
        if decide == FAILING and not (first.signal_name and not any(c.status == testrun.CRASH for c in first.cases)):
            inv, only = caseselect.selecting(inv, [c for c in first.cases if c.status in (testrun.FAIL, testrun.CRASH)])
        more = []
        for k in range(2, runs + 1):
            progress.begin(f"{label}: {inv.program} (run {k} of {runs})", None)
            with gated(inv, gate):
                more.append(caseselect.run_past_crashes(run.bin_dir, inv, log_of(i, k, inv), limit, only))
            progress.end()
        out.append(tuple(more))
    return tuple(out)


def failing_ids(r: testrun.ProgramResult) -> frozenset[str]:
    """The failing cases of one run (`backend NAME(PARAMS)`), or the program as a whole when it failed
    naming none."""
    ids = {f"{c.backend} {c.case_id}".strip() for c in r.cases if c.status in (testrun.FAIL, testrun.CRASH)}
    if not ids and r.verdict in (words.FAILED, words.CRASHED):
        ids = {f"{r.program}: the program failed"}
    return frozenset(ids)


def steady_failures(first: testrun.ProgramResult, more: tuple[testrun.ProgramResult, ...]) -> tuple[
        frozenset[str], dict[str, str]]:
    """(what failed in every run, {what failed in some runs only: `flaky (N of M runs)`}) of one test."""
    every = [failing_ids(r) for r in (first, *more)]
    steady = frozenset.intersection(*every)
    counts: dict[str, int] = {}
    for ids in every:
        for c in ids:
            counts[c] = counts.get(c, 0) + 1
    return steady, {c: words.flaky(n, len(every)) for c, n in counts.items() if c not in steady}

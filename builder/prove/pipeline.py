"""The steps the commands chain together: make sure `patched` is there, build it, test it."""

from __future__ import annotations

import dataclasses
import io
import sys
import tarfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from builder.compile import backends as backendmod
from builder.compile import cmakebuild as buildmod
from builder.compile import metalcheck, testrun
from builder.errors import BuildError, InputError, TestRunError
from builder.gitrepo import GitRepo
from builder.locking import project_lock
from builder.progress import ProgressSink
from builder.project import Project
from builder.series.apply import ApplyResult, apply
from builder.series.load import load_series
from builder.series.model import Series
from builder.series.workbase import PATCHED, fingerprint
from builder.series.workrepo import WorkRepo, ensure_objects
from builder.upstream.fetch import fetched_tree
from builder.upstream.pin import load_pin


def build_dir(project: Project, backend: str, targets: str) -> Path:
    return project.build_root / f"{backend}-{targets}"


def declared_tests(series: Series, backend: str) -> list[tuple[str, tuple[str, ...]]]:
    """(program, args) of every test the series declares for `backend`, in series order."""
    out: list[tuple[str, tuple[str, ...]]] = []
    for p in series.patches:
        for t in p.meta.tests:
            if t.runs_on(backend, p.meta.backends) and (t.program, t.args) not in out:
                out.append((t.program, t.args))
    return out


def programs_for(source: Path, series: Series, backend: str = "cpu") -> tuple[str, ...]:
    """The default test programs plus every program the series declares that the tree has, less
    those the backend cannot run."""
    names = list(buildmod.DEFAULT_PROGRAMS)
    for p in series.patches:
        for t in p.meta.tests:
            if t.program not in names and (source / "tests" / f"{t.program}.cpp").exists():
                names.append(t.program)
    allowed = backendmod.profile(backend).programs
    return tuple(n for n in names if allowed is None or n in allowed)


def ensure_patched(project: Project, progress: ProgressSink | None = None) -> tuple[WorkRepo, ApplyResult | None]:
    """The work repository on `patched`, applying first unless it already holds this series.

    Edits and commits made in the work tree since (that is how a fix is developed) are built as
    they are; apply would refuse to touch them anyway.
    """
    work = WorkRepo(project.work_repo)
    ensure_objects(project, work)
    if work.exists() and work.head() and work.git.current_branch() == PATCHED:
        state = work.load_state()
        pin = load_pin(project.pin_file)
        series = load_series(project.patches_dir)
        if state.op is None and state.fingerprint == fingerprint(pin, fetched_tree(project.cache_dir, pin), series):
            return work, None
    return work, apply(project, progress=progress)


def run_build(project: Project, backend: str = "cpu", targets: str = "minimal", jobs: int | None = None,
              build_type: str = "Release", cuda_arch: str | None = None,
              progress: ProgressSink | None = None, *, jobserver: str | None = None,
              libraries_built: Callable[[], None] | None = None) -> buildmod.BuildResult:
    """The patched tree's build. `jobserver`: ninja joins that pool (MAKEFLAGS) instead of `jobs` of its own;
    `libraries_built`: the libraries are built first and it is called then (cmakebuild.build_libraries_first)."""
    with project_lock(project.lock_file, purpose="build"):
        work, _ = ensure_patched(project, progress)
        series = load_series(project.patches_dir)
        if backend == "metal" and sys.platform != "darwin":
            programs = dict.fromkeys(prog for prog, _ in declared_tests(series, "metal"))
            return metalcheck.compile_check(work.path, build_dir(project, "metal", "check") / "check.log", programs)
        spec = buildmod.BuildSpec(
            source=work.path, build_dir=build_dir(project, backend, targets), backend=backend, targets=targets,
            programs=programs_for(work.path, series, backend), build_type=build_type, jobs=jobs, cuda_arch=cuda_arch,
            source_commit=work.git.out("rev-parse", "HEAD"), source_tree=work.worktree_tree(),
            platform_cache=project.platform_cache, jobserver=jobserver,
        )
        if libraries_built is not None:
            return buildmod.build_libraries_first(spec, progress, libraries_built)
        return buildmod.build(spec, progress)


def check_build_is_current(project: Project, bdir: Path) -> buildmod.BuiltFrom:
    """The build in `bdir`, refused when it was made from another tree than the work tree holds now."""
    built = buildmod.built_from(bdir)
    work = WorkRepo(project.work_repo)
    if built is None or not built.tree:
        raise TestRunError(f"{bdir}: no record of which tree this build was made from; run `patchset build` first")
    if not work.exists():
        raise TestRunError(f"{project.work_repo}: no work repository; run `patchset apply` and `patchset build`")
    now = work.worktree_tree()
    if now != built.tree:
        raise TestRunError(
            f"{bdir}: built from tree {built.tree[:12]} (commit {built.commit[:12]}), but the work tree now holds "
            f"tree {now[:12]}; run `patchset build` first (its results would describe another tree)")
    return built


def run_tests(project: Project, backend: str = "cpu", targets: str = "minimal", mode: str | None = None,
              ops: list[str] | None = None, all_ops: bool = False, *,
              timeout: float | None = testrun.DEFAULT_TIMEOUT_S, cores: int | None = None) -> testrun.TestReport:
    """The series' declared tests on the patched build; `cores`: each program is shown that many cores
    (testrun.Invocation.cores), else it sees the machine's."""
    with project_lock(project.lock_file, purpose="test"):
        return _run_tests(project, backend, targets, mode, ops, all_ops, timeout, cores)


def _run_tests(project: Project, backend: str, targets: str, mode: str | None, ops: list[str] | None,
               all_ops: bool, timeout: float | None, cores: int | None) -> testrun.TestReport:
    prof = backendmod.profile(backend)
    if sys.platform not in prof.platforms:
        raise InputError(f"{backend} tests cannot run on {sys.platform}: not run here")
    series = load_series(project.patches_dir)
    declared = declared_tests(series, backend)
    mode = mode or testrun.default_mode(backend)
    if all_ops:
        chosen = None
    elif ops:
        chosen = ops
    else:
        chosen = testrun.series_ops(declared) or None
    bdir = build_dir(project, backend, targets)
    bin_dir = bdir / "bin"
    if prof.harness:
        # a harness of ours (the Metal replay) is built for the tree by the test run itself: a no-op when current
        harness = run_build(project, backend, targets)
        if not harness.ok:
            raise BuildError(f"building the {backend} harness failed: {harness.failure or 'see the log'} "
                             f"(log {harness.log})")
    if not (bin_dir / "test-backend-ops").exists():
        raise TestRunError(f"{bin_dir}: no test programs; run `patchset build --backend {backend}` first")
    built = check_build_is_current(project, bdir)
    extra = [(prog, args) for prog, args in declared if prog not in ("test-opt", "test-backend-ops")
             and (bin_dir / prog).exists()]
    invs = testrun.plan(prof.device, backend, mode, chosen, extra, prof.programs, prof.trace_env)
    if prof.selftest and (bin_dir / prof.selftest).exists():
        # the harness checked against the tree it runs (its kernel models against the tree's shader text)
        invs.append(testrun.Invocation(prof.selftest, ("--tree", str(project.work_repo))))
    if cores is not None:
        invs = [dataclasses.replace(inv, cores=cores) for inv in invs]
    log_dir = project.state_dir / "test" / f"{backend}-{targets}-{mode}"
    return testrun.run_plan(bin_dir, invs, log_dir, backend, mode, chosen, timeout=timeout,
                            source_commit=built.commit, source_tree=built.tree)


@dataclass(frozen=True)
class SliceResult:
    path: Path
    files: int
    size: int
    commit: str


def make_slice(project: Project, out: Path | None = None, ref: str = PATCHED) -> SliceResult:
    """A tarball of the tree's ggml/ and test sources with our minimal CMake project on top,
    to build on another machine (a CUDA host, a Mac) with plain cmake."""
    with project_lock(project.lock_file, purpose="slice"):
        work, _ = ensure_patched(project)
        git = work.git
        commit = git.rev(f"{ref}^{{commit}}")
        if commit is None:
            raise InputError(f"--ref {ref}: names no commit in {work.path}")
        series = load_series(project.patches_dir)
        # the programs of the tree being sliced, not of the checked-out one: `--ref upstream`
        # has none of the series' own test programs
        progs = tuple(p for p in programs_for_commit(git, commit, series))
        llama = tuple(p for p in progs
                      if buildmod.includes_llama(git.out("cat-file", "blob", f"{commit}:tests/{p}.cpp")))
        paths = ["ggml"] + [f"tests/{p}.cpp" for p in progs] + list(buildmod.LLAMA_PATHS if llama else ())
        # absolute: git runs in the work repository, where a relative path means something else
        out = (out or project.state_dir / f"slice-{commit[:12]}.tar.gz").resolve()
        out.parent.mkdir(parents=True, exist_ok=True)
        plain = out.with_suffix(out.suffix + ".tar.tmp")
        tmp = out.with_suffix(out.suffix + ".tmp")
        try:
            git.run("archive", "--format=tar", "-o", str(plain), commit, "--", *paths)
            count = _write_slice(plain, tmp, commit, progs, llama)
            tmp.replace(out)
        finally:
            plain.unlink(missing_ok=True)
            tmp.unlink(missing_ok=True)
        return SliceResult(out, count, out.stat().st_size, commit)


def programs_for_commit(git: GitRepo, commit: str, series: Series) -> tuple[str, ...]:
    """The default test programs plus every program the series declares that `commit` has."""
    names = list(buildmod.DEFAULT_PROGRAMS)
    for p in series.patches:
        for t in p.meta.tests:
            if t.program not in names and git.blob(commit, f"tests/{t.program}.cpp"):
                names.append(t.program)
    return tuple(names)


def _write_slice(plain: Path, tmp: Path, commit: str, progs: tuple[str, ...], llama: tuple[str, ...]) -> int:
    count = 0
    with tarfile.open(plain) as src, tarfile.open(tmp, "w:gz") as dst:
        for m in src.getmembers():
            dst.addfile(m, src.extractfile(m) if m.isfile() else None)
            count += m.isfile()
        for name in buildmod.MINIMAL_FILES:
            data = (buildmod.MINIMAL_CMAKE_DIR / name).read_bytes()
            info = tarfile.TarInfo(name)
            info.size, info.mtime, info.mode = len(data), int(time.time()), 0o644
            dst.addfile(info, io.BytesIO(data))
        readme = (f"patchset slice of {commit}\nprograms: {';'.join(progs)}\n"
                  f"build: cmake -G Ninja -S . -B build -DCMAKE_BUILD_TYPE=Release "
                  f"-DPATCHSET_TESTS=\"{';'.join(progs)}\" -DPATCHSET_LLAMA_TESTS=\"{';'.join(llama)}\" "
                  "[-DGGML_CUDA=ON] && cmake --build build\n").encode()
        info = tarfile.TarInfo("PATCHSET-SLICE.txt")
        info.size, info.mtime, info.mode = len(readme), int(time.time()), 0o644
        dst.addfile(info, io.BytesIO(readme))
        count += len(buildmod.MINIMAL_FILES) + 1
    return count

"""Configure and build a llama.cpp tree for one backend and target set, with cmake and ninja.

`minimal` builds ggml and only the test programs (our CMake project in builder/cmake adds the
tree's ggml/ folder); `full` is the tree's own top-level CMake with tests on. A build folder
records what it was configured from and reconfigures when that changes.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import re
import shlex
import shutil
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from builder import proc
from builder.compile import llamacommon, objc_toolchain, platformseed
from builder.compile.backends import TARGET_SETS, profile
from builder.compile.toolchain import CcacheStats, Tool, ccache_stats, find_ccache, find_tool
from builder.errors import InputError, StateError
from builder.fsutil import atomic_write_text, remove_half_written
from builder.progress import NullProgress, ProgressSink

log = logging.getLogger("patchset")

MINIMAL_CMAKE_DIR = Path(__file__).parent.parent / "cmake"
MINIMAL_FILES = ("CMakeLists.txt", "cores.c")
"""The files of the minimal project: what a slice carries, and what a proof's key reads."""
CORES_LIBRARY = "libpatchset-cores.so"
"""The preload library a minimal build on Linux makes in bin/ (builder/cmake/cores.c): a test program
run with it and `CORES_ENV` set sees that many cores."""
CORES_ENV = "PATCHSET_CORES_SHOWN"
DEFAULT_PROGRAMS = ("test-opt", "test-backend-ops")
TREE_LINK = "tree"
"""In a minimal build folder, a link to the tree it builds: the compiler sees the tree there, and
ccache's base_dir is the folder. Every folder then names a source the same way (tree/ggml/src/ggml.c),
so a file another folder compiled from another checkout, with the same content and flags, comes from
the cache: the verify worktree's first build takes the work tree's objects, not minutes of compiling."""

# The tree's CMake drops test-opt silently when either is on, and sanitizers change the timing
# the optimizer tests rely on.
_TEST_SAFE = ("-DGGML_SCHED_NO_REALLOC=OFF", "-DLLAMA_SANITIZE_ADDRESS=OFF", "-DLLAMA_SANITIZE_THREAD=OFF",
              "-DLLAMA_SANITIZE_UNDEFINED=OFF")
# no network at configure or build time: no HTTPS client, no prebuilt web UI download
_FULL_ARGS = ("-DLLAMA_BUILD_TESTS=ON", "-DLLAMA_OPENSSL=OFF", "-DLLAMA_USE_PREBUILT_UI=OFF",
              "-DLLAMA_BUILD_UI=OFF")


def includes_llama(text: str) -> bool:
    """True when a test source includes llama's or llama-common's headers: the minimal build then
    builds libllama and llama-common for that program (and for no other)."""
    return '#include "llama' in text or '#include "common.h"' in text


LLAMA_PATHS = ("include", "src", "common", "vendor")
"""The folders of the tree the minimal build reads for libllama and llama-common, besides ggml/."""


def links_llama(source: Path, program: str) -> bool:
    f = source / "tests" / f"{program}.cpp"
    return f.exists() and includes_llama(f.read_text(errors="replace"))


@dataclass(frozen=True)
class BuildSpec:
    source: Path
    build_dir: Path
    backend: str = "cpu"
    targets: str = "minimal"
    programs: tuple[str, ...] = DEFAULT_PROGRAMS
    build_type: str = "Release"
    jobs: int | None = None
    cuda_arch: str | None = None
    use_ccache: bool = True
    extra_cmake_args: tuple[str, ...] = ()
    build_targets: tuple[str, ...] = ()
    """CMake targets to build; empty: all (minimal: ggml and `programs`; full: the tree's default)."""
    source_commit: str = ""
    """The commit checked out in `source` (recorded with the build; empty: not a git tree)."""
    source_tree: str = ""
    """The tree id of `source` as built, uncommitted edits included (recorded with the build)."""
    platform_cache: Path | None = None
    """Where a new build folder takes CMake's compiler detection from, and leaves it for the next
    (builder/compile/platformseed.py; None: every new folder detects for itself)."""
    jobserver: str | None = None
    """MAKEFLAGS of the run's jobserver (builder/compile/jobserver.py): ninja takes its jobs from that
    pool, shared with every other build of the run, instead of `jobs` of its own."""
    libraries_only: bool = False
    """Only the libraries the test programs link (`library_targets`), and no record that the folder is built:
    the first step of a build whose libraries others wait for (`build_libraries_first`)."""
    objects_of: tuple[str, ...] = ()
    """Only the objects of these test programs (`<program>-objects` of the minimal build, which need no library),
    and no record that the folder is built: what a proof's lane compiles while it waits for the libraries of a
    build beside it (builder/prove/treebuild.py `compile_ahead`)."""


@dataclass(frozen=True)
class CompilerError:
    file: str
    line: int
    message: str

    def __str__(self) -> str:
        return f"{self.file}:{self.line}: error: {self.message}"


@dataclass(frozen=True)
class BuildResult:
    spec_backend: str
    targets: str
    build_dir: Path
    bin_dir: Path
    ok: bool
    configured: bool
    """True when cmake had to (re)configure."""
    noop: bool
    """True when ninja had nothing to do."""
    steps: int
    duration_s: float
    log: Path
    cmake: str
    ninja: str
    ccache: str | None
    ccache_hits: int | None = None
    ccache_misses: int | None = None
    first_error: CompilerError | None = None
    kind: str = "build"
    """'build', or 'compile-check' for Metal sources checked on a machine without Metal."""
    notes: tuple[str, ...] = field(default_factory=tuple)
    timed_out_s: float | None = None
    """The time limit (`$PATCHSET_BUILD_TIMEOUT`) a configure or build step ran past and was killed at."""
    seeded: bool = False
    """A new folder's configure took CMake's compiler detection from an earlier one's (platformseed)."""

    @property
    def failure(self) -> str:
        """Why the build failed, in one line ('' when it did not): the time limit, or the first error."""
        if self.ok:
            return ""
        if self.timed_out_s is not None:
            return (f"killed after {self.timed_out_s:g}s, the build time limit (PATCHSET_BUILD_TIMEOUT, "
                    f"default {proc.BUILD_TIMEOUT_S:g}s)")
        return str(self.first_error) if self.first_error else ""

    @property
    def ccache_hit_rate(self) -> float | None:
        if self.ccache_hits is None or self.ccache_misses is None:
            return None
        total = self.ccache_hits + self.ccache_misses
        return self.ccache_hits / total if total else None


CMAKE_ARGS_ENV = "PATCHSET_CMAKE_ARGS"
"""More configure options for every build of a tree (shell words), after patchset's own: the build
record and the evidence's host and key name them."""


def user_cmake_args() -> tuple[str, ...]:
    """The options of `$PATCHSET_CMAKE_ARGS`, split as a shell would; each must be a -D option."""
    text = os.environ.get(CMAKE_ARGS_ENV, "")
    try:
        words = tuple(shlex.split(text))
    except ValueError as e:
        raise InputError(f"${CMAKE_ARGS_ENV}: {e} in {text!r}") from None
    for w in words:
        if not w.startswith("-D"):
            raise InputError(f"${CMAKE_ARGS_ENV}: {w!r} is not a -D option (only cache settings are taken)")
    return words


def cmake_args(spec: BuildSpec, ninja: Tool, ccache: str | None, *, llama: tuple[str, ...],
               llama_common: str) -> list[str]:
    """The configure options of `spec`; `llama` (llama_programs) and `llama_common` are the minimal
    build's PATCHSET_LLAMA_TESTS and PATCHSET_LLAMA_COMMON."""
    prof = profile(spec.backend)
    args = [f"-DCMAKE_BUILD_TYPE={spec.build_type}", f"-DCMAKE_MAKE_PROGRAM={ninja.path}",
            *prof.cmake_args, *_TEST_SAFE]
    if spec.backend == "cuda":
        args.append(f"-DCMAKE_CUDA_ARCHITECTURES={spec.cuda_arch or 'native'}")
    if spec.backend == "metal-linux":
        clang = shutil.which("clang")
        if clang is None:
            raise InputError("the metal-linux backend compiles Objective-C with clang, not found on PATH "
                             "(apt-get install clang)")
        args += [f"-DPATCHSET_OBJC_TOOLCHAIN={objc_toolchain.require_built()}",
                 f"-DCMAKE_OBJC_COMPILER={clang}"]
    if ccache:
        # set the launcher ourselves (and turn ggml's own detection off) so that our test
        # programs are cached too and the summary can count hits
        args += [f"-DCMAKE_C_COMPILER_LAUNCHER={ccache}", f"-DCMAKE_CXX_COMPILER_LAUNCHER={ccache}",
                 "-DGGML_CCACHE=OFF"]
        if spec.backend == "cuda":
            args.append(f"-DCMAKE_CUDA_COMPILER_LAUNCHER={ccache}")
    else:
        args.append("-DGGML_CCACHE=OFF")
    if spec.targets == "minimal":
        args += [f"-DPATCHSET_SOURCE={spec.build_dir / TREE_LINK}", f"-DPATCHSET_TESTS={';'.join(spec.programs)}",
                 f"-DPATCHSET_LLAMA_TESTS={';'.join(llama)}"]
        if llama:
            args.append(f"-DPATCHSET_LLAMA_COMMON={llama_common}")
    else:
        args += list(_FULL_ARGS)
    return args + list(user_cmake_args()) + list(spec.extra_cmake_args)


def ninja_targets(spec: BuildSpec) -> tuple[str, ...]:
    """The targets to ask for: the chosen ones, and in the minimal project the step that makes ninja
    compile the test sources first (see builder/cmake/CMakeLists.txt)."""
    if spec.libraries_only:
        return library_targets(spec)
    if spec.objects_of:
        return tuple(f"{p}-objects" for p in spec.objects_of)
    if not spec.build_targets:
        return ()
    if spec.targets != "minimal":
        return spec.build_targets
    # a stand-in's self-test comes with its test programs: verify checks the kernel models with it
    selftest = profile(spec.backend).selftest
    cores = ("patchset-cores",) if sys.platform == "linux" else ()
    return (*spec.build_targets, *((selftest,) if selftest else ()), *cores, "patchset-order")


def library_targets(spec: BuildSpec) -> tuple[str, ...]:
    """The libraries of a minimal build: ggml with its backends, and libllama and llama-common where a program
    links them."""
    return ("ggml", *(("llama", "llama-common") if llama_programs(spec) else ()))


def build_libraries_first(spec: BuildSpec, progress: ProgressSink | None, built: Callable[[], None]) -> BuildResult:
    """`build(spec)` in two steps: the libraries (`library_targets`), then `built()`, then the rest. `all` builds
    the patched tree so beside verify's lanes, whose first builds wait for `built()` and then take the library
    objects they share with it from the compiler cache. A failure of the first step is the result. No ccache
    counts: ccache's counters are the machine's, and after `built()` others compile too."""
    first = build(dataclasses.replace(spec, libraries_only=True), progress)
    built()
    if not first.ok:
        return first
    rest = build(spec, progress)
    return dataclasses.replace(rest, configured=first.configured or rest.configured, noop=first.noop and rest.noop,
                               steps=first.steps + rest.steps, duration_s=first.duration_s + rest.duration_s,
                               ccache_hits=None, ccache_misses=None)


def _record_path(build_dir: Path) -> Path:
    return build_dir / ".patchset-build.json"


def _built_path(build_dir: Path) -> Path:
    return build_dir / ".patchset-built.json"


@dataclass(frozen=True)
class BuiltFrom:
    """What the binaries of a build folder were last built from."""

    source: str
    commit: str
    tree: str


def built_from(build_dir: Path) -> BuiltFrom | None:
    """The source of the last successful build in `build_dir`; None when none was recorded.

    Raises StateError when the record is there but unreadable.
    """
    f = _built_path(build_dir)
    try:
        data = json.loads(f.read_text(encoding="utf-8"))
        return BuiltFrom(str(data["source"]), str(data["commit"]), str(data["tree"]))
    except FileNotFoundError:
        return None
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise StateError(f"{f}: damaged build record ({type(e).__name__}: {e}); run `patchset build` again") from None


def _read_config_record(rec_file: Path) -> dict | None:
    """The configure record, or None when there is none or it is damaged (then cmake configures again)."""
    try:
        data = json.loads(rec_file.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as e:
        log.warning("%s: damaged configure record (%s): configuring again", rec_file, e)
        return None
    return data if isinstance(data, dict) else None


_PROGRESS = re.compile(r"^\[(\d+)/(\d+)\]")
_ERROR = re.compile(r"^(?P<file>[^\s:][^:]*):(?P<line>\d+):(?:(?P<col>\d+):)? (?:fatal )?error: (?P<msg>.*)$")
_CMAKE_ERROR = re.compile(r"^CMake Error at (?P<file>[^:]+):(?P<line>\d+)")


def first_error(log_text: str) -> CompilerError | None:
    """The first compiler (or CMake) error in a build log, with its file and line."""
    lines = log_text.splitlines()
    for i, line in enumerate(lines):
        m = _ERROR.match(line)
        if m:
            return CompilerError(m.group("file"), int(m.group("line")), m.group("msg").strip())
        m = _CMAKE_ERROR.match(line)
        if m:
            msg = lines[i + 1].strip() if i + 1 < len(lines) else ""
            return CompilerError(m.group("file"), int(m.group("line")), msg or "CMake error")
    return None


def build(spec: BuildSpec, progress: ProgressSink | None = None) -> BuildResult:
    """Configure (when needed) and build; a failed build is a result with ok=False, not an exception.

    A minimal build whose test programs link llama-common compiles only the sources of it they reach
    (builder/compile/llamacommon.py). When that build fails with no compiler or CMake error, as a link
    that misses a symbol does, it is built once more with all of llama-common, and that result stands.
    """
    progress = progress or NullProgress()
    llama = llama_programs(spec) if spec.targets == "minimal" else ()
    reached = llamacommon.reached_sources(spec.source, llama)
    result = _build(spec, progress, llama, ";".join(reached) or llamacommon.ALL)
    if reached and not result.ok and result.first_error is None and result.timed_out_s is None:
        log.warning("%s: the build with the llama-common sources its test programs reach failed with no "
                    "compiler error: building again with all of llama-common", spec.build_dir)
        result = _build(spec, progress, llama, llamacommon.ALL)
    return result


def llama_programs(spec: BuildSpec) -> tuple[str, ...]:
    """The programs of `spec` that link libllama and llama-common in a minimal build."""
    return tuple(p for p in spec.programs if links_llama(spec.source, p))


def _build(spec: BuildSpec, progress: ProgressSink, llama: tuple[str, ...], llama_common: str) -> BuildResult:
    prof = profile(spec.backend)
    if spec.targets not in TARGET_SETS:
        raise InputError(f"unknown target set '{spec.targets}' (known: {', '.join(TARGET_SETS)})")
    if spec.targets not in prof.target_sets:
        raise InputError(f"backend '{spec.backend}' builds only the target set(s) {', '.join(prof.target_sets)}")
    if sys.platform not in prof.platforms:
        raise InputError(f"backend '{spec.backend}' does not build on {sys.platform}"
                         + (" (use --backend metal for a compile check)" if spec.backend == "metal" else ""))
    cmake, ninja = find_tool("cmake"), find_tool("ninja")
    ccache = find_ccache() if spec.use_ccache else None
    args = cmake_args(spec, ninja, ccache, llama=llama, llama_common=llama_common)
    src_dir = MINIMAL_CMAKE_DIR if spec.targets == "minimal" else spec.source
    record = {"source": str(spec.source), "cmake_source": str(src_dir), "args": args, "generator": "Ninja"}
    spec.build_dir.mkdir(parents=True, exist_ok=True)
    log = spec.build_dir / "build.log"
    log.write_text("")
    limit = proc.build_timeout()
    start = time.monotonic()
    configured = False
    rec_file = _record_path(spec.build_dir)
    old = _read_config_record(rec_file)
    # the binaries about to change no longer match the recorded source, whatever happens next; a record
    # whose write a kill cut short is removed too
    _built_path(spec.build_dir).unlink(missing_ok=True)
    remove_half_written(spec.build_dir, below=False)
    # another tree behind the link has the same object names as the last: nothing of its build is kept
    if old and (old.get("cmake_source") != record["cmake_source"] or old.get("source") != record["source"]):
        _wipe(spec.build_dir, keep=log)
    if spec.targets == "minimal":
        _link_tree(spec.build_dir / TREE_LINK, spec.source)
    env = {"CCACHE_BASEDIR": str(spec.build_dir)} if ccache else None
    seeded = False
    if old != record or not (spec.build_dir / "CMakeCache.txt").exists():
        progress.begin(f"configuring {spec.backend}/{spec.targets}", None)
        r, seeded = _configure(spec, cmake, src_dir, args, log, env, limit)
        progress.end()
        if r.returncode != 0 or r.timed_out:
            rec_file.unlink(missing_ok=True)
            return _failed(spec, log, start, cmake, ninja, ccache, configured=True,
                           timed_out_s=limit if r.timed_out else None)
        rec_file.write_text(json.dumps(record, indent=1))
        configured = True
    before = ccache_stats(ccache) if ccache else None
    jobs = spec.jobs or os.cpu_count() or 2
    steps = 0
    bar_started = False

    def on_line(line: str) -> None:
        nonlocal steps, bar_started
        m = _PROGRESS.match(line)
        if m:
            done, total = int(m.group(1)), int(m.group(2))
            steps = max(steps, done)
            if not bar_started:
                progress.begin(f"building {spec.backend}/{spec.targets}", total)
                bar_started = True
            progress.update(done, total)

    cmd = [cmake.path, "--build", str(spec.build_dir)]
    if spec.jobserver:
        # an explicit -j wins over the jobserver in ninja: none is given, nor cmake's own parallel level
        env = {**(env or {}), "MAKEFLAGS": spec.jobserver, "CMAKE_BUILD_PARALLEL_LEVEL": ""}
    else:
        cmd += ["--parallel", str(jobs)]
    if spec.build_targets or spec.libraries_only or spec.objects_of:
        cmd += ["--target", *ninja_targets(spec)]
    r = proc.stream(cmd, log_file=log, on_line=on_line, env=env, timeout=limit)
    if bar_started:
        progress.end()
    after = ccache_stats(ccache) if ccache else None
    delta: CcacheStats | None = after.minus(before) if after and before else None
    text = log.read_text(errors="replace")
    if r.returncode != 0 or r.timed_out:
        return _failed(spec, log, start, cmake, ninja, ccache, configured=configured, delta=delta,
                       timed_out_s=limit if r.timed_out else None)
    if not spec.libraries_only and not spec.objects_of:
        atomic_write_text(_built_path(spec.build_dir), json.dumps(
            {"source": str(spec.source), "commit": spec.source_commit, "tree": spec.source_tree}, indent=1) + "\n")
    return BuildResult(
        spec.backend, spec.targets, spec.build_dir, spec.build_dir / "bin", True, configured,
        noop="ninja: no work to do" in text, steps=steps, duration_s=time.monotonic() - start, log=log,
        cmake=f"{cmake.path} {cmake.version_text} ({cmake.origin})", ninja=f"{ninja.path} {ninja.version_text}",
        ccache=ccache, ccache_hits=delta.hits if delta else None, ccache_misses=delta.misses if delta else None,
        seeded=seeded,
    )


def _configure(spec: BuildSpec, cmake: Tool, src_dir: Path, args: list[str], log: Path, env: dict[str, str] | None,
               limit: float) -> tuple[proc.Completed, bool]:
    """Configure `spec.build_dir`; a new folder takes the compiler detection of an earlier one with the same
    key (platformseed), or leaves its own for the next. A seeded configure that fails is run again unseeded.
    The result and whether the seed was used."""
    cmd = [cmake.path, "-G", "Ninja", "-S", str(src_dir), "-B", str(spec.build_dir)]
    fresh = not (spec.build_dir / "CMakeCache.txt").exists()
    seed_key = (platformseed.key(cmake.path, cmake.version_text, src_dir, args)
                if fresh and spec.platform_cache is not None else None)
    store = spec.platform_cache
    seed = platformseed.take(store, seed_key, spec.build_dir) if seed_key and store is not None else None
    if seed:
        r = proc.stream([*cmd, *seed, *args], log_file=log, env=env, timeout=limit)
        if r.returncode == 0 and not r.timed_out:
            return r, True
        with log.open("a", encoding="utf-8") as fh:
            fh.write("patchset: the configure with an earlier folder's compiler detection failed: detecting again\n")
        (spec.build_dir / "CMakeCache.txt").unlink(missing_ok=True)
        shutil.rmtree(spec.build_dir / "CMakeFiles", ignore_errors=True)
    r = proc.stream([*cmd, *args], log_file=log, env=env, timeout=limit)
    if seed_key and store is not None and r.returncode == 0 and not r.timed_out:
        platformseed.keep(store, seed_key, spec.build_dir)
    return r, False


def _failed(spec: BuildSpec, log: Path, start: float, cmake: Tool, ninja: Tool, ccache: str | None, *,
            configured: bool, delta: CcacheStats | None = None, timed_out_s: float | None = None) -> BuildResult:
    return BuildResult(
        spec.backend, spec.targets, spec.build_dir, spec.build_dir / "bin", False, configured, False, 0,
        time.monotonic() - start, log, f"{cmake.path} {cmake.version_text}", f"{ninja.path} {ninja.version_text}",
        ccache, delta.hits if delta else None, delta.misses if delta else None,
        first_error=_in_tree(first_error(log.read_text(errors="replace")), spec.build_dir),
        timed_out_s=timed_out_s,
    )


def _in_tree(e: CompilerError | None, build_dir: Path) -> CompilerError | None:
    return e and CompilerError(compiled_path(build_dir, e.file), e.line, e.message)


def _link_tree(link: Path, source: Path) -> None:
    """Point `link` at `source` (replaced in one rename when it points elsewhere)."""
    target = source.resolve()
    if link.is_symlink() and Path(os.readlink(link)) == target:
        return
    tmp = link.with_name(f".{link.name}.new")
    tmp.unlink(missing_ok=True)
    tmp.symlink_to(target, target_is_directory=True)
    tmp.replace(link)


def compiled_path(build_dir: Path, file: str) -> str:
    """A file as the compiler named it in `build_dir` (relative to the folder under ccache's base_dir,
    or through the tree link) as the path of the file itself."""
    p = build_dir / file
    return str(p.resolve()) if p.exists() else file


def _wipe(build_dir: Path, keep: Path) -> None:
    for child in build_dir.iterdir():
        if child == keep:
            continue
        if child.is_dir() and not child.is_symlink():
            shutil.rmtree(child)
        else:
            child.unlink()

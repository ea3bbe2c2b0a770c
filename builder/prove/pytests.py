"""The `python` test kind: a patch's pytest file, run on a proof tree of a Python package over one built library.

A patch of the bindings series (`patches-bindings/`, llama-cpp-python) declares its test as
`Patchset-Test: python tests/test_x.py [PYTEST ARGS]`: a pytest file of the bindings' own layout. Such
a patch changes Python only, so its trees are never compiled: each tree (before, after, mutation) is
checked out and runs the test against the same library, the one `patchset wheel` built from the main
series' `patched` tree (the bindings' CMake installs it into the staged project's `<package>/lib`,
beside the `patchset.json` that says which tree it was built from). The library is linked into the
tree's package folder, so the tree's own Python code loads it as the installed package would.

What each test did is read from a JSON-lines record that a small pytest plugin of ours writes
(`data/patchset_pytest_record.py`), not from pytest's printed summary. A test that fails because
the tree lacks a name it uses (ImportError, NameError, an AttributeError of a module) did not test
behaviour: it is the Python form of a test that does not compile without the fix, and counts as such
(`build-fails`), never as a failing case.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import signal
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from builder import proc
from builder.compile import testrun
from builder.errors import InputError, TestRunError
from builder.gitrepo import GitRepo
from builder.project import Project
from builder.series.model import TestSpec

PYTHON = "python"
"""The program word of a Python test in `Patchset-Test`."""
PLUGIN_DIR = Path(__file__).with_name("data")
PLUGIN = "patchset_pytest_record"
PYTHON_ENV = "PATCHSET_PYTHON"
"""The interpreter that runs Python tests (default: patchset's own); it needs pytest and the package's
own requirements."""
DOES_NOT_LOAD = "does not load"
"""The detail that opens a case whose test lacks a name in the tree (missing API, not behaviour)."""
_PYTEST_USAGE_ERRORS = (3, 4)  # pytest's exit codes for an internal error and a usage error


def is_python(t: TestSpec) -> bool:
    return t.program == PYTHON


def test_file(t: TestSpec) -> str:
    """The tree path a test's source lives in: the pytest file of a Python test, else `tests/<program>.cpp`."""
    if is_python(t):
        return t.args[0] if t.args else ""
    return f"tests/{t.program}.cpp"


def interpreter() -> str:
    return os.environ.get(PYTHON_ENV) or sys.executable


@dataclass(frozen=True)
class Library:
    """The built library a Python test runs against."""

    folder: Path
    """The folder of shared libraries (`<staged project>/<package>/lib` of `patchset wheel`)."""
    package: str
    """The package folder name the library goes into (`llama_cpp`)."""
    tree: str
    """The git tree of the main series' `patched` it was built from."""
    version: str
    """The wheel version that build had (its provenance)."""

    def describe(self) -> str:
        return f"{self.folder} (built by `patchset wheel` {self.version} from llama.cpp tree {self.tree[:12]})"


def find_library(project: Project, backend: str) -> Library:
    """The library `patchset wheel --backend B` built from the main series' committed `patched`.

    Refuses one that is missing, or built from another tree than `patched` is now: the proof would
    then be about a library that is not the series'."""
    main = project.series("")
    stage = project.state_dir / "wheel" / backend / "src"
    records = sorted(stage.glob("*/patchset.json"))
    if not records:
        raise InputError(f"{stage}: no library built for the {backend} backend; a Python test runs against the "
                         f"library `patchset wheel --backend {backend}` builds: run it first")
    record = records[0]
    try:
        data = json.loads(record.read_text(encoding="utf-8"))
        tree, version = str(data["vendored"]["tree"]), str(data["version"])
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise InputError(f"{record}: unreadable provenance ({e}); run `patchset wheel --backend {backend}` again") \
            from e
    folder = record.parent / "lib"
    if not folder.is_dir() or not any(folder.iterdir()):
        raise InputError(f"{folder}: the staged wheel project holds no built library (the wheel build did not "
                         f"finish); run `patchset wheel --backend {backend}` again")
    git = GitRepo(main.work_repo)
    now = git.rev("refs/heads/patched") if main.work_repo.exists() else None
    if now is None or git.tree_of(now) != tree:
        raise InputError(f"{folder}: built from llama.cpp tree {tree[:12]}, but the main series' 'patched' is "
                         f"{git.tree_of(now)[:12] if now else 'not applied'}; run `patchset wheel --backend "
                         f"{backend}` again so that the Python test runs against the series' library")
    return Library(folder, record.parent.name, tree, version)


def place_library(tree: Path, lib: Library) -> None:
    """Link the library into the checked-out tree's package folder, where the package loads it from."""
    target = tree / lib.package / "lib"
    if target.is_symlink() and os.readlink(target) == str(lib.folder):
        return
    if target.is_symlink() or target.is_file():
        target.unlink()
    elif target.exists():
        raise TestRunError(f"{target}: the tree holds a folder where the built library goes")
    target.parent.mkdir(parents=True, exist_ok=True)
    target.symlink_to(lib.folder, target_is_directory=True)


def run(tree: Path, lib: Library, inv: testrun.Invocation, log: Path, timeout: float | None) -> testrun.ProgramResult:
    """Run one Python test on `tree` (checked out, the library placed) and read what each test did."""
    if not inv.args:
        raise InputError("a `python` test names no pytest file (Patchset-Test: python tests/test_x.py)")
    python = interpreter()
    if python == sys.executable and importlib.util.find_spec("pytest") is None:
        raise TestRunError(f"{python}: has no pytest; install it, or name an interpreter that has it "
                           f"(and the package's requirements) in {PYTHON_ENV}")
    log.parent.mkdir(parents=True, exist_ok=True)
    log.write_text("")
    record = log.with_suffix(".pytest.jsonl")
    record.unlink(missing_ok=True)
    env = {
        "PATCHSET_PYTEST_RECORD": str(record),
        # the plugin from our folder, the package from the tree (the current folder, first on the path)
        "PYTHONPATH": str(PLUGIN_DIR),
        # no __pycache__ or .pytest_cache left in the tree: the next checkout must find it clean
        "PYTHONDONTWRITEBYTECODE": "1",
    }
    argv = [python, "-m", "pytest", "-p", PLUGIN, "-p", "no:cacheprovider", "-q", "-rN", "--rootdir", str(tree),
            *inv.args]
    start = time.monotonic()
    r = proc.stream(argv, log_file=log, cwd=tree, timeout=timeout, env=env)
    took = time.monotonic() - start
    last = tuple(r.stdout.rstrip("\n").splitlines()[-testrun.LAST_LINES:])
    events = _read(record)
    if not r.timed_out and r.returncode >= 0 and not any(e.get("event") == "session" for e in events):
        raise TestRunError(f"{python} -m pytest did not start ({' | '.join(last[-3:]) or 'no output'}; log: {log})")
    if r.returncode in _PYTEST_USAGE_ERRORS:
        raise TestRunError(f"{python} -m pytest {' '.join(inv.args)}: pytest could not run it (exit "
                           f"{r.returncode}: {' | '.join(last[-3:])}; log: {log})")
    sig = None
    if r.returncode < 0:
        try:
            sig = signal.Signals(-r.returncode).name
        except ValueError:
            sig = f"signal {-r.returncode}"
    cases = _cases(events, inv.program, crashed=sig is not None)
    if r.timed_out:
        shown = " | ".join(line.strip() for line in last[-5:] if line.strip()) or "(it printed nothing)"
        cases.append(testrun.CaseResult(inv.program, "", "timeout", f"limit={timeout:g}s", testrun.FAIL,
                                        f"stopped after {timeout:g}s (time limit); last lines: {shown}"))
    # pytest exits 5 when it collected nothing: that checked nothing, like a run with every test skipped
    rc = 0 if r.returncode == 5 else r.returncode
    if rc in (1, 2) and not any(c.status == testrun.FAIL for c in cases) and any(_missing(c) for c in cases):
        rc = 0  # the only failures (2: at collection) are names the tree lacks: they read as `does not load`
    return testrun.ProgramResult(inv.program, inv.args, rc, sig, tuple(cases), took, log,
                                 timed_out=r.timed_out, last_lines=last if sig or rc else ())


def does_not_load(results: list[testrun.ProgramResult]) -> list[str]:
    """The tests that lack a name the tree does not have, when that is every failure of the runs (the
    Python form of a test that fails to compile in its own files): one line each; else []."""
    failed = [c for r in results for c in r.cases if c.status in (testrun.FAIL, testrun.CRASH)]
    missing = [c for r in results for c in r.cases if _missing(c)]
    if failed or not missing or any(r.signal_name or r.timed_out or r.returncode for r in results):
        return []
    return [f"{c.name}: {c.detail}" for c in missing]


def _missing(c: testrun.CaseResult) -> bool:
    return c.status == testrun.SKIP and c.detail.startswith(DOES_NOT_LOAD)


def _read(path: Path) -> list[dict]:
    if not path.is_file():
        return []
    out = []
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        try:
            out.append(json.loads(line))
        except ValueError:
            continue  # a line cut short by a crash
    return out


_PARAMS = re.compile(r"^(?P<name>.*?)(?:\[(?P<params>.*)\])?$")


def _cases(events: list[dict], program: str, *, crashed: bool) -> list[testrun.CaseResult]:
    """One case per test (and per module that failed to collect): pass, fail, skip, or crash for the test
    the interpreter died in. A failure whose exception says the tree lacks a name the test uses is a
    skip whose detail starts with DOES_NOT_LOAD: not behaviour, never a proof."""
    status: dict[str, str] = {}
    detail: dict[str, str] = {}
    missing: dict[str, str] = {}
    started: list[str] = []
    for e in events:
        node = str(e.get("nodeid", ""))
        kind = e.get("event")
        if kind == "start":
            started.append(node)
            status.setdefault(node, "")
        elif kind == "report":
            outcome, when = e.get("outcome"), e.get("when")
            if outcome == "failed":
                status[node] = testrun.FAIL
            elif outcome == "skipped" and status.get(node) != testrun.FAIL:
                status[node] = testrun.SKIP
                detail.setdefault(node, "xfail" if e.get("xfail") else "skipped")
            elif outcome == "passed" and when == "call" and not status.get(node):
                status[node] = testrun.PASS
        elif kind == "exception":
            detail.setdefault(node, str(e.get("text", "")))
            if e.get("missing_api"):
                missing.setdefault(node, str(e.get("text", "")))
    out = []
    for node, seen in status.items():
        st = seen
        if not st:
            # started and never reported: the interpreter died in it (a test stopped at the time limit
            # is the run's `timeout` case)
            if not crashed or node != (started[-1] if started else None):
                continue
            st = testrun.CRASH
        d = detail.get(node, "")
        if st == testrun.FAIL and node in missing:
            st, d = testrun.SKIP, f"{DOES_NOT_LOAD}: {missing[node]}"
        m = _PARAMS.match(node.split("::", 1)[1] if "::" in node else node)
        name, params = (m.group("name"), m.group("params") or "") if m else (node, "")
        out.append(testrun.CaseResult(program, "", name, params, st, d))
    return out

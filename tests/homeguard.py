"""The suite's home guard: the tests get a home of their own, and fail only for what they did.

From `pytest_configure` on (before any test module is imported), the test process's HOME, XDG
folders and patchset cache are a sandbox in a temporary folder; each test narrows them further
(conftest's hermetic fixtures). What could still reach the real home is code that finds it some
other way than through the environment. That is watched where it happens, not by comparing the
home before and after (which blamed the suite for a `patchset bump` that a user ran by hand in
another project at the same time): a Python audit hook in the test process, and in every Python
process it starts (`homeguard_site/sitecustomize.py`, put on their PYTHONPATH), records each write
(open for writing, mkdir, rename, remove, rmtree, ...) into the real home's top level or into one of
the folders patchset or git use there. A test that made such a write fails, naming the path; a
write by a process the suite did not start is never recorded.

Non-Python programs the suite starts (git, cmake, compilers) find the home through HOME only, and
HOME is the sandbox.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from homeguard_site.homeguard_hook import install

_seen: list[str] = []

def real_home() -> Path:
    """The home the suite must never write into: the user's, or the one a self-test names."""
    return Path(os.environ.get("PATCHSET_TEST_REAL_HOME") or os.path.expanduser("~")).resolve()


def new_writes() -> list[str]:
    """The writes into the real home recorded since the last call, by this process or its children."""
    log = Path(os.environ["PATCHSET_TEST_HOME_WRITES"])
    lines = log.read_text(encoding="utf-8").splitlines() if log.exists() else []
    new = lines[len(_seen):]
    _seen.extend(new)
    return new


# -- as a pytest plugin (conftest imports these) --------------------------------------------------------
def pytest_configure(config: pytest.Config) -> None:
    home = real_home()
    sandbox = Path(tempfile.mkdtemp(prefix="patchset-tests-"))
    config.stash[_SANDBOX] = sandbox
    for var, sub in (("HOME", "home"), ("XDG_CONFIG_HOME", "xdg-config"), ("XDG_CACHE_HOME", "xdg-cache"),
                     ("XDG_DATA_HOME", "xdg-data"), ("XDG_STATE_HOME", "xdg-state"),
                     ("PATCHSET_CACHE", "patchset-cache")):
        (sandbox / sub).mkdir()
        os.environ[var] = str(sandbox / sub)
    log = sandbox / "home-writes.log"
    os.environ["PATCHSET_TEST_REAL_HOME"] = str(home)
    os.environ["PATCHSET_TEST_HOME_WRITES"] = str(log)
    site = str(Path(__file__).resolve().parent / "homeguard_site")
    os.environ["PYTHONPATH"] = os.pathsep.join([site, *filter(None, [os.environ.get("PYTHONPATH")])])
    install(str(home), str(log))


def pytest_unconfigure(config: pytest.Config) -> None:
    sandbox = config.stash.get(_SANDBOX, None)
    if sandbox is not None:
        shutil.rmtree(sandbox, ignore_errors=True)


_SANDBOX = pytest.StashKey[Path]()


@pytest.fixture(scope="session", autouse=True)
def home_guard_session() -> Iterator[None]:
    """Fails the session's last test for writes into the real home made outside every test (by a
    session- or module-scoped fixture)."""
    new_writes()
    yield
    writes = new_writes()
    assert not writes, f"a fixture of the session wrote into the real home directory {real_home()}: {writes[:5]}"


@pytest.fixture(autouse=True)
def home_guard() -> Iterator[None]:
    """Fails the test when it, or a process it started, wrote into the real home directory."""
    new_writes()
    yield
    writes = new_writes()
    assert not writes, f"the test wrote into the real home directory {real_home()}: {writes[:5]}"

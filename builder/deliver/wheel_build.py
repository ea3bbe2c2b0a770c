"""`patchset wheel`'s build: scikit-build-core on the staged project, the wheel checked against it."""

from __future__ import annotations

import hashlib
import json
import os
import re
import shlex
import shutil
import sys
import tempfile
import time
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

from builder import proc
from builder.compile.cmakebuild import first_error
from builder.compile.toolchain import CcacheStats, ccache_stats, find_tool
from builder.deliver.wheel import PACKAGE, Prepared, WheelOptions, prepare, wheel_root
from builder.errors import BuildError
from builder.locking import hold
from builder.progress import NullProgress, ProgressSink
from builder.project import Project

_WHEEL_MARK = "PATCHSET-WHEEL:"
_NINJA_STEP = re.compile(r"^\[(\d+)/(\d+)\]\s(.*)$")


@dataclass(frozen=True)
class WheelResult:
    wheel: Path
    provenance_file: Path
    prepared: Prepared
    duration_s: float
    log: Path
    compiled: int
    """Compiler runs ninja made (C, C++, CUDA, Objective-C): what a rebuild had to recompile."""
    ccache: CcacheStats | None = None
    notes: tuple[str, ...] = field(default_factory=tuple)


# -- the build -------------------------------------------------------------------------------------
_BUILD_CODE = (
    "import sys\n"
    "import scikit_build_core.build as backend\n"
    "name = backend.build_wheel(sys.argv[1], {'build-dir': sys.argv[2]})\n"
    f"print({_WHEEL_MARK!r} + name)\n"
)


def build_env(prepared: Prepared, jobs: int | None) -> dict[str, str]:
    """The environment scikit-build-core and CMake run in."""
    cmake, ninja = find_tool("cmake"), find_tool("ninja")
    path_dirs = dict.fromkeys([str(Path(cmake.path).parent), str(Path(ninja.path).parent)])
    env = {
        "CMAKE_ARGS": shlex.join(prepared.cmake_args),
        "SOURCE_DATE_EPOCH": str(prepared.source_date_epoch),
        "CMAKE_BUILD_PARALLEL_LEVEL": str(jobs or os.cpu_count() or 2),
        "PATH": os.pathsep.join([*path_dirs, os.environ.get("PATH", "")]),
        # the staged tree has no .git: without a ceiling, the tree's CMake would ask git and find
        # the project repository around .patchset/ (and embed its commit in the build info)
        "GIT_CEILING_DIRECTORIES": str(prepared.source_dir.parent),
    }
    if prepared.ccache is None:
        env["CCACHE_DISABLE"] = "1"
    return env


def build_wheel(project: Project, options: WheelOptions, progress: ProgressSink | None = None) -> WheelResult:
    """Stage and build; the wheel and `<wheel>.provenance.json` land in the output folder."""
    progress = progress or NullProgress()
    root = wheel_root(project, options.backend)
    root.mkdir(parents=True, exist_ok=True)
    with hold(root.parent / f"{options.backend}.lock", 5, purpose="wheel", what=f"a {options.backend} wheel"):
        return _build_locked(project, options, progress)


def _build_locked(project: Project, options: WheelOptions, progress: ProgressSink) -> WheelResult:
    start = time.monotonic()
    prepared = prepare(project, options, progress)
    out_dir = (options.out_dir or project.root / "dist").resolve()
    out_dir.mkdir(parents=True, exist_ok=True)
    log = wheel_root(project, options.backend) / "build.log"
    log.write_text("")
    env = build_env(prepared, options.jobs)
    before = ccache_stats(prepared.ccache) if prepared.ccache else None
    compiled = 0
    bar = False

    def on_line(line: str) -> None:
        nonlocal compiled, bar
        m = _NINJA_STEP.match(line)
        if not m:
            return
        if " -c " in m.group(3) or "Building " in m.group(3):
            compiled += 1
        if not bar:
            progress.begin(f"building the {options.backend} wheel", int(m.group(2)))
            bar = True
        progress.update(int(m.group(1)), int(m.group(2)))

    tmp_out = Path(tempfile.mkdtemp(prefix=".wheel-", dir=out_dir))
    try:
        limit = proc.build_timeout()
        r = proc.stream([sys.executable, "-c", _BUILD_CODE, str(tmp_out), str(prepared.build_dir)],
                        log_file=log, cwd=prepared.source_dir, env=env, on_line=on_line, timeout=limit)
        if bar:
            progress.end()
        if r.timed_out:
            raise BuildError(f"wheel build killed after {limit:g}s, the build time limit (PATCHSET_BUILD_TIMEOUT, "
                             f"default {proc.BUILD_TIMEOUT_S:g}s) (full log: {log})")
        names = [line[len(_WHEEL_MARK):].strip() for line in r.stdout.splitlines() if line.startswith(_WHEEL_MARK)]
        if r.returncode != 0 or not names:
            err = first_error(log.read_text(errors="replace"))
            raise BuildError(f"wheel build failed{': ' + str(err) if err else ''} (full log: {log})")
        built = tmp_out / names[-1]
        _check_wheel(built, prepared)
        wheel = out_dir / built.name
        os.replace(built, wheel)
    finally:
        shutil.rmtree(tmp_out, ignore_errors=True)
    prov_file = out_dir / (wheel.name[: -len(".whl")] + ".provenance.json")
    data = json.dumps(prepared.provenance, indent=1) + "\n"
    fd, tmp = tempfile.mkstemp(prefix=".prov-", dir=out_dir)
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        fh.write(data)
    os.replace(tmp, prov_file)
    after = ccache_stats(prepared.ccache) if prepared.ccache else None
    return WheelResult(
        wheel=wheel, provenance_file=prov_file, prepared=prepared, duration_s=time.monotonic() - start, log=log,
        compiled=compiled, ccache=after.minus(before) if after and before else None,
    )


def _check_wheel(path: Path, prepared: Prepared) -> None:
    """The built wheel carries our version, a py3-none tag and the provenance we wrote."""
    name = path.name
    parts = name[: -len(".whl")].split("-")
    if len(parts) < 5 or parts[1] != prepared.version or parts[-3:-1] != ["py3", "none"]:
        raise BuildError(f"{name}: expected version {prepared.version} and a py3-none tag")
    want = (prepared.source_dir / PACKAGE / "patchset.json").read_bytes()
    with zipfile.ZipFile(path) as zf:
        try:
            got = zf.read(f"{PACKAGE}/patchset.json")
        except KeyError:
            raise BuildError(f"{name}: {PACKAGE}/patchset.json is missing from the wheel") from None
    if hashlib.sha256(got).digest() != hashlib.sha256(want).digest():
        raise BuildError(f"{name}: {PACKAGE}/patchset.json in the wheel differs from the staged one")

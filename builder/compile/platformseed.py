"""CMake's compiler detection, made once and reused by every new build folder with the same compilers.

A first configure detects the platform and each compiler (a dozen small compiles and runs: about
two thirds of a small project's configure) and writes the answers to `CMakeFiles/<version>/` and to
the cache (the compilers' and binutils' paths). A later configure of a new folder with the same cmake,
compilers, flags and environment gets both, and CMake reads them as it does on a reconfigure
(`CMAKE_PLATFORM_INFO_INITIALIZED`) instead of detecting again.

The seeds live in `$PATCHSET_CACHE/cmake-platform/<key>/`, one per key: a hash of everything the
detection depends on (cmake and its version, the configure options that name compilers, flags,
toolchains or languages, the compiler variables of the environment and PATH, and each compiler
binary's size and time). Delete the folder to make every new build folder detect again. A seeded
configure that fails is run again without the seed (`cmakebuild`), so a bad seed costs time, not a
build.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import shutil
import sys
import tempfile
from pathlib import Path

SEED_FILE = "initial-cache.cmake"
"""The cache entries of a seed, as a `cmake -C` script."""
INITIALIZED = "-DCMAKE_PLATFORM_INFO_INITIALIZED:INTERNAL=1"
_VERSION_DIR = re.compile(r"^\d+\.\d+")
_ENV = ("CC", "CXX", "OBJC", "OBJCXX", "CUDACXX", "CUDAHOSTCXX", "CFLAGS", "CXXFLAGS", "OBJCFLAGS", "CUDAFLAGS",
        "CPPFLAGS", "LDFLAGS", "PATH", "SDKROOT", "MACOSX_DEPLOYMENT_TARGET")
_DEFAULT_COMPILERS = ("cc", "c++", "nvcc", "clang")
# cache entries a configure made that hold the platform's answers: the compilers' and binutils' paths
# (FILEPATH entries of CMake's own) and these two
_PLATFORM_INTERNAL = ("CMAKE_EXECUTABLE_FORMAT", "CMAKE_UNAME")
_CACHE_LINE = re.compile(r"^(CMAKE_[A-Za-z0-9_]+):(FILEPATH|INTERNAL)=(.*)$")


def _detection_args(args: list[str]) -> list[str]:
    """The configure options the detection can depend on: CMake's own variables (compilers, flags,
    toolchain file) and the backend switches that enable languages (GGML_CUDA, ...)."""
    return [a for a in args if a.startswith(("-DCMAKE_", "-DGGML_", "-DPATCHSET_METAL", "-G"))
            and not a.startswith(("-DCMAKE_BUILD_TYPE", "-DCMAKE_MAKE_PROGRAM"))]


def _stat(path: str | None) -> str:
    if not path:
        return ""
    found = path if os.sep in path else shutil.which(path)
    if not found:
        return f"{path}: absent"
    try:
        real = os.path.realpath(found)
        st = os.stat(real)
    except OSError:
        return f"{path}: absent"
    return f"{real} {st.st_size} {st.st_mtime_ns}"


def key(cmake: str, cmake_version: str, cmake_source: Path, args: list[str]) -> str:
    """The seed's key for a configure of `cmake_source` with `args`."""
    chosen = _detection_args(args)
    compilers = [a.split("=", 1)[1] for a in chosen if "_COMPILER" in a.split("=", 1)[0] and "=" in a]
    compilers += [os.environ.get(v, "").split()[0] for v in ("CC", "CXX", "OBJC", "CUDACXX") if os.environ.get(v)]
    facts = {
        "cmake": [_stat(cmake), cmake_version], "source": str(cmake_source), "args": chosen,
        "env": {v: os.environ.get(v) for v in _ENV}, "platform": [sys.platform, os.uname().machine],
        "compilers": [_stat(c) for c in (*compilers, *_DEFAULT_COMPILERS)],
    }
    return hashlib.sha256(json.dumps(facts, sort_keys=True).encode()).hexdigest()[:24]


def _version_dir(build_dir: Path) -> Path | None:
    found = [p for p in (build_dir / "CMakeFiles").glob("*") if p.is_dir() and _VERSION_DIR.match(p.name)]
    return found[0] if len(found) == 1 else None


def take(store: Path, seed_key: str, build_dir: Path) -> list[str] | None:
    """Put the seed of `seed_key` into a new `build_dir`; the configure options that make CMake read it,
    or None when there is no seed."""
    seed = store / seed_key
    files = seed / "files"
    if not (seed / SEED_FILE).is_file() or not files.is_dir():
        return None
    versions = [p for p in files.iterdir() if p.is_dir()]
    if len(versions) != 1:
        return None
    shutil.copytree(versions[0], build_dir / "CMakeFiles" / versions[0].name, dirs_exist_ok=True)
    return ["-C", str(seed / SEED_FILE), INITIALIZED]


def keep(store: Path, seed_key: str, build_dir: Path) -> None:
    """After a configure that detected for itself, keep what it found as the seed of `seed_key` (written
    whole into a temporary folder and renamed: a reader never sees half a seed; the first writer wins)."""
    seed = store / seed_key
    version = _version_dir(build_dir)
    if seed.exists() or version is None or not (build_dir / "CMakeCache.txt").is_file():
        return
    entries = []
    for line in (build_dir / "CMakeCache.txt").read_text(errors="replace").splitlines():
        m = _CACHE_LINE.match(line)
        if m and (m.group(2) == "FILEPATH" or m.group(1) in _PLATFORM_INTERNAL):
            entries.append(f'set({m.group(1)} "{_quote(m.group(3))}" CACHE {m.group(2)} "")')
    store.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{seed_key}.", dir=store))
    try:
        shutil.copytree(version, tmp / "files" / version.name)
        (tmp / SEED_FILE).write_text("# made by patchset from a configure's compiler detection\n"
                                     + "".join(f"{e}\n" for e in entries))
        with contextlib.suppress(OSError):  # another process kept one first
            tmp.rename(seed)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _quote(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("$", "\\$")

"""The carry folder for a machine without network: a git bundle of the pin, the wheels patchset needs there, a manifest.

`patchset offline prepare` makes it here, where the pin's sources and the package index can be
reached; there, tools/gpu/run.sh installs patchset from it, and `patchset offline run` fetches the pin
from the bundle (builder/orchestrate/offline.py). The wheels fit CPython 3.11 and 3.12 on Linux x86_64
with glibc 2.28 or newer: every dependency but cmake is pure Python or tagged for those platforms, and
cmake is not carried (a build machine has one; its wheel alone is ~27 MB).
"""

from __future__ import annotations

import gzip
import importlib.metadata
import io
import json
import shutil
import sys
import tarfile
import time
import tomllib
from dataclasses import dataclass
from pathlib import Path

from packaging.requirements import Requirement

from builder import proc
from builder.deliver.wheel import WheelOptions, resolve_sdist
from builder.errors import ProcessError, SourceError
from builder.fsutil import sha256_file
from builder.progress import NullProgress, ProgressSink
from builder.project import Project
from builder.series.apply import fetch
from builder.upstream import mirror
from builder.upstream.fetch import export_bundle
from builder.upstream.pin import load_pin

FORMAT = "patchset-carry/1"
BUNDLE = "llama.cpp.bundle"
MANIFEST = "manifest.json"
PYTHONS = ("3.11", "3.12")
PLATFORMS = ("manylinux_2_17_x86_64", "manylinux2014_x86_64", "linux_x86_64", "manylinux_2_27_x86_64",
             "manylinux_2_28_x86_64")
"""The platform tags a glibc 2.28 x86_64 machine takes (pip asks for exactly those given): the pinned
clang-format has manylinux_2_27/_2_28 wheels only (tests/test_gpu_prepare.py checks every dependency)."""
BINDINGS_PYTHON = "3.12"
BINDINGS_PLATFORMS = ("manylinux_2_17_x86_64", "manylinux2014_x86_64", "manylinux_2_28_x86_64")
BINDINGS_SDIST = "wheel/bindings.tar.gz"
BINDINGS_SHA256 = "wheel/bindings.sha256"
"""The bindings sdist without its vendor/llama.cpp: `patchset wheel` replaces that folder with the patched
tree anyway, and the whole sdist (76 MB) is more than a carry may hold on some machines."""


@dataclass(frozen=True)
class Carry:
    """A carry folder as made."""

    folder: Path
    files: int
    bytes: int
    wheel: bool
    """It holds the bindings sdist and the wheels of their runtime dependencies (`--wheel`)."""


def requirements() -> list[str]:
    """What the wheels folder must install patchset from: its runtime dependencies less cmake; setuptools
    installs the checkout without build isolation (which would need an index); pip bootstraps a venv made
    without one."""
    deps = [Requirement(r) for r in importlib.metadata.requires("patchset") or []]
    keep = [str(r) for r in deps if r.marker is None and r.name.lower() != "cmake"]
    return [*keep, "setuptools>=77", "pip"]


def pip_download(dest: Path, requirements_file: Path, python: str, platforms: tuple[str, ...]) -> list[str]:
    """The `pip download` of the wheels of `requirements_file` for `python` on `platforms`."""
    words = [sys.executable, "-m", "pip", "download", "--quiet", "--disable-pip-version-check", "--only-binary=:all:"]
    for p in platforms:
        words += ["--platform", p]
    return [*words, "--python-version", python, "--implementation", "cp", "-d", str(dest), "-r",
            str(requirements_file)]


def prepare(project: Project, dest: Path, *, wheel: bool = False, progress: ProgressSink | None = None) -> Carry:
    """Make the carry folder `dest` (replaced whole at the end: a failure leaves the one before, if any)."""
    progress = progress or NullProgress()
    pin = load_pin(project.pin_file)
    fetch(project, progress)
    dest = dest.resolve()
    tmp = dest.with_name(f".{dest.name}.tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    (tmp / "wheels").mkdir(parents=True)
    try:
        progress.begin("bundling the pin", None)
        try:
            export_bundle(project.cache_dir, pin, tmp / BUNDLE)
        finally:
            progress.end()
        reqs = tmp / "requirements.txt"
        reqs.write_text("\n".join(requirements()) + "\n", encoding="utf-8")
        for python in PYTHONS:
            _download(tmp / "wheels", reqs, python, PLATFORMS, progress)
        if wheel:
            src, _ = resolve_sdist(pin, WheelOptions())
            archive = mirror.download(src, project.cache_dir / "downloads", project.cache_dir / "tmp", progress)
            runtime = repack_sdist(archive, tmp / BINDINGS_SDIST)
            (tmp / "wheel" / "runtime.txt").write_text("".join(f"{d}\n" for d in runtime), encoding="utf-8")
            _download(tmp / "wheels", tmp / "wheel" / "runtime.txt", BINDINGS_PYTHON, BINDINGS_PLATFORMS, progress)
        files, size = write_manifest(tmp)
        shutil.rmtree(dest, ignore_errors=True)
        tmp.replace(dest)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return Carry(dest, files, size, wheel)


def _download(dest: Path, requirements_file: Path, python: str, platforms: tuple[str, ...],
              progress: ProgressSink) -> None:
    progress.begin(f"wheels for CPython {python} from {requirements_file.name}", None)
    try:
        proc.run(pip_download(dest, requirements_file, python, platforms), timeout=1800)
    except ProcessError as e:
        raise SourceError(f"pip download for CPython {python} from {requirements_file.name} failed: "
                          f"{e.stderr.strip().splitlines()[-1] if e.stderr.strip() else e}") from None
    finally:
        progress.end()


def repack_sdist(archive: Path, out: Path) -> list[str]:
    """`archive` (the bindings sdist) without its vendor/llama.cpp as `out` (gzip without a date: the same
    bytes each time), its sha256 beside it in `bindings.sha256`; the sdist's runtime dependencies."""
    with tarfile.open(archive) as tin:
        members = [m for m in tin.getmembers() if "/vendor/llama.cpp/" not in m.name + "/"]
        if not members:
            raise SourceError(f"{archive}: an empty archive")
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tout:
            for m in members:
                tout.addfile(m, tin.extractfile(m) if m.isfile() else None)
        top = members[0].name.split("/")[0]
        try:
            pyproject = tin.extractfile(f"{top}/pyproject.toml")
            deps = tomllib.loads(pyproject.read().decode() if pyproject else "")["project"]["dependencies"]
        except (KeyError, tomllib.TOMLDecodeError) as e:
            raise SourceError(f"{archive}: no readable {top}/pyproject.toml with project.dependencies ({e})") from None
    out.parent.mkdir(parents=True, exist_ok=True)
    with out.open("wb") as f, gzip.GzipFile(fileobj=f, mode="wb", mtime=0) as gz:
        gz.write(buf.getvalue())
    out.with_name("bindings.sha256").write_text(sha256_file(out) + "\n", encoding="utf-8")
    return [str(d) for d in deps]


def write_manifest(folder: Path) -> tuple[int, int]:
    """`manifest.json` of every file under `folder` (size and sha256); how many files, how many bytes."""
    files = sorted(p for p in folder.rglob("*") if p.is_file() and p.name != MANIFEST)
    manifest = {
        "format": FORMAT,
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "files": {p.relative_to(folder).as_posix(): {"bytes": p.stat().st_size,
                                                     "sha256": sha256_file(p)}
                  for p in files},
    }
    (folder / MANIFEST).write_text(json.dumps(manifest, indent=1) + "\n", encoding="utf-8")
    return len(files), sum(p.stat().st_size for p in files)

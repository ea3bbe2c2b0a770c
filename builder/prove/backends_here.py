"""The backends this machine can build and run, and the one that stands in for Metal where it has none."""

from __future__ import annotations

import shutil
import sys

from builder.compile import backends as backendmod
from builder.compile import objc_toolchain
from builder.project import default_cache_dir
from builder.series.model import Patch


def available_backends() -> list[str]:
    """Backends this machine can build and run."""
    found = ["cpu"]
    if shutil.which("nvcc") and shutil.which("nvidia-smi"):
        found.append("cuda")
    if sys.platform == "darwin":
        found.append("metal")
    # the host-side Metal replay needs only a C++ compiler (docs/backends.md)
    if sys.platform in backendmod.profile("metal-replay").platforms and any(
            shutil.which(c) for c in ("c++", "g++", "clang++")):
        found.append("metal-replay")
    # the tree's Metal host code on patchset's Metal stand-in: clang and a built Objective-C toolchain
    if (sys.platform in backendmod.profile("metal-linux").platforms and shutil.which("clang")
            and objc_toolchain.find_built(default_cache_dir()) is not None):
        found.append("metal-linux")
    return found


STAND_INS = ("metal-linux", "metal-replay")
"""The backends that stand in for Metal on a machine without it, best first: the tree's own Metal host
code on patchset's Objective-C stand-in (where its toolchain is built), else the host-side replay."""


def stand_in(patch: Patch, backend: str, here: list[str] | None = None) -> str | None:
    """The backend that proves `patch` on this machine when `backend` cannot: the best of STAND_INS
    that the patch declares in Patchset-Backends and this machine has, on a machine without Metal.
    None when `backend` is one the patch's proof runs on, or nothing here can stand in (the patch
    then stays `needs ...`)."""
    here = available_backends() if here is None else here
    declared = patch.meta.backends
    if backend in declared or "metal" in here or backend in STAND_INS:
        return None
    return next((b for b in STAND_INS if b in declared and b in here), None)

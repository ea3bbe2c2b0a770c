"""The backends a tree is built for: each one's CMake options, platforms, test programs and harness."""

from __future__ import annotations

import hashlib
import sys
from dataclasses import dataclass
from pathlib import Path

from builder.errors import InputError

REPLAY_DIR = Path(__file__).parent.parent / "replay" / "cpp"
METAL_LINUX_DIR = Path(__file__).parent.parent / "metal_linux"
TARGET_SETS = ("minimal", "full")


@dataclass(frozen=True)
class BackendProfile:
    """Everything that differs between backends, in one place."""

    name: str
    cmake_args: tuple[str, ...]
    platforms: tuple[str, ...]
    """`sys.platform` values on which this backend builds and runs."""
    device: str
    """The backend name test programs know it by (`-b` of test-backend-ops)."""
    programs: tuple[str, ...] | None = None
    """The test programs that can run on this backend; None: every one."""
    target_sets: tuple[str, ...] = TARGET_SETS
    harness: tuple[Path, ...] = ()
    """Sources of ours compiled into the test programs (a change in them invalidates evidence)."""
    selftest: str | None = None
    """A program of ours that checks the harness against the tree (`--tree DIR`), run by `patchset test`."""
    trace_env: str | None = None
    """Environment variable naming the file a test program writes its dispatch trace to."""
    note: str = ""
    """What a result on this backend is and is not, for reports and evidence."""
    ggml_dirs: tuple[str, ...] = ("ggml-cpu",)
    """The folders of ggml/src whose backends a build for this one compiles (the other `ggml-*` folders
    it leaves alone): what two trees must have alike for one to find the other's objects."""
    on_host: bool = True
    """Its test programs compute on this machine's CPU (the CPU backend and the stand-ins), not on a GPU."""


REPLAY_NOTE = ("host-side replay, not a run on Apple hardware: the tree's Metal host C++ (the op encoders of "
               "ggml-metal-ops.cpp, ggml-metal-device.cpp, ggml-metal-common.cpp, ggml-metal.cpp) compiled unchanged "
               "on this machine with patchset's replacement of the Objective-C device and context and CPU models of "
               "the kernels it dispatches; shaders, the GPU's scheduling and memory model and the Objective-C code "
               "are not exercised (docs/backends.md)")

METAL_LINUX_NOTE = ("the tree's own Metal host code (every ggml/src/ggml-metal/*.m and *.cpp, compiled unchanged with "
                    "clang for the GNUstep runtime) run on patchset's Metal stand-in on this machine, not on Apple "
                    "hardware: buffers are host memory and each compute dispatch runs a CPU model of its kernel; the "
                    "shaders, the GPU's scheduling and memory model and its timing are not exercised "
                    "(docs/backends.md)")


def _harness(*dirs: Path) -> tuple[Path, ...]:
    return tuple(sorted(p for d in dirs if d.is_dir() for p in d.iterdir() if p.is_file()))


PROFILES: dict[str, BackendProfile] = {
    "cpu": BackendProfile("cpu", (), ("linux", "darwin", "win32"), "CPU"),
    "metal": BackendProfile("metal", ("-DGGML_METAL=ON", "-DGGML_METAL_EMBED_LIBRARY=ON"), ("darwin",), "MTL0",
                            ggml_dirs=("ggml-cpu", "ggml-metal"), on_host=False),
    "cuda": BackendProfile("cuda", ("-DGGML_CUDA=ON",), ("linux", "win32"), "CUDA0",
                           ggml_dirs=("ggml-cpu", "ggml-cuda"), on_host=False),
    "metal-replay": BackendProfile(
        "metal-replay", ("-DPATCHSET_METAL_REPLAY=ON",), ("linux", "darwin"), "MTL0-REPLAY",
        programs=("test-backend-ops",), target_sets=("minimal",),
        harness=tuple(sorted(p for p in REPLAY_DIR.iterdir() if p.is_file())) if REPLAY_DIR.is_dir() else (),
        selftest="patchset-replay-selftest", trace_env="GGML_METAL_REPLAY_TRACE", note=REPLAY_NOTE,
        ggml_dirs=("ggml-cpu", "ggml-metal")),
    "metal-linux": BackendProfile(
        "metal-linux", ("-DPATCHSET_METAL_LINUX=ON",), ("linux",), "MTL0",
        programs=("test-backend-ops",), target_sets=("minimal",),
        harness=_harness(METAL_LINUX_DIR, REPLAY_DIR), selftest="patchset-replay-selftest", note=METAL_LINUX_NOTE,
        ggml_dirs=("ggml-cpu", "ggml-metal")),
}

TEST_CORES = 2
"""The cores a proof's test program is shown on a backend that computes on this machine's CPU (Linux:
patchset's preload library, builder/cmake/cores.c). test-backend-ops and test-opt take half the cores
as threads: one thread on any machine, as on a 2-core one, so a result does not depend on the machine's
size and several programs run at once, each on one job slot, without ggml's threads spinning against
each other."""


def cores_shown(backend: str) -> int | None:
    """The cores a proof's test program on `backend` is shown (TEST_CORES), or None where it sees the
    machine's: a GPU backend (its programs run one at a time), or not Linux."""
    return TEST_CORES if profile(backend).on_host and sys.platform == "linux" else None


def harness_digest(backend: str) -> str:
    """A hash of the harness sources a backend compiles into the test programs ("" when it has none)."""
    h = hashlib.sha256()
    for p in profile(backend).harness:
        h.update(p.name.encode() + b"\0" + p.read_bytes() + b"\0")
    return h.hexdigest() if profile(backend).harness else ""


def profile(name: str) -> BackendProfile:
    try:
        return PROFILES[name]
    except KeyError:
        raise InputError(f"unknown backend '{name}' (known: {', '.join(PROFILES)})") from None



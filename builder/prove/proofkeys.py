"""What a proof depends on: the key of its trees and inputs, and the files its programs were built from.

The record of those files is what carries a proof over to later trees that differ elsewhere."""

from __future__ import annotations

import hashlib
import os
import shutil
from collections.abc import Callable
from dataclasses import asdict
from typing import Any

from builder import proc
from builder.compile import backends as backendmod
from builder.compile import cmakebuild as buildmod
from builder.compile import objc_toolchain
from builder.errors import ProcessError
from builder.fsutil import sha256_file
from builder.project import Project, default_cache_dir
from builder.prove import affected, pytests
from builder.prove import evidence as ev
from builder.prove.trees import Trees
from builder.series.model import Patch, TestSpec
from builder.series.workrepo import WorkRepo


class ProofKeys:
    """Keys and dependency records of proofs, from the trees in `work` and what builds read (`inputs`)."""

    def __init__(self, project: Project, work: WorkRepo, inputs: dict[str, tuple[str, ...] | None], *,
                 library: Callable[[str], str] | None = None, here: Callable[[], list[str]] | None = None,
                 timeout: float | None = None, confirm: int = 1) -> None:
        self.project = project
        self.work = work
        self.inputs = inputs
        """TreeBuilder.inputs: per commit built, the files its test programs were built from."""
        self.library = library
        """The tree of the built library a backend's Python tests run against (pytests.Library)."""
        self.here = here
        """The backends this machine has now (verify.available_backends)."""
        self.timeout = timeout
        """The time limit of each test program in this run (`--timeout`)."""
        self.confirm = confirm
        """How many runs confirm each deciding case (`--confirm`): a verdict of one run is not one of three."""
        self._blobs: dict[str, dict[str, str]] = {}
        self._host: dict | None = None
        self._tools: dict[str, dict[str, str]] = {}

    def key(self, patch: Patch, trees: Trees, backend: str, tests: list[TestSpec]) -> str:
        """The evidence's key: the patch's trees and everything else its proof depends on."""
        git = self.work.git
        # a Python test's proof is about the library it ran against too (absent otherwise: keys stay the same)
        library = {"library": self.library(backend)} if self.library and any(
            pytests.is_python(t) for t in tests) else {}
        return affected.static_digest({
            **self.inputs_of(patch, backend, tests), **library, "compiler": self.compiler(),
            "conditions": self.conditions(patch, backend, tests),
            "before": git.tree_of(trees.before), "after": git.tree_of(trees.after),
            "mutation": [git.tree_of(m) for m in trees.mutations] or None,
        })

    @staticmethod
    def inputs_of(patch: Patch, backend: str, tests: list[TestSpec]) -> dict[str, object]:
        """What a proof depends on besides its trees and the compiler (which `key` and `depends_now` add)."""
        inputs: dict[str, object] = {
            "backend": backend, "tests": [str(t) for t in tests], "meta": asdict(patch.meta),
            "cmake": {name: (buildmod.MINIMAL_CMAKE_DIR / name).read_text() for name in buildmod.MINIMAL_FILES},
            "harness": backendmod.harness_digest(backend)}
        if extra := buildmod.user_cmake_args():  # absent when unset: keys made without it stay the same
            inputs["cmake_args"] = list(extra)
        return inputs

    def conditions(self, patch: Patch, backend: str, tests: list[TestSpec]) -> dict[str, object]:
        """What a verdict depends on besides the trees, the sources and the compiler: which backends it
        needs that this machine lacks (a `needs X` verdict is of a machine without X), the time limit,
        the number of confirming runs, the cores the test programs were shown (backends.cores_shown),
        the environment the tests read (LLAMA_* and GGML_*, values hashed), the interpreter and its
        packages for Python tests, and the Objective-C compiler and toolchain for metal-linux.
        Recorded in the evidence as `conditions`."""
        here = self.here() if self.here is not None else [backend]
        declared = patch.meta.backends
        needed = [backend] if backend in declared or not declared else list(declared)
        out: dict[str, object] = {"missing": [b for b in needed if b not in here], "timeout": self.timeout,
                                   "confirm": self.confirm}
        if (cores := backendmod.cores_shown(backend)) is not None:
            out["cores"] = cores
        if env := read_environment():
            out["env"] = env
        if any(pytests.is_python(t) for t in tests):
            out["python"] = self._tool("python", python_info)
        if backend == "metal-linux":
            out["objc"] = self._tool("objc", objc_info)
        return out

    def _tool(self, name: str, find: Callable[[], dict[str, str]]) -> dict[str, str]:
        if name not in self._tools:
            self._tools[name] = find()
        return self._tools[name]

    def host_info(self) -> dict:
        if self._host is None:
            self._host = ev.host_info()
        return self._host

    def compiler(self) -> str:
        """The compiler as the evidence records it: one value for the key and for `depends`."""
        return str(self.host_info().get("compiler"))

    def tree_blobs(self, commit: str) -> dict[str, str]:
        if commit not in self._blobs:
            self._blobs[commit] = affected.blobs(self.work.git, commit)
        return self._blobs[commit]

    def depends_now(self, patch: Patch, backend: str, tests: list[TestSpec]) -> dict[str, Any]:
        """What a proof of the patch depends on besides the files of its trees."""
        return {
            "patch_sha256": sha256_file(patch.path),
            "mutations": {m: sha256_file(self.project.patches_dir / m) for m in patch.meta.mutation},
            "static": affected.static_digest({**self.inputs_of(patch, backend, tests), "compiler": self.compiler(),
                                              "conditions": self.conditions(patch, backend, tests)}),
        }

    def depends(self, patch: Patch, trees: Trees, backend: str, tests: list[TestSpec]) -> dict:
        """The evidence's record of every file the proven trees' test programs were built from;
        empty when ninja could not say for one of them (then the proof is never carried over)."""
        named = trees.named()
        inputs = [self.inputs.get(commit) for _, commit in named]
        if any(i is None for i in inputs) or not self.inputs.get(trees.after):
            return {}
        paths = sorted({p for i in inputs for p in i or ()})
        files = {name: {p: self.tree_blobs(commit).get(p) for p in paths} for name, commit in named}
        return {**self.depends_now(patch, backend, tests),
                "programs": list(dict.fromkeys(t.program for t in tests)), "trees": [n for n, _ in named],
                "files": affected.record(files)}


ENV_PREFIXES = ("LLAMA_", "GGML_")
"""The environment a test reads: upstream's own variables (a pytest test that skips without
LLAMA_CPP_TEST_OPT_MODEL, ggml's GGML_* switches). Their names and the hashes of their values are in the key."""


def read_environment() -> dict[str, str]:
    """Name -> sha256 of the value, of each variable of ENV_PREFIXES set now (values are not recorded)."""
    return {k: hashlib.sha256(v.encode()).hexdigest()[:16] for k, v in sorted(os.environ.items())
            if k.startswith(ENV_PREFIXES)}


_PACKAGES = ("import sys, importlib.metadata as m; print(sys.version.split()[0]); "
             "print(' '.join(sorted(f\"{d.metadata['Name']}=={d.version}\" for d in m.distributions())))")


def python_info() -> dict[str, str]:
    """The interpreter Python tests run under: its version and a hash of its installed packages."""
    python = pytests.interpreter()
    try:
        lines = proc.run([python, "-c", _PACKAGES], timeout=60).stdout.splitlines()
    except (ProcessError, OSError):
        return {"interpreter": python, "version": "unknown"}
    return {"interpreter": python, "version": lines[0] if lines else "unknown",
            "packages": hashlib.sha256("\n".join(lines[1:]).encode()).hexdigest()[:16]}


def objc_info() -> dict[str, str]:
    """metal-linux's Objective-C side: clang's version and the built toolchain's folder (named by its recipe's key)."""
    clang = shutil.which("clang")
    version = "none"
    if clang:
        try:
            version = (proc.run([clang, "--version"], timeout=30).stdout.splitlines() or ["unknown"])[0]
        except (ProcessError, OSError):
            version = "unknown"
    built = objc_toolchain.find_built(default_cache_dir())
    return {"clang": version, "toolchain": built.name if built else "none"}

"""What a proof depends on: the key of its trees and inputs, and the record of the files its
programs were built from (for carrying a proof over to later trees that differ elsewhere)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict
from typing import Any

from builder.compile import cmakebuild as buildmod
from builder.fsutil import sha256_file
from builder.project import Project
from builder.prove import affected, pytests
from builder.prove import evidence as ev
from builder.prove.trees import Trees
from builder.series.model import Patch, TestSpec
from builder.series.workrepo import WorkRepo


class ProofKeys:
    """Keys and dependency records of proofs, from the trees in `work` and what builds read (`inputs`)."""

    def __init__(self, project: Project, work: WorkRepo, inputs: dict[str, tuple[str, ...] | None], *,
                 library: Callable[[str], str] | None = None) -> None:
        self.project = project
        self.work = work
        self.inputs = inputs
        """TreeBuilder.inputs: per commit built, the files its test programs were built from."""
        self.library = library
        """The tree of the built library a backend's Python tests run against (pytests.Library)."""
        self._blobs: dict[str, dict[str, str]] = {}
        self._host: dict | None = None

    def key(self, patch: Patch, trees: Trees, backend: str, tests: list[TestSpec]) -> str:
        """The evidence's key: the patch's trees and everything else its proof depends on."""
        git = self.work.git
        # a Python test's proof is about the library it ran against too (absent otherwise: keys stay the same)
        library = {"library": self.library(backend)} if self.library and any(
            pytests.is_python(t) for t in tests) else {}
        return affected.static_digest({
            **self.inputs_of(patch, backend, tests), **library, "compiler": self.compiler(),
            "before": git.tree_of(trees.before), "after": git.tree_of(trees.after),
            "mutation": [git.tree_of(m) for m in trees.mutations] or None,
        })

    @staticmethod
    def inputs_of(patch: Patch, backend: str, tests: list[TestSpec]) -> dict[str, object]:
        """What a proof depends on besides its trees and the compiler (which `key` and `depends_now` add)."""
        inputs: dict[str, object] = {
            "backend": backend, "tests": [str(t) for t in tests], "meta": asdict(patch.meta),
            "cmake": (buildmod.MINIMAL_CMAKE_DIR / "CMakeLists.txt").read_text(),
            "harness": buildmod.harness_digest(backend)}
        if extra := buildmod.user_cmake_args():  # absent when unset: keys made without it stay the same
            inputs["cmake_args"] = list(extra)
        return inputs

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
            "static": affected.static_digest({**self.inputs_of(patch, backend, tests), "compiler": self.compiler()}),
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


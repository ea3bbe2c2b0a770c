"""The Metal stand-ins' kernel models checked against a tree's kernels, as verify proves on them.

metal-replay and metal-linux run each compute dispatch through a CPU model of its kernel
(builder/replay/cpp/replay-kernels.cpp), written for the kernel's text at one upstream. Their
self-test (`patchset-replay-selftest --tree DIR`, the backend profile's `selftest`) checks each
model against the tree's shader source (the kernel is defined where the model says, takes the
arguments it models, and its text hashes as when the model was written). `patchset test` runs it on
the work tree; verify runs it on the tree a proof is made on, so that an upstream whose kernel changed
under its model cannot prove against the stale model.
"""

from __future__ import annotations

from pathlib import Path

from builder.compile import testrun
from builder.gitrepo import GitRepo

METAL_DIR = "ggml/src/ggml-metal"
"""What the self-test reads of a tree: the shaders (*.metal) and ggml-metal-impl.h, beneath this folder."""


def write_kernels(git: GitRepo, commit: str, into: Path) -> Path:
    """The shader sources and headers of `commit`'s METAL_DIR written under `into` (a tree of only those
    files, laid out as in the commit); `into` is returned."""
    names = git.run("ls-tree", "-r", "--name-only", commit, "--", METAL_DIR).stdout.splitlines()
    for name in names:
        if name.endswith((".metal", ".h")):
            target = into / name
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(git.run("show", f"{commit}:{name}").stdout, encoding="utf-8")
    return into


def stale_models(bin_dir: Path, selftest: str, git: GitRepo, commit: str, work: Path,
                 timeout: float | None) -> tuple[str, ...]:
    """Why the stand-in's kernel models do not hold for `commit` (the self-test's failing lines), or ()
    when every model matches the commit's kernels. `work`: an empty folder for the kernels and the log."""
    tree = write_kernels(git, commit, work / "tree")
    r = testrun.run_program(bin_dir, testrun.Invocation(selftest, ("--tree", str(tree))), work / "selftest.log",
                            timeout=timeout)
    if r.verdict == testrun.PASSED:
        return ()
    return tuple(r.failing_lines()) or (f"{selftest} --tree: {r.verdict} (exit {r.returncode})",)

"""`canary --build` / `--test`: does the tree of an upstream commit with the series up to a patch still
build, and does the patch's test still pass there with its fix?

The check `builder.series.canary` bisects over where text checks pass: for patch k at a commit, the
commit's tree with the patches 1..k that apply there (as the dry run carries them) is checked out into
verify's own source folder (`.patchset/verify/src`, only the files that differ rewritten:
`trees.checkout_tree`) and built in verify's build folder of the backend, ggml and the patch's test
programs only; with `--test` the patch's tests for that backend run on it and must pass (verify's
rule: `testrun.tree_verdict`). The compiler cache and the build folder are shared with verify, so a
tree one file away from the last one built recompiles that file.
"""

from __future__ import annotations

from builder.compile import cmakebuild as buildmod
from builder.compile import testrun
from builder.errors import InputError
from builder.gitrepo import GitRepo
from builder.progress import NullProgress, ProgressSink
from builder.project import Project
from builder.prove.treebuild import invocation, tree_path
from builder.prove.trees import checkout_tree
from builder.prove.verify import available_backends
from builder.series.canary import KIND_BUILD, KIND_TEST, TreeCheck
from builder.series.model import Patch


def checker(project: Project, backend: str = "cpu", test: bool = False, progress: ProgressSink | None = None,
            jobs: int | None = None, timeout: float | None = testrun.DEFAULT_TIMEOUT_S) -> TreeCheck:
    """The tree check canary bisects with: ('', '') when the tree builds (and with `test`, the patch's
    tests pass on it), else (KIND_BUILD, the first compiler error) or (KIND_TEST, what failed)."""
    if backend not in available_backends():
        raise InputError(f"--backend {backend}: not on this machine (here: {', '.join(available_backends())})")
    src = project.state_dir / "verify" / "src"
    index = project.state_dir / "canary" / "index"
    sink = progress or NullProgress()

    def check(git: GitRepo, patch: Patch, tree: str) -> tuple[str, str]:
        tests = [t for t in patch.meta.tests if t.runs_on(backend, patch.meta.backends)]
        programs = tuple(dict.fromkeys(t.program for t in tests))
        checkout_tree(git, src, index, tree)
        spec = buildmod.BuildSpec(source=src, build_dir=project.build_root / f"verify-{backend}-minimal",
                                  backend=backend, targets="minimal", programs=programs, build_targets=programs,
                                  jobs=jobs, platform_cache=project.platform_cache)
        sink.begin(f"canary: {patch.name} [{backend}] building", None)
        result = buildmod.build(spec)
        sink.end()
        if not result.ok:
            err = result.first_error
            rel = tree_path(err.file, src, spec.build_dir) if err else ""
            return KIND_BUILD, f"{rel}:{err.line}: {err.message}" if err else "the build failed (see its log)"
        if not test or not tests:
            return "", ""  # a patch without a test here: only its build is checked
        verdicts = []
        said = []
        logs = project.state_dir / "canary" / "logs" / patch.name.removesuffix(".patch")
        for i, t in enumerate(tests, 1):
            inv = invocation(t, backend)
            sink.begin(f"canary: {patch.name} [{backend}] {inv.program}", None)
            r = testrun.run_program(result.bin_dir, inv, logs / f"{i}-{inv.program}.log", timeout=timeout)
            sink.end()
            verdicts.append(r.verdict)
            said.append(f"{t} {r.verdict} ({r.passed} passed, {r.failed} failed)")
        verdict = testrun.tree_verdict(verdicts)
        if verdict == testrun.TREE_PASSES:
            return "", ""
        return KIND_TEST, "; ".join(said)
    return check

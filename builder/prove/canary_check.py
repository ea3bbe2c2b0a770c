"""`canary --build` / `--test`: an upstream commit's tree with the series up to a patch, built and tested.

Does that tree still build, and does the patch's test still pass there with its fix?

The check `builder.series.canary` bisects over where text checks pass: for patch k at a commit, the
commit's tree with the patches 1..k that apply there (as the dry run carries them) is checked out into
verify's own source folder (`.patchset/verify/src`, only the files that differ rewritten:
`trees.checkout_tree`) and built in verify's build folder of the backend, ggml and the patch's test
programs only; with `--test` the patch's tests for that backend run on it and must pass. Built,
run and judged by verify's one runner (`runner.run_tree`): a program that does not load is a tree
that does not build, never a test that fails. The compiler cache and the build folder are shared with verify, so a
tree one file away from the last one built recompiles that file.
"""

from __future__ import annotations

from builder import words
from builder.compile import cmakebuild as buildmod
from builder.compile import testrun
from builder.errors import InputError
from builder.gitrepo import GitRepo
from builder.progress import NullProgress, ProgressSink
from builder.project import Project
from builder.prove import runner
from builder.prove.backends_here import available_backends
from builder.prove.trees import checkout_tree
from builder.series.canary import KIND_BUILD, KIND_TEST, TreeCheck
from builder.series.model import Patch


def checker(project: Project, backend: str = "cpu", test: bool = False, progress: ProgressSink | None = None,
            jobs: int | None = None, timeout: float | None = testrun.DEFAULT_TIMEOUT_S,
            confirm: int = words.CONFIRM_RUNS) -> TreeCheck:
    """The tree check canary bisects with: ('', '') when the tree builds (and with `test`, the patch's
    tests pass on it), else (KIND_BUILD, the first compiler error) or (KIND_TEST, what failed in every one
    of `confirm` runs: a case that fails in some runs only is flaky, and no break)."""
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
        logs = project.state_dir / "canary" / "logs" / patch.name.removesuffix(".patch")
        run = runner.run_tree([spec], src, tests if test else [], backend, patch.meta.test_part,
                              lambda i, inv: logs / f"{i}-{inv.program}.log", timeout=timeout, progress=sink,
                              label=f"canary: {patch.name} [{backend}]")
        if not run.built:
            return KIND_BUILD, run.errors[0]
        if not test or not tests:
            return "", ""  # a patch without a test here: only its build is checked
        if run.verdict == words.TREE_PASSES:
            return "", ""
        # a break is what fails in every run: the failing cases run again, back to back on this build
        more = runner.confirm(run, tests, backend, confirm, runner.FAILING,
                              lambda i, k, inv: logs / f"{i}-{inv.program}-run{k}.log", timeout=timeout, progress=sink,
                              label=f"canary: {patch.name} [{backend}]")
        found = [runner.steady_failures(r, m) for r, m in zip(run.results, more, strict=True)]
        if run.verdict == words.TREE_FAILS and not any(steady for steady, _ in found):
            return "", ""  # flaky: no failure repeats in every run
        said = "; ".join(f"{t} {r.verdict} ({r.passed} passed, {r.failed} failed)" for t, r in zip(tests, run.results,
                                                                                                  strict=True))
        return KIND_TEST, said + (f"; failing in each of {confirm} runs" if confirm > 1 else "")
    return check

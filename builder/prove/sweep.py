"""Regression sweep: the same test programs on the pin and on the patched tree, compared case by case.

`patchset test --against upstream` builds the other tree (default: branch `upstream` of the work
repository, the pin) in one extra worktree (`.patchset/against/<ref>`, like verify's), reuses the
patched tree's own build (`patchset build`'s folder), runs the same invocations on both, and
sorts every case into: newly failing (a regression), newly passing, failing in both (upstream's
own, listed and not blamed on the series), newly skipped, and only in one tree. A test program of
the series' own (not test-opt or test-backend-ops) is built and run on the other tree only when
the series leaves its source as it is there: otherwise it is a different test, run on the patched
tree alone.
"""

from __future__ import annotations

import re
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path

from builder.compile import backends as backendmod
from builder.compile import cmakebuild as buildmod
from builder.compile import testrun
from builder.compile.testrun import FAIL, PASS, Invocation
from builder.errors import BuildError, InputError
from builder.progress import NullProgress, ProgressSink
from builder.project import Project
from builder.prove.pipeline import build_dir, declared_tests, ensure_patched, programs_for, run_build
from builder.prove.sweep_compare import CONFIRMED, FAILING, FLAKY, NEWLY_PASSING, Change, SweepReport, TreeRun, compare
from builder.prove.sweep_split import TBO, TreeRunner, _with_filter
from builder.prove.trees import checkout_detached, with_comments_of
from builder.series.load import load_series
from builder.series.workbase import PATCHED, UPSTREAM


@dataclass(frozen=True)
class SweepOptions:
    backend: str = "cpu"
    mode: str | None = None
    """test-backend-ops mode; None: the backend's default (grad on the CPU, test elsewhere)."""
    ops: tuple[str, ...] | None = None
    """`-o` entries (op names or regexes); None: every op."""
    against: str = UPSTREAM
    """The work repository's ref to compare the patched tree with."""
    jobs: int | None = None
    """Parallel compile jobs."""
    cuda_arch: str | None = None
    workers: int = 1
    """test-backend-ops `-j`: parallel workers (test mode only)."""
    timeout_s: float | None = 3600
    """Per program run."""
    confirm: int = 3
    """Re-runs, on both trees, of each test-backend-ops case that changed, before it counts (0: none)."""


# -- the trees ----------------------------------------------------------------------------------------
def tree_invocations(opts: SweepOptions, mode: str, declared: list[tuple[str, tuple[str, ...]]],
                     built: set[str]) -> list[Invocation]:
    """What the sweep runs on one tree: `patchset test`'s plan for the backend (only the programs its
    profile can run, with its trace), and of the series' own programs those in `built`."""
    prof = backendmod.profile(opts.backend)
    extra = [(prog, args) for prog, args in declared if prog not in buildmod.DEFAULT_PROGRAMS and prog in built]
    invs = testrun.plan(prof.device, opts.backend, mode, list(opts.ops) if opts.ops else None, extra,
                        prof.programs, prof.trace_env)
    if opts.workers > 1:
        invs = [replace(i, args=(*i.args, "-j", str(opts.workers))) if i.program == TBO else i for i in invs]
    return invs


def sweep(project: Project, opts: SweepOptions, progress: ProgressSink | None = None) -> SweepReport:
    progress = progress or NullProgress()
    start = time.monotonic()
    prof = backendmod.profile(opts.backend)
    if sys.platform not in prof.platforms:
        raise InputError(f"{opts.backend} tests cannot run on {sys.platform}: not run here")
    mode = opts.mode or testrun.default_mode(opts.backend)
    if mode not in testrun.MODES:
        raise InputError(f"unknown mode '{mode}' (known: {', '.join(testrun.MODES)})")
    if opts.workers > 1 and mode != "test":
        raise InputError("--workers: test-backend-ops runs parallel workers in test mode only")
    work, _ = ensure_patched(project, progress)
    git = work.git
    other_commit = git.rev(opts.against) or git.rev(f"refs/heads/{opts.against}")
    if other_commit is None:
        raise InputError(f"--against {opts.against}: no such ref in the work repository {work.path}")
    series = load_series(project.patches_dir)
    declared = declared_tests(series, opts.backend)

    patched_build = run_build(project, opts.backend, "minimal", opts.jobs, cuda_arch=opts.cuda_arch,
                              progress=progress)
    if not patched_build.ok:
        raise _build_error("patched", patched_build)
    safe = re.sub(r"[^A-Za-z0-9._-]", "_", opts.against)
    src = project.state_dir / "against" / safe
    patched_commit = git.rev(PATCHED) or ""
    # the same code, compiled alike: the other tree with the patched tree's version of each file that differs
    # from it in comments only, so the objects of the patched build are found in the compiler cache (patch 3's
    # one line of comment in ggml-backend.h compiled all of ggml again for the pin)
    target, comment_only = with_comments_of(git, other_commit, patched_commit or None)
    checkout_detached(git, src, target)
    # a program of the series' own is the same test in both trees only when the series leaves its
    # source alone: a pin without the option a patch added (test-llama-archs --opt) would only fail
    same = tuple(prog for prog in programs_for(src, series, opts.backend) if prog in buildmod.DEFAULT_PROGRAMS
                 or git.blob(other_commit, f"tests/{prog}.cpp") == git.blob(patched_commit, f"tests/{prog}.cpp"))
    other_spec = buildmod.BuildSpec(
        source=src, build_dir=build_dir(project, opts.backend, f"against-{safe}"), backend=opts.backend,
        programs=same, jobs=opts.jobs, cuda_arch=opts.cuda_arch, platform_cache=project.platform_cache,
    )
    other_build = buildmod.build(other_spec, progress)
    if not other_build.ok:
        raise _build_error(opts.against, other_build)

    tbo_inv: dict[str, Invocation] = {}

    def run_tree(label: str, commit: str, result: buildmod.BuildResult, sink: ProgressSink) -> TreeRun:
        built = {prog for prog, _ in declared if (result.bin_dir / prog).exists()
                 and (label == "patched" or prog in same)}
        invs = tree_invocations(opts, mode, declared, built)
        log_dir = project.state_dir / "sweep" / f"{opts.backend}-{mode}" / ("patched" if label == "patched" else
                                                                          f"against-{safe}")
        runner = TreeRunner(result.bin_dir, log_dir, set(), opts.timeout_s, sink)
        tbo_inv[label] = next(i for i in invs if i.program == TBO)
        programs = [r for inv in invs for r in runner.run(inv)]
        return TreeRun(label, commit, git.tree_of(commit), result.build_dir, round(result.duration_s, 1),
                       result.steps, tuple(programs), runner.split_runs, tuple(runner.crashes),
                       comment_only if label != "patched" else ())

    # the two trees run side by side: their programs are independent, and each run of a test
    # program is mostly one thread (a whole grad-mode sweep on the CPU takes tens of minutes)
    with ThreadPoolExecutor(max_workers=2) as pool:
        mine = pool.submit(run_tree, "patched", patched_commit, patched_build, progress)
        theirs = pool.submit(run_tree, opts.against, other_commit, other_build, NullProgress())
        runs = {"patched": mine.result(), opts.against: theirs.result()}
    changes, counts = compare(runs[opts.against], runs["patched"])
    if opts.confirm:
        changes, counts = _confirm(changes, counts, runs, tbo_inv, opts, project.state_dir / "sweep" /
                                   f"{opts.backend}-{mode}" / "confirm")
    return SweepReport(opts.backend, mode, opts.ops, opts.against, runs[opts.against], runs["patched"],
                       tuple(changes), counts, round(time.monotonic() - start, 1), opts.confirm)


def _confirm(changes: list[Change], counts: dict[str, int], runs: dict[str, TreeRun], invs: dict[str, Invocation],
             opts: SweepOptions, log_dir: Path) -> tuple[list[Change], dict[str, int]]:
    """Re-run every test-backend-ops case that changed between the trees `opts.confirm` times on
    each tree (by its full case string, one process per tree and round); a case whose outcome
    varies within a tree is flaky (grad mode's finite differences on random inputs are), not a
    regression or a fix."""
    todo = [c for c in changes if c.category in CONFIRMED and c.program == TBO and c.name and
            not c.name.startswith("(")]
    if not todo:
        return changes, counts
    cases = list(dict.fromkeys(f"{c.name}({c.params})" for c in todo))

    def rounds(label: str) -> list[dict[str, str]]:
        t = runs[label]
        seen: list[dict[str, str]] = []
        for i in range(opts.confirm):
            inv = replace(invs[label], args=_with_filter(invs[label].args, tuple(cases)))
            r = testrun.run_program(t.build_dir / "bin", inv, log_dir / label / f"{i + 1:02d}.log",
                                    timeout=opts.timeout_s)
            out: dict[str, str] = {}
            for c in r.cases:
                k = f"{c.name}({c.params})"
                if c.status in FAILING or out.get(k) in FAILING:
                    out[k] = FAIL
                elif c.status == PASS or out.get(k) == PASS:
                    out[k] = PASS
                else:
                    out[k] = c.status
            seen.append(out)
        return seen

    with ThreadPoolExecutor(max_workers=2) as pool:
        futures = {label: pool.submit(rounds, label) for label in runs}
        seen = {label: f.result() for label, f in futures.items()}
    other = next(label for label in runs if label != "patched")
    counts = dict(counts)
    out: list[Change] = []
    for c in changes:
        if c not in todo:
            out.append(c)
            continue
        k = f"{c.name}({c.params})"
        per_tree = {label: [rnd.get(k, "none") for rnd in seen[label]] for label in runs}
        note = ", ".join(f"{label} {' '.join(v[:1].upper() for v in per_tree[label])}" for label in (other, "patched"))
        fails = {label: {v in FAILING for v in per_tree[label] if v != "none"} for label in runs}
        steady = all(len(f) <= 1 for f in fails.values())
        agrees = ((c.category == NEWLY_PASSING and fails[other] <= {True} and fails["patched"] <= {False}) or
                  (c.category != NEWLY_PASSING and fails["patched"] <= {True} and fails[other] <= {False}))
        if steady and agrees:
            out.append(replace(c, reruns=note))
        else:
            counts[c.category] -= 1
            counts[FLAKY] = counts.get(FLAKY, 0) + 1
            out.append(replace(c, category=FLAKY, reruns=note))
    return out, counts


def _build_error(label: str, r: buildmod.BuildResult) -> BuildError:
    where = f": {r.failure}" if r.failure else ""
    return BuildError(f"the {label} tree failed to build{where} (log {r.log})")

"""`patchset build`: the patched tree built (minimal: ggml and the test programs; full: the tree's own CMake)."""

from __future__ import annotations

import argparse

from builder import proc
from builder.commands import jsonout
from builder.compile.backends import PROFILES, TARGET_SETS
from builder.compile.cmakebuild import BuildResult
from builder.console import CliProgress, console
from builder.errors import EXIT_FAILED, EXIT_LOCKED, EXIT_OK, Outcome
from builder.project import Project
from builder.prove.pipeline import run_build

NAME = "build"
HELP = "build the patched tree (minimal: ggml + test programs; full: the tree's own CMake with tests)"

EXAMPLE = """example:
  patchset build --backend cpu -j 8
  patchset build --backend cuda --cuda-arch 90 --targets full"""
EXITS = (EXIT_OK, EXIT_FAILED, EXIT_LOCKED)
"""The exit codes it returns besides errors.ANY_COMMAND (its --help lists them)."""


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.epilog = proc.BUILD_TIMEOUT_HELP
    p.add_argument("--backend", choices=list(PROFILES), default="cpu",
                   help="cpu, cuda, metal (on Linux: a compile check of the Metal C++ sources), metal-replay "
                        "(test-backend-ops with the host-side Metal replay), or metal-linux (the tree's Metal host "
                        "code, Objective-C included, on patchset's Metal stand-in; needs `patchset toolchain objc`); "
                        "docs/backends.md")
    p.add_argument("--targets", choices=TARGET_SETS, default="minimal",
                   help="minimal: ggml and the test programs only; full: the tree's own CMake project with its tests")
    p.add_argument("--jobs", "-j", type=int, help="parallel compile jobs (default: all cores)")
    p.add_argument("--build-type", default="Release", help="CMAKE_BUILD_TYPE: Release, Debug, RelWithDebInfo, ...")
    p.add_argument("--cuda-arch", help="CMAKE_CUDA_ARCHITECTURES (default: native)")
    jsonout.add_option(p, "the build's result")


def print_build(r: BuildResult) -> None:
    if r.kind == "compile-check":
        for n in r.notes:
            console.print(f"metal: {n}")
    else:
        what = "nothing to do" if r.noop else f"{r.steps} step(s)"
        cc = "ccache: not used"
        if r.ccache and r.ccache_hits is None:
            cc = "ccache: used"
        elif r.ccache:
            rate = r.ccache_hit_rate
            cc = f"ccache: used, {r.ccache_hits} hit(s) / {r.ccache_misses} miss(es)" + (
                f" ({rate:.0%})" if rate is not None else "")
        state = "ok" if r.ok else "FAILED"
        console.print(f"build {r.spec_backend}/{r.targets} {state}: {what} in {r.duration_s:.1f}s; {cc}")
        console.print(f"  binaries: {r.bin_dir}", highlight=False)
    if not r.ok:
        if r.timed_out_s is not None:
            console.print(f"  {r.failure}", highlight=False, markup=False)
        elif r.first_error:
            console.print(f"  first error: {r.first_error}", highlight=False, markup=False)
        console.print(f"  full log: {r.log}", highlight=False)


def run(args: argparse.Namespace, project: Project) -> Outcome:
    r = run_build(project, args.backend, args.targets, args.jobs, args.build_type, args.cuda_arch, CliProgress())
    print_build(r)
    jsonout.emit(args, "build", jsonout.plain(r))
    return Outcome.OK if r.ok else Outcome.FAILED

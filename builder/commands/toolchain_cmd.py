"""`patchset toolchain`: a toolchain the project needs built into the patchset cache, or reused (`objc`)."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from builder.compile import objc_toolchain
from builder.console import CliProgress, console
from builder.errors import EXIT_FAILED, EXIT_OK, InputError, Outcome
from builder.project import Project

NAME = "toolchain"
HELP = ("build a toolchain the project needs into the patchset cache, or reuse it: `objc` is libobjc2, "
        "GNUstep make and GNUstep base for running Objective-C on Linux")

EXAMPLE = """example:
  patchset toolchain objc --jobs 4"""
EXITS = (EXIT_OK, EXIT_FAILED)
"""The exit codes it returns besides errors.ANY_COMMAND (its --help lists them)."""


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("which", choices=["objc"], help="the toolchain (objc: builder/compile/data/objc_toolchain.json)")
    p.add_argument("--mirror", type=Path, metavar="DIR",
                   help="a folder holding the recipe's source archives (CI: ../shared/third_party); "
                        "default: <cache>/downloads/objc")
    p.add_argument("--timeout", type=float, default=objc_toolchain.DEFAULT_TIMEOUT_S, metavar="S",
                   help=f"stop the build after S seconds in all (default {objc_toolchain.DEFAULT_TIMEOUT_S:g})")
    p.add_argument("--only", metavar="NAME", help="build the recipe's archives up to NAME only (e.g. libobjc2)")
    p.add_argument("--jobs", "-j", type=int, default=min(2, os.cpu_count() or 1), help="parallel make jobs (default 2)")


def run(args: argparse.Namespace, project: Project) -> Outcome:
    if not args.timeout > 0:
        raise InputError(f"--timeout {args.timeout:g}: give a number of seconds above 0")
    recipe = objc_toolchain.load_recipe().upto(args.only)
    mirror = args.mirror or project.cache_dir / "downloads" / "objc"
    r = objc_toolchain.build(project.cache_dir, mirror, recipe=recipe, timeout=args.timeout, jobs=args.jobs,
                             progress=CliProgress())
    state = "reused" if r.reused else "built"
    console.print(f"toolchain objc {state} in {r.seconds:.1f}s: {r.prefix}", highlight=False)
    if r.log:
        console.print(f"  build log: {r.log}", highlight=False)
    return Outcome.OK

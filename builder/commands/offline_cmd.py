"""`patchset offline`: the carry folder for a machine without network made here (prepare)."""

from __future__ import annotations

import argparse
from pathlib import Path

from builder.console import CliProgress, console
from builder.deliver import carry
from builder.errors import EXIT_FAILED, EXIT_LOCKED, EXIT_OK, Outcome
from builder.project import Project

NAME = "offline"
HELP = "the carry folder for a machine without network (prepare): the pin as a git bundle, wheels, a manifest"
PREPARE = ("make the carry folder here, where the pin's sources and the package index can be reached "
           "(after `patchset fetch` works)")

EXAMPLE = """example:
  patchset offline prepare --wheel               # .patchset/carry: copy it to the machine without network"""
EXITS = (EXIT_OK, EXIT_FAILED, EXIT_LOCKED)
"""The exit codes it returns besides errors.ANY_COMMAND (its --help lists them)."""


def add_arguments(p: argparse.ArgumentParser) -> None:
    pr = p.add_subparsers(dest="action", metavar="ACTION", required=True, help="prepare").add_parser("prepare",
                                                                                                     help=PREPARE)
    pr.add_argument("dir", nargs="?", type=Path, metavar="DIR",
                    help="the carry folder, replaced whole (default: .patchset/carry in the project)")
    pr.add_argument("--wheel", action="store_true",
                    help="also what `patchset wheel` needs there: the pin's bindings sdist without its vendored "
                         "llama.cpp and the wheels of the bindings' runtime dependencies")


def run(args: argparse.Namespace, project: Project) -> Outcome:
    made = carry.prepare(project, args.dir or project.state_dir / "carry", wheel=args.wheel, progress=CliProgress())
    console.print(f"{made.folder}: {made.files} files, {made.bytes / 2**20:.1f} MiB", highlight=False, markup=False)
    console.print(f"carry folder ready: {made.folder} (copy it to the machine without network)", highlight=False,
                  markup=False)
    return Outcome.OK

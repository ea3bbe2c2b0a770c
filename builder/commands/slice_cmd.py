"""`patchset slice`: a small tarball (patched ggml/, test sources, our CMake project) to build elsewhere."""

from __future__ import annotations

import argparse
from pathlib import Path

from builder.commands import jsonout
from builder.console import console
from builder.errors import EXIT_FAILED, EXIT_LOCKED, EXIT_OK, Outcome
from builder.project import Project
from builder.prove.pipeline import make_slice

NAME = "slice"
HELP = "write a small tarball (patched ggml/, test sources, our CMake project) to build elsewhere"

EXAMPLE = """example:
  patchset slice --out slice.tar.gz  # then build it on a CUDA host or a Mac with plain cmake"""
EXITS = (EXIT_OK, EXIT_FAILED, EXIT_LOCKED)
"""The exit codes it returns besides errors.ANY_COMMAND (its --help lists them)."""


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--out", type=Path, help="output file (default: .patchset/slice-<commit>.tar.gz)")
    p.add_argument("--ref", default="patched", help="work-repository ref to slice (default: patched)")
    jsonout.add_option(p, "the tarball written")


def run(args: argparse.Namespace, project: Project) -> Outcome:
    jsonout.emit(args, "slice", {"ref": args.ref, "path": None, "commit": None, "files": None, "size": None})
    r = make_slice(project, args.out, args.ref)
    jsonout.emit(args, "slice", {"ref": args.ref, "path": r.path, "commit": r.commit, "files": r.files,
                                 "size": r.size})
    console.print(f"slice of {r.commit[:12]}: {r.path} ({r.files} files, {r.size / 1e6:.1f} MB)", highlight=False)
    return Outcome.OK

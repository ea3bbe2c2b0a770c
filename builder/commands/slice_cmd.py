"""`patchset slice`: a small tarball (patched ggml/, test sources, our CMake project) to build elsewhere."""

from __future__ import annotations

import argparse
from pathlib import Path

from builder.commands import jsonout
from builder.console import console
from builder.errors import Outcome
from builder.project import Project
from builder.prove.pipeline import make_slice

NAME = "slice"
HELP = "write a small tarball (patched ggml/, test sources, our CMake project) to build elsewhere"


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

"""`patchset fetch`: the pinned upstream fetched into the cache from the first source that works, and verified."""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path

from builder.commands import jsonout
from builder.console import CliProgress, console
from builder.errors import EXIT_FAILED, EXIT_LOCKED, EXIT_OK, Outcome
from builder.project import Project
from builder.series.apply import fetch
from builder.upstream.fetch import export_bundle
from builder.upstream.pin import load_pin

NAME = "fetch"
HELP = "fetch the pinned upstream into the cache from the first source that works, and verify it"

EXAMPLE = """example:
  patchset fetch
  patchset fetch --export-bundle pin.bundle    # for a machine without network: fetch --bundle pin.bundle there"""
EXITS = (EXIT_OK, EXIT_FAILED, EXIT_LOCKED)
"""The exit codes it returns besides errors.ANY_COMMAND (its --help lists them)."""


def add_arguments(p: argparse.ArgumentParser) -> None:
    # the global `patchset --pin FILE fetch` works too; this spelling reads as the verb's own
    p.add_argument("--pin", dest="fetch_pin", type=Path, metavar="FILE",
                   help="fetch and verify this pin file instead of the project's (e.g. one `patchset pin` wrote)")
    g = p.add_mutually_exclusive_group()
    g.add_argument("--bundle", type=Path, metavar="FILE",
                   help="try this git bundle (from --export-bundle) before the pin's sources: for a machine "
                        "without network; its tree is checked against the pin")
    g.add_argument("--export-bundle", type=Path, metavar="FILE",
                   help="write the cached, verified pin as a git bundle to carry to such a machine")
    jsonout.add_option(p, "the verified upstream")


def run(args: argparse.Namespace, project: Project) -> Outcome:
    if args.fetch_pin is not None:
        project = dataclasses.replace(project, pin_file=args.fetch_pin.resolve())
    if args.export_bundle:
        f = fetch(project, CliProgress())
        out = export_bundle(project.cache_dir, load_pin(project.pin_file), args.export_bundle)
        console.print(f"bundle of {f.commit[:12]} (tree {f.tree}): {out} ({out.stat().st_size / 1e6:.1f} MB)",
                      highlight=False)
        return Outcome.OK
    f = fetch(project, None if jsonout.to_stdout(args) else CliProgress(), bundle=args.bundle)
    jsonout.emit(args, "fetch", {"commit": f.commit, "tree": f.tree, "source": f.source, "cached": f.cached})
    how = "already in the cache" if f.cached else f"fetched from {f.source}"
    console.print(f"upstream tree {f.tree} verified ({how}); commit {f.commit[:12]} in {f.repo}")
    return Outcome.OK

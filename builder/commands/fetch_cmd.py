from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path

from builder.console import CliProgress, console
from builder.errors import Outcome
from builder.project import Project
from builder.series.apply import fetch

NAME = "fetch"
HELP = "fetch the pinned upstream into the cache from the first source that works, and verify it"


def add_arguments(p: argparse.ArgumentParser) -> None:
    # the global `patchset --pin FILE fetch` works too; this spelling reads as the verb's own
    p.add_argument("--pin", dest="fetch_pin", type=Path, metavar="FILE",
                   help="fetch and verify this pin file instead of the project's (e.g. one `patchset pin` wrote)")


def run(args: argparse.Namespace, project: Project) -> Outcome:
    if args.fetch_pin is not None:
        project = dataclasses.replace(project, pin_file=args.fetch_pin.resolve())
    f = fetch(project, CliProgress())
    how = "already in the cache" if f.cached else f"fetched from {f.source}"
    console.print(f"upstream tree {f.tree} verified ({how}); commit {f.commit[:12]} in {f.repo}")
    return Outcome.OK

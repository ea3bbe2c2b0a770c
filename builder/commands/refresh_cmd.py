from __future__ import annotations

import argparse

from builder.console import console
from builder.project import Project
from builder.series.refresh import refresh

NAME = "refresh"
HELP = "write patches/ back from the 'patched' branch (byte-stable)"


def add_arguments(p: argparse.ArgumentParser) -> None:
    pass


def run(args: argparse.Namespace, project: Project) -> int:
    result = refresh(project)
    changed = [c for c in result.changes if c.change != "unchanged"]
    for c in changed:
        console.print(f"  {c.change:>9} patches/{c.name}", highlight=False)
    if not changed:
        console.print(f"patches/ already matches 'patched' ({len(result.changes)} patch(es))")
    for w in result.warnings:
        console.print(f"warning: {w}")
    return 0

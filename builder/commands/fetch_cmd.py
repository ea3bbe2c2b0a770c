from __future__ import annotations

import argparse

from builder.console import CliProgress, console
from builder.errors import Outcome
from builder.project import Project
from builder.series.apply import fetch

NAME = "fetch"
HELP = "fetch the pinned upstream into the cache from the first source that works, and verify it"


def add_arguments(p: argparse.ArgumentParser) -> None:
    pass


def run(args: argparse.Namespace, project: Project) -> Outcome:
    f = fetch(project, CliProgress())
    how = "already in the cache" if f.cached else f"fetched from {f.source}"
    console.print(f"upstream tree {f.tree} verified ({how}); commit {f.commit[:12]} in {f.repo}")
    return Outcome.OK

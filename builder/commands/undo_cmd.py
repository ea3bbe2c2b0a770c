"""`patchset undo`: 'patched' and patches/ put back as they were before the last series verb, from its recovery ref."""

from __future__ import annotations

import argparse

from builder.commands import jsonout
from builder.commands.series_view import print_recoveries, recovery_json
from builder.console import console
from builder.errors import EXIT_FAILED, EXIT_LOCKED, EXIT_OK, Outcome
from builder.project import Project
from builder.series.edit import undo
from builder.series.movesnap import MOVE_VERBS

NAME = "undo"
HELP = ("put 'patched' and patches/ back as they were before the last new, edit, drop, move, mark, or rebase or "
        "bump (then the pin and 'upstream' too), from its recovery ref, which is then removed; an edit in progress "
        "is given up, its uncommitted work saved under refs/patchset/backup/; lists the recovery refs kept")
EXAMPLE = """example:
  patchset drop 2
  patchset undo
  patchset rebase --onto 0123456789abcdef0123456789abcdef01234567
  patchset undo      # the pin, patches/ and the work repository as before the rebase"""
EXITS = (EXIT_OK, EXIT_FAILED, EXIT_LOCKED)
"""The exit codes it returns besides errors.ANY_COMMAND (its --help lists them)."""


def add_arguments(p: argparse.ArgumentParser) -> None:
    jsonout.add_option(p, "the recovery ref gone back to and the series")


def run(args: argparse.Namespace, project: Project) -> Outcome:
    jsonout.emit(args, "undo", {"restored": None, "moved": None, "patches": None, "kept": None})
    result = undo(project)
    jsonout.emit(args, "undo", {"restored": recovery_json(result.restored),
                                "moved": result.restored.verb in MOVE_VERBS,
                                "patches": [{"patch": name} for name in result.patches],
                                "kept": [recovery_json(r) for r in result.kept]})
    moved = " (the pin, patches/, 'patched' and 'upstream')" if result.restored.verb in MOVE_VERBS else ""
    console.print(f"back to {result.restored.ref} ({result.restored.commit[:12]}, before {result.restored.verb})"
                  f"{moved}: {len(result.patches)} patch(es)", highlight=False)
    for i, name in enumerate(result.patches, 1):
        console.print(f"  {i:>3} {name}", highlight=False)
    print_recoveries(result.kept)
    return Outcome.OK

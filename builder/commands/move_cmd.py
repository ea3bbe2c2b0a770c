"""`patchset move`: patch N put just before patch M, the patches replayed in the new order."""

from __future__ import annotations

import argparse

from builder.commands import jsonout
from builder.commands.series_view import edit_json, listed, patch_at, print_edit
from builder.errors import EXIT_CONFLICT, EXIT_FAILED, EXIT_LOCKED, EXIT_OK, Outcome
from builder.project import Project
from builder.series.edit import move

NAME = "move"
HELP = ("put patch N just before patch M (numbers as they are now; M = the count + 1 puts it last); the patches "
        "replayed in the new order (nothing changes when one no longer applies, exit 3); `patchset undo` goes back")
EXAMPLE = """example:
  patchset move 4 --before 2"""

EXITS = (EXIT_OK, EXIT_FAILED, EXIT_CONFLICT, EXIT_LOCKED)
"""The exit codes it returns besides errors.ANY_COMMAND (its --help lists them)."""


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("n", metavar="N", type=int, help="the patch to move (its number as `patchset status` shows it)")
    p.add_argument("--before", metavar="M", type=int, required=True, help="the patch it is to come before")
    jsonout.add_option(p, "the patch moved and the series")


def run(args: argparse.Namespace, project: Project) -> Outcome:
    head = {"n": args.n, "before": args.before, "patch": patch_at(listed(project), args.n)}
    jsonout.emit(args, "move", {**head, **edit_json(None)})
    result = move(project, args.n, args.before)
    jsonout.emit(args, "move", {**head, **edit_json(result)})
    print_edit(result)
    return Outcome.OK

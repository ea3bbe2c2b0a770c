"""`patchset edit`: patch N checked out on branch 'patched' to amend it (the later patches wait)."""

from __future__ import annotations

import argparse

from builder.commands import jsonout
from builder.commands.series_view import edit_json, listed, patch_at, print_edit
from builder.errors import EXIT_FAILED, EXIT_LOCKED, EXIT_OK, Outcome
from builder.project import Project
from builder.series.edit import edit

NAME = "edit"
HELP = ("check out patch N on branch 'patched' to amend it (the later patches wait); `patchset refresh` folds the "
        "work tree into it, replays the later patches and writes patches/ back; `patchset undo` gives the edit up")
EXAMPLE = """example:
  patchset edit 2
  $EDITOR .patchset/work/llama.cpp/ggml/src/ggml.c
  patchset refresh"""

EXITS = (EXIT_OK, EXIT_FAILED, EXIT_LOCKED)
"""The exit codes it returns besides errors.ANY_COMMAND (its --help lists them)."""


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("n", metavar="N", type=int, help="the patch's number in the series (as `patchset status` shows it)")
    jsonout.add_option(p, "the patch checked out and the series")


def run(args: argparse.Namespace, project: Project) -> Outcome:
    head = {"n": args.n, "patch": patch_at(listed(project), args.n)}
    jsonout.emit(args, "edit", {**head, **edit_json(None)})
    result = edit(project, args.n)
    jsonout.emit(args, "edit", {**head, **edit_json(result)})
    print_edit(result)
    return Outcome.OK

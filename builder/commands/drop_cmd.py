"""`patchset drop`: patch N removed from the series, the later patches replayed without it."""

from __future__ import annotations

import argparse

from builder.commands import jsonout
from builder.commands.series_view import edit_json, listed, patch_at, print_edit
from builder.errors import EXIT_CONFLICT, EXIT_FAILED, EXIT_LOCKED, EXIT_OK, Outcome
from builder.project import Project
from builder.series.edit import drop

NAME = "drop"
HELP = ("remove patch N from the series: the later patches are replayed without it (nothing changes when one "
        "no longer applies, exit 3); patches/ and 'patched' updated together, with --reason its record in "
        "patches/dropped; `patchset undo` brings it back")
EXAMPLE = """example:
  patchset drop 3 --reason 'upstream took another design (ggml-org/llama.cpp#12345)'"""

EXITS = (EXIT_OK, EXIT_FAILED, EXIT_CONFLICT, EXIT_LOCKED)
"""The exit codes it returns besides errors.ANY_COMMAND (its --help lists them)."""


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("n", metavar="N", type=int, help="the patch's number in the series (as `patchset status` shows it)")
    p.add_argument("--reason", metavar="WHY", default="",
                   help="why it goes, one line: recorded in patches/dropped (by-hand), which `patchset check` reads")
    jsonout.add_option(p, "the patch dropped and the series")


def run(args: argparse.Namespace, project: Project) -> Outcome:
    head = {"n": args.n, "patch": patch_at(listed(project), args.n), "reason": args.reason or None}
    jsonout.emit(args, "drop", {**head, **edit_json(None)})
    result = drop(project, args.n, args.reason)
    jsonout.emit(args, "drop", {**head, **edit_json(result)})
    print_edit(result)
    return Outcome.OK

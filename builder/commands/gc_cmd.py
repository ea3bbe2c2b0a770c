"""`patchset gc`: temporary folders killed runs left, and verify's lane folders and refs older than a limit, removed."""

from __future__ import annotations

import argparse

from builder.commands import jsonout
from builder.console import console
from builder.errors import EXIT_FAILED, EXIT_LOCKED, EXIT_OK, InputError, Outcome
from builder.orchestrate.gc import gc
from builder.project import Project

NAME = "gc"
HELP = "remove temporary folders killed runs left, and verify's lane folders and refs unused for a limit"

EXAMPLE = """example:
  patchset gc --dry-run --older-than 30
  patchset gc --broken"""
EXITS = (EXIT_OK, EXIT_FAILED, EXIT_LOCKED)
"""The exit codes it returns besides errors.ANY_COMMAND (its --help lists them)."""


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--older-than", type=float, default=14.0, metavar="DAYS",
                   help="remove verify and backup refs older than this many days, and verify's lane folders "
                        "unused for as long (default 14; 0: all)")
    p.add_argument("--broken", action="store_true", help="also remove refs whose objects are gone with a lost cache")
    p.add_argument("--dry-run", action="store_true", help="say what would be removed, remove nothing")
    jsonout.add_option(p, "what was removed and what was left alone")


def run(args: argparse.Namespace, project: Project) -> Outcome:
    if args.older_than < 0:
        raise InputError(f"--older-than {args.older_than:g}: give a number of days, 0 or more")
    result = gc(project, args.older_than, broken=args.broken, dry_run=args.dry_run)
    jsonout.emit(args, "gc", {"dry_run": args.dry_run, "removed": list(result.removed),
                              "left_alone": list(result.skipped)})
    verb = "would remove" if args.dry_run else "removed"
    for item in result.removed:
        console.print(f"  {verb} {item}", highlight=False, markup=False)
    for item in result.skipped:
        console.print(f"  left alone: {item}", highlight=False, markup=False)
    if not result.removed:
        console.print("nothing to remove")
    else:
        console.print(f"{verb} {len(result.removed)} item(s)")
    return Outcome.OK

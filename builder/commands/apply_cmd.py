"""`patchset apply`: branch 'patched' built as the pinned upstream plus the series, in the work repository."""

from __future__ import annotations

import argparse

from builder.commands import jsonout, options
from builder.commands.dryrun_view import print_dry_run
from builder.console import CliProgress, console
from builder.errors import EXIT_CONFLICT, EXIT_FAILED, EXIT_LOCKED, EXIT_OK, InputError, Outcome, PinError
from builder.project import Project
from builder.series.apply import abort_apply, apply, continue_apply, dry_run_apply
from builder.series.workbase import Operation, PatchOutcome
from builder.series.workrepo import StoppedOnConflict, WorkRepo
from builder.upstream.pin import load_pin

NAME = "apply"
HELP = "fetch if needed, then build branch 'patched' = pinned upstream + the series in the work repository"

EXAMPLE = """example:
  patchset apply
  patchset apply --dry-run --json > apply.json   # each patch on the pin, nothing changed
  patchset apply --continue                      # after resolving a conflict and `git add`"""
EXITS = (EXIT_OK, EXIT_FAILED, EXIT_CONFLICT, EXIT_LOCKED)
"""The exit codes it returns besides errors.ANY_COMMAND (its --help lists them)."""


def add_arguments(p: argparse.ArgumentParser) -> None:
    g = p.add_mutually_exclusive_group()
    g.add_argument("--continue", dest="cont", action="store_true", help="go on after resolving a conflict")
    g.add_argument("--abort", action="store_true", help="give up a stopped apply and restore the state before")
    g.add_argument("--dry-run", action="store_true",
                   help="try every patch on the pin in a scratch index and print the rebase --dry-run table; "
                        "change nothing (for a series not applied yet, or whose old base is gone)")
    jsonout.add_option(p, "each patch's outcome (with --dry-run: the table)")
    options.add_force(p, "apply", "uncommitted work or unsaved commits in the work repository (saved under "
                                  "refs/patchset/backup/ first)")


def print_outcomes(outcomes: tuple[PatchOutcome, ...] | list[PatchOutcome]) -> None:
    for i, o in enumerate(outcomes, 1):
        console.print(f"  {i:>3} {o.name}: {o.outcome}", highlight=False)


def pin_commit(project: Project) -> str:
    """The pin's commit for the document ('' when the pin cannot be read: the apply says why; --abort needs none)."""
    try:
        return load_pin(project.pin_file).commit
    except PinError:
        return ""


def _row(o: PatchOutcome) -> dict:
    return {"patch": o.name, "outcome": o.outcome, "commit": o.commit or None, "resolutions": list(o.resolutions)}


def stopped_rows(op: Operation | None, stop: StoppedOnConflict) -> list[dict]:
    """A sequence stopped at a conflict (apply, rebase; `op` its saved operation): the patches applied before
    it, then the one it stopped at."""
    c = stop.info
    return [*(_row(o) for o in (op.named(op.done) if op else ())),
            {"index": c.position, "patch": c.name, "outcome": "conflict", "commit": None, "resolutions": [],
             "files": list(c.conflicted), "hunks": list(c.failed)}]


def run(args: argparse.Namespace, project: Project) -> Outcome:
    if args.dry_run:
        if args.force:
            raise InputError("--dry-run changes nothing: --force has no meaning with it")
        return print_dry_run(dry_run_apply(project), args, "apply", "on the pin")
    # until the apply ends, its document says nothing was applied (an error is its problem)
    body = {"dry_run": False, "old": "", "new": pin_commit(project) if args.json else "", "patches": [],
            "head": None, "noop": None, "aborted": bool(args.abort), "backups": []}
    jsonout.emit(args, "apply", body)
    if args.abort:
        abort_apply(project)
        jsonout.emit(args, "apply", {**body, "noop": False})
        console.print("apply aborted; the work repository is back where it was")
        return Outcome.OK
    try:
        result = continue_apply(project) if args.cont else apply(project, force=args.force, progress=CliProgress())
    except StoppedOnConflict as e:
        op = WorkRepo(project.work_repo).load_state().op
        jsonout.emit(args, "apply", {**body, "patches": stopped_rows(op, e)})
        raise
    jsonout.emit(args, "apply", {**body, "new": result.upstream, "head": result.head or None, "noop": result.noop,
                                 "backups": list(result.backups), "patches": [_row(o) for o in result.outcomes]})
    for b in result.backups:
        console.print(f"saved: {b}")
    if result.noop:
        console.print(f"patched is up to date at {result.head[:12]} ({project.work_repo})")
        return Outcome.OK
    print_outcomes(result.outcomes)
    console.print(f"patched = upstream + {len(result.outcomes)} patch(es) at {result.head[:12]} ({project.work_repo})")
    return Outcome.OK

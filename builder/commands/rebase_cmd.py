"""`patchset rebase`: the series moved onto another upstream commit (or pin file), every patch reported."""

from __future__ import annotations

import argparse

from builder.commands import jsonout
from builder.commands.apply_cmd import pin_commit, print_outcomes, stopped_rows
from builder.commands.dryrun_view import print_dry_run, print_report
from builder.commands.test_cmd import add_confirm
from builder.console import CliProgress, console
from builder.errors import EXIT_CONFLICT, EXIT_FAILED, EXIT_LOCKED, EXIT_OK, InputError, Outcome
from builder.project import Project
from builder.series.dryrun import Check, RebaseReport
from builder.series.model import BACKENDS
from builder.series.rebase import abort_rebase, continue_rebase, dry_run_rebase, rebase, skip_rebase
from builder.series.workrepo import StoppedOnConflict, WorkRepo

NAME = "rebase"
ONTO_HELP = ("a full commit id, a tag or a branch name of the pin's git remote (a tag is recorded in the "
             "new pin), or a pin file (.toml)")
HELP = "move the series onto another upstream commit (or pin file), reporting every patch"

EXAMPLE = """example:
  patchset rebase --onto b7100 --dry-run
  patchset rebase --onto b7100
  patchset rebase --continue         # after resolving a conflict and `git add`"""
EXITS = (EXIT_OK, EXIT_FAILED, EXIT_CONFLICT, EXIT_LOCKED)
"""The exit codes it returns besides errors.ANY_COMMAND (its --help lists them)."""


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--onto", help=ONTO_HELP)
    p.add_argument("--dry-run", action="store_true",
                   help="try every patch on the new base in a scratch index and print the table; change nothing")
    jsonout.add_option(p, "the table")
    p.add_argument("--fixed-upstream", action="store_true",
                   help="also run each patch's failing-before test on the new upstream without the fix (builds: "
                        "slow on the real tree) and say whether upstream fixed it; and which patches upstream "
                        "merged as they are (patch-id)")
    p.add_argument("--backend", choices=BACKENDS,
                   help="with --fixed-upstream: the backend to run the tests on (default: for each patch the first "
                        "of its Patchset-Backends this machine has)")
    add_confirm(p, "with --fixed-upstream, each tree whose tests decide (at least 2)")
    g = p.add_mutually_exclusive_group()
    g.add_argument("--continue", dest="cont", action="store_true", help="go on after resolving a conflict")
    g.add_argument("--skip", action="store_true", help="drop the patch the rebase stopped at from the series, go on")
    g.add_argument("--abort", action="store_true", help="give up and restore the state before")


def _check(args: argparse.Namespace, project: Project) -> Check | None:
    if not args.fixed_upstream:
        return None
    from builder.prove.fixed_upstream import checker  # noqa: PLC0415 (only this check needs build and verify)
    return checker(project, args.backend, CliProgress(), confirm=args.confirm)


def print_way_back(report: RebaseReport) -> None:
    """After a rebase or bump: what each patch became (range-diff) and the ref of the series before."""
    if report.range_diff:
        console.print("what each patch became (git range-diff, old series .. new):", highlight=False)
        console.print(report.range_diff.rstrip("\n"), highlight=False, markup=False)
    if report.recovery_ref:
        console.print(f"the series as it was: {report.recovery_ref} in the work repository; `patchset undo` "
                      "takes the move back (docs/upstream.md)", highlight=False)


def run(args: argparse.Namespace, project: Project) -> Outcome:
    if args.fixed_upstream and project.series_name:
        raise InputError(f"--series {project.series_name} with --fixed-upstream: the check builds llama.cpp's tree "
                         "only; rebase a second series without it")
    if args.fixed_upstream and not args.onto:
        raise InputError("--fixed-upstream goes with --onto (it runs before the series moves)")
    if args.dry_run:
        if not args.onto or args.cont or args.skip or args.abort:
            raise InputError("--dry-run needs --onto COMMIT|TAG|PIN_FILE (and no --continue/--skip/--abort)")
        return print_dry_run(dry_run_rebase(project, args.onto, _check(args, project)), args, "rebase", "onto")
    if args.abort:
        abort_rebase(project)
        jsonout.emit(args, "rebase", {"old": pin_commit(project), "new": None, "dry_run": False, "patches": [],
                                      "aborted": True})
        console.print("rebase aborted; pin, patches/ and the work repository are as before")
        return Outcome.OK
    if not (args.cont or args.skip or args.onto):
        raise InputError("rebase needs --onto COMMIT|TAG|PIN_FILE (or --continue / --skip / --abort)")
    try:
        if args.cont:
            result = continue_rebase(project)
        elif args.skip:
            result = skip_rebase(project)
        else:
            result = rebase(project, args.onto, _check(args, project))
    except StoppedOnConflict as e:
        # its own document on exit 3 too: the patches moved before it, then the one it stopped at
        op = WorkRepo(project.work_repo).load_state().op
        new = op.new_upstream if op and op.new_upstream else None
        jsonout.emit(args, "rebase", {"old": pin_commit(project), "new": new, "dry_run": False,
                                      "patches": stopped_rows(op, e)})
        raise
    if result.report is None:
        print_outcomes(result.outcomes)
        jsonout.emit(args, "rebase", {"old": result.old_pin.commit, "new": result.new_pin.commit, "dry_run": False,
                                      "patches": [{"patch": o.name, "outcome": o.outcome} for o in result.outcomes]})
    else:
        print_report(result.report)
        jsonout.emit(args, "rebase", result.report.as_json())
    onto = result.new_pin.commit[:12] + (f" ({result.new_pin.tag})" if result.new_pin.tag else "")
    console.print(f"rebased from {result.old_pin.commit[:12]} onto {onto}; "
                  f"pin {project.pin_file.name} and {project.patches_dir.name}/ updated"
                  + (f"; table written to {result.report_file}" if result.report_file else ""))
    if result.report is not None:
        print_way_back(result.report)
    if result.dropped:
        console.print(f"dropped as already upstream: {', '.join(result.dropped)}")
    if result.skipped:
        console.print(f"dropped with --skip: {', '.join(result.skipped)}")
    return Outcome.OK

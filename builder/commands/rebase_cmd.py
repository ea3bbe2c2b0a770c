from __future__ import annotations

import argparse

from builder.commands.apply_cmd import print_outcomes
from builder.console import console
from builder.errors import InputError, Outcome
from builder.project import Project
from builder.series.rebase import abort_rebase, continue_rebase, rebase

NAME = "rebase"
HELP = "move the series onto another upstream commit (or pin file), reporting every patch"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--onto", help="a full commit id of the pin's git remote, or a pin file (.toml)")
    g = p.add_mutually_exclusive_group()
    g.add_argument("--continue", dest="cont", action="store_true", help="go on after resolving a conflict")
    g.add_argument("--abort", action="store_true", help="give up and restore the state before")


def run(args: argparse.Namespace, project: Project) -> Outcome:
    if args.abort:
        abort_rebase(project)
        console.print("rebase aborted; pin, patches/ and the work repository are as before")
        return Outcome.OK
    if args.cont:
        result = continue_rebase(project)
    elif args.onto:
        result = rebase(project, args.onto)
    else:
        raise InputError("rebase needs --onto COMMIT|PIN_FILE (or --continue / --abort)")
    print_outcomes(result.outcomes)
    console.print(f"rebased from {result.old_pin.commit[:12]} onto {result.new_pin.commit[:12]}; "
                  f"pin {project.pin_file.name} and patches/ updated")
    if result.dropped:
        console.print(f"dropped as already upstream: {', '.join(result.dropped)}")
    return Outcome.OK

from __future__ import annotations

import argparse

from builder.commands import NAMES
from builder.errors import InputError, Outcome

NAME = "help"
HELP = "print the help of patchset, or of one command"
EXAMPLE = """example:
  patchset help mark"""
NEEDS_PROJECT = False


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("topic", metavar="COMMAND", nargs="?", help="a command (default: the list of commands)")


def run(args: argparse.Namespace, project: object) -> Outcome:
    root: argparse.ArgumentParser = args.root_parser
    if not args.topic:
        root.print_help()
        return Outcome.OK
    if args.topic not in NAMES:
        raise InputError(f"help {args.topic}: no such command; the commands: {', '.join(NAMES)}")
    sub = next(a for a in root._actions if isinstance(a, argparse._SubParsersAction))
    sub.choices[args.topic].print_help()
    return Outcome.OK

"""The `patchset` command: parse arguments, call the library, turn results and errors into text
and exit codes. Exit codes are decided here and nowhere else."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from rich.markup import escape

from builder import __version__, proc
from builder.commands import NAMES, load
from builder.console import err_console, setup_logging
from builder.errors import EXIT_INTERNAL, Outcome, PatchsetError
from builder.project import load_project

# variables that would silently point our git commands at another repository
_GIT_REDIRECTS = ("GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE", "GIT_OBJECT_DIRECTORY",
                  "GIT_ALTERNATE_OBJECT_DIRECTORIES", "GIT_COMMON_DIR", "GIT_NAMESPACE")


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The whole parser; with `only`, the other commands are names without their options (their
    modules are not imported)."""
    parser = argparse.ArgumentParser(
        prog="patchset",
        description="Keep a fork's fixes as a patch series on a pinned llama.cpp; build, test and prove them.",
    )
    parser.add_argument("--version", action="version", version=f"patchset {__version__}")
    parser.add_argument("--project", type=Path, help="project folder (default: found above the current folder)")
    parser.add_argument("--pin", type=Path, help="pin file (default: upstream/llama.cpp.toml)")
    parser.add_argument("--debug", action="store_true", help="log every command run; tracebacks on errors")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name in NAMES:
        if only is not None and name != only:
            sub.add_parser(name)
            continue
        cmd = load(name)
        p = sub.add_parser(cmd.NAME, help=cmd.HELP, description=cmd.HELP)
        cmd.add_arguments(p)
        p.set_defaults(handler=cmd.run)
    return parser


def _verb(argv: list[str]) -> str | None:
    """The command word of `argv`, when nothing before it asks for the whole parser (--help)."""
    rest = iter(argv)
    for a in rest:
        if a in ("--project", "--pin"):
            next(rest, None)
        elif a.startswith(("--project=", "--pin=")) or a == "--debug":
            continue
        elif a.startswith("-"):
            return None
        else:
            return a if a in NAMES else None
    return None


def main(argv: list[str] | None = None) -> int:
    for var in _GIT_REDIRECTS:
        os.environ.pop(var, None)
    argv = sys.argv[1:] if argv is None else argv
    parser = build_parser(only=_verb(argv))
    args = parser.parse_args(argv)
    setup_logging(args.debug)
    try:
        proc.check_timeout_variables()
        project = load_project(root=args.project, pin_file=args.pin)
        return exit_code(args.handler(args, project))
    except PatchsetError as e:
        if args.debug:
            err_console.print_exception()
        err_console.print(f"[bold red]error:[/] {escape(str(e))}", highlight=False, soft_wrap=True)
        return e.exit_code
    except KeyboardInterrupt:
        err_console.print("interrupted")
        return 130
    except Exception as e:
        # a bug: still one line (and the traceback with --debug), never a raw traceback
        if args.debug:
            err_console.print_exception()
        err_console.print(f"[bold red]internal error:[/] {type(e).__name__}: {escape(str(e))} "
                          "(a bug in patchset; run with --debug for the traceback)", highlight=False, soft_wrap=True)
        return EXIT_INTERNAL


def exit_code(result: Outcome) -> int:
    """The exit code of a command's outcome: the one place that decides it."""
    return result.value


def entry() -> None:
    sys.exit(main())


if __name__ == "__main__":
    entry()

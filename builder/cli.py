"""The `patchset` command: its arguments parsed, the library called, results and errors turned into text.

Exit codes are decided here and nowhere else."""

from __future__ import annotations

import argparse
import os
import sys
import textwrap
from collections.abc import Iterable
from pathlib import Path
from types import ModuleType

from rich.markup import escape

from builder import __version__, proc
from builder.commands import NAMES, jsonout, load
from builder.commands.options import REFUSED_DEST
from builder.console import err_console, setup_logging
from builder.environment import VARIABLES
from builder.errors import ANY_COMMAND, EXIT_CODES, EXIT_INTERNAL, InputError, Outcome, PatchsetError
from builder.project import load_project

# variables that would silently point our git commands at another repository
_GIT_REDIRECTS = ("GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE", "GIT_OBJECT_DIRECTORY",
                  "GIT_ALTERNATE_OBJECT_DIRECTORIES", "GIT_COMMON_DIR", "GIT_NAMESPACE")


def exit_lines(codes: Iterable[int]) -> list[str]:
    """`exit codes:` and each of `codes` with its meaning in the one exit map (builder/errors.py)."""
    lines = ["exit codes:"]
    for code in codes:
        # (not at a hyphen: "metal-replay" stays one word, as the docs' table has it)
        lines += textwrap.wrap(EXIT_CODES[code], 96, initial_indent=f"  {code:<4}", subsequent_indent="      ",
                               break_on_hyphens=False)
    return lines


def command_epilog(cmd: ModuleType, extra: str | None) -> str:
    """The end of `patchset COMMAND --help`: its examples (EXAMPLE), what its add_arguments put there,
    and the exit codes it returns (its EXITS and errors.ANY_COMMAND)."""
    codes = sorted({*cmd.EXITS, *ANY_COMMAND})
    return "\n\n".join(filter(None, [cmd.EXAMPLE, extra, "\n".join(exit_lines(codes))]))


def top_epilog() -> str:
    """The end of `patchset --help`: exit codes and environment variables, from the code that uses them."""
    lines = exit_lines(EXIT_CODES)
    lines += ["", "environment:"]
    for name, what in VARIABLES:
        lines.append(f"  {name}")
        lines += textwrap.wrap(what, 92, initial_indent="      ", subsequent_indent="      ")
    lines += ["", "`patchset help COMMAND` (or `patchset COMMAND --help`) says more of one command; docs/guide.md "
              "walks through a maintainer's day."]
    return "\n".join(lines)


class HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """Keeps the examples' line breaks, and ends an option's help with its default where the help
    does not say it already."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        default = action.default
        if (not action.option_strings or default is None or default is False or default is True
                or default is argparse.SUPPRESS or default == [] or "default" in text):
            return text
        return f"{text} (default: %(default)s)"


def version_text(root: Path | None = None) -> str:
    """`patchset --version`: the version, and the pin and series of the project here (when in one)."""
    from builder.project import find_root  # noqa: PLC0415 (only --version needs them)
    from builder.series.load import read_series_file  # noqa: PLC0415
    from builder.upstream.pin import load_pin  # noqa: PLC0415
    lines = [f"patchset {__version__}"]
    try:
        root = root or find_root(Path.cwd())
        pin = load_pin(root / "upstream" / "llama.cpp.toml")
        lines.append(f"pin: {pin.name} {pin.tag or '(no tag)'} commit {pin.commit} "
                     f"({root / 'upstream' / 'llama.cpp.toml'})")
        entries = read_series_file(root / "patches" / "series")[0] if (root / "patches" / "series").is_file() else []
        lines.append(f"series: {len(entries)} patch(es) in {root / 'patches'}")
    except PatchsetError as e:
        lines.append(f"(no project here: {e})")
    return "\n".join(lines)


class _Version(argparse.Action):
    def __init__(self, option_strings: list[str], dest: str, **kw: object) -> None:
        super().__init__(option_strings, dest, nargs=0, help="print the version, and the pin and series of the "
                         "project here, and exit")

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: object,
                 option_string: str | None = None) -> None:
        root = getattr(namespace, "project", None)
        print(version_text(root.resolve() if root else None))
        parser.exit()


SECOND_SERIES_VERBS = ("fetch", "apply", "refresh", "check", "status", "verify", "export", "import", "new", "edit",
                       "drop", "move", "mark", "undo", "canary", "rebase")
"""The commands that address a second series (`--series NAME`). The others build or test llama.cpp's tree
(`patchset wheel` applies the bindings series itself). verify proves a second series' patches by their
`python` tests, against the library `patchset wheel` built (docs/verify.md); export writes them on
llama-cpp-python's rules (docs/export.md); canary and rebase work without the checks that build
llama.cpp's tree (--build, --test, --fixed-upstream)."""


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The whole parser; with `only`, the other commands are names without their options (their
    modules are not imported)."""
    parser = argparse.ArgumentParser(
        prog="patchset",
        description="Keep a fork's fixes as a patch series on a pinned llama.cpp; build, test and prove them.",
        epilog=top_epilog(), formatter_class=HelpFormatter,
    )
    parser.add_argument("--version", action=_Version)
    parser.add_argument("--project", type=Path, help="project folder (default: found above the current folder)")
    parser.add_argument("--pin", type=Path, help="pin file (default: upstream/llama.cpp.toml)")
    parser.add_argument("--series", default="", metavar="NAME",
                        help="a second series of the project by name (patches-NAME/, pin upstream/NAME.toml; "
                             "e.g. bindings); default: the main series (patches/)")
    parser.add_argument("--debug", action="store_true", help="log every command run; tracebacks on errors")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True, help="one of:")
    for name in NAMES:
        if only is not None and name != only:
            sub.add_parser(name)
            continue
        cmd = load(name)
        p = sub.add_parser(cmd.NAME, help=cmd.HELP, description=textwrap.fill(cmd.HELP, 96),
                           formatter_class=HelpFormatter)
        cmd.add_arguments(p)
        p.epilog = command_epilog(cmd, p.epilog)
        for action in p._actions:  # an action's own help (evidence check, offline prepare) ends the same way
            if isinstance(action, argparse._SubParsersAction):
                for q in action.choices.values():
                    q.formatter_class, q.epilog = HelpFormatter, command_epilog(cmd, q.epilog)
        p.set_defaults(handler=cmd.run, needs_project=getattr(cmd, "NEEDS_PROJECT", True), root_parser=parser)
    return parser


def _verb(argv: list[str]) -> str | None:
    """The command word of `argv`, when nothing before it asks for the whole parser (--help)."""
    rest = iter(argv)
    for a in rest:
        if a in ("--project", "--pin", "--series"):
            next(rest, None)
        elif a.startswith(("--project=", "--pin=", "--series=")) or a == "--debug":
            continue
        elif a.startswith("-"):
            return None
        else:
            return a if a in NAMES and a != "help" else None
    return None


def main(argv: list[str] | None = None) -> int:
    for var in _GIT_REDIRECTS:
        os.environ.pop(var, None)
    argv = sys.argv[1:] if argv is None else argv
    if os.environ.get("_ARGCOMPLETE"):
        # run by `patchset completion`'s script: answer from the whole parser and exit
        import argcomplete  # noqa: PLC0415 (a completion only; a verb starts faster)

        argcomplete.autocomplete(build_parser())
    parser = build_parser(only=_verb(argv))
    if not argv:
        parser.print_help()
        return 0
    args = parser.parse_args(argv)
    setup_logging(args.debug)
    error: BaseException | None = None
    with jsonout.console_aside(args):
        try:
            code = _run(args)
        except PatchsetError as e:
            if args.debug:
                err_console.print_exception()
            err_console.print(f"[bold red]error:[/] {escape(str(e))}", highlight=False, soft_wrap=True)
            code, error = e.exit_code, e
        except KeyboardInterrupt as e:
            err_console.print("interrupted")
            code, error = 130, e
        except Exception as e:
            # a bug: still one line (and the traceback with --debug), never a raw traceback
            if args.debug:
                err_console.print_exception()
            err_console.print(f"[bold red]internal error:[/] {type(e).__name__}: {escape(str(e))} "
                              "(a bug in patchset; run with --debug for the traceback)", highlight=False,
                              soft_wrap=True)
            code, error = EXIT_INTERNAL, RuntimeError(f"internal error: {type(e).__name__}: {e}")
        # with --json: the command's document (or the error's) on every exit, with the exit status
        jsonout.finish(args, code, error)
    return code


def _run(args: argparse.Namespace) -> int:
    """Run the command `args` names, its exit code; raises what the command raises."""
    proc.check_timeout_variables()
    if getattr(args, REFUSED_DEST, None):
        raise InputError(getattr(args, REFUSED_DEST))
    if args.series and args.command not in SECOND_SERIES_VERBS:
        raise InputError(f"patchset {args.command} does not take --series (it works on the main series, "
                         f"patches/); the commands that address a second series: {', '.join(SECOND_SERIES_VERBS)}")
    project = (load_project(root=args.project, pin_file=args.pin, series=args.series)
               if args.needs_project else None)
    return exit_code(args.handler(args, project))


def exit_code(result: Outcome) -> int:
    """The exit code of a command's outcome: the one place that decides it."""
    return result.value


def entry() -> None:
    sys.exit(main())


if __name__ == "__main__":
    entry()

"""`patchset completion`: the shell completion script for bash or zsh, made from the command parser by argcomplete."""

from __future__ import annotations

import argparse

from builder.errors import EXIT_OK, Outcome

NAME = "completion"
HELP = ("print the shell completion script for bash or zsh, made from the command parser by argcomplete "
        "(commands, options and their choices complete)")
EXAMPLE = """example:
  patchset completion bash > ~/.local/share/bash-completion/completions/patchset
  eval "$(patchset completion bash)"      # this shell only"""
NEEDS_PROJECT = False

SHELLS = ("bash", "zsh")

EXITS = (EXIT_OK,)
"""The exit codes it returns besides errors.ANY_COMMAND (its --help lists them)."""


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("shell", choices=SHELLS, help="the shell the script is for")


def script(shell: str) -> str:
    """The completion script: a shell function that runs `patchset` with argcomplete's variables
    set, which answers from the parser (builder/cli.py) instead of running a command."""
    import argcomplete  # noqa: PLC0415 (only this command and a completion need it)

    return str(argcomplete.shellcode(["patchset"], shell=shell))


def run(args: argparse.Namespace, project: object) -> Outcome:
    print(script(args.shell), end="")
    return Outcome.OK

"""Options that mean one thing in every command: `--force`, and the old spellings refused.

`--force` means one thing wherever it is taken: overwrite what the command would otherwise refuse
to lose (a hand-edited file, unsaved work); where the old bytes can be kept, a copy is saved first.
An option that meant something else under an old name is refused with one line naming the new
one: never a silent alias whose meaning changed."""

from __future__ import annotations

import argparse
from collections.abc import Sequence

FORCE = "overwrite what {cmd} would otherwise refuse to lose: {what}"
"""The help of every `--force` (the one meaning)."""

REFUSED_DEST = "refused_option"
"""Where a refused spelling leaves its message; the CLI raises it as an input error (exit 2)."""


def add_force(p: argparse.ArgumentParser, cmd: str, what: str) -> None:
    """`--force`: overwrite what `cmd` refuses to lose (`what`: which things, and where a copy goes)."""
    p.add_argument("--force", action="store_true", help=FORCE.format(cmd=cmd, what=what))


class _Refused(argparse.Action):
    def __init__(self, option_strings: list[str], dest: str, message: str = "", **kw: object) -> None:
        super().__init__(option_strings, REFUSED_DEST, nargs=0, help=argparse.SUPPRESS)
        self.message = message

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: str | Sequence[object] | None, option_string: str | None = None) -> None:
        setattr(namespace, REFUSED_DEST, self.message)


def refuse(p: argparse.ArgumentParser, old: str, new: str, meaning: str) -> None:
    """`old` is no longer an option of this command: one line naming `new`, which does `meaning`."""
    p.add_argument(old, action=_Refused, message=f"{p.prog} {old}: not an option of this command; "
                   f"for {meaning}, give {new} (--force overwrites only what a command would refuse to lose)")

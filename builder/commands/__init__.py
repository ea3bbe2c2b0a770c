"""The CLI's commands, one module per verb.

Each module has NAME, HELP, add_arguments(parser), run(args, project) -> Outcome (the CLI turns it
into the exit code).

A command's module is imported when it is needed: a verb imports only its own module and what it
uses (importing all of them took a third of a second of every start), `patchset --help` all."""

import importlib
from types import ModuleType

NAMES = (
    "fetch", "apply", "refresh", "status", "rebase", "check", "build", "test", "slice", "verify",
    "all", "pin", "export", "evidence", "report", "wheel", "gc", "bump", "canary", "toolchain",
    "init", "import", "new", "edit", "drop", "move", "mark", "undo", "offline", "completion", "help",
)


def load(name: str) -> ModuleType:
    """The module of command `name` (one of NAMES)."""
    return importlib.import_module(f"builder.commands.{name}_cmd")

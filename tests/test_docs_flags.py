"""Every option of every command is documented: the argparse parsers against README.md and docs/."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

from builder.cli import build_parser

ROOT = Path(__file__).resolve().parent.parent


def _options(parser: argparse.ArgumentParser, path: str) -> list[tuple[str, str]]:
    """(command path, option) for the parser and each parser below it."""
    found: list[tuple[str, str]] = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                found += _options(sub, f"{path} {name}")
        elif not isinstance(action, argparse._HelpAction):
            found += [(path, o) for o in action.option_strings if o.startswith("--")]
    return found


def test_every_flag_of_every_command_appears_in_the_readme_or_a_doc() -> None:
    text = "\n".join(p.read_text(encoding="utf-8") for p in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))])
    documented = set(re.findall(r"--[a-z][a-z0-9-]*", text))
    options = _options(build_parser(), "patchset")
    assert len({c for c, _ in options}) > 15  # every command, not just the top level
    missing = [f"{cmd} {opt}" for cmd, opt in options if opt not in documented]
    assert missing == [], "options no doc mentions: " + ", ".join(missing)

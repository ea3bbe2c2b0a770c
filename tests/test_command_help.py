"""Every command's --help (and that of each action, `evidence check`, `offline prepare`) ends with at least
one example line and the table of the exit codes it returns: its module's EXITS with errors.ANY_COMMAND,
each code one of the one exit map's (builder/errors.py EXIT_CODES), its meaning from there."""

from __future__ import annotations

import argparse
import re

import pytest

from builder.cli import build_parser, main
from builder.commands import NAMES, load
from builder.errors import ANY_COMMAND, EXIT_CODES, EXIT_OK


def _sub(p: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    return next((a.choices for a in p._actions if isinstance(a, argparse._SubParsersAction)), {})


def helps() -> list[tuple[str, str, str]]:
    """(verb, the command line, its --help) of every command and every action of one."""
    out = []
    for verb, p in _sub(build_parser()).items():
        out.append((verb, verb, p.format_help()))
        out += [(verb, f"{verb} {action}", q.format_help()) for action, q in _sub(p).items()]
    return out


def exit_table(text: str) -> list[tuple[int, str]]:
    """The codes of the `exit codes:` block and the first line of each meaning."""
    block = text.split("\nexit codes:\n", 1)[1]
    rows = []
    for line in block.splitlines():
        m = re.match(r"  (\d+) +(\S.*)", line)
        if m:
            rows.append((int(m[1]), m[2]))
        elif not line.startswith("      "):
            break
    return rows


@pytest.mark.parametrize("verb", NAMES)
def test_each_command_declares_its_exits_from_the_exit_map(verb: str) -> None:
    cmd = load(verb)
    assert EXIT_OK in cmd.EXITS and set(cmd.EXITS) <= set(EXIT_CODES), cmd.EXITS
    assert not set(cmd.EXITS) & set(ANY_COMMAND), "2 and 70 come with every command (errors.ANY_COMMAND)"


def test_every_help_has_an_example_and_its_exit_table() -> None:
    seen = set()
    for verb, line, text in helps():
        seen.add(verb)
        examples = text.partition("\nexample")[2]
        assert examples, f"patchset {line} --help: no example"
        assert re.search(r"^  (\S+ )*patchset \S", examples.split("\n\n")[0], re.M), \
            f"patchset {line} --help: no example line"
        rows = exit_table(text)
        declared = sorted({*load(verb).EXITS, *ANY_COMMAND})
        assert [code for code, _ in rows] == declared, (line, rows)
        for code, first in rows:
            # the meaning is the exit map's, not words of the command's own
            assert EXIT_CODES[code].startswith(first.rstrip()[:40]), (line, code, first)
    assert seen == set(NAMES)


def test_help_command_prints_the_same(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["help", "drop"]) == 0
    out = capsys.readouterr().out
    assert "patchset drop 3 --reason" in out
    assert [code for code, _ in exit_table(out)] == [0, 1, 2, 3, 7, 70]

"""The release workflow cannot run here: check that every `patchset` command and flag it calls exists."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
import yaml

from builder.cli import build_parser

WORKFLOW = Path(__file__).resolve().parent.parent / ".github" / "workflows" / "wheels.yml"
_EXPR = re.compile(r"\$\{\{\s*matrix\.(\w+)\s*\}\}")


def _simple_commands(line: str) -> list[list[str]]:
    """A shell line split into its simple commands at ;, &&, || and |, quotes respected."""
    lex = shlex.shlex(line, posix=True, punctuation_chars=True)
    lex.whitespace_split = True
    lex.commenters = "#"
    out: list[list[str]] = [[]]
    for tok in lex:
        if tok and set(tok) <= set(";&|"):
            out.append([])
        else:
            out[-1].append(tok)
    return [c for c in out if c]


def _commands() -> list[tuple[str, list[str]]]:
    """(job and matrix entry, argv after `patchset`) of every patchset call in every run step."""
    doc = yaml.safe_load(WORKFLOW.read_text())
    found: list[tuple[str, list[str]]] = []
    for job_id, job in doc["jobs"].items():
        entries = job.get("strategy", {}).get("matrix", {}).get("include") or [{}]
        for entry in entries:
            for step in job["steps"]:
                script = step.get("run", "").replace("\\\n", " ")
                for raw in script.splitlines():
                    line = _EXPR.sub(lambda m, e=entry: str(e[m.group(1)]), raw)
                    assert "${{" not in line, f"{job_id}: unresolved expression in {line!r}"
                    for words in _simple_commands(line):
                        if words and words[0] == "patchset":
                            found.append((f"{job_id} {entry.get('name', '')}".strip(), words[1:]))
    return found


def test_the_workflow_builds_every_backend_with_patchset_wheel() -> None:
    backends = set()
    for _, argv in _commands():
        if argv[0] == "wheel":
            args = build_parser().parse_args(argv)
            backends.add(args.backend)
    assert backends == {"cpu", "cuda", "metal"}


@pytest.mark.parametrize(("where", "argv"), _commands(), ids=lambda v: v if isinstance(v, str) else " ".join(v))
def test_every_patchset_call_parses(where: str, argv: list[str]) -> None:
    try:
        args = build_parser().parse_args(argv)
    except SystemExit as e:  # argparse's way of saying "no such command or flag"
        pytest.fail(f"{where}: `patchset {' '.join(argv)}` does not parse (exit {e.code})")
    assert args.command == argv[0]


def test_a_wrong_flag_is_caught() -> None:
    # the check above can fail: an unknown flag makes argparse exit
    with pytest.raises(SystemExit):
        build_parser().parse_args(["wheel", "--backend", "cpu", "--no-such-flag"])

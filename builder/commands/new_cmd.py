"""`patchset new`: a new patch added on top of the series, its message from the trailer template."""

from __future__ import annotations

import argparse
import os
import shlex
import sys
import tempfile
from pathlib import Path

from builder import proc
from builder.commands import jsonout
from builder.commands.series_view import edit_json, print_edit
from builder.errors import EXIT_FAILED, EXIT_LOCKED, EXIT_OK, InputError, Outcome
from builder.project import Project
from builder.series.edit import TEMPLATE_BODY, author_ident, new

NAME = "new"
HELP = ("add a new patch on top of the series, its message from the trailer template (in $VISUAL or $EDITOR, "
        "or --message-file), and start editing it; `patchset refresh` writes it to patches/")
EXAMPLE = """example:
  patchset new 'ggml : fix ADD for empty rows' --message-file msg.txt
  $EDITOR .patchset/work/llama.cpp/ggml/src/ggml.c   # the fix and its test
  patchset refresh"""

EXITS = (EXIT_OK, EXIT_FAILED, EXIT_LOCKED)
"""The exit codes it returns besides errors.ANY_COMMAND (its --help lists them)."""


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("name", metavar="NAME", help="the patch's subject line (the file name is made from it)")
    p.add_argument("-F", "--message-file", type=Path, metavar="FILE",
                   help="the message after the subject (description and Patchset-* trailers) from FILE "
                        "instead of an editor; '-' reads stdin")
    p.add_argument("--author", metavar="'NAME <EMAIL>'",
                   help="the patch's author (default: git's user outside the work repository)")
    jsonout.add_option(p, "the new patch and the series")


def _body(args: argparse.Namespace, project: Project) -> str:
    f: Path | None = args.message_file
    if f is not None:
        if str(f) == "-":
            return sys.stdin.read()
        try:
            return f.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as e:
            raise InputError(f"--message-file {f}: cannot read it ({e})") from e
    editor = os.environ.get("VISUAL") or os.environ.get("EDITOR")
    text = TEMPLATE_BODY
    if not editor or not sys.stdin.isatty():
        return text  # the template as it is: amend the message while editing the patch
    with tempfile.NamedTemporaryFile("w", suffix=".txt", prefix="patchset-new-", delete=False) as tmp:
        tmp.write(f"# the message of '{args.name}' after its subject; lines starting with # are left out\n{text}")
    try:
        if proc.interactive([*shlex.split(editor), tmp.name]) != 0:
            raise InputError(f"the editor ({editor}) exited with an error: no patch added")
        return Path(tmp.name).read_text(encoding="utf-8")
    finally:
        Path(tmp.name).unlink(missing_ok=True)


def run(args: argparse.Namespace, project: Project) -> Outcome:
    head = {"name": args.name}
    jsonout.emit(args, "new", {**head, **edit_json(None)})
    author = author_ident(project, args.author or "")
    result = new(project, args.name, _body(args, project), author)
    jsonout.emit(args, "new", {**head, **edit_json(result)})
    print_edit(result)
    return Outcome.OK

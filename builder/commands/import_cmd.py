"""`patchset import`: commits from elsewhere (a range, an mbox, a pull request's .patch) added as patches on top."""

from __future__ import annotations

import argparse
from pathlib import Path

from builder.commands import jsonout
from builder.commands.series_view import edit_json, print_edit
from builder.console import console
from builder.errors import EXIT_CONFLICT, EXIT_FAILED, EXIT_LOCKED, EXIT_OK, Outcome
from builder.project import Project
from builder.series.importer import ORIGIN, TO_FILL, import_mails, is_range, mails_from_file, mails_from_range

NAME = "import"
HELP = ("add commits from elsewhere on top of the series, one patch each, with the Patchset-* trailers they lack "
        "to fill: a range A..B of the work repository (or of --repo DIR), an mbox, or a pull request's .patch "
        "file; nothing changes unless every one applies; patches/ and 'patched' updated together; "
        "`patchset undo` takes it back")
EXAMPLE = """example:
  patchset import --repo ../my-llama.cpp b7000..my-fixes
  curl -LO https://github.com/ggml-org/llama.cpp/pull/12345.patch
  patchset import 12345.patch --origin https://github.com/ggml-org/llama.cpp/pull/12345"""

EXITS = (EXIT_OK, EXIT_FAILED, EXIT_CONFLICT, EXIT_LOCKED)
"""The exit codes it returns besides errors.ANY_COMMAND (its --help lists them)."""


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("source", metavar="A..B|FILE",
                   help="a range of commits (A..B, oldest first), or an mbox / a pull request's .patch file")
    p.add_argument("--repo", type=Path, metavar="DIR",
                   help="with A..B: the git repository that holds the range (default: the work repository)")
    p.add_argument("--origin", metavar="URL", default="",
                   help="the Patchset-Origin of each imported patch that has none (a pull request's URL; a "
                        "range's commits otherwise get their commit id)")
    jsonout.add_option(p, "the patches imported and the series")


def run(args: argparse.Namespace, project: Project) -> Outcome:
    head = {"source": args.source, "origin": args.origin or None}
    jsonout.emit(args, "import", {**head, "imported": None, "to_fill": None, **edit_json(None)})
    if is_range(args.source) and not Path(args.source).is_file():
        mails = mails_from_range((args.repo or project.work_repo).resolve(), args.source)
    else:
        mails = mails_from_file(Path(args.source))
    result = import_mails(project, mails, args.source, args.origin)
    fill = (*TO_FILL, *([] if args.origin or all(m.origin for m in mails) else [ORIGIN]))
    jsonout.emit(args, "import", {**head, "imported": len(mails), "to_fill": list(fill), **edit_json(result)})
    print_edit(result)
    console.print(f"imported {len(mails)} patch(es); to fill in each: {', '.join(fill)} (which test proves it, "
                  "docs/series-format.md): `patchset edit N`, `git commit --amend` in the work repository, "
                  "`patchset refresh`", highlight=False)
    return Outcome.OK

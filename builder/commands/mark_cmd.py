"""`patchset mark`: where patch N stands upstream, recorded in its Patchset-Upstream trailer."""

from __future__ import annotations

import argparse

from builder.commands import jsonout
from builder.commands.series_view import edit_json, listed, patch_at, print_edit
from builder.errors import EXIT_FAILED, EXIT_LOCKED, EXIT_OK, Outcome
from builder.project import Project
from builder.series.edit import mark

NAME = "mark"
HELP = ("record where patch N stands upstream: its Patchset-Upstream trailer set to `sent URL`, `merged COMMIT`, "
        "`rejected URL`, `not-needed WHY` or `fork-only WHY` (kept in the fork, never exported; "
        "docs/series-format.md); patches/ and 'patched' updated together")
EXAMPLE = """example:
  patchset mark 2 sent https://github.com/ggml-org/llama.cpp/pull/12345
  patchset mark 6 fork-only upstream asserts on such a graph instead"""

EXITS = (EXIT_OK, EXIT_FAILED, EXIT_LOCKED)
"""The exit codes it returns besides errors.ANY_COMMAND (its --help lists them)."""


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("n", metavar="N", type=int, help="the patch's number in the series (as `patchset status` shows it)")
    p.add_argument("state", choices=("sent", "merged", "rejected", "not-needed", "fork-only"),
                   help="where it stands upstream")
    p.add_argument("value", metavar="URL|COMMIT|WHY", nargs="+",
                   help="the pull request's URL (sent, rejected), the upstream commit or URL (merged), the reason "
                        "(not-needed, fork-only)")
    jsonout.add_option(p, "the trailer set and the series")


def run(args: argparse.Namespace, project: Project) -> Outcome:
    value = " ".join(args.value)
    head = {"n": args.n, "patch": patch_at(listed(project), args.n), "state": args.state, "value": value}
    jsonout.emit(args, "mark", {**head, **edit_json(None)})
    result = mark(project, args.n, args.state, value)
    jsonout.emit(args, "mark", {**head, **edit_json(result)})
    print_edit(result)
    return Outcome.OK

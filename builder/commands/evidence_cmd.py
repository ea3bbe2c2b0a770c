"""`patchset evidence`: the current series' evidence committed into docs/evidence/ (update), checked there (check)."""

from __future__ import annotations

import argparse
from pathlib import Path

from builder.commands import jsonout
from builder.console import console
from builder.deliver import committed, committed_update
from builder.errors import EXIT_FAILED, EXIT_LOCKED, EXIT_OK, Outcome
from builder.project import Project
from builder.series.load import load_series
from builder.upstream.pin import load_pin

NAME = "evidence"
HELP = ("commit the current series' evidence into docs/evidence/ with what made it (update), "
        "or find stale, hand-made and missing evidence there (check)")

EXAMPLE = """example:
  patchset evidence check
  patchset verify --backend cpu && patchset evidence update
  patchset evidence update --from .cudabuild/out    # a tools/gpu/run.sh output folder too"""
EXITS = (EXIT_OK, EXIT_FAILED, EXIT_LOCKED)
"""The exit codes it returns besides errors.ANY_COMMAND (its --help lists them)."""


def add_arguments(p: argparse.ArgumentParser) -> None:
    sub = p.add_subparsers(dest="action", metavar="ACTION", required=True, help="update or check")
    up = sub.add_parser("update", help="copy verify's evidence of the current patches (and offline runs' outputs) "
                                       "into docs/evidence/, record each file in its MANIFEST.json, regenerate "
                                       "docs/backends.md and the counts of docs/patches.md")
    up.add_argument("--from", dest="from_dirs", action="append", type=Path, default=[], metavar="DIR",
                    help="also an output folder of `patchset offline run` (its run-*.json and the files they name; "
                         "never its log); repeatable. Its verify.json is taken only with the runs that make each "
                         "verdict, made on the pin and patch bytes now; else nothing is written (exit 2)")
    jsonout.add_option(up, "the files written and removed")
    up.add_argument("--drop-stale", action="store_true",
                    help="delete the committed files that cover other bytes of a patch (after the series "
                         "changed, before its evidence is made again), once every --from folder is checked")
    ck = sub.add_parser("check", help="exit 1 with one line per problem: stale (a covered patch changed), hand-made "
                                 "(no recorded command, or edited since), a verify.json record verify would not "
                                 "have made, cited by a doc but missing")
    jsonout.add_option(ck, "the problems")


def _say(text: str) -> None:
    console.print(text, markup=False, highlight=False, emoji=False)


def run(args: argparse.Namespace, project: Project) -> Outcome:
    series = load_series(project.patches_dir)
    if args.action == "update":
        # the after trees tell a proof of these patch bytes from one of others (a reworded patch keeps its trees)
        trees = committed_update.after_trees(project) if project.evidence_dir.is_dir() or args.from_dirs else {}
        result = committed_update.update(series, project.root, project.evidence_dir, tuple(args.from_dirs), trees,
                                         drop_stale=args.drop_stale, pin_commit=load_pin(project.pin_file).commit)
        jsonout.emit(args, "evidence", {"action": "update", "written": result.written, "removed": result.dropped,
                                        "left_out": result.skipped})
        for f in result.dropped:
            _say(f"removed docs/evidence/{f}")
        for f in result.written:
            _say(f"wrote docs/evidence/{f}")
        for s in result.skipped:
            _say(f"left out: {s}")
        _say(f"{len(result.written)} evidence file(s) written; docs/evidence/{committed.MANIFEST} records them")
        return Outcome.OK
    problems = committed.check(series, project.root)
    jsonout.emit(args, "evidence", {"action": "check", "problems": problems})
    for p in problems:
        _say(str(p))
    if problems:
        _say(f"{len(problems)} problem(s) in the committed evidence")
        return Outcome.FAILED
    _say("committed evidence: every file recorded, none stale, every cited file present")
    return Outcome.OK

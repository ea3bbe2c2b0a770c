from __future__ import annotations

import argparse

from rich.table import Table

from builder.build.cmakebuild import PROFILES
from builder.console import CliProgress, console
from builder.errors import EXIT_FAILED, EXIT_NOT_PROVEN
from builder.project import Project
from builder.prove.hunks import CAUGHT, EXEMPT, NOT_BUILT, UNGUARDED, summarize
from builder.prove.verify import PROVEN, VerifyReport, report_table, verify

NAME = "verify"
HELP = "prove each patch known-positive: its tests fail without the fix and pass with it (writes evidence)"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("patches", nargs="*", help="patch names or numbers (default: all)")
    p.add_argument("--backend", action="append", choices=list(PROFILES),
                   help="backend to verify on (repeatable; default: every backend this machine has)")
    p.add_argument("--report", action="store_true", help="print the table of recorded outcomes and exit")
    p.add_argument("--no-reuse", action="store_true", help="re-run even when the trees are unchanged")
    p.add_argument("--hunks", action="store_true",
                   help="also revert each hunk of every fix on its own: the tests must fail (or the tree not build)")
    p.add_argument("--jobs", "-j", type=int)


_HUNK_STYLE = {CAUGHT: "green", NOT_BUILT: "cyan", EXEMPT: "yellow", UNGUARDED: "red"}


def _style(outcome: str) -> str:
    if outcome.split(" (", maxsplit=1)[0] == PROVEN:
        return "green"
    if outcome.startswith("needs"):
        return "yellow"
    return "red"


def print_verdicts(report: VerifyReport) -> None:
    table = Table("patch", "backend", "outcome", "why", title="patchset verify")
    for v in report.verdicts:
        table.add_row(v.patch, v.backend, f"[{_style(v.outcome)}]{v.outcome}[/]", v.reason)
    console.print(table)
    for v in report.verdicts:
        if v.hunks:
            table = Table("file", "lines", "outcome", "why", title=f"{v.patch} [{v.backend}]: {summarize(v.hunks)}")
            for h in v.hunks:
                why = h["reason"] + (f": {h['failing'][0]}" if h["failing"] else "") + \
                    (f": {h['errors'][0]}" if h["errors"] else "")
                table.add_row(h["file"], h["lines"] + (f" ({h['part']})" if h["part"] else ""),
                              f"[{_HUNK_STYLE[h['outcome']]}]{h['outcome']}[/]", why)
            console.print(table)
    for v in report.verdicts:
        if v.evidence_md:
            console.print(f"  evidence: {v.evidence_md}", highlight=False)


def run(args: argparse.Namespace, project: Project) -> int:
    if args.report:
        rows = report_table(project)
        table = Table("patch", *PROFILES, title="recorded verify outcomes (.patchset/evidence)")
        for name, cells in rows:
            table.add_row(name, *[f"[{_style(cells[b])}]{cells[b]}[/]" if b in cells else "-" for b in PROFILES])
        console.print(table)
        return 0
    report = verify(project, args.patches or None, args.backend, CliProgress(), reuse=not args.no_reuse,
                    jobs=args.jobs, hunks=args.hunks)
    print_verdicts(report)
    if report.regressed:
        return EXIT_FAILED
    return 0 if report.ok else EXIT_NOT_PROVEN

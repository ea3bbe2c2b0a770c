"""`patchset report`: the series at a glance as one static HTML page: subjects, upstream status, the proof matrix."""

from __future__ import annotations

import argparse
from pathlib import Path

from builder.console import console
from builder.deliver import report_page
from builder.errors import EXIT_FAILED, EXIT_OK, Outcome
from builder.project import Project
from builder.series.load import load_series
from builder.series.status import status

NAME = "report"
HELP = ("write the series at a glance as one static HTML page (DIR/index.html, no script): each patch's subject "
        "and upstream status, the proof matrix patch x backend from the committed evidence with each record's "
        "cases and mutations one click away, the runs that made it and, with --canary, where each patch breaks")
EXAMPLE = """examples:
  patchset report --html site                  # then open site/index.html (file:// works; no server)
  patchset canary --json > canary.json && patchset report --html site --canary canary.json"""

EXITS = (EXIT_OK, EXIT_FAILED)
"""The exit codes it returns besides errors.ANY_COMMAND (its --help lists them)."""


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--html", type=Path, required=True, metavar="DIR",
                   help="the folder to write index.html into (made when missing; the page is the only file)")
    p.add_argument("--state", action="store_true",
                   help="the proofs of this machine's runs (.patchset/evidence/, what `verify --report` prints: a "
                        "CI job's own verify) instead of the committed evidence under docs/evidence/")
    p.add_argument("--canary", type=Path, metavar="FILE",
                   help="a canary report, as `patchset canary --json` prints it: the page then maps where each "
                        "patch breaks over its range")


def run(args: argparse.Namespace, project: Project) -> Outcome:
    canary = report_page.load_canary(args.canary) if args.canary else None
    st = status(project)
    page = report_page.gather(load_series(project.patches_dir), st.patches, st.pin,
                              project.root / "docs" / "evidence", dropped=st.dropped, problems=st.problems,
                              canary=canary, canary_file=args.canary.name if args.canary else "",
                              state=project.evidence_dir if args.state else None)
    target = report_page.write(page, args.html)
    proven = sum(1 for r in page.rows if any(c.state == "proven" for c in r.cells))
    console.print(f"{target}: {len(page.rows)} patch(es), {proven} proven on at least one backend"
                  + (f", canary {page.canary.old[:12]}..{page.canary.new[:12]}" if page.canary else ""),
                  highlight=False, markup=False)
    return Outcome.OK

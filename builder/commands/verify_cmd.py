from __future__ import annotations

import argparse
from pathlib import Path

from rich.table import Table

from builder.build.cmakebuild import PROFILES
from builder.console import CliProgress, console
from builder.errors import EXIT_FAILED, EXIT_NOT_PROVEN
from builder.project import Project
from builder.prove import backends_doc
from builder.prove.verify import PROVEN, VerifyReport, report_table, verify
from builder.series.model import load_series

NAME = "verify"
HELP = "prove each patch known-positive: its tests fail without the fix and pass with it (writes evidence)"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("patches", nargs="*", help="patch names or numbers (default: all)")
    p.add_argument("--backend", action="append", choices=list(PROFILES),
                   help="backend to verify on (repeatable; default: every backend this machine has)")
    p.add_argument("--report", action="store_true", help="print the table of recorded outcomes and exit")
    p.add_argument("--markdown", nargs="?", type=Path, const=Path("docs/backends.md"), metavar="FILE",
                   help="with --report: regenerate the table of FILE (default docs/backends.md) from the committed "
                        "evidence under docs/evidence/<backend>/; text outside its markers is kept")
    p.add_argument("--no-reuse", action="store_true", help="re-run even when the trees are unchanged")
    p.add_argument("--jobs", "-j", type=int)
    p.add_argument("--cuda-arch", help="CMAKE_CUDA_ARCHITECTURES (default: native); give the one `patchset build` "
                   "used, so that the patched tree's build is reused")


def _style(outcome: str) -> str:
    if outcome == PROVEN:
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
        if v.evidence_md:
            console.print(f"  evidence: {v.evidence_md}", highlight=False)


def run(args: argparse.Namespace, project: Project) -> int:
    if args.markdown:
        target = args.markdown if args.markdown.is_absolute() else project.root / args.markdown
        changed = backends_doc.write(load_series(project.patches_dir), project.root / "docs" / "evidence", target)
        console.print(f"{target}: {'regenerated' if changed else 'up to date'}", highlight=False)
        return 0
    if args.report:
        rows = report_table(project)
        table = Table("patch", *PROFILES, title="recorded verify outcomes (.patchset/evidence)")
        for name, cells in rows:
            table.add_row(name, *[f"[{_style(cells[b])}]{cells[b]}[/]" if b in cells else "-" for b in PROFILES])
        console.print(table)
        return 0
    report = verify(project, args.patches or None, args.backend, CliProgress(), reuse=not args.no_reuse,
                    jobs=args.jobs, cuda_arch=args.cuda_arch)
    print_verdicts(report)
    if report.regressed:
        return EXIT_FAILED
    return 0 if report.ok else EXIT_NOT_PROVEN

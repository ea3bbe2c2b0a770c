"""The per-patch table of `rebase --dry-run`, `rebase` and `apply --dry-run` (one view for all three)."""

from __future__ import annotations

import argparse

from rich.table import Table

from builder.commands import jsonout
from builder.console import console
from builder.errors import Outcome
from builder.series.dryrun import CONFLICT, DEPENDS, NOT_FIXED, REUSED, PatchReport, RebaseReport


def print_report(report: RebaseReport) -> None:
    table = Table("#")
    # whole file names and paths, folded rather than cut short with an ellipsis
    table.add_column("patch", overflow="fold")
    table.add_column("outcome", no_wrap=True)
    table.add_column("detail", overflow="fold")
    checked = any(p.fix or p.merged_as or p.merged_unchecked for p in report.patches)
    if checked:
        table.add_column("upstream", overflow="fold")
    for i, p in enumerate(report.patches, 1):
        detail = ""
        if p.outcome == CONFLICT:
            detail = "files: " + ", ".join(p.files) + ("; hunks: " + ", ".join(p.hunks) if p.hunks else "")
        elif p.outcome == DEPENDS:
            detail = f"needs {p.depends_on}"
        if p.change:
            detail = "; ".join(filter(None, [detail, p.change]))
        if p.renamed:
            detail = "; ".join(filter(None, [detail, "renamed upstream, followed: " + ", ".join(p.renamed)]))
        if p.resolutions:
            verb = "reused" if p.outcome == REUSED else "recorded"
            detail = "; ".join(filter(None, [detail, f"resolution {verb}: " + ", ".join(
                f"patches/resolutions/{k[:12]}" for k in p.resolutions)]))
        table.add_row(str(i), p.patch, p.outcome, detail, *([_upstream(p)] if checked else []))
    console.print(table)
    if checked:
        for p in report.patches:
            if p.fix and p.fix.evidence:
                console.print(f"{p.patch}: {p.fix.evidence}", highlight=False, markup=False)


def _upstream(p: PatchReport) -> str:
    """The upstream column: merged as a commit, and the verdict of the patch's own test."""
    words = [f"merged as {p.merged_as[:12]}"] if p.merged_as else []
    words += [f"merged as: {p.merged_unchecked}"] if p.merged_unchecked else []
    if p.fix:
        words.append(p.fix.verdict + (f"; still failing: {', '.join(p.fix.still_failing)}"
                                      if p.fix.still_failing and p.fix.verdict != NOT_FIXED else ""))
    return "; ".join(words)


def print_dry_run(report: RebaseReport, args: argparse.Namespace, verb: str, where: str) -> Outcome:
    """A dry run's table and one line of summary (with --json, the report on stdout as `verb`'s
    document); exit 3 when some patch would not apply."""
    print_report(report)
    jsonout.emit(args, verb, report.as_json())
    n = len(report.failed)
    console.print(f"dry run {where} {report.new_commit[:12]}: " + (
        f"{n} of {len(report.patches)} patch(es) would not apply" if n else "every patch would apply")
        + "; nothing was changed")
    return Outcome.CONFLICT if report.failed else Outcome.OK

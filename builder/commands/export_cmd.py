"""`patchset export`: each patch as a pull-request package for upstream, checked against upstream's rules."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from builder.commands import jsonout
from builder.console import console
from builder.deliver.layout import LAYOUTS
from builder.errors import EXIT_FAILED, EXIT_LOCKED, EXIT_OK, Outcome
from builder.project import Project

if TYPE_CHECKING:
    from builder.deliver.export import ExportResult

NAME = "export"
HELP = ("write each patch as a pull-request package for upstream (mail, PR.md, ISSUE.md, gh commands) "
        "and check it against upstream's rules; never pushes, never runs gh")

EXAMPLE = """example:
  patchset export --check --author 'Ann Example <ann@example.org>'
  patchset export --out upstream-prs --author 'Ann Example <ann@example.org>' 2 3"""
EXITS = (EXIT_OK, EXIT_FAILED, EXIT_LOCKED)
"""The exit codes it returns besides errors.ANY_COMMAND (its --help lists them)."""


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("patches", nargs="*", help="patch names or numbers (default: all)")
    p.add_argument("--layout", choices=list(LAYOUTS), default="llama.cpp",
                   help="paths for llama.cpp (default) or for the standalone ggml repository")
    p.add_argument("--out", type=Path, help="folder of the packages (default: .patchset/export)")
    p.add_argument("--author", help="'Name <mail>' for the mails (default: your git identity)")
    p.add_argument("--check", action="store_true",
                   help="fail while a placeholder is unfilled or a rule reports an error")
    jsonout.add_option(p, "the packages and findings")
    p.add_argument("--cover", action="store_true", help="also write COVER.md for the series")
    p.add_argument("--full", action="store_true",
                   help=f"print whole clang-format diffs (default: {DETAIL_LINES} lines each)")
    p.add_argument("--drop-non-ggml", action="store_true",
                   help="with --layout ggml: leave out llama.cpp-only files instead of refusing")


DETAIL_LINES = 24


def print_result(result: ExportResult, full: bool = False) -> None:
    for pkg in result.packages:
        deps = f", with {', '.join(pkg.deps)}" if pkg.deps else ""
        branch = f", branch {pkg.branch}" if pkg.branch else ""
        console.print(f"{pkg.patch}: v{pkg.version} {pkg.state}{deps}{branch}: {pkg.directory}",
                      markup=False, highlight=False, emoji=False)
        if pkg.dropped:
            console.print(f"  dropped for ggml: {', '.join(pkg.dropped)}", markup=False, emoji=False)
        for note in pkg.notes:
            console.print(f"  {note}", markup=False, emoji=False)
        if pkg.range_diff:
            console.print(f"  range-diff: {pkg.range_diff}", markup=False, emoji=False)
    for line in result.left_out:
        console.print(line, markup=False, highlight=False, emoji=False)
    findings = [f for p in result.packages for f in p.findings]
    for f in findings:
        console.print(str(f), markup=False, highlight=False, emoji=False)
        if f.detail:
            lines = f.detail.splitlines()
            shown = lines if full else lines[:DETAIL_LINES]
            if len(shown) < len(lines):
                shown.append(f"... {len(lines) - len(shown)} more line(s); --full prints them")
            console.print("\n".join(f"    {x}" for x in shown), markup=False, highlight=False, emoji=False)
    for ph in result.placeholders:
        console.print(str(ph), markup=False, highlight=False, emoji=False)
    errors = len(result.errors)
    waiting = sum(1 for f in findings if f.needs_approval)
    warnings = sum(1 for f in findings if not f.blocking and not f.settled and not f.needs_approval)
    settled = sum(1 for f in findings if not f.blocking and f.settled)
    summary = f"{len(result.packages)} package(s) in {result.out}: {errors} error(s), {warnings} warning(s)"
    if waiting:
        summary += f", {waiting} need(s) approval"
    if settled:
        summary += f", {settled} acknowledged or approved"
    if result.checked:
        summary += f", {len(result.placeholders)} placeholder(s) to fill"
    console.print(summary, markup=False, highlight=False, emoji=False)
    if result.cover:
        console.print(f"cover: {result.cover}", markup=False, emoji=False)


def run(args: argparse.Namespace, project: Project) -> Outcome:
    # imported here: the export rules (yaml, editorconfig, templates) weigh on every other command's start
    from builder.deliver.export import export  # noqa: PLC0415
    from builder.deliver.export_package import ExportOptions  # noqa: PLC0415

    opts = ExportOptions(tuple(args.patches), args.layout, args.out, args.author, args.check, args.cover,
                         args.drop_non_ggml)
    if project.series_name:
        from builder.deliver.export_bindings import export_bindings  # noqa: PLC0415

        result = export_bindings(project, opts)
    else:
        result = export(project, opts)
    print_result(result, args.full)
    jsonout.emit(args, "export", jsonout.plain(result))
    return Outcome.OK if result.ok else Outcome.FAILED

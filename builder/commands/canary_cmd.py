"""`patchset canary`: the first upstream commit after the pin where each patch stops applying, building or passing."""

from __future__ import annotations

import argparse
import contextlib
from pathlib import Path

from rich.table import Table

from builder.commands import jsonout
from builder.commands.test_cmd import add_confirm, add_timeout
from builder.commands.verify_cmd import check_lanes
from builder.console import CliProgress, console
from builder.errors import EXIT_CONFLICT, EXIT_FAILED, EXIT_LOCKED, EXIT_OK, InputError, Outcome
from builder.fsutil import atomic_write_text
from builder.locking import project_lock
from builder.project import Project
from builder.series import refname
from builder.series.canary import CanaryReport, canary
from builder.series.model import BACKENDS
from builder.upstream.pin import load_pin

NAME = "canary"
HELP = ("over the upstream commits after the pin, find by bisection the first commit where each patch stops "
        "applying (with --build/--test: building, or passing its test), and the newest where the whole series does")

EXAMPLE = """example:
  patchset canary --range ..b7100 --markdown canary.md
  patchset canary --scan --json > canary.json"""
EXITS = (EXIT_OK, EXIT_FAILED, EXIT_CONFLICT, EXIT_LOCKED)
"""The exit codes it returns besides errors.ANY_COMMAND (its --help lists them)."""


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--range", dest="range_", metavar="OLD..NEW",
                   help="the first-parent commits of the pin's git source to try, each end a commit id, tag or branch "
                        "name of it (default: the pin..HEAD; OLD may be left out: the pin)")
    p.add_argument("--step", type=int, default=1,
                   help="try every Nth commit only (the first breaking commit is then known to within N)")
    p.add_argument("--scan", action="store_true",
                   help="try every commit instead of bisecting (a linear scan, to check the bisection against)")
    g = p.add_mutually_exclusive_group()
    g.add_argument("--build", action="store_true",
                   help="a patch also stops where the tree with the series up to it no longer builds (ggml and the "
                        "patch's test programs, in verify's build folder)")
    g.add_argument("--test", action="store_true",
                   help="as --build, and where the patch's tests no longer pass with its fix")
    p.add_argument("--backend", choices=BACKENDS, default="cpu", help="with --build/--test (default: cpu)")
    p.add_argument("--jobs", "-j", type=int, help="parallel compile jobs (default: all cores)")
    p.add_argument("--lanes", type=int, metavar="N",
                   help="with --build/--test: try N commits at once a bisection round, each tree in its own "
                        "worktree and build folder, on one jobserver of --jobs slots (default: as many as the "
                        "cores, memory and a compiler cache allow; 1: one commit at a time)")
    add_timeout(p)
    add_confirm(p, "with --test, the failing cases of a tree")
    jsonout.add_option(p, "the report")
    p.add_argument("--markdown", metavar="FILE", help="also write the report as Markdown to FILE")


def run(args: argparse.Namespace, project: Project) -> Outcome:
    old, new = "", "HEAD"
    if args.range_:
        if ".." not in args.range_ or "..." in args.range_:
            raise InputError(f"--range {args.range_}: expected OLD..NEW (OLD may be empty)")
        old, new = args.range_.split("..", 1)
        old, new = _by_name(project, old), _by_name(project, new or "HEAD")
    progress = None if args.json else CliProgress()
    check = None
    if (args.build or args.test) and project.series_name:
        raise InputError(f"--series {project.series_name} with --{'test' if args.test else 'build'}: canary builds "
                         "llama.cpp's tree only; a second series gets its text checks (leave the flag out)")
    if args.build or args.test:
        from builder.prove.canary_check import checker  # noqa: PLC0415 (only these flags build)
        check_lanes(args)
        check = checker(project, args.backend, args.test, progress, args.jobs, args.timeout, args.confirm,
                        args.lanes)
    with project_lock(project.lock_file) if check else contextlib.nullcontext():
        report = canary(project, new, old, args.step, args.scan, progress, check,
                        "test" if args.test else "build" if args.build else "")
    if args.markdown:
        atomic_write_text(Path(args.markdown), markdown(report))
    if args.json:
        jsonout.emit(args, "canary", report.as_json())
    else:
        _print(report)
    return Outcome.CONFLICT if report.broken else Outcome.OK


def _by_name(project: Project, ref: str) -> str:
    """A tag or branch name of the pin's git source as its commit id (HEAD and ids as given)."""
    if not ref or ref == "HEAD" or not refname.is_name(ref):
        return ref
    return refname.resolve(load_pin(project.pin_file), ref, "--range").commit


def _print(report: CanaryReport) -> None:
    table = Table("patch", "breaks at", "class", "detail", "tries")
    for p in report.patches:
        at = f"{p.broken_at.id[:12]} {p.broken_at.subject}" if p.broken_at else "-"
        table.add_row(p.patch, at, p.state, p.detail(), str(p.tries))
    console.print(table)
    console.print(report.where(), highlight=False)
    console.print(f"newest commit where the whole series {report.survives}: {report.newest_whole[:12]} "
                  f"{report.newest_subject}",
                  highlight=False, markup=False)


def markdown(report: CanaryReport) -> str:
    """The report as a Markdown page."""
    lines = [f"# patchset canary {report.old[:12]}..{report.new[:12]}", "",
             report.where() + ".", "",
             f"Newest commit where the whole series applies: `{report.newest_whole[:12]}` {report.newest_subject}",
             "", "| patch | breaks at | subject | class | detail | tries |", "| --- | --- | --- | --- | --- | --- |"]
    for p in report.patches:
        at, subject = (f"`{p.broken_at.id[:12]}`", p.broken_at.subject) if p.broken_at else ("-", "")
        cells = [p.patch, at, subject, p.state, p.detail(), str(p.tries)]
        lines.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    what = {"": "Text checks only (the patches applied in a scratch index)",
            "build": "Applied in a scratch index, then built where they apply (ggml and each patch's test programs)",
            "test": "Applied in a scratch index, built where they apply, and each patch's tests run with its fix"}
    lines += ["", f"{what[report.checked]}; bisection assumes a patch that stops surviving a commit does not "
              "survive a later one in the range."]
    return "\n".join(lines) + "\n"

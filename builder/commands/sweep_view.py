"""`patchset test --against REF`: the sweep's table and files (the test command's second mode)."""

from __future__ import annotations

import argparse
from dataclasses import replace

from rich.table import Table

from builder.commands import jsonout
from builder.compile.testrun import series_ops
from builder.console import CliProgress, console
from builder.errors import Outcome
from builder.fsutil import atomic_write
from builder.locking import project_lock
from builder.project import Project
from builder.prove import sweep as sweepmod
from builder.prove.pipeline import declared_tests
from builder.prove.sweep_compare import (
    CATEGORIES,
    NEWLY_PASSING,
    REGRESSION_CATEGORIES,
    SweepReport,
    sweep_dict,
    sweep_junit,
)
from builder.series.load import load_series


def print_sweep(r: SweepReport) -> None:
    ops = ",".join(r.ops) if r.ops else "all ops"
    table = Table("", r.against, "patched", title=f"patchset test --against {r.against}: backend {r.backend}, "
                  f"mode {r.mode}, {ops}")
    for status in ("pass", "fail", "crash", "skip"):
        table.add_row(status, str(r.counts.get(f"other.{status}", 0)), str(r.counts.get(f"patched.{status}", 0)))
    table.add_row("program runs", str(len(r.other.programs)), str(len(r.patched.programs)))
    console.print(table)
    console.print(f"{r.compared} case(s) compared in {r.duration_s:.0f}s", highlight=False)
    for cat in CATEGORIES:
        changes = r.of(cat)
        style = "red" if cat in REGRESSION_CATEGORIES else (
            "green" if cat == NEWLY_PASSING else "yellow")
        console.print(f"[{style}]{cat}: {len(changes)}[/]")
        for c in changes[:25]:
            reruns = f" (re-runs: {c.reruns})" if c.reruns else ""
            console.print(f"  {c.program} {c.backend} {c.case}: {c.before} -> {c.after}{reruns}", highlight=False,
                          markup=False)
        if len(changes) > 25:
            console.print(f"  ... {len(changes) - 25} more (see --json)")
    for t in (r.other, r.patched):
        if t.crashes:
            console.print(f"{t.label}: crashed inside one op, later cases of it not run: {', '.join(t.crashes)}",
                          highlight=False, markup=False)


def run_sweep(args: argparse.Namespace, project: Project, ops: list[str] | None) -> Outcome:
    opts = sweepmod.SweepOptions(
        backend=args.backend, mode=args.mode, ops=None if args.all or not ops else tuple(ops),
        against=args.against, jobs=args.jobs, cuda_arch=args.cuda_arch, workers=args.workers, confirm=args.confirm,
    )
    if not args.all and not ops:
        opts = replace(opts, ops=tuple(series_ops(declared_tests(load_series(project.patches_dir), args.backend)))
                       or None)
    # the sweep builds and runs in .patchset/ (the patched build, the other tree's checkout and build,
    # the logs): the project lock for all of it, as `test` holds it; bump's sweep of its scratch
    # project runs under bump's own lock of the project
    with project_lock(project.lock_file, purpose="test --against"):
        r = sweepmod.sweep(project, opts, CliProgress())
    print_sweep(r)
    jsonout.emit(args, "sweep", sweep_dict(r))
    if args.junit:
        atomic_write(args.junit, sweep_junit(r))
    if r.regressions:
        console.print(f"{len(r.regressions)} regression(s) against {r.against}: exit 1")
        return Outcome.FAILED
    if not r.compared:
        console.print("nothing compared: no case ran in both trees: exit 1")
        return Outcome.FAILED
    return Outcome.OK

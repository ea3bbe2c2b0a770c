"""`patchset test`: test-opt, test-backend-ops and the series' own tests run on a build, and summarised."""

from __future__ import annotations

import argparse
from pathlib import Path

from rich.table import Table

from builder import proc, words
from builder.commands import jsonout, sweep_view
from builder.compile.backends import PROFILES, TARGET_SETS
from builder.compile.reports import report_dict, write_junit
from builder.compile.testrun import CRASHED, DEFAULT_TIMEOUT_S, FAILED, MODES, NOT_LOADED, NOTHING, TestReport
from builder.console import console
from builder.errors import EXIT_FAILED, EXIT_LOCKED, EXIT_OK, Outcome
from builder.project import Project
from builder.prove.pipeline import run_tests

NAME = "test"
HELP = "run test-opt, test-backend-ops and the series' own tests on a build, and summarise them"

EXAMPLE = """example:
  patchset test --backend cpu --ops ADD,MUL_MAT
  patchset test --against upstream --json sweep.json   # what the series changed, case by case"""
EXITS = (EXIT_OK, EXIT_FAILED, EXIT_LOCKED)
"""The exit codes it returns besides errors.ANY_COMMAND (its --help lists them)."""


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.epilog = proc.BUILD_TIMEOUT_HELP
    p.add_argument("--backend", choices=list(PROFILES), default="cpu", help="the backend whose build is tested")
    p.add_argument("--targets", choices=TARGET_SETS, default="minimal",
                   help="minimal: ggml and the test programs only; full: the tree's own CMake project with its tests")
    g = p.add_mutually_exclusive_group()
    g.add_argument("--ops", help="comma-separated ops for test-backend-ops (default: the series' ops)")
    g.add_argument("--all", action="store_true", help="every op")
    p.add_argument("--mode", choices=MODES, help="test-backend-ops mode (default: grad on cpu, test elsewhere)")
    jsonout.add_option(p, "per-case results (with --against: the sweep)", file=True)
    p.add_argument("--junit", type=Path, help="write JUnit XML")
    add_timeout(p)
    _add_sweep(p)


def add_timeout(p: argparse.ArgumentParser) -> None:
    p.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT_S, metavar="SECONDS",
                   help=f"stop a test program that runs longer (a failed case; default {DEFAULT_TIMEOUT_S:g})")


def add_confirm(p: argparse.ArgumentParser, what: str) -> None:
    """`--confirm N`: how many runs confirm what decides a verdict (as `patchset test --against --confirm`)."""
    p.add_argument("--confirm", type=int, default=words.CONFIRM_RUNS, metavar="N",
                   help=f"run {what} N times in all; a case that varies between runs is flaky and decides nothing "
                        f"(default {words.CONFIRM_RUNS}; 1: one run)")


def _add_sweep(p: argparse.ArgumentParser) -> None:
    p.add_argument("--against", metavar="REF",
                   help="regression sweep: build and run the same tests on REF of the work repository (e.g. "
                        "upstream, the pin) and on the patched tree, and compare them case by case")
    p.add_argument("--workers", type=int, default=1,
                   help="test-backend-ops parallel workers (-j; test mode only)")
    p.add_argument("--confirm", type=int, default=3, metavar="N",
                   help="with --against: re-run each case that changed N times on both trees; a case that "
                        "varies within a tree is flaky, not a regression (default 3; 0: off)")
    p.add_argument("--jobs", "-j", type=int, help="parallel compile jobs for --against's builds (default: all cores)")
    p.add_argument("--cuda-arch", help="CMAKE_CUDA_ARCHITECTURES for --against's builds (default: native)")


def print_report(report: TestReport) -> None:
    ops = ",".join(report.ops) if report.ops else "all ops"
    table = Table("program", "args", "passed", "failed", "skipped", "verdict", "time",
                  title=f"patchset test: backend {report.backend}, mode {report.mode}, {ops}")
    for p in report.programs:
        verdict = p.verdict if not p.signal_name else f"crashed ({p.signal_name})"
        style = {FAILED: "red", CRASHED: "red", NOT_LOADED: "red", NOTHING: "yellow"}.get(p.verdict, "green")
        table.add_row(p.program, " ".join(p.args), str(p.passed), str(p.failed), str(p.skipped),
                      f"[{style}]{verdict}[/]", f"{p.duration_s:.1f}s")
    console.print(table)
    for p in report.programs:
        for line in p.failing_lines()[:20]:
            console.print(f"  FAIL {p.program}: {line}", highlight=False, markup=False)
        for line in p.notes[:10]:
            console.print(f"  {p.program}: {line}", highlight=False, markup=False)
        if p.verdict == NOTHING:
            console.print(f"  {p.program}: nothing checked on this backend (not counted as passed)")
        if p.verdict == NOT_LOADED:
            console.print(f"  {p.program}: did not load (exit {p.returncode}, the dynamic loader's: a library or "
                          "symbol missing); it ran none of its tests", highlight=False, markup=False)
        if p.timed_out or p.signal_name or p.verdict == NOT_LOADED:
            console.print(f"  {p.program}: last lines it printed:", highlight=False)
            for line in p.last_lines:
                console.print(f"    | {line}", highlight=False, markup=False)
        if p.verdict in (FAILED, CRASHED, NOT_LOADED):
            console.print(f"  log: {p.log}", highlight=False)
    if report.source_tree:
        console.print(f"tested the build of tree {report.source_tree[:12]} (commit {report.source_commit[:12]})",
                      highlight=False)


def outcome(report: TestReport) -> Outcome:
    if report.failed:
        return Outcome.FAILED
    if report.nothing_checked:
        console.print(f"nothing checked by: {', '.join(report.nothing_checked)}: counted as failed")
        return Outcome.FAILED
    return Outcome.OK


def run(args: argparse.Namespace, project: Project) -> Outcome:
    ops = [o for o in args.ops.split(",") if o] if args.ops else None
    if args.against:
        return sweep_view.run_sweep(args, project, ops)
    report = run_tests(project, args.backend, args.targets, args.mode, ops, args.all, timeout=args.timeout)
    print_report(report)
    jsonout.emit(args, "test", report_dict(report))
    if args.junit:
        write_junit(report, args.junit)
    return outcome(report)

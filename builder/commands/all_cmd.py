from __future__ import annotations

import argparse
from pathlib import Path

from builder.build.cmakebuild import PROFILES
from builder.build.reports import write_json, write_junit
from builder.commands.build_cmd import print_build
from builder.commands.test_cmd import print_report
from builder.commands.verify_cmd import print_verdicts
from builder.console import CliProgress, console
from builder.errors import EXIT_FAILED, EXIT_NOT_PROVEN
from builder.pipeline import run_build, run_tests
from builder.project import Project
from builder.prove.verify import verify

NAME = "all"
HELP = "the main job: fetch, apply, build, test and verify on the pin (default backend: cpu)"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--backend", choices=list(PROFILES), default="cpu")
    p.add_argument("--jobs", "-j", type=int)
    p.add_argument("--no-verify", action="store_true", help="stop after the tests")
    p.add_argument("--junit", type=Path, help="write the test results as JUnit XML")
    p.add_argument("--json", type=Path, help="write the test results as JSON")


def run(args: argparse.Namespace, project: Project) -> int:
    console.rule("build")
    b = run_build(project, args.backend, "minimal", args.jobs, progress=CliProgress())
    print_build(b)
    if not b.ok:
        return EXIT_FAILED
    if b.kind == "compile-check":
        console.print("metal: compile check only; tests and verify need a Mac: not run here")
        return 0
    console.rule("test")
    report = run_tests(project, args.backend)
    print_report(report)
    if args.json:
        write_json(report, args.json)
    if args.junit:
        write_junit(report, args.junit)
    code = EXIT_FAILED if report.failed or report.nothing_checked else 0
    if args.no_verify:
        return code
    console.rule("verify")
    v = verify(project, backends=[args.backend], progress=CliProgress(), jobs=args.jobs)
    print_verdicts(v)
    if v.regressed:
        return EXIT_FAILED
    if not v.ok:
        return code or EXIT_NOT_PROVEN
    return code

from __future__ import annotations

import argparse
from pathlib import Path

from builder import proc
from builder.build.cmakebuild import PROFILES
from builder.build.reports import write_json, write_junit
from builder.commands.build_cmd import print_build
from builder.commands.test_cmd import add_timeout, print_report
from builder.commands.test_cmd import outcome as test_outcome
from builder.commands.verify_cmd import outcome as verify_outcome
from builder.commands.verify_cmd import print_verdicts
from builder.console import CliProgress, console
from builder.errors import Outcome
from builder.pipeline import run_build, run_tests
from builder.project import Project
from builder.prove.verify import verify

NAME = "all"
HELP = "the main job: fetch, apply, build, test and verify on the pin (default backend: cpu)"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.epilog = proc.BUILD_TIMEOUT_HELP
    p.add_argument("--backend", choices=list(PROFILES), default="cpu", help="backend to build, test and verify on")
    p.add_argument("--jobs", "-j", type=int, help="parallel compile jobs (default: all cores)")
    p.add_argument("--no-verify", action="store_true", help="stop after the tests")
    p.add_argument("--junit", type=Path, help="write the test results as JUnit XML")
    p.add_argument("--json", type=Path, help="write the test results as JSON")
    add_timeout(p)


def run(args: argparse.Namespace, project: Project) -> Outcome:
    console.rule("build")
    b = run_build(project, args.backend, "minimal", args.jobs, progress=CliProgress())
    print_build(b)
    if not b.ok:
        return Outcome.FAILED
    if b.kind == "compile-check":
        console.print("metal: compile check only; tests and verify need a Mac: not run here")
        return Outcome.OK
    console.rule("test")
    report = run_tests(project, args.backend, timeout=args.timeout)
    print_report(report)
    if args.json:
        write_json(report, args.json)
    if args.junit:
        write_junit(report, args.junit)
    tested = test_outcome(report)
    if args.no_verify:
        return tested
    console.rule("verify")
    v = verify(project, backends=[args.backend], progress=CliProgress(), jobs=args.jobs, timeout=args.timeout)
    print_verdicts(v)
    return Outcome.worst(tested, verify_outcome(v))

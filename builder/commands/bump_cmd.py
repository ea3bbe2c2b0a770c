"""`patchset bump`: the series moved to a new upstream only when it rebases, builds, sweeps and proves there."""

from __future__ import annotations

import argparse

from rich.markup import escape

from builder import proc
from builder.commands import jsonout
from builder.commands.rebase_cmd import ONTO_HELP, print_report, print_way_back
from builder.commands.sweep_view import print_sweep
from builder.commands.test_cmd import add_timeout
from builder.commands.verify_cmd import outcome as verify_outcome
from builder.commands.verify_cmd import print_not_here, print_verdicts, verify_json
from builder.compile.backends import PROFILES
from builder.compile.testrun import MODES
from builder.console import CliProgress, console
from builder.errors import (
    EXIT_CONFLICT,
    EXIT_FAILED,
    EXIT_FIXED_UPSTREAM,
    EXIT_LOCKED,
    EXIT_NOT_PROVEN,
    EXIT_NOT_PROVEN_HERE,
    EXIT_OK,
    Outcome,
)
from builder.orchestrate.bump import bump
from builder.orchestrate.bump_plan import CONFLICT, FIXED, NOT_PROVEN, BumpOptions, BumpResult
from builder.project import Project
from builder.prove.sweep_compare import sweep_dict

NAME = "bump"
HELP = ("move the series to a new upstream only if no patch's bug is fixed there, it rebases, builds, passes the "
        "regression sweep and every patch is proven there; else change nothing")

EXAMPLE = """example:
  patchset bump --onto b7100 -j 8 --json > bump.json
  patchset bump --onto b7100 --drop-fixed          # drop what upstream fixed, then move"""
EXITS = (EXIT_OK, EXIT_FAILED, EXIT_CONFLICT, EXIT_NOT_PROVEN, EXIT_FIXED_UPSTREAM, EXIT_NOT_PROVEN_HERE, EXIT_LOCKED)
"""The exit codes it returns besides errors.ANY_COMMAND (its --help lists them)."""


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.epilog = proc.BUILD_TIMEOUT_HELP
    p.add_argument("--onto", required=True, help=ONTO_HELP)
    p.add_argument("--backend", choices=list(PROFILES), default="cpu", help="backend to build, sweep and verify on")
    p.add_argument("--mode", choices=MODES, help="the sweep's test-backend-ops mode (default: the backend's)")
    g = p.add_mutually_exclusive_group()
    g.add_argument("--ops", help="comma-separated ops for the sweep (default: the series' ops)")
    g.add_argument("--all", action="store_true", help="sweep every op")
    p.add_argument("--workers", type=int, default=1, help="test-backend-ops parallel workers (-j; test mode only)")
    p.add_argument("--confirm", type=int, default=3, metavar="N",
                   help="re-runs of each sweep case that changed, on both trees (default 3; 0: off)")
    p.add_argument("--jobs", "-j", type=int, help="parallel compile jobs (default: all cores)")
    p.add_argument("--cuda-arch", help="CMAKE_CUDA_ARCHITECTURES (default: native)")
    p.add_argument("--drop-fixed", action="store_true",
                   help="leave out the patches upstream fixed (controlled: their own test's cases fail without the "
                        "fix on the old pin and pass on the new upstream, in each of two runs; or upstream holds their "
                        "diff byte for byte) and record each in patches/dropped; without it they stop the bump "
                        "(exit 5). A patch fixed in part always stops it")
    add_timeout(p)
    jsonout.add_option(p, "the bump's report")


def outcome(result: BumpResult) -> Outcome:
    if result.ok:
        # the verdicts of the bump's backend and of the stand-ins it ran, by verify's one rule
        return verify_outcome(result.verify) if result.verify is not None else Outcome.OK
    return {CONFLICT: Outcome.CONFLICT, NOT_PROVEN: Outcome.NOT_PROVEN,
            FIXED: Outcome.FIXED_UPSTREAM}.get(result.failure, Outcome.FAILED)


def run(args: argparse.Namespace, project: Project) -> Outcome:
    opts = BumpOptions(
        onto=args.onto, backend=args.backend, mode=args.mode,
        ops=tuple(o for o in args.ops.split(",") if o) if args.ops else None, all_ops=args.all,
        workers=args.workers, confirm=args.confirm, jobs=args.jobs, cuda_arch=args.cuda_arch, timeout_s=args.timeout,
        drop_fixed=args.drop_fixed,
    )
    result = bump(project, opts, CliProgress())
    jsonout.emit(args, "bump", {
        **jsonout.plain(result), "patches": [{"patch": name} for name in result.patches],
        "sweep": sweep_dict(result.sweep) if result.sweep is not None else None,
        "verify": verify_json(result.verify) if result.verify is not None else None})
    if result.recovered:
        console.print(f"finished the interrupted bump onto {result.new_pin.commit[:12]}: pin "
                      f"{project.pin_file.name} and patches/ are on it")
        return Outcome.OK
    if result.rebase is not None:
        print_report(result.rebase)
    if result.sweep is not None:
        print_sweep(result.sweep)
    if result.verify is not None:
        print_verdicts(result.verify)
        print_not_here(result.verify)
    old, new = result.old_pin.commit[:12], result.new_pin.commit[:12]
    if result.ok:
        console.print(f"bumped from {old} onto {new}: pin {project.pin_file.name} and patches/ updated "
                      f"(commit them); report written to {result.report_file}", highlight=False)
        for d in result.records:
            console.print(f"dropped {d.patch} ({d.why} in {d.commit[:12]}), recorded in patches/dropped: "
                          f"{d.evidence}", highlight=False, markup=False, soft_wrap=True)
        if result.rebase is not None:
            print_way_back(result.rebase)
    else:
        names = f" ({', '.join(result.patches)})" if result.patches else ""
        console.print(f"[bold red]bump onto {new} failed at {result.failed_stage}[/]{escape(names)}: "
                      f"{escape(result.reason)}", highlight=False, soft_wrap=True)
        console.print(f"pin, patches/ and the work repository are unchanged; report written to "
                      f"{result.report_file}", highlight=False)
    return outcome(result)

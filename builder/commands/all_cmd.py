"""`patchset all`: the main job: fetch, apply, build, test and verify on the pin."""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import threading
import time
from contextlib import nullcontext
from pathlib import Path

from rich.table import Table

from builder import proc
from builder.commands import jsonout
from builder.commands.build_cmd import print_build
from builder.commands.test_cmd import add_confirm, add_timeout, print_report
from builder.commands.test_cmd import outcome as test_outcome
from builder.commands.verify_cmd import (
    add_plan_options,
    check_lanes,
    print_not_here,
    print_plan,
    print_verdict_line,
    print_verdicts,
)
from builder.commands.verify_cmd import outcome as verify_outcome
from builder.compile import backends as backendmod
from builder.compile import cmakebuild as buildmod
from builder.compile.backends import PROFILES
from builder.compile.jobserver import Jobserver
from builder.compile.reports import report_dict, write_junit
from builder.compile.toolchain import CcacheStats
from builder.console import CliProgress, console
from builder.errors import (
    EXIT_CONFLICT,
    EXIT_FAILED,
    EXIT_LOCKED,
    EXIT_NOT_PROVEN,
    EXIT_NOT_PROVEN_HERE,
    EXIT_OK,
    Outcome,
)
from builder.locking import borrowed, project_lock
from builder.orchestrate.phases import AllReport, Phase, PhaseClock, record_tests, reusable_tests, tests_key
from builder.progress import ProgressSink
from builder.project import Project
from builder.prove.backends_here import available_backends, stand_in
from builder.prove.pipeline import build_dir, declared_tests, ensure_patched, run_build, run_tests
from builder.prove.plan import WHY, Node, Plan
from builder.prove.schedule import BESIDE_MIN_SLOTS, Beside
from builder.prove.verdicts import PatchVerdict, VerifyReport
from builder.prove.verify import plan, verify
from builder.series.load import load_series
from builder.upstream.fetch import fetch
from builder.upstream.pin import load_pin
from builder.words import NEEDS

NAME = "all"
HELP = "the main job: fetch, apply, build, test and verify on the pin (default backend: cpu)"

EXAMPLE = """example:
  patchset all -j 8 --json all.json --junit all.xml
  patchset all --plan                # what it would build and test, and in which order
  patchset all --lanes 1             # build, test, then each proof, one after another (on 8 job slots or
                                     # more the build and tests run beside the proofs: docs/all.md)"""
EXITS = (EXIT_OK, EXIT_FAILED, EXIT_CONFLICT, EXIT_NOT_PROVEN, EXIT_NOT_PROVEN_HERE, EXIT_LOCKED)
"""The exit codes it returns besides errors.ANY_COMMAND (its --help lists them)."""


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.epilog = proc.BUILD_TIMEOUT_HELP
    p.add_argument("--backend", choices=list(PROFILES), default="cpu", help="backend to build, test and verify on")
    p.add_argument("--jobs", "-j", type=int, help="parallel compile jobs (default: all cores)")
    p.add_argument("--no-verify", action="store_true", help="stop after the tests")
    add_plan_options(p)
    p.add_argument("--junit", type=Path, help="write the test results as JUnit XML")
    jsonout.add_option(p, "the run (each phase with its seconds, reuse and ccache counters, the verdicts and the "
                          "test results; docs/all.md)", file=True)
    add_timeout(p)
    add_confirm(p, "what decides on each tree of verify's proofs")


def run(args: argparse.Namespace, project: Project) -> Outcome:
    check_lanes(args)
    if args.plan:
        return _plan(args, project)
    started = time.perf_counter()
    clock = PhaseClock()
    out: dict = {}
    try:
        return _run(args, project, clock, out)
    finally:
        # also after a failed phase: the phases that ran, with their seconds
        report = clock.report(args.backend, started)
        print_summary(report)
        jsonout.emit(args, "all", report.to_json(out.get("tests")))


def _run(args: argparse.Namespace, project: Project, clock: PhaseClock, out: dict) -> Outcome:
    console.rule("fetch and apply")
    with clock.phase("fetch", compiles=False) as ph:
        fetched = fetch(project.cache_dir, load_pin(project.pin_file), CliProgress())
        ph["reused"], ph["detail"] = fetched.cached, ("in the cache" if fetched.cached else f"from {fetched.source}")
    with clock.phase("apply", compiles=False) as ph, project_lock(project.lock_file, purpose="apply"):
        _, applied = ensure_patched(project, CliProgress())
        ph["reused"] = applied is None or applied.noop
        ph["detail"] = "the work tree holds this series" if ph["reused"] else \
            f"{len(applied.outcomes) if applied else 0} patch(es) applied"
    if at_once(args):
        return _at_once(args, project, clock, out)
    console.rule("build")
    tested, go_on = _build_and_test(args, project, clock, out, CliProgress())
    if not go_on or args.no_verify:
        return tested
    console.rule("verify")
    before = clock.stats()
    v = _verify(args, project)
    after = clock.stats()
    if before is not None and after is not None:
        clock.verify_ccache = after.minus(before)
    return _verdicts(v, tested, clock)


def at_once(args: argparse.Namespace) -> bool:
    """Whether the patched tree is built and tested beside verify's proofs, not before them: with lanes (not `--lanes
    1`) on at least BESIDE_MIN_SLOTS job slots, on a backend whose tests run here."""
    slots = args.jobs or os.cpu_count() or 1
    return (not args.no_verify and args.lanes != 1 and slots >= BESIDE_MIN_SLOTS
            and not (args.backend == "metal" and sys.platform != "darwin"))


def _build_and_test(args: argparse.Namespace, project: Project, clock: PhaseClock, out: dict,
                    progress: ProgressSink, beside: Beside | None = None,
                    pool: Jobserver | None = None) -> tuple[Outcome, bool]:
    """The build and test phases: their outcome, and whether the proofs go on (not after a failed build, nor after
    Metal's compile check, where nothing runs here). Beside the proofs (`beside`, on their jobserver `pool`) the
    lanes' first builds wait for the libraries only, each test program is shown the cores a proof's is (one that
    sees every core runs alone among the lanes), and the phases' ccache counters are the whole run's."""
    with clock.phase("build", compiles=beside is None) as ph:
        b = run_build(project, args.backend, "minimal", args.jobs, progress=progress,
                      jobserver=pool.makeflags if pool is not None else None,
                      libraries_built=beside.libraries_built if beside is not None else None)
        ph["reused"] = b.noop
        ph["detail"] = ("nothing to do" if b.noop else f"{b.steps} step(s)") + ("" if b.ok else ", failed")
        if b.ccache_hits is not None and b.ccache_misses is not None:
            ph["ccache"] = CcacheStats(b.ccache_hits, b.ccache_misses)
    print_build(b)
    if not b.ok:
        return Outcome.FAILED, False
    if b.kind == "compile-check":
        console.print("metal: compile check only; tests and verify need a Mac: not run here")
        return Outcome.OK, False
    if beside is None:
        console.rule("test")
    bdir = build_dir(project, args.backend, "minimal")
    built = buildmod.built_from(bdir)
    cores = backendmod.cores_shown(args.backend) if beside is not None else None
    key = tests_key(args.backend, bdir / "bin", built.commit if built else "", built.tree if built else "",
                    declared_tests(load_series(project.patches_dir), args.backend), args.timeout, cores)
    record = project.state_dir / "test" / f"all-{args.backend}.json"
    # the tests of a build nothing changed, which passed last time, are not run again (--junit needs a run)
    earlier = reusable_tests(record, key) if b.noop and built and not args.junit else None
    harness = bool(backendmod.profile(args.backend).harness)
    with clock.phase("test", compiles=harness and beside is None) as ph:
        if earlier is not None:
            ph["reused"] = True
            ph["detail"] = f"{len(earlier['programs'])} program(s) passed on this build before"
            out["tests"] = earlier
            tested = Outcome.OK
        else:
            # beside the proofs: a program shown every core (a GPU backend's) runs alone among the lanes
            with pool.alone() if pool is not None and cores is None else nullcontext():
                report = run_tests(project, args.backend, timeout=args.timeout, cores=cores)
            ph["detail"] = f"{len(report.programs)} program(s) run" + (", failed" if report.failed else "") + (
                f", each shown {cores} cores beside the proofs" if cores is not None else "")
    if earlier is not None:
        console.print(f"tests: the build is unchanged and its {len(earlier['programs'])} test program(s) passed on "
                      f"it (tree {key['tree'][:12]}): reused, not run again", highlight=False)
    else:
        print_report(report)
        out["tests"] = report_dict(report)
        record_tests(record, key, out["tests"])
        if args.junit:
            write_junit(report, args.junit)
        tested = test_outcome(report)
    return tested, True


def _verify(args: argparse.Namespace, project: Project, beside: Beside | None = None) -> VerifyReport:
    replay = stand_ins(project, args.backend)
    for sub, names in replay.items():
        console.print(f"stand-in for Metal here: {sub} ({STAND_IN_WORDS[sub]}) for {', '.join(names)}",
                      highlight=False)
    return verify(project, backends=[args.backend], progress=CliProgress(), jobs=args.jobs, timeout=args.timeout,
                  confirm=args.confirm, lanes=args.lanes, on_verdict=print_verdict_line, also=replay, beside=beside)


def _verdicts(v: VerifyReport, tested: Outcome, clock: PhaseClock) -> Outcome:
    for verdict in v.verdicts:
        clock.add(_verify_phase(verdict))
    print_verdicts(v, evidence=False)
    print_not_here(v)
    return outcome(tested, (v,))


def _at_once(args: argparse.Namespace, project: Project, clock: PhaseClock, out: dict) -> Outcome:
    """The build and test phases in a thread of their own beside verify's lanes, on one jobserver, under the one
    project lock: the proofs start at once; the lanes' first builds wait for the patched tree's libraries
    (whose objects they share), and the proof whose tree is the work tree's waits for the build and its tests
    (it builds in the same folder, whose record the tests check)."""
    console.rule("build and test, and verify at once")
    owner = threading.get_ident()

    def build_and_test(beside: Beside, pool: Jobserver) -> tuple[Outcome, bool]:
        with borrowed(project.lock_file, owner):
            return _build_and_test(args, project, clock, out, CliProgress().lane(), beside, pool)

    beside = Beside(args.backend, build_and_test)
    with project_lock(project.lock_file, purpose="all"):
        before = clock.stats()
        try:
            v = _verify(args, project, beside)
        finally:
            after = clock.stats()
            if before is not None and after is not None:
                clock.verify_ccache = after.minus(before)
                clock.at_once = True
    tested, _ = beside.outcome()
    # a failed build fails the run; the proofs ran meanwhile on their own trees, and their verdicts stand
    return _verdicts(v, tested, clock)


def outcome(tested: Outcome, reports: tuple[VerifyReport, ...]) -> Outcome:
    """The tests' outcome and verify's one rule over the verdicts of every backend the run verified on,
    as one report: a patch that needs metal on the CPU and is proven on its stand-in is proven in this run."""
    return Outcome.worst(tested, verify_outcome(VerifyReport(tuple(x for r in reports for x in r.verdicts))))


STAND_IN_WORDS = {"metal-linux": "the tree's own Metal host code on patchset's Objective-C stand-in",
                  "metal-replay": "the host-side Metal replay; metal-linux, the tree's own host code, needs "
                                  "`patchset toolchain objc`"}


STAND_IN_SHORT = {"metal-replay": "the host-side Metal replay, not a Mac",
                  "metal-linux": "the tree's Metal host code on the Objective-C stand-in, not a Mac"}


def stand_ins(project: Project, backend: str) -> dict[str, list[str]]:
    """The patches whose proof needs a backend this machine lacks, by the backend that stands in for
    it here (the best: metal-linux where its toolchain is built, else the Metal replay)."""
    here = available_backends()
    found: dict[str, list[str]] = {}
    for p in load_series(project.patches_dir).patches:
        sub = stand_in(p, backend, here)
        if sub:
            found.setdefault(sub, []).append(p.name)
    return found


def _plan(args: argparse.Namespace, project: Project) -> Outcome:
    """`all --plan`: the patched tree's build and tests, then (or beside them: `at_once`) every proof (stand-ins
    included)."""
    cost, source = _build_cost(build_dir(project, args.backend, "minimal"))
    build = Node(f"all:{args.backend}:build", "", args.backend, "build", "", (), WHY["build"], cost, source)
    test = Node(f"all:{args.backend}:test", "", args.backend, "test", "", (build.id,), WHY["test"], 0.0,
                "not estimated")
    steps = (build,) if args.no_verify else (build, test)
    if args.no_verify:
        planned = Plan("all", 1, args.jobs or os.cpu_count() or 1, (), (), (build, test))
    else:
        replay = stand_ins(project, args.backend)
        planned = dataclasses.replace(
            plan(project, backends=[args.backend], jobs=args.jobs, lanes=args.lanes, command="all", steps=steps,
                 also=replay, beside=at_once(args)),
            notes=tuple(f"stand-in for Metal here: {sub} ({STAND_IN_WORDS[sub]}) for {', '.join(names)}"
                        for sub, names in replay.items()))
    print_plan(planned)
    jsonout.emit(args, "plan", planned.to_json())
    return Outcome.OK


def _build_cost(folder: Path) -> tuple[float, str]:
    """The patched tree's build: the compile seconds its folder's ninja log records (every step, as one
    core would take them), else not estimated."""
    log = folder / ".ninja_log"
    if not log.is_file():
        return 0.0, "not estimated (no earlier build)"
    total = 0.0
    for line in log.read_text(errors="replace").splitlines()[1:]:
        parts = line.split("\t")
        if len(parts) >= 2 and parts[0].isdigit() and parts[1].isdigit():
            total += (int(parts[1]) - int(parts[0])) / 1000
    return total, "ninja log"


def _verify_phase(v: PatchVerdict) -> Phase:
    return Phase("verify", v.seconds, v.reused or v.carried, v.reason, patch=v.patch, backend=v.backend,
                 outcome=v.outcome, evidence=str(v.evidence_md) if v.evidence_md else None)


def _cache(c: CcacheStats | None) -> str:
    return "-" if c is None else f"{c.hits} hit(s) / {c.misses} miss(es)"


def _verify_cache(report: AllReport) -> str:
    if not report.verify_ccache:
        return ""
    during = "build, test and verify at once" if report.at_once else "verify"
    return f" ({during} {_cache(report.verify_ccache)})"


def print_summary(report: AllReport) -> None:
    """Where the time went, phase by phase, and each evidence file once."""
    if not report.phases:
        return
    table = Table("phase", "patch", "seconds", "reused", "ccache hit/miss", "what",
                  title="patchset all: where the time went")
    for p in report.phases:
        what = p.detail if p.name != "verify" else f"{p.outcome} on {p.backend}" + (
            f" ({STAND_IN_SHORT[p.backend]})" if p.backend in STAND_IN_SHORT else "")
        table.add_row(p.name, p.patch or "", f"{p.seconds:.1f}", "yes" if p.reused else "no",
                      "-" if p.ccache is None else f"{p.ccache.hits}/{p.ccache.misses}", what)
    console.print(table)
    replayed = {p.patch: p for p in report.phases if p.name == "verify" and p.backend in STAND_IN_SHORT}
    needs = [p for p in report.phases if p.name == "verify" and p.patch in replayed and p.outcome
             and p.outcome.startswith(NEEDS)]
    for p in needs:
        sub = replayed[p.patch]
        console.print(f"{p.patch}: {p.outcome} on {p.backend}; proven here on {sub.backend} instead "
                      f"({STAND_IN_SHORT[str(sub.backend)]})" if sub.outcome == "proven" else
                      f"{p.patch}: {p.outcome} on {p.backend}; on {sub.backend}: {sub.outcome}", highlight=False)
    verify_phases = [p for p in report.phases if p.name == "verify"]
    console.print(f"total {report.total_seconds:.1f}s; reused {report.reused} of {len(report.phases)} phase(s)"
                  + (f", evidence reused for {report.evidence_reused} of {len(verify_phases)} verdict(s)"
                     if verify_phases else "")
                  + f"; ccache {_cache(report.ccache)}" + _verify_cache(report),
                  highlight=False)
    for p in verify_phases:
        if p.evidence:
            console.print(f"  evidence: {p.evidence}", highlight=False)

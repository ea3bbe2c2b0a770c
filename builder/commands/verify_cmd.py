"""`patchset verify`: each patch proven known-positive: its tests fail without the fix and pass with it."""

from __future__ import annotations

import argparse
from pathlib import Path

from rich.markup import escape
from rich.table import Table

from builder import proc
from builder.commands import jsonout, options
from builder.commands.test_cmd import add_confirm, add_timeout
from builder.compile.backends import PROFILES
from builder.console import CliProgress, console
from builder.errors import EXIT_FAILED, EXIT_LOCKED, EXIT_NOT_PROVEN, EXIT_NOT_PROVEN_HERE, EXIT_OK, InputError, Outcome
from builder.project import Project
from builder.prove import backends_doc
from builder.prove.hunks import CAUGHT, EXEMPT, NOT_BUILT, UNGUARDED, summarize
from builder.prove.plan import Plan, render
from builder.prove.verdicts import PatchVerdict, VerifyReport, report_table
from builder.prove.verify import plan, verify
from builder.series.load import load_series
from builder.words import PROVEN

NAME = "verify"
HELP = "prove each patch known-positive: its tests fail without the fix and pass with it (writes evidence)"

EXAMPLE = """example:
  patchset verify --backend cpu -j 8
  patchset verify --plan             # the trees it would build and test
  patchset verify --report --markdown"""
EXITS = (EXIT_OK, EXIT_FAILED, EXIT_NOT_PROVEN, EXIT_NOT_PROVEN_HERE, EXIT_LOCKED)
"""The exit codes it returns besides errors.ANY_COMMAND (its --help lists them)."""


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.epilog = proc.BUILD_TIMEOUT_HELP
    p.add_argument("patches", nargs="*", help="patch names or numbers (default: all)")
    p.add_argument("--backend", action="append", choices=list(PROFILES),
                   help="backend to verify on (repeatable; default: every backend this machine has)")
    p.add_argument("--report", action="store_true", help="print the table of recorded outcomes and exit")
    p.add_argument("--markdown", nargs="?", type=Path, const=Path("docs/backends.md"), metavar="FILE",
                   help="only with --report (an error alone): regenerate the table of FILE (default "
                        "docs/backends.md) from the committed evidence under docs/evidence/<backend>/; text "
                        "outside its markers is kept")
    jsonout.add_option(p, "the verdicts (with --report: the recorded ones)")
    options.refuse(p, "--force", "--no-reuse", "proving every patch again without reusing recorded evidence")
    p.add_argument("--no-reuse", action="store_true",
                   help="prove every patch again: reuse no evidence, carry no earlier proof over")
    p.add_argument("--hunks", action="store_true",
                   help="also revert each hunk of every fix on its own: the tests must fail (or the tree not build)")
    p.add_argument("--jobs", "-j", type=int, help="parallel compile jobs (default: all cores)")
    add_plan_options(p)
    add_timeout(p)
    add_confirm(p, "what decides on each tree (every case of the after tree, the failing ones of the mutation and "
                   "before trees)")
    p.add_argument("--cuda-arch", help="CMAKE_CUDA_ARCHITECTURES (default: native); give the one `patchset build` "
                   "used, so that the patched tree's build is reused")


def add_plan_options(p: argparse.ArgumentParser) -> None:
    """--plan and --lanes (verify, all)."""
    p.add_argument("--plan", action="store_true",
                   help="print the plan (every tree to build and test, why, what it waits for, estimated costs "
                        "and the critical path) and exit: nothing is built; with --json the plan document")
    p.add_argument("--lanes", type=int, metavar="N",
                   help="prove at most N patches at once, each in its own worktree and build folder, on one "
                        "jobserver of --jobs slots (default: as many as the patches, cores and memory allow; "
                        "1: one after another)")


def check_lanes(args: argparse.Namespace) -> None:
    if args.lanes is not None and args.lanes < 1:
        raise InputError(f"--lanes {args.lanes}: give a number of lanes >= 1")


def print_plan(p: Plan) -> None:
    for line in render(p):
        console.print(line, highlight=False, markup=False)


def print_verdict_line(v: PatchVerdict) -> None:
    """One proof as soon as it and every one before it in series order are known."""
    console.print(f"{v.patch} [{v.backend}]: [{_style(v.outcome)}]{escape(v.outcome)}[/] ({v.seconds:.1f}s)",
                  highlight=False)


_HUNK_STYLE = {CAUGHT: "green", NOT_BUILT: "cyan", EXEMPT: "yellow", UNGUARDED: "red"}


def _style(outcome: str) -> str:
    if outcome.split(" (", maxsplit=1)[0] == PROVEN:
        return "green"
    if outcome.startswith("needs"):
        return "yellow"
    return "red"


def print_verdicts(report: VerifyReport, *, evidence: bool = True) -> None:
    """The verdicts table (and each --hunks table); with `evidence`, each evidence file after it
    (`all` lists them once, in its summary)."""
    table = Table("patch", "backend", "outcome", "why", title="patchset verify")
    for v in report.verdicts:
        table.add_row(v.patch, v.backend, f"[{_style(v.outcome)}]{v.outcome}[/]", v.reason)
    console.print(table)
    for v in report.verdicts:
        if v.hunks:
            table = Table("file", "lines", "outcome", "why", title=f"{v.patch} [{v.backend}]: {summarize(v.hunks)}")
            for h in v.hunks:
                why = h["reason"] + (f": {h['failing'][0]}" if h["failing"] else "") + \
                    (f": {h['errors'][0]}" if h["errors"] else "")
                table.add_row(h["file"], h["lines"] + (f" ({h['part']})" if h["part"] else ""),
                              f"[{_HUNK_STYLE[h['outcome']]}]{h['outcome']}[/]", why)
            console.print(table)
    for v in report.verdicts:
        if evidence and v.evidence_md:
            console.print(f"  evidence: {v.evidence_md}", highlight=False)


def outcome(report: VerifyReport) -> Outcome:
    """The one exit rule of verify, all and bump over every verdict of the run (builder/errors.py
    EXIT_CODES): 1 when a patch regressed or a tree failed to build; else 4 when a patch that ran is
    not proven; else 6 when a patch is proven on no backend of the run (it needs one this machine
    lacks); else 0, a proof on a stand-in counting as one. `all` and `bump` pass the verdicts of
    every backend they ran (the stand-ins' too) in one report."""
    if report.regressed:
        return Outcome.FAILED
    if not report.ok:
        return Outcome.NOT_PROVEN
    return Outcome.NOT_PROVEN_HERE if report.not_proven_here else Outcome.OK


def on_stand_in(report: VerifyReport) -> dict[str, list[str]]:
    """Patch -> the stand-ins (backends built from patchset's harness) it is proven on, for the patches
    proven on no other backend of the run."""
    proven: dict[str, list[str]] = {}
    for v in report.verdicts:
        if v.outcome == PROVEN:
            proven.setdefault(v.patch, []).append(v.backend)
    return {p: bs for p, bs in proven.items() if all(PROFILES[b].harness for b in bs)}


def print_not_here(report: VerifyReport) -> None:
    """The patches proven only on a stand-in, and those this run did not prove because this machine
    lacks their backend (exit 6)."""
    for name, backends in on_stand_in(report).items():
        needs = f"; {report.needs_of(name)}" if report.needs_of(name) else ""
        console.print(f"[green]proven on a stand-in[/]: {name} (on {', '.join(backends)}, patchset's stand-in, not "
                      f"the real backend{needs})", highlight=False)
    for name in report.not_proven_here:
        console.print(f"[yellow]not proven on this machine[/]: {name} ({report.needs_of(name)})", highlight=False)


def run(args: argparse.Namespace, project: Project) -> Outcome:
    if args.markdown and not args.report:
        # alone it used to regenerate the file silently, where a reader expects a verify run
        raise InputError("--markdown needs --report: `patchset verify --report --markdown [FILE]` regenerates "
                         "the table of FILE (default docs/backends.md); it verifies nothing")
    if args.markdown and project.series_name:
        raise InputError("--markdown regenerates docs/backends.md, the main series' table; it takes no --series")
    if args.markdown:
        target = args.markdown if args.markdown.is_absolute() else project.root / args.markdown
        changed = backends_doc.write(load_series(project.patches_dir), project.root / "docs" / "evidence", target)
        console.print(f"{target}: {'regenerated' if changed else 'up to date'}", highlight=False)
        return Outcome.OK
    if args.report:
        rows = report_table(project)
        jsonout.emit(args, "verify-recorded", {"patches": [{"patch": name, "outcomes": cells} for name, cells in rows]})
        table = Table("patch", *PROFILES, title=f"recorded verify outcomes ({project.evidence_dir.name})")
        for name, cells in rows:
            table.add_row(name, *[f"[{_style(cells[b])}]{cells[b]}[/]" if b in cells else "-" for b in PROFILES])
        console.print(table)
        return Outcome.OK
    check_lanes(args)
    if args.plan:
        planned = plan(project, args.patches or None, args.backend, reuse=not args.no_reuse, jobs=args.jobs,
                       hunks=args.hunks, lanes=args.lanes)
        print_plan(planned)
        jsonout.emit(args, "plan", planned.to_json())
        return Outcome.OK
    report = verify(project, args.patches or None, args.backend, CliProgress(), reuse=not args.no_reuse,
                    jobs=args.jobs, timeout=args.timeout, cuda_arch=args.cuda_arch, hunks=args.hunks,
                    confirm=args.confirm, lanes=args.lanes, on_verdict=print_verdict_line)
    print_verdicts(report)
    print_not_here(report)
    jsonout.emit(args, "verify", verify_json(report))
    return outcome(report)


def verify_json(report: VerifyReport) -> dict:
    """The verify report as `verify --json` prints it (and `bump --json` inside its own)."""
    return {"ok": report.ok, "verdicts": report.verdicts, "not_proven_here": report.not_proven_here}

"""`patchset check`: the series linted: its patches, diffs, paths and trailers, patches/dropped, patches/resolutions."""

from __future__ import annotations

import argparse

from builder.commands import jsonout
from builder.console import console
from builder.deliver import evidence_facts
from builder.deliver.readiness import strict_findings
from builder.errors import EXIT_FAILED, EXIT_LOCKED, EXIT_OK, Outcome
from builder.project import Project
from builder.series import dropped
from builder.series import resolutions as rr
from builder.series.load import lint
from builder.series.trailers import deprecations

NAME = "check"
HELP = ("lint the series: missing, unlisted or duplicate patches, unparseable diffs, bad paths and trailers; "
        "the dropped-patch log (patches/dropped); the recorded conflict resolutions (patches/resolutions)")

EXAMPLE = """example:
  patchset check
  patchset check --strict --json > check.json"""
EXITS = (EXIT_OK, EXIT_FAILED, EXIT_LOCKED)
"""The exit codes it returns besides errors.ANY_COMMAND (its --help lists them)."""


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--strict", action="store_true",
                   help="also require Patchset-Origin and Patchset-Upstream trailers on every patch, and a trailer "
                        "block git reads whole; on the pinned tree: a patch that does not apply alone declares "
                        "Patchset-Depends, build-fails is not caused by the API the patch adds, every Patchset-Test "
                        "is run by upstream's CTest or Patchset-Not-In-CI says why; and no undeclared guard case in "
                        "the committed evidence")
    jsonout.add_option(p, "the problems")


def run(args: argparse.Namespace, project: Project) -> Outcome:
    series, findings = lint(project.patches_dir, strict=args.strict)
    findings += dropped.lint(project.patches_dir, series, dropped.committed(project.patches_dir))
    findings += rr.lint(project.patches_dir, [(p.name, p.subject) for p in series.patches])
    if args.strict and series.patches:
        findings += strict_findings(project, series)
    if args.strict:
        # an added test case that passes without the fix too, as the committed evidence saw it
        findings += evidence_facts.guard_findings(series, project.root / "docs" / "evidence")
    jsonout.emit(args, "check", {"strict": args.strict, "patches": [{"patch": p.name} for p in series.patches],
                                 "problems": findings,
                                 "deprecated": [str(d) for d in deprecations(series)]})
    for f in findings:
        console.print(str(f), highlight=False, markup=False)
    for d in deprecations(series):
        console.print(f"deprecated: {d}", highlight=False, markup=False)
    if findings:
        console.print(f"{len(findings)} problem(s) in {project.patches_dir}")
        return Outcome.FAILED
    console.print(f"series OK: {len(series.patches)} patch(es)")
    return Outcome.OK

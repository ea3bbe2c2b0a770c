"""`patchset refresh`: patches/ written back from the 'patched' branch (byte-stable)."""

from __future__ import annotations

import argparse

from builder.commands import jsonout, options
from builder.console import console
from builder.errors import EXIT_CONFLICT, EXIT_FAILED, EXIT_LOCKED, EXIT_OK, Outcome
from builder.locking import project_lock
from builder.project import Project
from builder.series.edit import finish_pending
from builder.series.refresh import FileChange, check_current, refresh
from builder.series.scratch import CONTEXT_ONLY

NAME = "refresh"
HELP = "write patches/ back from the 'patched' branch (byte-stable)"

EXAMPLE = """example:
  patchset refresh
  patchset refresh --check           # in CI: exit 1 when patches/ is not what refresh writes"""
EXITS = (EXIT_OK, EXIT_FAILED, EXIT_CONFLICT, EXIT_LOCKED)
"""The exit codes it returns besides errors.ANY_COMMAND (its --help lists them)."""


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--check", action="store_true",
                   help="write nothing; exit 1 listing the files when patches/ is not what refresh would write")
    options.add_force(p, "refresh", "files of patches/ edited by hand since the last apply or refresh (a copy is "
                                    "kept under .patchset/backup/)")
    jsonout.add_option(p, "the files written (with --check: the files that differ)")


def _print_changes(project: Project, changes: list[FileChange]) -> None:
    """The files to review first; the patches changed in context only after them, on one line."""
    context = [c.name for c in changes if c.review == CONTEXT_ONLY]
    for c in changes:
        if c.review != CONTEXT_ONLY:
            review = f" ({c.review})" if c.review else ""
            console.print(f"  {c.change:>9} {project.patches_dir.name}/{c.name}{review}", highlight=False)
    if context:
        console.print(f"  context only (message and own lines unchanged, nothing new to review): {', '.join(context)}",
                      highlight=False)


def run(args: argparse.Namespace, project: Project) -> Outcome:
    if args.check:
        stale = check_current(project)
        _print_changes(project, list(stale))
        jsonout.emit(args, "refresh", {"check": True, "current": not stale, "changes": list(stale)})
        if stale:
            console.print(f"patches/ is not what `patchset refresh` writes from 'patched': {len(stale)} file(s)")
            return Outcome.FAILED
        console.print("patches/ is current: exactly what `patchset refresh` writes from 'patched'")
        return Outcome.OK
    with project_lock(project.lock_file, purpose="refresh"):
        edited = finish_pending(project)
        result = refresh(project, force=args.force)
    if edited:
        console.print(f"edit of '{edited}' folded back into 'patched'", highlight=False)
    if result.backup:
        console.print(f"saved: the hand-edited files it overwrote, in {result.backup}", highlight=False)
    changed = [c for c in result.changes if c.change != "unchanged"]
    jsonout.emit(args, "refresh", {"check": False, "current": not changed, "changes": changed,
                                   "backup": result.backup, "warnings": list(result.warnings)})
    _print_changes(project, changed)
    if not changed:
        console.print(f"patches/ already matches 'patched' ({len(result.changes)} patch(es))")
    for w in result.warnings:
        console.print(f"warning: {w}")
    return Outcome.OK

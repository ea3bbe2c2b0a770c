"""`patchset status`: the pin, whether its source is verified, and each patch's state."""

from __future__ import annotations

import argparse

from rich.table import Table

from builder.commands import jsonout
from builder.console import console
from builder.errors import EXIT_FAILED, EXIT_OK, Outcome
from builder.project import Project
from builder.series.status import status

NAME = "status"
HELP = "show the pin, whether its source is verified, and each patch's state"

EXAMPLE = """example:
  patchset status
  patchset status --json > status.json"""
EXITS = (EXIT_OK, EXIT_FAILED)
"""The exit codes it returns besides errors.ANY_COMMAND (its --help lists them)."""


def add_arguments(p: argparse.ArgumentParser) -> None:
    jsonout.add_option(p, "the status")


def run(args: argparse.Namespace, project: Project) -> Outcome:
    st = status(project)
    if args.json:
        body = jsonout.plain(st)
        jsonout.emit(args, "status", {**body, "patches": [{"patch": p["name"], **p} for p in body["patches"]]})
        return Outcome.OK
    pin = st.pin
    console.print(f"pin: {pin.name} {pin.tag or ''} {pin.commit} tree {pin.tree}", highlight=False)
    console.print(f"source: {'verified, from ' + st.source if st.verified else 'not fetched yet (run patchset fetch)'}")
    clean = "clean" if st.work_tree_clean else "UNCOMMITTED CHANGES"
    console.print(f"work repository: {st.work_repo} (branch {st.branch or '-'}, {clean})", highlight=False)
    if st.operation:
        console.print(f"[bold yellow]a {st.operation} is stopped at a conflict[/]: --continue or --abort")
    table = Table("#", "patch", "applied", "dirty", "upstream")
    for p in st.patches:
        table.add_row(str(p.index), p.name, "yes" if p.applied else "no",
                      "DIRTY" if p.dirty else "", p.upstream_status)
    console.print(table)
    if st.extra_commits:
        console.print(f"{st.extra_commits} commit(s) on 'patched' are not in patches/ yet: run `patchset refresh`")
    for d in st.dropped:
        console.print(f"dropped: {d.patch} ({d.why} in {d.commit[:12]}; patches/dropped)", highlight=False,
                      markup=False)
    for prob in st.problems:
        console.print(f"problem: {prob}", highlight=False)
    return Outcome.OK

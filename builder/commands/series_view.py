"""What the series verbs print: the recovery ref left, the series now, the edit in progress."""

from __future__ import annotations

from builder.console import console
from builder.series.journal import EditResult, Recovery


def print_edit(result: EditResult) -> None:
    if result.editing:
        console.print(f"editing patch: {result.editing}", highlight=False)
        console.print(f"  make the change in {result.work_tree} (commit it or leave it uncommitted), then "
                      "`patchset refresh` writes it back to patches/", highlight=False)
    for i, name in enumerate(result.patches, 1):
        console.print(f"  {i:>3} {name}", highlight=False)
    if result.recovery:
        console.print(f"recovery ref: {result.recovery} (`patchset undo` goes back to it)", highlight=False)


def print_recoveries(kept: tuple[Recovery, ...] | list[Recovery]) -> None:
    if not kept:
        console.print("no other recovery ref is kept")
        return
    console.print("recovery refs kept (newest last):")
    for r in kept:
        count = f"{r.patches} patch(es)" if r.patches >= 0 else "on another upstream"
        console.print(f"  {r.ref}  {r.commit[:12]}  before {r.verb}, {count}", highlight=False)

"""What the series verbs print: the recovery ref left, the series now, the edit in progress (as text or JSON)."""

from __future__ import annotations

from builder.console import console
from builder.project import Project
from builder.series.journal import EditResult, Recovery
from builder.series.load import read_series_file


def listed(project: Project) -> list[str]:
    """The patches the series file lists now, in order (none when it cannot be read: the verb says why)."""
    return [e.name for e in read_series_file(project.series_file)[0]]


def patch_at(names: list[str], n: int) -> str | None:
    """The name of patch `n` (from 1) of `names`; None when there is no such patch."""
    return names[n - 1] if 1 <= n <= len(names) else None


def edit_json(result: EditResult | None) -> dict:
    """The fields every series verb's document has: the series as the verb left it (null when it stopped
    before changing anything), the patch being edited, its work tree, and the recovery ref left."""
    if result is None:
        return {"patches": None, "editing": None, "work_tree": None, "recovery": None}
    return {"patches": [{"patch": name} for name in result.patches], "editing": result.editing or None,
            "work_tree": None if result.work_tree is None else str(result.work_tree),
            "recovery": result.recovery or None}


def recovery_json(r: Recovery) -> dict:
    return {"ref": r.ref, "commit": r.commit, "verb": r.verb, "patches": r.patches if r.patches >= 0 else None}


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

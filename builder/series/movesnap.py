"""The way back from a `rebase` or a `bump`, for `patchset undo`.

A move changes three things together: the pin file, `patches/` (patch files, series, the dropped
log) and the work repository's `patched` and `upstream`. Before it writes any of them, the move
makes a snapshot commit in the work repository: its tree holds the pin file (`pin.toml`) and every
file of `patches/` (under `patches/`), its parents are `patched` and `upstream` as they were. When
the move has finished, the recovery ref `refs/patchset/undo/NNNN-rebase` (or `-bump`) names it, as
the series verbs' refs name `patched`. `restore()` puts all three back; it is idempotent, so an
undo killed half-way is finished by the next command that recovers (`journal.recover`)."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

from builder.fsutil import atomic_write_text
from builder.gitrepo import COMMITTER
from builder.project import Project
from builder.series.load import load_series
from builder.series.workbase import PATCHED, UPSTREAM, fingerprint
from builder.series.workrepo import WorkRepo
from builder.upstream.pin import load_pin

MOVE_VERBS = ("rebase", "bump")
"""The verbs whose recovery ref is a snapshot (restored by `restore`), not a position of `patched`."""

AUTHOR = {**COMMITTER, "GIT_AUTHOR_NAME": COMMITTER["GIT_COMMITTER_NAME"],
          "GIT_AUTHOR_EMAIL": COMMITTER["GIT_COMMITTER_EMAIL"]}

PIN_PATH = "pin.toml"
PATCHES_PATH = "patches"


def snapshot(work: WorkRepo, project: Project, verb: str, head: str | None, up: str | None) -> str:
    """A commit holding the pin file and patches/ as they are now, with `head` and `up` (the work
    repository's `patched` and `upstream` before the move) as its parents."""
    files = [project.pin_file, *sorted(p for p in project.patches_dir.rglob("*") if p.is_file())]
    names = [PIN_PATH, *(f"{PATCHES_PATH}/{p.relative_to(project.patches_dir).as_posix()}" for p in files[1:])]
    blobs = work.git.run("hash-object", "-w", "--stdin-paths", "--no-filters",
                         input_text="".join(f"{p}\n" for p in files)).stdout.split()
    with tempfile.TemporaryDirectory(prefix="patchset-snapshot-") as tmp:
        env = {"GIT_INDEX_FILE": str(Path(tmp) / "index")}
        work.git.run("update-index", "--add", "--index-info", env=env,
                     input_text="".join(f"100644 {b}\t{n}\n" for b, n in zip(blobs, names, strict=True)))
        tree = work.git.out("write-tree", env=env)
    parents = [a for c in (head, up) if c for a in ("-p", c)]
    return work.git.run("commit-tree", tree, *parents, "-F", "-", env=AUTHOR,
                        input_text=f"patchset: the pin and patches/ before {verb}\n").stdout.strip()


def restore(project: Project, work: WorkRepo, commit: str) -> None:
    """The pin file, patches/ and (when the snapshot has them) `patched` and `upstream` as
    `snapshot` recorded them. Idempotent: a rerun after a kill does the same again."""
    parents = work.git.out("rev-list", "--parents", "--max-count=1", commit).split()[1:]
    staged = project.state_dir / "undo-patches.staged"
    retired = project.state_dir / "undo-patches.retired"
    for leftover in (staged, retired):
        if leftover.exists():
            shutil.rmtree(leftover)
    with tempfile.TemporaryDirectory(prefix="patchset-undo-") as tmp:
        env = {"GIT_INDEX_FILE": str(Path(tmp) / "index")}
        out = Path(tmp) / "out"
        out.mkdir()
        work.git.run("read-tree", commit, env=env)
        work.git.run("checkout-index", "--all", "--force", f"--prefix={out}/", env=env)
        project.state_dir.mkdir(parents=True, exist_ok=True)
        shutil.copytree(out / PATCHES_PATH, staged)
        pin_text = (out / PIN_PATH).read_text(encoding="utf-8")
    # patches/ swapped whole (a file the move added goes too), then the pin
    if project.patches_dir.exists():
        os.replace(project.patches_dir, retired)
    os.replace(staged, project.patches_dir)
    shutil.rmtree(retired, ignore_errors=True)
    atomic_write_text(project.pin_file, pin_text)
    if len(parents) == 2:
        head, up = parents
        work.git.update_ref(f"refs/heads/{UPSTREAM}", up, "patchset undo")
        work.git.update_ref("refs/patchset/pin", up, "patchset undo")
        work.git.run("checkout", "--quiet", "--force", "-B", PATCHED, head)
        pin = load_pin(project.pin_file)
        work.finish({"fingerprint": fingerprint(pin, pin.tree, load_series(project.patches_dir)),
                     "applied_head": head, "upstream": up, "pin_commit": pin.commit})

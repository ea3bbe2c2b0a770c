"""Which earlier proofs still hold: what each test program was built from, and whether it changed.

After a build, ninja knows every file of the tree a test program was made from: its graph names
the sources and objects of the program and of the libraries it links (`ninja -t inputs`), its
dependency log the headers each object included (`ninja -t deps`), and the regeneration edge of
build.ninja the CMake files the configure read (`ninja -t query build.ninja`). verify records
these files (repository-relative) with their git blob id in each tree it proved. A later verify
whose trees differ (a patch earlier in the series was edited) finds the same blob ids for all of
them in its own trees when the programs, and so their runs, are byte-for-byte what was proven:
then the earlier proof still holds and nothing is built or run again.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from builder import proc
from builder.compile.toolchain import find_tool
from builder.errors import PatchsetError
from builder.gitrepo import GitRepo


def _ninja(build_dir: Path, *args: str) -> str:
    return proc.run([find_tool("ninja").path, "-C", str(build_dir), "-t", *args], timeout=120).stdout


def _deps(text: str) -> list[str]:
    """The dependency paths of `ninja -t deps` output: each target's line is followed by its
    dependencies, one per line, indented (ninja's fixed layout); the target lines are skipped."""
    return [line.strip() for line in text.splitlines() if line[:1].isspace() and line.strip()]


def _query_inputs(text: str) -> list[str]:
    """The inputs of `ninja -t query` output: the lines under `input:`, indented twice, with `|`
    (implicit) or `||` (order-only) before the path."""
    out, inside = [], False
    for line in text.splitlines():
        depth = len(line) - len(line.lstrip(" "))
        if depth == 2:
            inside = line.strip().startswith("input:")
        elif depth >= 4 and inside:
            out.append(line.strip().lstrip("|").strip())
    return out


def program_inputs(build_dir: Path, source: Path, programs: tuple[str, ...]) -> tuple[str, ...] | None:
    """The files of the tree in `source` that `programs` were last built from in `build_dir`:
    sources, headers and CMake files, as sorted repository-relative paths.

    None when ninja cannot say (an older ninja without `-t inputs --print0`, a damaged log): the
    caller then records nothing, and the proof is never carried over.
    """
    try:
        inputs = [p for p in _ninja(build_dir, "inputs", "--print0", "--no-shell-escape", *programs).split("\0") if p]
        # the relative inputs are the build's own outputs (objects, libraries): the headers each
        # object included are in the dependency log (a target without an entry prints none)
        built = [p for p in inputs if not Path(p).is_absolute()]
        headers = _deps(_ninja(build_dir, "deps", *built)) if built else []
        cmake = _query_inputs(_ninja(build_dir, "query", "build.ninja"))
    except (PatchsetError, OSError):
        return None
    root = source.resolve()
    found = set()
    # each path once: every object's dependencies name the same headers again (about 20 times over in ggml)
    for p in dict.fromkeys((*inputs, *headers, *cmake)):
        path = Path(p) if Path(p).is_absolute() else build_dir / p
        try:
            rel = path.resolve().relative_to(root)
        except ValueError:
            continue  # the compiler's own headers, generated files in the build folder, CMake's modules
        found.add(rel.as_posix())
    return tuple(sorted(found))


def blobs(git: GitRepo, commit: str) -> dict[str, str]:
    """Every file of `commit` with its blob id (one `git ls-tree`)."""
    out: dict[str, str] = {}
    for entry in git.run("ls-tree", "-r", "-z", "--full-tree", commit).stdout.split("\0"):
        if entry:
            meta, path = entry.split("\t", 1)
            out[path] = meta.split()[2]
    return out


def record(files_per_tree: dict[str, dict[str, str | None]]) -> dict[str, object]:
    """The compact form for the evidence: per path the blob id when every tree has the same one,
    else the blob id per tree (None: the file is not in that tree)."""
    paths = sorted({p for files in files_per_tree.values() for p in files})
    out: dict[str, object] = {}
    for p in paths:
        ids = {tree: files.get(p) for tree, files in files_per_tree.items()}
        values = set(ids.values())
        out[p] = next(iter(values)) if len(values) == 1 else ids
    return out


def blob_in(entry: object, tree: str) -> str | None:
    """The recorded blob id of a file in `tree` (the inverse of `record`)."""
    if isinstance(entry, dict):
        v = entry.get(tree)
        return str(v) if v else None
    return str(entry) if entry else None


def static_digest(parts: dict[str, object]) -> str:
    """One digest of what else the proof depended on (backend, tests, patch metadata, the minimal
    CMake project, the backend's harness, the compiler)."""
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()


@dataclass(frozen=True)
class Holds:
    """Whether an earlier proof holds for the trees of now, and why (or why not)."""

    holds: bool
    why: str


def check(depends: dict, now: dict[str, Any], trees: dict[str, dict[str, str]],
          program_names: tuple[str, ...]) -> Holds:
    """Compare what an earlier proof depended on (`depends`, from the evidence) with what it would
    depend on now: `now` (patch_sha256, mutations, static, as `depends` has them) and `trees`
    (tree name -> every file's blob id, as `blobs` gives them)."""
    if not depends.get("files"):
        return Holds(False, "the earlier evidence does not record what its test programs were built from")
    if depends.get("patch_sha256") != now["patch_sha256"]:
        return Holds(False, "the patch file changed")
    old_mut, new_mut = depends.get("mutations", {}), now["mutations"]
    for name in sorted(set(old_mut) | set(new_mut)):
        if old_mut.get(name) != new_mut.get(name):
            return Holds(False, f"the mutation {name} changed")
    if depends.get("static") != now["static"]:
        return Holds(False, "its tests, metadata, backend harness, minimal CMake project or compiler changed")
    if list(depends.get("trees", ())) != list(trees):
        return Holds(False, "the patch's trees are not the ones proven")
    files: dict[str, object] = depends["files"]
    for path, entry in files.items():
        for tree, blobs_now in trees.items():
            if blob_in(entry, tree) != blobs_now.get(path):
                return Holds(False, f"{path} changed in the {tree} tree")
    programs = " ".join(program_names)
    return Holds(True, f"the {len(files)} files {programs} {'was' if len(program_names) == 1 else 'were'} built "
                       f"from are identical in the {', '.join(trees)} trees; the patch is unchanged")

"""verify after one patch in the middle of a long series was edited: re-proving only the patches whose
test programs read a changed file, against re-proving everything, side by side in one run.

On a synthetic mini-upstream of a fork's shape (tests/test_verify.py's tiny CMake project, grown):
a ggml/ library of a few sources, and beside it files the test programs are never built from
(src/, tools/, examples/), as most of llama.cpp is for the CPU test programs. The series has N
patches (default 40), one comment line each, spread over all those files with one in 8 in the
library, and T of them (default 6) fix a bug of the library and add their own test program.

Two edits, each of one patch in the middle of the series (its added line says something else):
- "outside": the patch changes a file no test program is built from (the common case in a fork)
- "library": the patch changes a library source every test program is linked with (the worst case)

For each: verify with this feature (earlier proofs carried over where they hold), verify as it was
before it (every patch whose trees changed is re-proven: the evidence without its `depends` record),
and `verify --no-reuse` (every patch re-proven). All three start from the same evidence and a warm
build folder. The real-pin series of benchmarks/fork_series.py is not used: its test patches only
add a comment to tests/test-opt.cpp (they are not proven, so there is no proof to carry), and each
tree of it rebuilds much of ggml (minutes per tree on 2 cores).

`--real`: the same three runs on the real pin with this project's series: `verify 2 3 --backend
cpu` (both test-opt proofs, patch 3 with two mutations) after an edit of patch 1 (the Metal fix: a
comment line in ggml-metal-common.cpp, which the CPU programs are not built from). Heavy: a cold
verify of patches 2 and 3 first, then the two full re-proofs (each rebuilds most of ggml per tree
switch, as patch 3 changes ggml-backend.h).

Usage: python benchmarks/verify_affected.py [-n 40] [--tests 6] | --real [--cache DIR] [-j N]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
from collections.abc import Callable
from pathlib import Path

from _common import ROOT, row, scratch_project, tempdir, timed

sys.path.insert(0, str(ROOT))

from builder.project import Project, default_cache_dir, load_project
from builder.prove.verdicts import VerifyReport
from builder.prove.verify import verify
from builder.series.apply import apply
from builder.series.load import load_series
from builder.words import PROVEN
from tests.test_verify import commit_files, init_upstream, program_source, write_project

LIB = ("ggml/src/calc.c", "ggml/src/ops-a.c", "ggml/src/ops-b.c", "ggml/src/ops-c.c")
OUTSIDE = tuple([f"src/llama-part-{i}.cpp" for i in range(12)] + [f"tools/tool-{i}/main.cpp" for i in range(8)]
                + [f"examples/example-{i}.cpp" for i in range(8)])
FILLER = "".join(f"int filler_{i} = {i};\n" for i in range(20))


def upstream_files(tests: int) -> dict[str, str]:
    decls = "".join(f"int calc_f{k}(int a, int b);\n" for k in range(tests))
    bugs = "".join(f"int calc_f{k}(int a, int b) {{ return a - b - {k + 1}; }}\n" for k in range(tests))
    files = {
        "ggml/CMakeLists.txt": "add_library(ggml STATIC src/calc.c src/ops-a.c src/ops-b.c src/ops-c.c)\n"
                               "target_include_directories(ggml PUBLIC include)\n",
        "ggml/include/calc.h": f'#pragma once\n#ifdef __cplusplus\nextern "C" {{\n#endif\n{decls}'
                               "#ifdef __cplusplus\n}\n#endif\n",
        "ggml/src/calc.c": '#include "calc.h"\n' + bugs + FILLER,
    }
    for f in LIB[1:]:
        files[f] = '#include "calc.h"\n' + FILLER.replace("filler", Path(f).stem.replace("-", "_"))
    for f in OUTSIDE:
        files[f] = FILLER.replace("filler", "part")
    return files


def pool(n: int) -> list[str]:
    """The file each patch changes: one in 8 in the library, the rest outside it, round robin."""
    lib, out = iter(LIB * n), iter(OUTSIDE * n)
    return [next(lib) if i % 8 == 3 else next(out) for i in range(1, n + 1)]


def make_series(base: Path, n: int, tests: int) -> tuple[Path, dict[str, int]]:
    src = init_upstream(base, upstream_files(tests))
    files = pool(n)
    with_test = {round((k + 1) * n / (tests + 1)) + (k % 2): k for k in range(tests)}
    for i in range(1, n + 1):
        changes = {}
        path = files[i - 1]
        lines = (src / path).read_text().splitlines(keepends=True)
        lines.insert(1 + i % 15, f"// fork: local change {i}\n")
        changes[path] = "".join(lines)
        msg = f"fork : local change {i}\n\nPatchset-Status: fork-only\n"
        if i in with_test:
            k = with_test[i]
            calc = changes.get("ggml/src/calc.c", (src / "ggml/src/calc.c").read_text())
            changes["ggml/src/calc.c"] = calc.replace(f"return a - b - {k + 1}; }}", "return a + b; }")
            changes[f"tests/test-f{k}.cpp"] = program_source(f"f{k}", f"calc_f{k}(2, 3)", 5)
            msg = (f"calc : f{k} adds\n\nPatchset-Status: pending\nPatchset-Backends: cpu\n"
                   f"Patchset-Test: test-f{k}\nPatchset-Test-Paths: tests/test-f{k}.cpp\n")
        commit_files(src, changes, msg)
    project = write_project(base, src)
    # the patch in the middle of the series that changes a file outside the library, and the one
    # nearest the middle that changes a library source (neither with a test)
    mid = n // 2
    outside = min((i for i in range(1, n + 1) if files[i - 1] in OUTSIDE and i not in with_test),
                  key=lambda i: abs(i - mid))
    library = min((i for i in range(1, n + 1) if files[i - 1] in LIB and i not in with_test),
                  key=lambda i: abs(i - mid))
    return project, {"outside": outside, "library": library}


def edit(root: Path, n: int) -> None:
    patch = load_series(root / "patches").patches[n - 1].path
    text = patch.read_text()
    old = f"+// fork: local change {n}\n"
    assert text.count(old) == 1, patch
    patch.write_text(text.replace(old, f"+// fork: local change {n}, edited\n"))


def strip_depends(evidence: Path) -> None:
    """The evidence as verify wrote it before it recorded what each proof depended on."""
    for f in evidence.rglob("*.json"):
        data = json.loads(f.read_text())
        data.pop("depends", None)
        data.pop("holds", None)
        f.write_text(json.dumps(data, indent=1) + "\n")


def edit_real(root: Path) -> int:
    """Patch 1 of the real series: one comment line of its ggml-metal-common.cpp says something else."""
    patch = load_series(root / "patches").patches[0].path
    text = patch.read_text()
    old = "+    // written only by the thread whose record took the count from 0 to 1\n"
    assert text.count(old) == 1, patch
    patch.write_text(text.replace(old, old.replace(" to 1", " to 1 (edited)")))
    return 1


def compare(project: Project, label: str, n: int, pristine: Path, proven: list[str], run: Callable) -> None:
    """verify with earlier proofs carried, as before, and --no-reuse, each from the evidence in `pristine`."""
    times = {}
    reproved = {}
    for mode in ("affected", "before", "force"):
        shutil.rmtree(project.evidence_dir)
        shutil.copytree(pristine, project.evidence_dir)
        if mode == "before":
            strip_depends(project.evidence_dir)
        t, rep = timed(lambda mode=mode: run(reuse=mode != "force"))
        assert all(v.outcome == PROVEN for v in rep.verdicts if v.patch in proven), rep
        times[mode] = t
        reproved[mode] = sum(1 for v in rep.verdicts if v.patch in proven and not v.reused)
        print(f"  {mode}: " + "; ".join(f"{v.patch[:4]} {v.reason}" for v in rep.verdicts), flush=True)
    print(f"\nedit of patch {n} ({label}: {load_series(project.patches_dir).patches[n - 1].name})")
    print(row(f"verify, earlier proofs carried ({reproved['affected']} re-proven)", times["affected"]))
    print(row(f"verify as before: changed trees ({reproved['before']} re-proven)", times["before"]))
    print(row(f"verify --no-reuse ({reproved['force']} re-proven)", times["force"]))
    print(f"before / carried = {times['before'] / times['affected']:.1f}x; "
          f"--no-reuse / carried = {times['force'] / times['affected']:.1f}x", flush=True)


def synthetic(base: Path, n: int, tests: int) -> None:
    root, edits = make_series(base, n, tests)
    project = load_project(root=root, cache_dir=base / "cache")
    apply(project)
    t_cold, cold = timed(lambda: verify(project, backends=["cpu"]))
    proven = [v.patch for v in cold.verdicts if v.outcome == PROVEN]
    assert len(proven) == tests, [(v.patch, v.outcome, v.reason) for v in cold.verdicts]
    print(f"{n} patches, {tests} with their own test program; cold verify {t_cold:.1f} s", flush=True)
    pristine = base / "evidence-proven"
    shutil.copytree(project.evidence_dir, pristine)
    patches = base / "patches-proven"
    shutil.copytree(project.patches_dir, patches)
    for label, k in edits.items():
        shutil.rmtree(project.patches_dir)
        shutil.copytree(patches, project.patches_dir)
        edit(root, k)
        compare(project, label, k, pristine, proven, lambda reuse: verify(project, backends=["cpu"], reuse=reuse))


def real(base: Path, cache: Path | None, jobs: int) -> None:
    root = scratch_project(base)
    project = load_project(root=root, state_dir=root / ".patchset", cache_dir=cache or default_cache_dir())
    apply(project)

    def run(reuse: bool = True) -> VerifyReport:
        return verify(project, ["2", "3"], backends=["cpu"], reuse=reuse, jobs=jobs)

    t_cold, cold = timed(run)
    proven = [v.patch for v in cold.verdicts if v.outcome == PROVEN]
    print(f"real pin, verify 2 3 --backend cpu: cold {t_cold:.1f} s: "
          + ", ".join(f"{v.patch[:4]} {v.outcome}" for v in cold.verdicts), flush=True)
    pristine = base / "evidence-proven"
    shutil.copytree(project.evidence_dir, pristine)
    compare(project, "the Metal fix, outside the CPU programs", edit_real(root), pristine, proven, run)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("-n", type=int, default=40, help="patches in the series")
    ap.add_argument("--tests", type=int, default=6, help="patches with their own test program")
    ap.add_argument("--real", action="store_true", help="the real pin and series (heavy, see above)")
    ap.add_argument("--cache", type=Path, help="--real: PATCHSET_CACHE holding the pin")
    ap.add_argument("-j", type=int, default=2, help="--real: build jobs")
    args = ap.parse_args()
    base = tempdir("patchset-bench-affected-")
    if not args.real:
        os.environ["CCACHE_DIR"] = str(base / "ccache")  # its own compiler cache, gone with it
    try:
        if args.real:
            real(base, args.cache, args.j)
        else:
            synthetic(base, args.n, args.tests)
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()

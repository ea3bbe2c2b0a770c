"""Verify speed on the real pin: `patchset verify --backend cpu` cold and warm, against a naive run
that builds every tree from scratch in a new folder (no shared build folder, no compiler cache):
each tree gets the standard build (`patchset build`'s minimal set: ggml, test-opt and
test-backend-ops) and then the patch's tests. For transparency a second naive run builds only
the programs each tree's tests need. Prints times and ratios from one run.

Targets on a 2-core machine: cold under 5 minutes, warm (nothing changed) under 30 s, naive at
least 3x slower than cold.

The hunks row: `verify 2 3 --hunks --backend cpu` from a cold build folder and compiler cache
(patches 2 and 3: every tree of their proofs plus one tree per hunk of their fixes) against the
naive cost of the same trees: each built from scratch in a new folder (only the programs its tests
need, no compiler cache) and its tests run, with the time limit verify gives them. Printed: the
ratio for every tree of the run, and the stricter one of the reverted trees alone against the
whole run (verify's total includes the proof trees). Target: naive at least 5x slower. `--sample N`
builds only N of the reverted trees from scratch, evenly spread, and scales their time to all of
them (printed as an estimate).
Each hunks-row line also gives the CPU time (user + system, this process and the builds it ran): on
a shared machine the load can change between the two measurements, the CPU-time ratio compares the
work itself. `--evidence-out DIR` keeps the hunks run's evidence files (JSON and MD per patch).
Usage: python benchmarks/verify.py [--cache DIR] [--hunks-only] [--sample N] [--evidence-out DIR]
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
from pathlib import Path

from _common import ROOT, cpu_now, row, scratch_project, tempdir, timed

sys.path.insert(0, str(ROOT))

from builder.compile import testrun
from builder.compile.cmakebuild import DEFAULT_PROGRAMS, BuildSpec, build
from builder.project import load_project
from builder.prove.backends_here import available_backends
from builder.prove.runner import invocation
from builder.prove.verifier import HUNK_TEST_TIMEOUT_MIN_S
from builder.prove.verify import verify
from builder.series.load import load_series


def naive(project, trees: list[tuple[str, str, list]], base: Path, standard: bool,
          timeout: float | None = testrun.DEFAULT_TIMEOUT_S) -> None:
    """Every tree exported to a new folder and built from nothing, then its tests run (each test
    program stopped after `timeout`, as verify stops it)."""
    for i, (label, commit, tests) in enumerate(trees):
        src = base / f"naive-{i}"
        src.mkdir()
        archive = subprocess.run(["git", "-C", str(project.work_repo), "archive", commit], check=True,
                                 capture_output=True).stdout
        subprocess.run(["tar", "-x", "-C", str(src)], input=archive, check=True)
        needed = tuple(dict.fromkeys(t.program for t in tests))
        programs = tuple(dict.fromkeys((*DEFAULT_PROGRAMS, *needed))) if standard else needed
        r = build(BuildSpec(src, base / f"naive-{i}-build", "cpu", "minimal", programs, use_ccache=False,
                            build_targets=() if standard else programs))
        if r.ok:
            for t in tests:
                testrun.run_program(r.bin_dir, invocation(t, "cpu"), base / f"naive-{i}-{t.program}.log",
                                    timeout=timeout)
        print(f"  naive {label}: build {'ok' if r.ok else 'failed (as expected for a build-fails proof)'}"
              f" in {r.duration_s:.1f}s", flush=True)
        shutil.rmtree(src)
        shutil.rmtree(base / f"naive-{i}-build")


def _proof_trees(project, patch) -> list[tuple[str, str, list]]:
    """The before, after and mutation trees verify built for `patch`, from the refs it leaves."""
    tests = [t for t in patch.meta.tests if t.runs_on("cpu", patch.meta.backends)]
    kinds = ("before", "after", "mutation", *[f"mutation-{i}" for i in range(2, len(patch.meta.mutation) + 1)])
    trees = []
    for kind in kinds:
        ref = f"refs/patchset/verify/{patch.index:04d}/{kind}"
        commit = subprocess.run(["git", "-C", str(project.work_repo), "rev-parse", "--verify", "-q", ref],
                                capture_output=True, text=True, check=False).stdout.strip()
        if commit:
            trees.append((f"{patch.name[:4]} {kind}", commit, tests))
    return trees


def hunks_row(project, base: Path, sample: int | None, evidence_out: Path | None = None) -> None:
    """verify --hunks of patches 2 and 3 from a cold build folder, against each of its trees from scratch."""
    cpu0 = cpu_now()
    t_hunks, rep = timed(lambda: verify(project, ["2", "3"], backends=["cpu"], hunks=True))
    c_hunks = cpu_now() - cpu0
    if evidence_out:
        for v in rep.verdicts:
            for f in (v.evidence_json, v.evidence_md):
                if f:
                    (evidence_out / v.patch).mkdir(parents=True, exist_ok=True)
                    shutil.copy2(f, evidence_out / v.patch / f.name)
    reverted, proofs = [], []
    for v in rep.verdicts:
        patch = load_series(project.patches_dir).by_name(v.patch)
        tests = [t for t in patch.meta.tests if t.runs_on("cpu", patch.meta.backends)]
        print(f"{v.patch[:4]}: {v.outcome}: {v.reason}", flush=True)
        reverted += [(f"{v.patch[:4]} {h['file']}:{h['lines']}", h["commit"], tests) for h in v.hunks if h["commit"]]
        proofs += _proof_trees(project, patch)
    chosen = reverted
    if sample and sample < len(reverted):
        step = len(reverted) / sample
        chosen = [reverted[int(i * step)] for i in range(sample)]
    os.environ["CCACHE_DISABLE"] = "1"
    cpu0 = cpu_now()
    # a reverted tree's test can hang (a loop that never ends): stopped as verify --hunks stops it
    t_naive, _ = timed(lambda: naive(project, chosen, base, standard=False, timeout=HUNK_TEST_TIMEOUT_MIN_S))
    c_naive = (cpu_now() - cpu0) * len(reverted) / len(chosen)
    cpu0 = cpu_now()
    t_proofs, _ = timed(lambda: naive(project, proofs, base, standard=False))
    c_proofs = cpu_now() - cpu0
    os.environ.pop("CCACHE_DISABLE")
    scaled = t_naive * len(reverted) / len(chosen)
    est = f", estimated from {len(chosen)}" if len(chosen) < len(reverted) else ""
    every, c_every = scaled + t_proofs, c_naive + c_proofs
    print(f"verify --hunks 2 3 --backend cpu on the real pin: {len(proofs)} proof trees, "
          f"{len(reverted)} reverted trees")
    print(row("verify --hunks 2 3, cold build folder and ccache", t_hunks, f"cpu {c_hunks:.0f} s"))
    print(row(f"naive: each reverted tree from scratch ({len(reverted)}{est})", scaled, f"cpu {c_naive:.0f} s"))
    print(row(f"naive: each proof tree from scratch ({len(proofs)})", t_proofs, f"cpu {c_proofs:.0f} s"))
    print(f"naive / verify --hunks, every tree of the run: {every / t_hunks:.1f}x wall, {c_every / c_hunks:.1f}x cpu"
          "   (target >= 5x)")
    print(f"naive / verify --hunks, the reverted trees alone against the whole run: {scaled / t_hunks:.1f}x wall, "
          f"{c_naive / c_hunks:.1f}x cpu")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--cache", help="PATCHSET_CACHE holding the pin (else fetched into a temporary one)")
    ap.add_argument("--hunks-only", action="store_true", help="only the hunks row")
    ap.add_argument("--sample", type=int, help="hunks row: build only N reverted trees from scratch and scale")
    ap.add_argument("--evidence-out", type=Path, help="hunks row: copy its evidence files (per patch) here")
    args = ap.parse_args()
    base = tempdir("patchset-bench-verify-")
    os.environ["CCACHE_DIR"] = str(base / "ccache")  # a cold compiler cache for the cold run
    try:
        root = scratch_project(base)
        project = load_project(root=root, state_dir=root / ".patchset",
                               cache_dir=Path(args.cache) if args.cache else base / "cache")
        if args.hunks_only:
            hunks_row(project, base, args.sample, args.evidence_out)
            return
        t_cold, cold = timed(lambda: verify(project, backends=["cpu"]))
        t_warm, warm = timed(lambda: verify(project, backends=["cpu"]))
        t_rerun, rerun = timed(lambda: verify(project, backends=["cpu"], reuse=False))
        for label, rep in (("cold", cold), ("warm", warm), ("re-run", rerun)):
            print(f"{label}: " + ", ".join(f"{v.patch[:4]} {v.outcome}" for v in rep.verdicts), flush=True)
        # the trees the cold run built, in the same order, for the naive path
        series = load_series(project.patches_dir)
        trees = []
        for p in series.patches:
            tests = [t for t in p.meta.tests if t.runs_on("cpu", p.meta.backends)]
            if not tests:
                continue
            kinds = ("before", "after", "mutation", *[f"mutation-{i}" for i in range(2, len(p.meta.mutation) + 1)])
            for kind in kinds if "cpu" in p.meta.backends else ("after",):
                ref = f"refs/patchset/verify/{p.index:04d}/{kind}"
                commit = subprocess.run(["git", "-C", str(project.work_repo), "rev-parse", "--verify", "-q", ref],
                                        capture_output=True, text=True, check=False).stdout.strip()
                if commit:
                    trees.append((f"{p.name[:4]} {kind}", commit, tests))
        os.environ["CCACHE_DISABLE"] = "1"
        t_naive, _ = timed(lambda: naive(project, trees, base, standard=True))
        t_naive_min, _ = timed(lambda: naive(project, trees, base, standard=False))
        print(f"patchset verify --backend cpu on the real pin ({len(trees)} trees built; backends here: "
              f"{', '.join(available_backends())})")
        print(row("verify, cold (empty build folder and ccache)", t_cold, "target < 300 s"))
        print(row("verify, warm (nothing changed: evidence reused)", t_warm, "target < 30 s"))
        print(row("verify, warm with --no-reuse (every tree rebuilt)", t_rerun))
        print(row("naive: every tree from scratch, standard build", t_naive))
        print(row("naive: every tree from scratch, only its tests' programs", t_naive_min))
        print(f"naive / cold = {t_naive / t_cold:.1f}x   (target >= 3x); "
              f"with only the tests' programs {t_naive_min / t_cold:.1f}x")
        os.environ.pop("CCACHE_DISABLE")
        shutil.rmtree(root / ".patchset" / "build", ignore_errors=True)
        shutil.rmtree(root / ".patchset" / "evidence", ignore_errors=True)
        os.environ["CCACHE_DIR"] = str(base / "ccache-hunks")
        hunks_row(project, base, args.sample, args.evidence_out)
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()

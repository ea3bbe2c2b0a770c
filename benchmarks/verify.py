"""Verify speed on the real pin: `patchset verify --backend cpu` cold and warm, against a naive run
that builds every tree from scratch in a new folder (no shared build folder, no compiler cache):
each tree gets the standard build (`patchset build`'s minimal set: ggml, test-opt and
test-backend-ops) and then the patch's tests. For transparency a second naive run builds only
the programs each tree's tests need. Prints times and ratios from one run.

Targets on a 2-core machine: cold under 5 minutes, warm (nothing changed) under 30 s, naive at
least 3x slower than cold.
Usage: python benchmarks/verify.py [--cache DIR]
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
from pathlib import Path

from _common import ROOT, row, scratch_project, tempdir, timed

sys.path.insert(0, str(ROOT))

from builder.build import testrun
from builder.build.cmakebuild import DEFAULT_PROGRAMS, BuildSpec, build
from builder.project import load_project
from builder.prove.verify import _invocation, available_backends, verify
from builder.series.model import load_series


def naive(project, trees: list[tuple[str, str, list]], base: Path, standard: bool) -> None:
    """Every tree exported to a new folder and built from nothing, then its tests run."""
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
                testrun.run_program(r.bin_dir, _invocation(t, "cpu"), base / f"naive-{i}-{t.program}.log")
        print(f"  naive {label}: build {'ok' if r.ok else 'failed (as expected for a build-fails proof)'}"
              f" in {r.duration_s:.1f}s", flush=True)
        shutil.rmtree(src)
        shutil.rmtree(base / f"naive-{i}-build")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--cache", help="PATCHSET_CACHE holding the pin (else fetched into a temporary one)")
    args = ap.parse_args()
    base = tempdir("patchset-bench-verify-")
    os.environ["CCACHE_DIR"] = str(base / "ccache")  # a cold compiler cache for the cold run
    try:
        root = scratch_project(base)
        project = load_project(root=root, state_dir=root / ".patchset",
                               cache_dir=Path(args.cache) if args.cache else base / "cache")
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
            kinds = ("before", "after", "mutation") if "cpu" in p.meta.backends else ("after",)
            for kind in kinds:
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
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()

"""Build speed on the real pin: the minimal path (ggml + the two test programs, our CMake project)
against the tree's own full CMake building the same two programs, both cold and without ccache,
then the warm no-op build. Prints both times and their ratio from one run.

Target on a 2-core machine: the minimal path at least 5x faster than the full path, cold.
Usage: python benchmarks/build.py [--cache DIR] [--jobs N]
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys

from _common import ROOT, applied_project, row, tempdir, timed

sys.path.insert(0, str(ROOT))

from builder.compile.cmakebuild import DEFAULT_PROGRAMS, BuildSpec, build


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--cache", help="PATCHSET_CACHE holding the pin (else fetched into a temporary one)")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 2)
    args = ap.parse_args()
    base = tempdir("patchset-bench-build-")
    os.environ["CCACHE_DISABLE"] = "1"  # cold means cold: no compiler cache on either path
    try:
        project = applied_project(base, args.cache)
        src = project.work_repo
        minimal = BuildSpec(src, base / "minimal", "cpu", "minimal", DEFAULT_PROGRAMS, jobs=args.jobs,
                            use_ccache=False)
        full = BuildSpec(src, base / "full", "cpu", "full", DEFAULT_PROGRAMS, jobs=args.jobs, use_ccache=False,
                         build_targets=DEFAULT_PROGRAMS)
        t_min, r_min = timed(lambda: build(minimal))
        t_full, r_full = timed(lambda: build(full))
        t_noop, r_noop = timed(lambda: build(minimal))
        for r in (r_min, r_full, r_noop):
            if not r.ok:
                raise SystemExit(f"build failed: {r.first_error} (log {r.log})")
        print(f"patchset build on the real pin with the series, {args.jobs} jobs, no ccache")
        print(row(f"minimal, cold ({r_min.steps} steps)", t_min))
        print(row(f"full tree CMake, same two programs, cold ({r_full.steps} steps)", t_full))
        print(row("minimal, warm no-op", t_noop, "target < 2 s" + (" (ninja: no work)" if r_noop.noop else "")))
        print(f"full / minimal, cold = {t_full / t_min:.1f}x   (target >= 5x)")
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()

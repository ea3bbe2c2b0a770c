"""The floor under a cold `patchset all`: its build phase alone, measured.

`patchset all` builds the patched tree as `patchset build` does (the series' test programs, the tree's Release
flags; libllama and the llama-common sources test-llama-archs reaches, at -O0) before any proof runs. This
script builds exactly that target set cold (no compiler cache, a fresh folder), with the machine's default
compiler and with clang where there is one, and prints each build's wall time, its CPU seconds (the compiler
processes included) and the shortest wall time those CPU seconds allow on this machine's cores, against the
120 s goal of issue 33 for the whole of `all` (fetch, build, tests and every proof).

Usage: python benchmarks/first_run_floor.py [--cache DIR] [--write]
(--write: also into benchmarks/results/first-run-floor.txt, with the command and the date)
"""

from __future__ import annotations

import argparse
import datetime
import os
import shutil
import sys

from _common import ROOT, applied_project, cpu_now, tempdir, timed

sys.path.insert(0, str(ROOT))

from builder.compile.cmakebuild import BuildSpec, build
from builder.prove.pipeline import programs_for
from builder.series.load import load_series

GOAL_S = 120.0
RESULT = ROOT / "benchmarks" / "results" / "first-run-floor.txt"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--cache", help="PATCHSET_CACHE holding the pin (else fetched into a temporary one)")
    ap.add_argument("--write", action="store_true", help=f"also write {RESULT.relative_to(ROOT)}")
    args = ap.parse_args()
    lines: list[str] = []

    def say(line: str) -> None:
        print(line, flush=True)
        lines.append(line)

    cores = len(os.sched_getaffinity(0))
    base = tempdir("patchset-bench-floor-")
    os.environ["CCACHE_DISABLE"] = "1"
    os.environ.pop("PATCHSET_CMAKE_ARGS", None)
    try:
        project = applied_project(base, args.cache)
        src = project.work_repo
        programs = programs_for(src, load_series(project.patches_dir))
        compilers = [("default (cc, c++)", ())]
        if shutil.which("clang") and shutil.which("clang++"):
            compilers.append(("clang", ("-DCMAKE_C_COMPILER=clang", "-DCMAKE_CXX_COMPILER=clang++")))
        say(f"`patchset build` of the series' tree, cold, no ccache, {cores} cores: {', '.join(programs)}")
        for i, (label, extra) in enumerate(compilers):
            spec = BuildSpec(src, base / f"build-{i}", "cpu", "minimal", programs, jobs=cores, use_ccache=False,
                             extra_cmake_args=extra)
            cpu0 = cpu_now()
            wall, result = timed(lambda spec=spec: build(spec))
            cpu = cpu_now() - cpu0
            if not result.ok:
                raise SystemExit(f"{label}: build failed: {result.failure} (log {result.log})")
            floor = cpu / cores
            say(f"{label:<20} wall {wall:7.1f} s   cpu {cpu:7.1f} s   floor on {cores} cores {floor:6.1f} s   "
                  f"= {floor / GOAL_S:.2f}x the {GOAL_S:.0f} s goal for all of `all`")
        if args.write:
            head = (f"# written by `python benchmarks/first_run_floor.py --write` on {datetime.date.today()}; "
                    f"{os.cpu_count()} CPUs, nothing else running\n")
            RESULT.write_text(head + "".join(f"{line}\n" for line in lines))
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()

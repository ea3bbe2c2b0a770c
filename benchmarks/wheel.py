"""Wheel build speed on the real pin, side by side in one run:

1. the bindings' own `pip wheel` of the unmodified sdist (llama-cpp-python 0.3.36), cold;
2. `patchset wheel`, cold (a new state folder: no staged project, no build folder);
3. `patchset wheel` again after one patch changed the way a developer changes it (an edit to the
   fix in the work repository, committed, `patchset refresh`): only what the edit touches compiles.

Both cold builds use the same CMake flags and no ccache (CCACHE_DISABLE, GGML_CCACHE=OFF), the same
number of jobs and the same Python environment (pip without build isolation, so neither pays for
a download of its build tools). Targets on 2 cores: cold no slower than pip wheel; the rebuild at
least 3x faster than cold.

Each row gives the wall time and the CPU time of the processes it ran (user + system of the
children): on a machine that other work shares, the load can change between the rows and move the
wall-time ratio; the CPU-time ratio compares the work itself.

Usage: python benchmarks/wheel.py [--cache DIR] [--jobs N] [--with-mtmd]
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from _common import ROOT, cpu_now, patchset, row, scratch_project, tempdir

sys.path.insert(0, str(ROOT))

from builder.gitrepo import COMMITTER
from builder.project import load_project
from builder.series.apply import apply
from builder.series.load import load_series
from builder.series.workrepo import WorkRepo
from builder.upstream import mirror
from builder.upstream.pin import SdistSource, load_pin


def change_one_patch(project_root: Path, work: Path, file: str) -> str:
    """Edit `file` in the commit of the last patch that changes it, replay the later patches, refresh."""
    series = load_series(project_root / "patches")
    index = max(i for i, p in enumerate(series.patches) if file in p.files)
    patch = series.patches[index]
    git = WorkRepo(work).git
    later = git.commits(f"patched~{len(series.patches) - index - 1}..patched")
    target = f"patched~{len(series.patches) - index - 1}"
    git.run("checkout", "--quiet", "--detach", target)
    path = work / file
    path.write_text(path.read_text() + "// benchmark: one patch changed\n")
    git.run("commit", "--quiet", "--amend", "--no-edit", "-a", env=COMMITTER)
    for c in later:
        git.run("cherry-pick", c, env=COMMITTER)
    git.run("checkout", "--quiet", "-B", "patched")
    patchset(project_root, "refresh")
    return patch.name


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--cache", help="PATCHSET_CACHE holding the pin (else fetched into a temporary one)")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 2)
    ap.add_argument("--with-mtmd", action="store_true", help="also build the multimodal library (the default "
                    "of both builds; left out here unless asked, as in the integration test)")
    ap.add_argument("--change", default="ggml/src/ggml-opt.cpp", help="file whose patch the rebuild changes")
    args = ap.parse_args()
    base = tempdir("patchset-bench-wheel-")
    try:
        root = scratch_project(base)
        cache = Path(args.cache) if args.cache else base / "cache"
        project = load_project(root=root, state_dir=root / ".patchset", cache_dir=cache)
        apply(project)
        pin = load_pin(project.pin_file)
        src = next(s for s in pin.sources if isinstance(s, SdistSource))
        sdist = mirror.download(src, cache / "downloads", cache / "tmp")

        flags = ["-DGGML_NATIVE=OFF", "-DGGML_CCACHE=OFF"] + ([] if args.with_mtmd else ["-DLLAVA_BUILD=OFF"])
        env = {**os.environ, "CCACHE_DISABLE": "1", "CMAKE_BUILD_PARALLEL_LEVEL": str(args.jobs),
               "CMAKE_ARGS": " ".join(flags), "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
        start, cpu0 = time.perf_counter(), cpu_now()
        subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-build-isolation", "--no-deps", "--no-cache-dir",
                        "-w", str(base / "pip-dist"), str(sdist)], check=True, env=env,
                       stdout=subprocess.DEVNULL)
        t_pip, c_pip = time.perf_counter() - start, cpu_now() - cpu0
        print(row("pip wheel of the unmodified sdist, cold", t_pip, f"cpu {c_pip:.0f} s"), flush=True)

        wheel_args = ["wheel", "--no-ccache", "-j", str(args.jobs), "--out", str(base / "dist")]
        if not args.with_mtmd:
            wheel_args.append("--no-mtmd")
        env_ps = {"CCACHE_DISABLE": "1"}
        cpu0 = cpu_now()
        t_cold = patchset(root, *wheel_args, env=env_ps)
        c_cold = cpu_now() - cpu0
        print(row("patchset wheel, cold", t_cold, f"cpu {c_cold:.0f} s"), flush=True)
        changed = change_one_patch(root, project.work_repo, args.change)
        cpu0 = cpu_now()
        t_re = patchset(root, *wheel_args, env=env_ps)
        c_re = cpu_now() - cpu0

        print(f"llama-cpp-python wheel on the real pin, {args.jobs} jobs, no ccache, "
              f"{'with' if args.with_mtmd else 'without'} mtmd; flags: {' '.join(flags)}")
        print(row("pip wheel of the unmodified sdist, cold", t_pip, f"cpu {c_pip:.0f} s"))
        print(row("patchset wheel, cold", t_cold, f"cpu {c_cold:.0f} s; patchset/pip = {t_cold / t_pip:.2f} wall, "
                  f"{c_cold / c_pip:.2f} cpu   (target <= 1.0)"))
        print(row(f"patchset wheel after changing {changed[:22]}", t_re,
                  f"cpu {c_re:.0f} s; cold/rebuild = {t_cold / t_re:.1f}x wall, {c_cold / max(c_re, 0.01):.1f}x cpu"
                  "   (target >= 3x)"))
        print(f"(the patch changed {args.change}; see the build log in the state folder for what was compiled)")
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()

"""A tree switch that keeps the times of files changed in comments only, against a plain `git checkout`.

On the real pin, patch 3's last mutation tree is built in two fresh worktrees and build folders (the
programs of patch 3's tests: test-alloc and test-opt, no compiler cache, so that each build compiles
what it must); then each is switched to patch 3's before tree, which lacks the patch's one line of
comment in ggml-backend.h and its fix in ggml-backend.cpp and ggml-opt.cpp: one by verify's switch
(builder.prove.trees.checkout_detached, which keeps that header's time), one by a plain
`git checkout`, and each built again. Prints both rebuilds' wall and CPU seconds and their ratio.

    python benchmarks/comment_only.py [--cache DIR] [--jobs N]
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys

from _common import ROOT, applied_project, cpu_now, tempdir, timed

sys.path.insert(0, str(ROOT))

from builder.compile.cmakebuild import BuildSpec, build
from builder.prove.trees import checkout_detached, make_trees
from builder.series.load import load_series
from builder.series.workrepo import WorkRepo
from builder.upstream.pin import load_pin


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cache", default=os.environ.get("PATCHSET_CACHE"), help="a PATCHSET_CACHE holding the pin")
    ap.add_argument("--jobs", "-j", type=int, default=os.cpu_count())
    args = ap.parse_args()
    base = tempdir("patchset-bench-comment-only-")
    try:
        project = applied_project(base, args.cache)
        work = WorkRepo(project.work_repo)
        series = load_series(project.patches_dir)
        trees = make_trees(work.git, load_pin(project.pin_file).commit, series, project.patches_dir)[3]
        programs = ("test-alloc", "test-opt")
        results = {}
        for how in ("kept", "plain"):
            src, out = base / f"src-{how}", base / f"build-{how}"
            spec = BuildSpec(source=src, build_dir=out, programs=programs, build_targets=programs, jobs=args.jobs,
                             use_ccache=False)
            checkout_detached(work.git, src, trees.mutations[-1])
            first = build(spec)
            assert first.ok, first.log
            if how == "kept":
                kept = checkout_detached(work.git, src, trees.before)
            else:
                subprocess.run(["git", "-C", str(src), "checkout", "--quiet", "--detach", "--force", trees.before],
                               check=True)
                kept = ()
            cpu = cpu_now()
            wall, again = timed(lambda: build(spec))  # noqa: B023 (called at once)
            assert again.ok, again.log
            results[how] = (wall, cpu_now() - cpu, again.steps, kept)
        print(f"patch 3's before tree after its last mutation, one build folder, {args.jobs} job(s), no compiler cache")
        for how, (wall, cpu, steps, kept) in results.items():
            what = f"times kept: {', '.join(kept)}" if kept else "every changed file rewritten"
            print(f"  {how:<6} {wall:7.1f} s wall {cpu:7.1f} CPU-s  {steps:4d} build steps  ({what})")
        print(f"  plain / kept: {results['plain'][0] / results['kept'][0]:.1f}x wall, "
              f"{results['plain'][1] / max(results['kept'][1], 0.01):.1f}x CPU")
    finally:
        shutil.rmtree(base, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""What patch 1's check costs on the host: the time per node of computing a llama-sized graph on the Metal
backend, with and without patch 1, measured side by side in one run.

Two trees of the real pin are built by the project's own machinery (a scratch project's `apply`, a worktree of
each commit, `cmakebuild.build` for the metal-linux backend at the tree's Release flags, with the compiler
cache): the pin with patch 1 and the pin without it. Into each, as one of its test programs, goes
`benchmarks/data/metal_encode.cpp`: a graph of 32 layers x 30 nodes (960) of ADD, CPY, SET and CONT on 32x4
tensors, computed many times with `ggml_backend_graph_compute`, each compute timed on its own. The two programs
run interleaved (without, with, without, with, ...) for several rounds; a run's figure is its fastest compute
(on a shared machine the least disturbed one); printed: the medians over the rounds, the paired difference per
node with its range over the rounds, and the ratio.

What this is: host-side encode and dispatch cost (the tree's ggml-metal .m and .cpp, compiled unchanged) on
the metal-linux stand-in (libobjc2 and GNUstep base, kernels run by CPU models), not Apple's driver or GPU.
A difference whose range over the rounds includes zero is reported as "no measurable difference".

Usage: python benchmarks/metal_encode.py [--rounds 7] [--iterations 300] [-j 2] [--cache DIR] [--workdir DIR]
       [--write]   (--write: the output also goes to benchmarks/results/metal-encode.txt; --workdir keeps the
       trees and builds there for a later run; needs the objc toolchain, `patchset toolchain objc`)
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

from _common import ROOT, scratch_project, tempdir

sys.path.insert(0, str(ROOT))

from builder.compile.cmakebuild import BuildSpec, build
from builder.fsutil import atomic_write_text
from builder.gitrepo import GitRepo
from builder.project import default_cache_dir, load_project
from builder.prove.trees import checkout_detached
from builder.series.apply import apply

PROGRAM = "patchset-bench-metal-encode"
SOURCE = ROOT / "benchmarks" / "data" / "metal_encode.cpp"
RESULT = ROOT / "benchmarks" / "results" / "metal-encode.txt"
LABEL = ("host-side encode+dispatch cost on the metal-linux stand-in (the tree's ggml-metal .m/.cpp on "
         "libobjc2/GNUstep, kernels run by CPU models), not Apple's driver or GPU")


def parse_line(text: str) -> dict[str, float]:
    """The program's `key=value` line."""
    words = dict(w.split("=", 1) for w in text.split() if "=" in w)
    return {k: float(v) for k, v in words.items()}


def run_once(bin_dir: Path, iterations: int) -> dict[str, float]:
    r = subprocess.run([str(bin_dir / PROGRAM), str(iterations)], cwd=bin_dir, capture_output=True,
                       text=True, timeout=600, check=False)
    if r.returncode != 0:
        raise SystemExit(f"{bin_dir / PROGRAM} exited {r.returncode}: {(r.stderr or r.stdout).strip()[-400:]}")
    return parse_line(r.stdout.strip().splitlines()[-1])


def build_tree(git: GitRepo, base: Path, name: str, commit: str, jobs: int) -> tuple[Path, float]:
    src = base / f"src-{name}"
    checkout_detached(git, src, commit)
    shutil.copyfile(SOURCE, src / "tests" / f"{PROGRAM}.cpp")
    start = time.perf_counter()
    res = build(BuildSpec(source=src, build_dir=base / f"build-{name}", backend="metal-linux", targets="minimal",
                          programs=(PROGRAM,), build_type="Release", jobs=jobs, source_commit=commit))
    if not res.ok:
        raise SystemExit(f"build of the tree {name} failed: {res.failure} (log: {res.log})")
    return res.bin_dir, time.perf_counter() - start


def command_line(args: argparse.Namespace) -> str:
    niceness = os.nice(0)
    words = [*(["nice", "-n", str(niceness)] if niceness else []), "python", "benchmarks/metal_encode.py",
             "--rounds", str(args.rounds), "--iterations", str(args.iterations), "-j", str(args.j)]
    if args.cache:
        words += ["--cache", "<DIR>"]
    if args.workdir:
        words += ["--workdir", "<DIR>"]
    return " ".join(words + (["--write"] if args.write else []))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=7, help="rounds, each runs both programs once")
    ap.add_argument("--iterations", type=int, default=300, help="graph computes timed per run")
    ap.add_argument("-j", type=int, default=2, help="build jobs")
    ap.add_argument("--cache", type=Path, help="PATCHSET_CACHE holding the pin (default: the user's)")
    ap.add_argument("--workdir", type=Path, help="keep the scratch project, trees and builds here")
    ap.add_argument("--write", action="store_true", help=f"also write {RESULT.relative_to(ROOT)}")
    args = ap.parse_args()
    base = args.workdir.resolve() if args.workdir else tempdir("patchset-bench-metal-encode-")
    t0 = time.perf_counter()
    out: list[str] = [command_line(args)]

    def say(line: str = "") -> None:
        out.append(line)
        print(line, flush=True)

    try:
        base.mkdir(parents=True, exist_ok=True)
        root = base / "project"
        if not root.exists():
            root = scratch_project(base)
        project = load_project(root=root, state_dir=root / ".patchset", cache_dir=args.cache or default_cache_dir())
        applied = apply(project)
        git = GitRepo(project.work_repo)
        pin = applied.upstream or git.run("rev-parse", "HEAD~5").stdout.strip()
        with_p1 = git.run("rev-list", "--reverse", f"{pin}..HEAD").stdout.split()[0]
        subject = git.run("log", "-1", "--format=%s", with_p1).stdout.strip()
        pin_subject = git.run("log", "-1", "--format=%s", pin).stdout.strip()
        trees = {}
        built = {}
        for name, commit in (("without", pin), ("with", with_p1)):
            trees[name], built[name] = build_tree(git, base, name, commit, args.j)
        print(f"built: without patch 1 {built['without']:.0f} s, with {built['with']:.0f} s", flush=True)

        runs: dict[str, list[dict[str, float]]] = {"without": [], "with": []}
        for _ in range(args.rounds):
            for name in ("without", "with"):
                runs[name].append(run_once(trees[name], args.iterations))
        nodes = int(runs["with"][0]["nodes"])
        node = {k: [r["min_graph_ns"] / nodes for r in v] for k, v in runs.items()}
        typical = {k: statistics.median(r["median_graph_ns"] / nodes for r in v) for k, v in runs.items()}
        diffs = [w - o for w, o in zip(node["with"], node["without"], strict=True)]
        med = {k: statistics.median(v) for k, v in node.items()}
        d_med, d_lo, d_hi = statistics.median(diffs), min(diffs), max(diffs)
        q1, _, q3 = statistics.quantiles(diffs, n=4) if len(diffs) > 1 else (d_med, d_med, d_med)

        say(f"# {LABEL}")
        say(f"trees: the pin ({pin_subject}), and the pin with patch 1 ({subject}); Release build (-O3) of each "
            "tree's ggml and ggml-metal")
        say(f"graph: {nodes} nodes (32 layers x 30: CPY, ADD, SET, CONT on 32x4 tensors), one Metal buffer")
        say(f"runs: {args.rounds} rounds, each runs the program of the tree without patch 1, then with it; a run "
            f"times {args.iterations} computes one by one, its figure is the fastest (the least disturbed by other "
            "processes)")
        say(f"machine: {platform.machine()}, {os.cpu_count()} cores shared with other work, load average "
            f"{os.getloadavg()[0]:.1f} at the end")
        say("")
        head = "each round (the run's fastest compute)"
        say(f"{'ns per node':<22} {'median':>9}   {head:<50} the runs' medians")
        for name in ("without", "with"):
            say(f"{name + ' patch 1':<22} {med[name]:9.1f}   {' '.join(f'{x:.0f}' for x in node[name]):<50} "
                f"{typical[name]:.0f}")
        say(f"{'with - without':<22} {d_med:+9.1f}   {' '.join(f'{x:+.0f}' for x in diffs):<50} (paired by round)")
        say(f"paired difference per node: median {d_med:+.1f} ns, middle half of the rounds {q1:+.1f} to {q3:+.1f}, "
            f"all rounds {d_lo:+.1f} to {d_hi:+.1f}")
        say(f"per graph: {med['without'] * nodes / 1000:.0f} us without, {med['with'] * nodes / 1000:.0f} us with")
        say("")
        if d_lo <= 0 <= d_hi:
            say(f"result: no measurable difference: the paired difference per node ranges from {d_lo:+.1f} to "
                f"{d_hi:+.1f} ns over the rounds, which includes zero (ratio of the medians "
                f"{med['with'] / med['without']:.3f})")
        else:
            say(f"result: patch 1 {'adds' if d_med > 0 else 'saves'} {abs(d_med):.1f} ns per node "
                f"({d_lo:+.1f} to {d_hi:+.1f} over the rounds), {100 * d_med / med['without']:+.1f}%; ratio of the "
                f"medians {med['with'] / med['without']:.3f}")
        say(f"(run took {time.perf_counter() - t0:.0f} s, builds included)")
        if args.write:
            atomic_write_text(RESULT, "\n".join(out) + "\n")
            print(f"written: {RESULT.relative_to(ROOT)}")
    finally:
        if not args.workdir:
            shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()

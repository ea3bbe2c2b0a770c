"""The first run of a new user: `patchset all` on a fresh clone with empty caches, sequential and
concurrent side by side, then again warm.

Makes two fresh clones of the project (its committed pin and series; a folder that is no git
repository is copied), each with a patchset cache and a ccache folder of its own, both empty, and
runs `patchset all --json` with the interpreter running this script (nothing is installed): in the
first cold with `--lanes 1` (the proofs one after another), in the second cold with the default
lanes (the proofs at once on one jobserver, and on 8 job slots or more the patched tree's build and
tests beside them: docs/all.md), then warm there with nothing changed. Prints each
phase's seconds side by side; and for each run its wall and CPU seconds (its processes', children
included), and its ratio to the floor: the wall time over the CPU seconds shared by the cores (1.0:
every core busy all the time), with the ratio to the goals (issue 44: cold within 60 s on 16 cores,
260 s on 2; warm within 5 s).

    python benchmarks/first_run.py [--project DIR] [--jobs N] [--backend B] [--keep] [--no-sequential]
                                   [--bundle FILE] [--lanes N]

`--bundle` (a machine without network, such as the GPU host: `patchset fetch --export-bundle FILE`
made elsewhere) puts the pin into each clone's empty cache from that git bundle before its cold run,
untimed: the cold runs then measure everything but the download.

A cold run of this project's series fetches the pin and builds every tree verify needs: minutes.
`--project` takes a small synthetic project (upstream/llama.cpp.toml and patches/) to try the
script itself in seconds.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
WARM_GOAL_S = 5.0


def cold_goal_s(cores: int) -> float:
    """Issue 44's goal for a cold run: 60 s on 16 cores, 260 s on 2."""
    return 60.0 if cores >= 16 else 260.0


def fresh_copy(project: Path, dest: Path) -> Path:
    """A clone of `project` (its committed files), or a copy of its pin and series when it is no git repository."""
    if (project / ".git").exists():
        subprocess.run(["git", "clone", "--quiet", "--no-hardlinks", str(project), str(dest)], check=True)
    else:
        dest.mkdir(parents=True)
        for part in ("upstream", "patches"):
            shutil.copytree(project / part, dest / part)
    return dest


def run_all(project: Path, report: Path, env: dict[str, str], jobs: int | None,
            backend: str, lanes: int | None = None) -> tuple[int, float, float, dict]:
    """`patchset all --json` in a process of its own: exit code, wall seconds, CPU seconds (the process
    and every child it waited for), the JSON document."""
    argv = [sys.executable, "-m", "builder.cli", "--project", str(project), "all", "--backend", backend,
            "--json", str(report)]
    if jobs:
        argv += ["--jobs", str(jobs)]
    if lanes:
        argv += ["--lanes", str(lanes)]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    rc = subprocess.run(argv, env=env, stdout=subprocess.DEVNULL, check=False).returncode
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    data = json.loads(report.read_text()) if report.exists() else {"phases": [], "total_seconds": 0.0}
    return rc, wall, cpu, data


def phase_key(p: dict) -> str:
    return p["name"] + (f" {p['patch']}" if p.get("patch") else "") + (
        f" [{p['backend']}]" if p["name"] == "verify" and p.get("backend") else "")


def cache_text(c: dict | None) -> str:
    return "-" if not c else f"{c['hits']}/{c['misses']}"


def table(runs: list[tuple[str, dict]]) -> list[str]:
    """One row per phase (of the first run), its seconds in each run."""
    by = [{phase_key(p): p for p in data["phases"]} for _, data in runs]
    rows = [f"{'phase':<56} " + " ".join(f"{label[:14]:>14}" for label, _ in runs)]
    for p in runs[0][1]["phases"] if runs else []:
        cells = []
        for found in by:
            q = found.get(phase_key(p))
            cells.append(f"{q['seconds']:8.1f}" + (" reused" if q["reused"] else "       ") if q else f"{'-':>14}")
        rows.append(f"{phase_key(p)[:56]:<56} " + " ".join(f"{c:>14}" for c in cells))
    return rows


def floor_ratio(wall: float, cpu: float, cores: int) -> float:
    """The wall time over the least the CPU seconds allow on `cores` (1.0: every core busy throughout)."""
    return wall / (cpu / cores) if cpu > 0 else float("nan")


def run_line(label: str, rc: int, wall: float, cpu: float, data: dict, cores: int) -> str:
    """One run's wall and CPU seconds, its ratio to the floor and to the goal."""
    goal = WARM_GOAL_S if label == "warm" else cold_goal_s(cores)
    reused = data.get("reused") or {}
    return (f"{label:<10} {wall:7.1f} s wall, {cpu:7.1f} CPU-s, {floor_ratio(wall, cpu, cores):.2f}x the floor "
            f"on {cores} core(s); exit {rc}; {wall / goal:.2f} of the {goal:.0f} s goal; reused "
            f"{reused.get('phases', 0)} of {reused.get('of', 0)} phase(s); ccache {cache_text(data.get('ccache'))}")


def which_builder() -> str:
    """The folder of the `builder` package a `python -m builder.cli` started from here imports."""
    r = subprocess.run([sys.executable, "-c", "import builder, os; print(os.path.dirname(builder.__file__))"],
                       capture_output=True, text=True, check=False)
    return r.stdout.strip() or f"none ({r.stderr.strip().splitlines()[-1] if r.stderr.strip() else 'no output'})"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--project", type=Path, default=ROOT, help="the project to clone (default: this one)")
    ap.add_argument("--jobs", "-j", type=int, help="passed to `patchset all --jobs`")
    ap.add_argument("--backend", default="cpu")
    ap.add_argument("--no-sequential", action="store_true", help="only the concurrent run (cold, then warm)")
    ap.add_argument("--keep", action="store_true", help="keep the clones and their caches (their path is printed)")
    ap.add_argument("--bundle", type=Path, help="the pin as a git bundle, fetched into each empty cache untimed")
    ap.add_argument("--lanes", type=int, help="the concurrent run's lanes (`patchset all --lanes`; default: its own)")
    args = ap.parse_args(argv)
    base = Path(tempfile.mkdtemp(prefix="patchset-first-run-"))
    cores = os.cpu_count() or 1
    # the code the runs import, as they import it (this Python, this folder, this environment): two versions
    # side by side are two folders, and a module imported early (a sitecustomize) once made both the same
    print(f"code: {which_builder()}", flush=True)
    try:
        plan = [] if args.no_sequential else [("sequential", "seq", 1)]
        plan += [("concurrent", "con", args.lanes), ("warm", "con", args.lanes)]
        runs: list[tuple[str, int, float, float, dict]] = []
        for label, clone, lanes in plan:
            project = base / clone / "project"
            if not project.exists():
                fresh_copy(args.project.resolve(), project)
            env = {**os.environ, "PATCHSET_CACHE": str(base / clone / "cache"),
                   "CCACHE_DIR": str(base / clone / "ccache")}
            env.pop("PATCHSET_STATE", None)
            if args.bundle and label != "warm":  # untimed: the cold run then measures all but the download
                subprocess.run([sys.executable, "-m", "builder.cli", "--project", str(project), "fetch", "--bundle",
                                str(args.bundle.resolve())], env=env, stdout=subprocess.DEVNULL, check=True)
            runs.append((label, *run_all(project, base / f"{label}.json", env, args.jobs, args.backend, lanes)))
            # each run's line as it ends: a run stopped from outside (a time limit) still leaves the ones before
            print(run_line(*runs[-1], cores), flush=True)
        pin = f"the pin from {args.bundle.name}, untimed; " if args.bundle else ""
        print(f"first run of {args.project} (backend {args.backend}, jobs {args.jobs or 'default'}, {cores} core(s), "
              f"load average {os.getloadavg()[0]:.1f} at the end); {pin}caches empty at the start: {base}")
        print("\n".join(table([(label, data) for label, _, _, _, data in runs])))
        for run in runs:
            print(run_line(*run, cores))
        return 0 if all(rc in (0, 4, 6) for _, rc, _, _, _ in runs) else 1
    finally:
        if args.keep:
            print(f"kept: {base}")
        else:
            shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())

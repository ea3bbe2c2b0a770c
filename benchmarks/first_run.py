"""The first run of a new user: `patchset all` on a fresh clone with empty caches, then again warm.

Makes a fresh clone of the project (its committed pin and series; a folder that is no git
repository is copied), gives it a patchset cache and a ccache folder of its own, both empty,
and runs `patchset all --json` in it twice with the interpreter running this script (nothing is
installed): cold, then warm with nothing changed. Prints each phase's seconds side by side, the
totals, and the ratio to the goals (issue 33: cold within 120 s, warm within 10 s on 2 cores).

    python benchmarks/first_run.py [--project DIR] [--jobs N] [--backend B] [--keep]

A cold run of this project's series fetches the pin and builds every tree verify needs: minutes.
`--project` takes a small synthetic project (upstream/llama.cpp.toml and patches/) to try the
script itself in seconds.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
COLD_GOAL_S = 120.0
WARM_GOAL_S = 10.0


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
            backend: str) -> tuple[int, float, dict]:
    """`patchset all --json` in a process of its own: exit code, wall seconds, the JSON document."""
    argv = [sys.executable, "-m", "builder.cli", "--project", str(project), "all", "--backend", backend,
            "--json", str(report)]
    if jobs:
        argv += ["--jobs", str(jobs)]
    start = time.perf_counter()
    rc = subprocess.run(argv, env=env, stdout=subprocess.DEVNULL, check=False).returncode
    wall = time.perf_counter() - start
    data = json.loads(report.read_text()) if report.exists() else {"phases": [], "total_seconds": 0.0}
    return rc, wall, data


def phase_key(p: dict) -> str:
    return p["name"] + (f" {p['patch']}" if p.get("patch") else "") + (
        f" [{p['backend']}]" if p["name"] == "verify" and p.get("backend") else "")


def cache_text(c: dict | None) -> str:
    return "-" if not c else f"{c['hits']}/{c['misses']}"


def table(cold: dict, warm: dict) -> list[str]:
    """One row per phase: cold seconds and ccache, warm seconds and whether it was reused."""
    warm_by = {phase_key(p): p for p in warm["phases"]}
    rows = [f"{'phase':<62} {'cold s':>8} {'ccache':>9} {'warm s':>8}  reused"]
    for p in cold["phases"]:
        w = warm_by.get(phase_key(p))
        rows.append(f"{phase_key(p)[:62]:<62} {p['seconds']:8.1f} {cache_text(p.get('ccache')):>9} "
                    f"{w['seconds'] if w else float('nan'):8.1f}  {('yes' if w['reused'] else 'no') if w else '-'}")
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--project", type=Path, default=ROOT, help="the project to clone (default: this one)")
    ap.add_argument("--jobs", "-j", type=int, help="passed to `patchset all --jobs`")
    ap.add_argument("--backend", default="cpu")
    ap.add_argument("--keep", action="store_true", help="keep the clone and its caches (their path is printed)")
    args = ap.parse_args(argv)
    base = Path(tempfile.mkdtemp(prefix="patchset-first-run-"))
    try:
        project = fresh_copy(args.project.resolve(), base / "project")
        env = {**os.environ, "PATCHSET_CACHE": str(base / "cache"), "CCACHE_DIR": str(base / "ccache")}
        env.pop("PATCHSET_STATE", None)
        rc_cold, wall_cold, cold = run_all(project, base / "cold.json", env, args.jobs, args.backend)
        rc_warm, wall_warm, warm = run_all(project, base / "warm.json", env, args.jobs, args.backend)
        print(f"first run of {args.project} (backend {args.backend}, jobs {args.jobs or 'default'}, "
              f"{os.cpu_count()} core(s), load average {os.getloadavg()[0]:.1f} at the end); caches empty at the "
              f"start: {base}")
        print("\n".join(table(cold, warm)))
        for label, rc, wall, data, goal in (("cold", rc_cold, wall_cold, cold, COLD_GOAL_S),
                                            ("warm", rc_warm, wall_warm, warm, WARM_GOAL_S)):
            reused = data.get("reused") or {}
            print(f"{label}: {wall:7.1f} s wall ({data['total_seconds']:.1f} s in `all`), exit {rc}, "
                  f"{wall / goal:.2f} of the {goal:.0f} s goal; reused {reused.get('phases', 0)} of "
                  f"{reused.get('of', 0)} phase(s); ccache {cache_text(data.get('ccache'))}")
        return 0 if rc_cold in (0, 4) and rc_warm in (0, 4) else 1
    finally:
        if args.keep:
            print(f"kept: {base}")
        else:
            shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())

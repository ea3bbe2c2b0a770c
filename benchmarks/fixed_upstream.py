"""What the fixed-upstream check costs on the real series, against `patchset verify` of the same patches
(issue 23: a dry run with the semantic checks costs at most 2x a verify).

Side by side, in one run, each as a user runs it (a new `patchset` process) and each cold: no build folder,
no evidence, and an empty compiler cache of its own (the same ccache state for both: empty):

- `patchset verify` (every patch, every backend this machine has);
- `patchset rebase --onto PIN --dry-run --fixed-upstream --json` onto a later upstream: the pin plus one
  commit that fixes the ACC half of patch 5's bug in its own way (tests/data/fixed-upstream, as the
  integration test makes it), so that patch 5 needs its test on the new tree and on the old one.

Then the dry run again right after the verify, in the same state folder (verify's build folders,
evidence and compiler cache present), as a user runs it before moving the pin.
Prints wall and CPU seconds (user + system of the process and its builds) and the ratios; the verdicts
of the dry run, to show that it answered. The cache given with --cache is copied (the later upstream's
commit is fetched into the copy, not into it).

Usage: python benchmarks/fixed_upstream.py [--cache DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from _common import ROOT, cpu_now, scratch_project, tempdir

sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from helpers import UPSTREAM_FIXES, real_pin_moved_on

from builder.upstream import fetch as upstream
from builder.upstream.pin import load_pin


def run(project: Path, ccache: Path, *args: str) -> tuple[float, float, str, int]:
    """(wall s, cpu s, stdout, exit code) of one `patchset` process with its own compiler cache."""
    env = {**os.environ, "CCACHE_DIR": str(ccache)}
    cpu0, start = cpu_now(), time.perf_counter()
    r = subprocess.run([sys.executable, "-m", "builder.cli", "--project", str(project), *args], env=env,
                       stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, check=False)
    return time.perf_counter() - start, cpu_now() - cpu0, r.stdout, r.returncode


def cold(root: Path) -> None:
    """No build folder, check folder or evidence: what a first run finds."""
    for d in ("build", "evidence", "upstream-check", "verify"):
        shutil.rmtree(root / ".patchset" / d, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--cache", type=Path, help="PATCHSET_CACHE holding the pin (copied; else fetched into a new one)")
    args = ap.parse_args()
    base = tempdir("patchset-bench-fixed-upstream-")
    try:
        cache = base / "cache"
        if args.cache:
            shutil.copytree(args.cache / "upstream", cache / "upstream", symlinks=True)
        upstream.fetch(cache, load_pin(ROOT / "upstream" / "llama.cpp.toml"))
        os.environ["PATCHSET_CACHE"] = str(cache)
        (pin,) = real_pin_moved_on(cache, base / "upstream", [UPSTREAM_FIXES / "metal-acc-wide-rows.patch"])
        root = scratch_project(base)
        subprocess.run([sys.executable, "-m", "builder.cli", "--project", str(root), "apply"], check=True,
                       stdout=subprocess.DEVNULL)
        dry = ("rebase", "--onto", str(pin), "--dry-run", "--fixed-upstream", "--json")

        cold(root)
        v_wall, v_cpu, _, v_rc = run(root, base / "ccache-verify", "verify")
        d_warm_wall, d_warm_cpu, _, _ = run(root, base / "ccache-verify", *dry)
        cold(root)
        d_wall, d_cpu, out, d_rc = run(root, base / "ccache-dry-run", *dry)

        rows = json.loads(out)["patches"] if out.strip().startswith("{") else []
        for r in rows:
            fix = r.get("fixed_upstream") or {}
            print(f"  {r['patch'][:4]} {r['outcome']:<9} {fix.get('verdict', '-')}"
                  + (f" (still failing: {len(fix['still_failing'])})" if fix.get("still_failing") else ""))
        print(f"the real series ({len(rows)} patches) on a 2-core machine ({os.cpu_count()} cpus here); "
              f"verify exit {v_rc}, dry run exit {d_rc}")
        print(f"{'':<62} {'wall s':>8} {'cpu s':>8}")
        for label, wall, cpu in (
                ("patchset verify, cold (empty build folders and ccache)", v_wall, v_cpu),
                ("rebase --dry-run --fixed-upstream, cold (same)", d_wall, d_cpu),
                ("rebase --dry-run --fixed-upstream right after verify", d_warm_wall, d_warm_cpu)):
            print(f"{label:<62} {wall:8.1f} {cpu:8.1f}")
        print(f"dry run / verify, cold: {d_wall / v_wall:.2f}x wall, {d_cpu / v_cpu:.2f}x cpu   (target <= 2x)")
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()

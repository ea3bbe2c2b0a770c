"""`patchset canary` against a linear scan on any git history (issue 35): per patch the first commit
where it stops applying, found by bisection and by trying every commit, side by side.

Given a git source (a URL or a local repository), a series folder (`patches/`: `series` and its
mails, e.g. `patchset export --layout ggml` of the shipped series for ggml-org/ggml's history) and
a range OLD..NEW of that source, it writes a throwaway project pinned at OLD (`patchset pin --git`),
runs `patchset canary --json` and `patchset canary --scan --json` over the range (each a new
process, the same cache), and prints for each patch the tries of each, whether both name the same
first breaking commit, and the bound 2*ceil(log2(commits)); then the wall time of each run.
Exit 1 when the two disagree on some patch or the bisection goes over the bound.

Usage: python benchmarks/canary.py --source URL --series DIR --range OLD..NEW [--step N] [--cache DIR]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from _common import ROOT, tempdir


def patchset(project: Path, cache: Path, *args: str) -> tuple[float, subprocess.CompletedProcess[str]]:
    env = {**os.environ, "PATCHSET_CACHE": str(cache), "PYTHONPATH": str(ROOT)}
    start = time.perf_counter()
    r = subprocess.run([sys.executable, "-m", "builder.cli", "--project", str(project), *args], env=env,
                       capture_output=True, text=True, check=False)
    return time.perf_counter() - start, r


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--source", required=True, help="git URL or local repository of the upstream")
    ap.add_argument("--series", type=Path, required=True, help="a patches/ folder (series file and mails) for OLD")
    ap.add_argument("--range", dest="range_", required=True, metavar="OLD..NEW")
    ap.add_argument("--step", type=int, default=1)
    ap.add_argument("--cache", type=Path, help="PATCHSET_CACHE to use (default: a new one)")
    args = ap.parse_args()
    old, _, new = args.range_.partition("..")
    source = str(Path(args.source).resolve()) if Path(args.source).exists() else args.source
    base = tempdir("patchset-canary-bench-")
    try:
        project = base / "project"
        (project / "upstream").mkdir(parents=True)
        shutil.copytree(args.series, project / "patches")
        cache = args.cache or base / "cache"
        # written beside the project, then moved in (`pin --out` refuses the pin in use)
        _, r = patchset(project, cache, "pin", "--git", source, old, "--out", str(base / "pin.toml"))
        if r.returncode != 0:
            print(r.stderr, file=sys.stderr)
            return 2
        (base / "pin.toml").replace(project / "upstream" / "llama.cpp.toml")
        common = ["canary", "--json", "--range", f"..{new}", "--step", str(args.step)]
        t_bisect, rb = patchset(project, cache, *common)
        t_scan, rs = patchset(project, cache, *common, "--scan")
        if rb.returncode not in (0, 3) or rs.returncode not in (0, 3):
            print(rb.stderr or rs.stderr, file=sys.stderr)
            return 2
        bisect, scan = json.loads(rb.stdout), json.loads(rs.stdout)
    finally:
        shutil.rmtree(base, ignore_errors=True)
    n = bisect["commits"]
    bound = 2 * math.ceil(math.log2(max(2, math.ceil(n / args.step))))
    print(f"{source} {bisect['old'][:12]}..{bisect['new'][:12]}: {n} first-parent commit(s), step {args.step}")
    print(f"{'patch':<48} {'breaks at':<12} {'class':<18} {'bisect':>6} {'scan':>5}  same")
    ok = True
    for b, s in zip(bisect["patches"], scan["patches"], strict=True):
        at_b = (b["broken_at"] or {}).get("commit", "")
        at_s = (s["broken_at"] or {}).get("commit", "")
        same = at_b == at_s
        ok = ok and same and b["tries"] <= bound
        print(f"{b['patch'][:48]:<48} {at_b[:12] or '-':<12} {b['class'] or 'applies':<18} {b['tries']:>6} "
              f"{s['tries']:>5}  {'yes' if same else 'NO: scan ' + at_s[:12]}")
    print(f"bound per patch 2*ceil(log2(commits)) = {bound}; commits tried: bisection {bisect['tried']}, "
          f"scan {scan['tried']}")
    print(f"newest commit where the whole series applies: bisection {bisect['newest_whole']['commit'][:12]}, "
          f"scan {scan['newest_whole']['commit'][:12]}")
    print(f"wall: bisection {t_bisect:.1f} s, scan {t_scan:.1f} s")
    return 0 if ok and bisect["newest_whole"] == scan["newest_whole"] else 1


if __name__ == "__main__":
    sys.exit(main())

"""Core speed on the real pin: cold fetch from the PyPI mirror, warm fetch, apply of the series,
no-op apply, and refresh, each a fresh `patchset` process as a user runs it.

Targets on a 2-core machine: warm fetch and no-op apply under 1 s, apply under 3 s, refresh under 2 s.
Usage: python benchmarks/core.py [--cache DIR]   (a warm DIR skips the download in the cold row)
"""

from __future__ import annotations

import argparse
import shutil

from _common import patchset, row, scratch_project, tempdir


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--cache", help="reuse this PATCHSET_CACHE (the cold row is then not cold)")
    args = ap.parse_args()
    base = tempdir("patchset-bench-core-")
    try:
        project = scratch_project(base)
        env = {"PATCHSET_CACHE": args.cache or str(base / "cache"), "CI": "1"}
        results = []
        results.append(("fetch, cold (pip download + verify + import)" if not args.cache else "fetch (given cache)",
                        patchset(project, "fetch", env=env), ""))
        results.append(("fetch, warm", patchset(project, "fetch", env=env), "target < 1 s"))
        results.append(("apply (new work repository + series)", patchset(project, "apply", env=env), "target < 3 s"))
        results.append(("apply, no-op", patchset(project, "apply", env=env), "target < 1 s"))
        results.append(("refresh (no change)", patchset(project, "refresh", env=env), "target < 2 s"))
        print(f"patchset core on the real pin ({project})")
        for label, secs, target in results:
            print(row(label, secs, target))
        warm, noop = results[1][1], results[3][1]
        print(f"cold fetch / warm fetch = {results[0][1] / warm:.0f}x; "
              f"apply / no-op apply = {results[2][1] / noop:.1f}x")
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()

"""Export speed on the real pin: the whole series with --check, each a fresh `patchset` process.

Rows: the first export (new work repository, clang-format on every patch), the warm export with
--check (target under 10 s on 2 cores), and the same warm export with the findings cache removed
(what rerunning every rule costs), side by side in one run.
Usage: python benchmarks/export.py [--cache DIR]   (default: the user's PATCHSET_CACHE, which must hold the pin)
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import time

from _common import row, scratch_project, tempdir


def export(project: object, env: dict[str, str]) -> float:
    """`patchset export --check`: exit 1 is expected (the packages hold placeholders to fill)."""
    start = time.perf_counter()
    r = subprocess.run([sys.executable, "-m", "builder.cli", "--project", str(project), "export", "--check",
                        "--author", "Bench Mark <bench@example.org>"], env={**os.environ, **env},
                       stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, check=False)
    took = time.perf_counter() - start
    if r.returncode not in (0, 1):
        raise SystemExit(f"export failed ({r.returncode}): {r.stderr}")
    return took


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--cache", help="PATCHSET_CACHE holding the pin (default: the user's)")
    args = ap.parse_args()
    base = tempdir("patchset-bench-export-")
    try:
        project = scratch_project(base)
        env = {"CI": "1", **({"PATCHSET_CACHE": args.cache} if args.cache else {})}
        first = export(project, env)
        warm = export(project, env)
        shutil.rmtree(project / ".patchset" / "export-cache")
        no_cache = export(project, env)
        warm2 = export(project, env)
        print(f"patchset export --check of the whole series on the real pin ({project})")
        print(row("first export (work repository, every rule)", first))
        print(row("warm export --check", warm, "target < 10 s"))
        print(row("warm export --check, findings cache dropped", no_cache))
        print(row("warm export --check, again", warm2, "target < 10 s"))
        print(f"rules rerun / warm = {no_cache / min(warm, warm2):.1f}x")
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()

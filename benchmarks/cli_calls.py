"""The tests' `patchset` calls forked from one process that imported patchset (tests/forkcli.py) against each
call a fresh process (PATCHSET_TEST_FORKCLI=0): the same tests run both ways, one after the other, in one run.

Each run is `python -m pytest` with a basetemp of its own (nothing of an earlier run to delete) and the
suite's own options; printed: its wall time, the CPU seconds of it and every process it started (the forked
calls included: their server waits for them), the tests passed, and the ratios.

    python benchmarks/cli_calls.py [--rounds N] [PYTEST_ARGS ...]     (default: -m "not integration")
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _common import ROOT, cpu_now

WAYS = (("fresh", "0"), ("forked", "1"))


def run_tests(pytest_args: list[str], forked: str, base: Path) -> tuple[float, float, str]:
    """Wall seconds, CPU seconds and pytest's summary line of one run."""
    env = {**os.environ, "PATCHSET_TEST_FORKCLI": forked}
    cpu0, t0 = cpu_now(), time.perf_counter()
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"--basetemp={base}",
                        *pytest_args], cwd=ROOT, env=env, capture_output=True, text=True, check=False)
    wall, cpu = time.perf_counter() - t0, cpu_now() - cpu0
    summary = next((line.strip("= ") for line in reversed(r.stdout.splitlines())
                    if re.search(r"\d+ (passed|failed)", line)), f"exit {r.returncode}")
    if r.returncode != 0:  # what failed, and why: pytest's "E" lines
        print("\n".join(line for line in r.stdout.splitlines()
                        if line.startswith(("E ", "FAILED", "ERROR", "___"))), file=sys.stderr)
    return wall, cpu, summary


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=1, help="runs of each way (the fresh calls first in odd rounds)")
    args, pytest_args = ap.parse_known_args()
    pytest_args = pytest_args or ["-m", "not integration"]
    print(f"pytest {' '.join(pytest_args)}, {os.cpu_count()} cores, {args.rounds} round(s)")
    totals = {name: [0.0, 0.0] for name, _ in WAYS}
    with tempfile.TemporaryDirectory(prefix="cli-calls-") as tmp:
        for n in range(args.rounds):
            for name, value in WAYS if n % 2 == 0 else WAYS[::-1]:  # each way first in every other round
                wall, cpu, summary = run_tests(pytest_args, value, Path(tmp) / f"{name}-{n}")
                totals[name][0] += wall
                totals[name][1] += cpu
                print(f"  {name:7} round {n + 1}: {wall:7.1f} s wall {cpu:8.1f} CPU-s   {summary}", flush=True)
    (fw, fc), (kw, kc) = totals["fresh"], totals["forked"]
    print(f"forked / fresh: wall {kw / fw:.2f}, CPU {kc / fc:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

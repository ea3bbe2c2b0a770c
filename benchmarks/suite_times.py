"""Where the test suite's time goes, per test module, before and after: two JUnit XML files side by side.

Make each with `python -m pytest [-m "not integration"] --junitxml FILE` (`.ci/run` leaves one in
`.patchset/ci-junit.xml`). A module's time is the sum of its test cases' times (pytest counts the
setup and teardown of fixtures in the test that ran them, so a module-scoped build is in its
module's first test).

With the CPU seconds of each module where the tests recorded them (tests/conftest.py: a `cpu_s`
property per test): a loaded run's wall time says little of what a module costs, its CPU time does.

Usage: python benchmarks/suite_times.py BEFORE.xml AFTER.xml [--markdown]
"""

from __future__ import annotations

import argparse
import sys
import xml.etree.ElementTree as ET
from collections import defaultdict
from pathlib import Path


def module_times(junit: Path) -> tuple[dict[str, float], dict[str, int], float]:
    """Seconds and test count per module (tests/test_x.py), and the suite's own wall time."""
    times, counts, wall, _ = module_stats(junit)
    return times, counts, wall


def module_stats(junit: Path) -> tuple[dict[str, float], dict[str, int], float, dict[str, float]]:
    """module_times, and the CPU seconds per module where the tests recorded them (a `cpu_s` property:
    tests/conftest.py records it for each test, its processes' included)."""
    root = ET.parse(junit).getroot()
    times: dict[str, float] = defaultdict(float)
    counts: dict[str, int] = defaultdict(int)
    cpu: dict[str, float] = defaultdict(float)
    for tc in root.iter("testcase"):
        # classname is the dotted module path (tests.test_x), with a class name after it for class tests
        parts = (tc.get("classname") or "?").split(".")
        mods = [i for i, p in enumerate(parts) if p.startswith("test_")]
        module = "/".join(parts[: mods[0] + 1]) + ".py" if mods else ".".join(parts)
        times[module] += float(tc.get("time") or 0)
        counts[module] += 1
        for prop in tc.iter("property"):
            if prop.get("name") == "cpu_s":
                cpu[module] += float(prop.get("value") or 0)
    suites = [root] if root.tag == "testsuite" else list(root.iter("testsuite"))
    wall = sum(float(s.get("time") or 0) for s in suites)
    return times, counts, wall, cpu


def table(before: Path, after: Path, markdown: bool) -> list[str]:
    tb, cb, wb, ub = module_stats(before)
    ta, ca, wa, ua = module_stats(after)
    rows = sorted(set(tb) | set(ta), key=lambda m: -max(tb.get(m, 0), ta.get(m, 0)))

    def fmt(t: dict[str, float], c: dict[str, int], m: str) -> str:
        return f"{t[m]:.1f} s ({c[m]})" if m in t else "-"

    def change(m: str) -> str:
        if m not in tb or m not in ta or tb[m] == 0:
            return ""
        return f"{ta[m] / tb[m]:.2f}x"

    cpu = bool(ub or ua)

    def cpu_cells(m: str | None) -> list[str]:
        if not cpu:
            return []
        if m is None:
            return [f"{sum(ub.values()):.1f} s" if ub else "-", f"{sum(ua.values()):.1f} s" if ua else "-"]
        return [f"{u[m]:.1f} s" if m in u else "-" for u in (ub, ua)]

    head = ["module", "before (tests)", "after (tests)", "after/before"] + (["cpu before", "cpu after"] if cpu else [])
    body = [[m, fmt(tb, cb, m), fmt(ta, ca, m), change(m), *cpu_cells(m)] for m in rows]
    total = ["whole run (wall; cpu: sum)", f"{wb:.1f} s" if wb else "-", f"{wa:.1f} s",
             f"{wa / wb:.2f}x" if wb else "", *cpu_cells(None)]
    if markdown:
        lines = ["| " + " | ".join(head) + " |", "| --- |" + " ---: |" * (len(head) - 1)]
        lines += ["| " + " | ".join(r) + " |" for r in body]
        lines.append("| " + " | ".join(f"**{c}**" if c else c for c in total) + " |")
        return lines
    width = max([len(m) for m in rows] + [len(total[0])])
    cols = [width] + [16] * (len(head) - 1)

    def line(cells: list[str]) -> str:
        pairs = enumerate(zip(cells, cols, strict=True))
        return "  ".join(f"{c:<{w}}" if i == 0 else f"{c:>{w}}" for i, (c, w) in pairs)

    lines = [line(head), *(line(r) for r in body), line(total)]
    return lines


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("before", type=Path)
    ap.add_argument("after", type=Path)
    ap.add_argument("--markdown", action="store_true", help="a Markdown table")
    args = ap.parse_args(argv)
    for f in (args.before, args.after):
        if not f.is_file():
            print(f"{f}: no such file", file=sys.stderr)
            return 2
    try:
        print("\n".join(table(args.before, args.after, args.markdown)))
    except ET.ParseError as e:
        print(f"not a JUnit XML file: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())

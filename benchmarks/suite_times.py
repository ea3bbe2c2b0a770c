"""Where the test suite's time goes, per test module, before and after: two JUnit XML files side by side.

Make each with `python -m pytest [-m "not integration"] --junitxml FILE` (`.ci/run` leaves one in
`.patchset/ci-junit.xml`). A module's time is the sum of its test cases' times (pytest counts the
setup and teardown of fixtures in the test that ran them, so a module-scoped build is in its
module's first test).

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
    root = ET.parse(junit).getroot()
    times: dict[str, float] = defaultdict(float)
    counts: dict[str, int] = defaultdict(int)
    for tc in root.iter("testcase"):
        # classname is the dotted module path (tests.test_x), with a class name after it for class tests
        parts = (tc.get("classname") or "?").split(".")
        mods = [i for i, p in enumerate(parts) if p.startswith("test_")]
        module = "/".join(parts[: mods[0] + 1]) + ".py" if mods else ".".join(parts)
        times[module] += float(tc.get("time") or 0)
        counts[module] += 1
    suites = [root] if root.tag == "testsuite" else list(root.iter("testsuite"))
    wall = sum(float(s.get("time") or 0) for s in suites)
    return times, counts, wall


def table(before: Path, after: Path, markdown: bool) -> list[str]:
    tb, cb, wb = module_times(before)
    ta, ca, wa = module_times(after)
    rows = sorted(set(tb) | set(ta), key=lambda m: -max(tb.get(m, 0), ta.get(m, 0)))

    def fmt(t: dict[str, float], c: dict[str, int], m: str) -> str:
        return f"{t[m]:.1f} s ({c[m]})" if m in t else "-"

    def change(m: str) -> str:
        if m not in tb or m not in ta or tb[m] == 0:
            return ""
        return f"{ta[m] / tb[m]:.2f}x"

    lines = []
    if markdown:
        lines += ["| module | before (tests) | after (tests) | after/before |", "| --- | ---: | ---: | ---: |"]
        lines += [f"| {m} | {fmt(tb, cb, m)} | {fmt(ta, ca, m)} | {change(m)} |" for m in rows]
        lines.append(f"| **whole run (wall)** | **{wb:.1f} s** | **{wa:.1f} s** | **{wa / wb:.2f}x** |"
                     if wb else f"| whole run (wall) | - | {wa:.1f} s | |")
    else:
        width = max([len(m) for m in rows] + [20])
        lines.append(f"{'module':<{width}}  {'before (tests)':>16}  {'after (tests)':>16}  {'after/before':>12}")
        lines += [f"{m:<{width}}  {fmt(tb, cb, m):>16}  {fmt(ta, ca, m):>16}  {change(m):>12}" for m in rows]
        lines.append(f"{'whole run (wall)':<{width}}  {wb:>14.1f} s  {wa:>14.1f} s  "
                     f"{(f'{wa / wb:.2f}x' if wb else ''):>12}")
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

"""The sweep's comparison of two trees, case by case: its categories, report and the files other tools read.

Every case is keyed the same in both trees (program, backend, variant, name, params, occurrence) and
sorted into one category; only a newly failing case (or a new case that fails) is a regression.
The report as JSON (`patchset-sweep/1`) and as JUnit XML, where a case failing in both trees is
skipped, not failed.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from builder import words
from builder.compile.testrun import CRASH, FAIL, PASS, SKIP, CaseResult, ProgramResult

FAILING = (FAIL, CRASH)

# categories of the comparison, in report order
NEWLY_FAILING = "newly failing"
NEW_FAILING = "new case failing"
NEWLY_PASSING = "newly passing"
FAILING_IN_BOTH = "failing in both"
NEWLY_SKIPPED = "newly skipped"
ONLY_OTHER = "only in the other tree"
ONLY_PATCHED = "only in the patched tree"
FLAKY = words.FLAKY
"""Changed between the trees, but re-runs of the case disagree within one tree (random inputs)."""
REGRESSION_CATEGORIES = (NEWLY_FAILING, NEW_FAILING)
CATEGORIES = (NEWLY_FAILING, NEW_FAILING, NEWLY_PASSING, FLAKY, FAILING_IN_BOTH, NEWLY_SKIPPED, ONLY_OTHER,
              ONLY_PATCHED)
CONFIRMED = (NEWLY_FAILING, NEW_FAILING, NEWLY_PASSING)


@dataclass(frozen=True)
class TreeRun:
    """One tree's build and the program runs the sweep made on it."""

    label: str
    """'upstream' (or the --against ref) or 'patched'."""
    commit: str
    tree_id: str
    build_dir: Path
    build_s: float
    build_steps: int
    programs: tuple[ProgramResult, ...]
    split_runs: int = 0
    """Runs made to split crashed test-backend-ops runs."""
    crashes: tuple[str, ...] = ()
    """Ops whose run crashed (their later cases did not run), or `-o` entries when no op was named."""
    reference_comments: tuple[str, ...] = ()
    """The files built in the patched tree's version: they differ from this tree's in comments and whitespace
    only (trees.with_comments_of; the same code, and the patched build's objects)."""

    def cases(self) -> dict[tuple, CaseResult]:
        return keyed_cases(self.programs)


@dataclass(frozen=True)
class Change:
    category: str
    program: str
    case: str
    backend: str
    before: str | None
    """Status on the other tree (None: no such case there)."""
    after: str | None
    detail: str = ""
    name: str = ""
    params: str = ""
    reruns: str = ""
    """What the confirmation re-runs saw, per tree (`upstream F F F, patched F F F`)."""


@dataclass(frozen=True)
class SweepReport:
    backend: str
    mode: str
    ops: tuple[str, ...] | None
    against: str
    other: TreeRun
    patched: TreeRun
    changes: tuple[Change, ...]
    counts: dict[str, int] = field(default_factory=dict)
    """Cases per status in each tree and per category."""
    duration_s: float = 0.0
    confirm: int = 0

    def of(self, category: str) -> list[Change]:
        return [c for c in self.changes if c.category == category]

    @property
    def regressions(self) -> list[Change]:
        return [c for c in self.changes if c.category in REGRESSION_CATEGORIES]

    @property
    def compared(self) -> int:
        return self.counts.get("compared", 0)


# -- case identity ------------------------------------------------------------------------------------
def keyed_cases(programs: tuple[ProgramResult, ...]) -> dict[tuple, CaseResult]:
    """Every case under a key that is the same in both trees: program, backend, variant, name,
    params, and which occurrence of that name it is (a few test cases are listed twice)."""
    out: dict[tuple, CaseResult] = {}
    seen: Counter[tuple] = Counter()
    for p in programs:
        for c in p.cases:
            base = (p.program, c.backend, c.variant, c.name, c.params)
            seen[base] += 1
            out[(*base, seen[base])] = c
    return out


def _case_label(key: tuple) -> str:
    _program, _backend, variant, name, params, n = key
    return f"{name}({params})" + (f" [{variant}]" if variant else "") + (f" #{n}" if n > 1 else "")


def compare(other: TreeRun, patched: TreeRun) -> tuple[list[Change], dict[str, int]]:
    a, b = other.cases(), patched.cases()
    changes: list[Change] = []
    counts: Counter[str] = Counter()
    for key in [*a, *[k for k in b if k not in a]]:
        before, after = a.get(key), b.get(key)
        sb, sa = (before.status if before else None), (after.status if after else None)
        if before and after:
            counts["compared"] += 1
        if before is None:
            cat = NEW_FAILING if sa in FAILING else ONLY_PATCHED
        elif after is None:
            cat = ONLY_OTHER
        elif sa in FAILING and sb in FAILING:
            cat = FAILING_IN_BOTH
        elif sa in FAILING:
            cat = NEWLY_FAILING
        elif sb in FAILING and sa == PASS:
            cat = NEWLY_PASSING
        elif sb == PASS and sa == SKIP:
            cat = NEWLY_SKIPPED
        else:
            continue
        counts[cat] += 1
        shown = after if after is not None else before
        assert shown is not None
        changes.append(Change(cat, key[0], _case_label(key), key[1], sb, sa, shown.detail, key[3], key[4]))
    for label, cases in (("other", a), ("patched", b)):
        for c in cases.values():
            counts[f"{label}.{c.status}"] += 1
    return changes, dict(counts)


# -- files other tools read ----------------------------------------------------------------------------
def _run_dict(p: ProgramResult) -> dict:
    return {"program": p.program, "args": list(p.args), "returncode": p.returncode, "signal": p.signal_name,
            "verdict": p.verdict, "passed": p.passed, "failed": p.failed, "skipped": p.skipped,
            "duration_s": round(p.duration_s, 3), "log": str(p.log)}


def _tree_dict(t: TreeRun) -> dict:
    return {"label": t.label, "commit": t.commit, "tree": t.tree_id, "build_dir": str(t.build_dir),
            "build_s": t.build_s, "build_steps": t.build_steps, "split_runs": t.split_runs,
            "unsplittable_crashes": list(t.crashes), "reference_comments": list(t.reference_comments),
            "runs": [_run_dict(p) for p in t.programs]}


def sweep_dict(r: SweepReport) -> dict:
    """The sweep as JSON: counts, every case that is not passing-in-both-unchanged, and each run."""
    return {
        "format": "patchset-sweep/1", "backend": r.backend, "mode": r.mode,
        "ops": list(r.ops) if r.ops else None, "against": r.against, "duration_s": r.duration_s,
        "regressions": len(r.regressions), "counts": r.counts,
        "confirm_runs": r.confirm,
        "changes": {cat: [{"program": c.program, "case": c.case, "backend": c.backend, "before": c.before,
                           "after": c.after, "detail": c.detail[:300], **({"reruns": c.reruns} if c.reruns else {})}
                          for c in r.of(cat)] for cat in CATEGORIES},
        "trees": {"other": _tree_dict(r.other), "patched": _tree_dict(r.patched)},
    }


def sweep_junit(r: SweepReport) -> bytes:
    """JUnit XML: one test case per case of the patched tree (and per case that vanished from it).

    Only a regression is a failure; a case failing in both trees is reported as skipped with the
    reason, so that upstream's own failures do not turn a CI dashboard red.
    """
    by_key = {(c.program, c.case, c.backend): c for c in r.changes}
    suites = ET.Element("testsuites", name=f"patchset sweep {r.backend} {r.mode} against {r.against}")
    groups: dict[str, list[tuple[tuple, CaseResult]]] = {}
    for key, case in r.patched.cases().items():
        groups.setdefault(key[0], []).append((key, case))
    for key, case in r.other.cases().items():
        if key not in r.patched.cases():
            groups.setdefault(key[0], []).append((key, case))
    for program, items in groups.items():
        suite = ET.SubElement(suites, "testsuite", name=program, tests=str(len(items)))
        failures = skipped = 0
        for key, case in items:
            label = _case_label(key)
            tc = ET.SubElement(suite, "testcase", classname=f"{program}.{case.backend or 'all'}", name=label)
            ch = by_key.get((program, label, key[1]))
            if ch is None:
                if case.status == SKIP:
                    ET.SubElement(tc, "skipped", message=case.detail or "skipped")
                    skipped += 1
                continue
            if ch.category in REGRESSION_CATEGORIES:
                ET.SubElement(tc, "failure", message=f"{ch.category}: {ch.before} -> {ch.after}").text = ch.detail
                failures += 1
            elif ch.category in (FAILING_IN_BOTH, ONLY_OTHER, NEWLY_SKIPPED) or case.status == SKIP:
                ET.SubElement(tc, "skipped", message=f"{ch.category} ({ch.before} -> {ch.after})")
                skipped += 1
        suite.set("failures", str(failures))
        suite.set("skipped", str(skipped))
    ET.indent(suites)
    return ET.tostring(suites, encoding="utf-8", xml_declaration=True) + b"\n"

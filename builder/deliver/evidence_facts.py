"""What verify's evidence files say about one patch, as facts for PR.md, ISSUE.md and COVER.md.

The JSON is read as it is on disk (not through `prove.evidence.load`), so that a field another
version writes (the `hunks` table, say) is shown when present and nothing breaks when it is not.
Evidence recorded for another version of the patch (its after tree differs from the series' after
tree now) is stale and treated as absent, unless verify found that the proof still holds for
the tree of now (`holds`, builder/prove/affected.py).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from builder.build.cmakebuild import PROFILES
from builder.prove import evidence as ev
from builder.series.model import Patch, TestSpec

NAMES = {"cpu": "CPU", "cuda": "CUDA", "metal": "Metal"}


@dataclass(frozen=True)
class BackendEvidence:
    backend: str
    data: dict | None
    """The evidence JSON; None when there is none usable."""
    why_none: str = ""

    def step(self, tree: str) -> dict | None:
        for s in (self.data or {}).get("steps", []):
            if s.get("tree") == tree:
                return s
        return None


def display(backend: str) -> str:
    return NAMES.get(backend, backend)


def backends_of(patch: Patch) -> tuple[str, ...]:
    """The backends on which the patch's tests run, in the order it declares them."""
    return patch.meta.backends_for_tests()


def load(evidence_dir: Path, patch: Patch, backend: str, after_tree: str) -> BackendEvidence:
    jpath, _ = ev.paths(evidence_dir, patch.name, backend)
    if not jpath.exists():
        return BackendEvidence(backend, None, f"not run on {display(backend)}")
    try:
        data = json.loads(jpath.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return BackendEvidence(backend, None, f"not run on {display(backend)} (unreadable evidence)")
    if not isinstance(data, dict) or not data.get("steps"):
        return BackendEvidence(backend, None, f"not run on {display(backend)}")
    after = next((s for s in data["steps"] if isinstance(s, dict) and s.get("tree") == "after"), None)
    # a proof that a later verify carried over to this version's trees (its test programs read no
    # file that changed) answers for them too
    holds = data.get("holds")
    carried_to = holds.get("trees", {}).get("after") if isinstance(holds, dict) else None
    if after is None or (after.get("tree_id") != after_tree and carried_to != after_tree):
        return BackendEvidence(backend, None, f"not run on {display(backend)} for this version of the patch "
                                              "(the evidence is of another version)")
    return BackendEvidence(backend, data)


def commands(tests: list[TestSpec], backend: str) -> list[str]:
    """The commands that reproduce the tests on `backend` in a checkout of upstream."""
    prof = PROFILES[backend]
    programs = list(dict.fromkeys(t.program for t in tests))
    out = [" ".join(["cmake -B build -DCMAKE_BUILD_TYPE=Release", *prof.cmake_args]),
           f"cmake --build build -j --target {' '.join(programs)}"]
    for t in tests:
        args = list(t.args)
        if t.program == "test-backend-ops" and "-b" not in args:
            args += ["-b", prof.device]
        out.append(" ".join([f"./build/bin/{t.program}", *args]))
    return out


def tests_on(patch: Patch, backend: str) -> list[TestSpec]:
    return [t for t in patch.meta.tests if t.runs_on(backend, patch.meta.backends)]


def counts(t: dict) -> str:
    return f"{t.get('passed', 0)} passed, {t.get('failed', 0)} failed, {t.get('skipped', 0)} skipped"


def failing_output(step: dict | None, limit: int = 30) -> str:
    """The failing lines of a before step (test output or compiler errors)."""
    if not step:
        return ""
    lines: list[str] = []
    if step.get("build_errors"):
        lines += [str(e) for e in step["build_errors"]]
    for t in step.get("tests", []):
        if t.get("failing"):
            lines.append(f"$ {t.get('command', '')}")
            lines += [str(x) for x in t["failing"]]
    return "\n".join(lines[:limit])


def step_summary(step: dict | None) -> str:
    if not step:
        return "not run"
    if not step.get("build_ok", True):
        where = "in the test files only" if step.get("errors_only_in_test_paths") else "outside the test files"
        return f"fails to compile ({where})"
    tests = step.get("tests", [])
    parts = [f"`{t.get('command', '')}`: {t.get('verdict', '?')} ({counts(t)})" for t in tests]
    return "; ".join(parts) or str(step.get("verdict", ""))


def hunks_table(data: dict) -> list[str]:
    """The evidence's `hunks` table as Markdown, when the evidence has one."""
    hunks = data.get("hunks")
    if not hunks:
        return []
    if isinstance(hunks, dict):
        rows = [{"hunk": k, **(v if isinstance(v, dict) else {"result": v})} for k, v in hunks.items()]
    elif isinstance(hunks, list):
        rows = [h if isinstance(h, dict) else {"result": h} for h in hunks]
    else:
        return [f"  - hunks: {hunks}"]
    cols = list(dict.fromkeys(k for r in rows for k in r))
    out = ["", "  | " + " | ".join(cols) + " |", "  | " + " | ".join("---" for _ in cols) + " |"]
    for r in rows:
        out.append("  | " + " | ".join(str(r.get(c, "")).replace("|", "\\|").replace("\n", " ") for c in cols) + " |")
    return out

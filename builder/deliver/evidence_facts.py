"""What verify's evidence files say about one patch, as facts for PR.md, ISSUE.md and COVER.md.

The JSON is read as it is on disk (not through `prove.evidence.load`), so that a field another
version writes (the `hunks` table, say) is shown when present and nothing breaks when it is not.
Evidence recorded for another version of the patch (its after tree differs from the series' after
tree now) is stale and treated as absent, unless verify found that the proof still holds for
the tree of now (`holds`, builder/prove/affected.py).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

from builder.compile.backends import PROFILES
from builder.deliver import clean
from builder.prove import cases as case_table
from builder.prove import evidence as ev
from builder.prove import evidence_rules as rules
from builder.prove import pytests
from builder.series.model import Finding, Patch, Series, TestSpec

NAMES = {"cpu": "CPU", "cuda": "CUDA", "metal": "Metal"}
STAND_IN_FOR = {"metal-replay": "metal", "metal-linux": "metal"}
"""patchset's own stand-ins, and the backend each stands in for: upstream cannot run them (they are
built from patchset's harness), so a reproducer names the real backend."""
STAND_IN_RUN = {"metal-linux": "the tree's own {real} host code run on patchset's {real} stand-in on Linux"}
"""What a run on a stand-in is, for the reproducer's note (`stand_in_note`); any other is a host-side replay."""


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


def stand_in_note(backend: str, real: str) -> str:
    """The note under a reproducer whose failing output is from the stand-in `backend` of `real`."""
    what = STAND_IN_RUN.get(backend, "patchset's host-side replay of the {real} backend on {cpu}")
    return (f"the failing output below is from {what.format(real=display(real), cpu=display('cpu'))} ({backend}), "
            f"not from {display(real)} hardware")


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
    # the same tree with other trailers (another Patchset-Test): its output is not of the command shown now
    other = rules.declared_differs(data, rules.declared(patch, backend), backend)
    if other:
        return BackendEvidence(backend, None, f"not run on {display(backend)} for this version of the patch "
                                              f"(the evidence was {other})")
    return BackendEvidence(backend, data)


def commands(tests: list[TestSpec], backend: str) -> list[str]:
    """The commands that reproduce the tests on `backend` in a checkout of upstream (of the bindings, for
    `python` tests: the package built with its vendored llama.cpp, then pytest)."""
    python = [t for t in tests if pytests.is_python(t)]
    if python:
        return ["python -m pip install -e .  # builds vendor/llama.cpp into llama_cpp/lib",
                *[" ".join(["python -m pytest", *t.args]) for t in python]]
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


def failing_output(step: dict | None, limit: int = 20) -> str:
    """The lines that matter of a failed before step: the compiler's errors (`file:line: message`),
    else each failing test command and its failing cases; paths relative to the tree's root."""
    if not step:
        return ""
    lines: list[str] = []
    if step.get("build_errors"):
        lines += [str(e) for e in step["build_errors"]]
    for t in step.get("tests", []):
        if t.get("failing"):
            lines.append(f"$ {t.get('command', '')}")
            lines += [str(x) for x in t["failing"]]
    cleaned = [clean.relative(x).rstrip() for x in lines if str(x).strip()]
    if len(cleaned) > limit:
        cleaned = [*cleaned[:limit], f"... {len(cleaned) - limit} more line(s)"]
    return "\n".join(cleaned)


def guard_cases(data: dict | None, patch: Patch) -> list[dict]:
    """The rows of an evidence's case table that pass without the fix too and that no `Patchset-Guard`
    trailer of the patch (as it is now) declares."""
    rows = (data or {}).get("cases") or []
    return case_table.undeclared_guards([r for r in rows if isinstance(r, dict)], patch.meta.guards)


def case_lines(data: dict | None, patch: Patch, limit: int = 10) -> list[str]:
    """The proof and the undeclared guard cases of an evidence's case table, for PR.md ('' lines when the
    evidence has no case table: it was made before the table existed, or the before tree does not compile)."""
    rows = [r for r in (data or {}).get("cases") or [] if isinstance(r, dict)]
    proof = [r for r in rows if r.get("role") == case_table.PROOF]
    out = []
    if proof:
        out.append(f"  - cases that fail without the fix and pass with it: {len(proof)}")
        out += [f"    - `{r.get('command', '')}` {r.get('backend', '')} `{r.get('case', '')}` "
                f"(before: {r.get('before', '')})" for r in proof[:limit]]
    guards = guard_cases(data, patch)
    if guards:
        out.append(f"  - added cases that pass without the fix too (guard cases, not part of the proof): {len(guards)}")
        out += [f"    - `{r.get('command', '')}` {r.get('backend', '')} `{r.get('case', '')}`" for r in guards[:limit]]
    return out


def guard_findings(series: Series, docs_evidence: Path) -> list[Finding]:
    """`check --strict`: per patch and backend of the committed evidence (`docs/evidence/<backend>/verify.json`),
    its guard cases that no `Patchset-Guard` trailer declares, one finding each."""
    found: list[Finding] = []
    for path in sorted(docs_evidence.glob("*/verify.json")):
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue  # `evidence check` reports an unreadable file
        patches = data.get("patches") if isinstance(data, dict) else None
        for patch in series.patches:
            entry = patches.get(patch.name.removesuffix(".patch")) if isinstance(patches, dict) else None
            for r in guard_cases(entry if isinstance(entry, dict) else None, patch):
                found.append(Finding(patch.path, 0, (
                    f"guard case on {path.parent.name}: `{r.get('command', '')}` `{r.get('case', '')}` passes without "
                    f"the fix too ({path.name}); drop it, make it fail without the fix, or declare it with "
                    "`Patchset-Guard: PROGRAM CASE-PATTERN: REASON`")))
    return found


def step_summary(step: dict | None) -> str:
    if not step:
        return "not run"
    if not step.get("build_ok", True):
        where = "in the test files only" if step.get("errors_only_in_test_paths") else "outside the test files"
        return f"fails to compile ({where})"
    tests = step.get("tests", [])
    parts = [f"`{clean.relative(str(t.get('command', '')))}`: {t.get('verdict', '?')} ({counts(t)})" for t in tests]
    return "; ".join(parts) or str(step.get("verdict", ""))


_FUNCTION = re.compile(r"([A-Za-z_][\w:~]*)\s*\(")
WHY_LIMIT = 120


def function_of(section: str) -> str:
    """The function (or other scope) git names after a hunk header, without its signature."""
    names = _FUNCTION.findall(section)
    if names:
        return names[0]
    return section.replace("{", "").strip() or "-"


def _why(h: dict) -> str:
    """Why a hunk got its outcome, in plain words."""
    outcome = h.get("outcome", "")
    reason = clean.drop_trailer_notes(str(h.get("reason", ""))).strip()
    if outcome == "caught":
        failing = [clean.relative(str(f)).strip() for f in h.get("failing") or () if str(f).strip()]
        how = re.search(r"\((.*)\)\s*$", reason)
        why = "reverted alone, the tests fail" + (f" ({how.group(1)})" if how else "")
        if failing:
            first = re.sub(r":\s*FAIL\s*$", "", failing[0]).split("; last lines:")[0]
            why += f", first: `{first.strip()}`" if len(failing) == 1 else \
                f", {len(failing)} case(s), first: `{first.strip()}`"
        return why
    if outcome == "not built":
        # the first error's first line: where the compiler stopped (the rest is its notes)
        errors = [clean.relative(str(e)).strip().splitlines()[0] for e in h.get("errors") or () if str(e).strip()]
        return "reverted alone, the tree does not compile" + (f": `{errors[0]}`" if errors else "")
    if outcome == "unguarded":
        return "reverted alone, it builds and the tests still pass"
    return clean.relative(reason) or outcome


def hunks_table(data: dict) -> list[str]:
    """Each hunk of the fix reverted on its own (`verify --hunks`) as a short Markdown table for a
    maintainer: file, lines, function, outcome and why; nothing of verify's own records."""
    hunks = data.get("hunks")
    if not hunks or not isinstance(hunks, list):
        return []
    rows: list[list[str]] = []
    for h in hunks:
        if not isinstance(h, dict):
            continue
        lines = str(h.get("lines", "")) + (f" ({h['part']})" if h.get("part") else "")
        row = [f"`{h.get('file', '?')}`", lines, f"`{function_of(str(h.get('section', '')))}`",
               str(h.get("outcome", "?")), clean.cell(_why(h), WHY_LIMIT)]
        # neighbours that differ only in their lines are one row: the table stays short
        if rows and rows[-1][0] == row[0] and rows[-1][2:] == row[2:]:
            rows[-1][1] += f", {lines}"
        else:
            rows.append(row)
    if not rows:
        return []
    total = sum(1 for h in hunks if isinstance(h, dict))
    counts: dict[str, int] = {}
    for h in hunks:
        if isinstance(h, dict):
            counts[str(h.get("outcome", "?"))] = counts.get(str(h.get("outcome", "?")), 0) + 1
    summary = ", ".join(f"{n} {o}" for o, n in counts.items())
    return ["", f"  Each hunk of the fix reverted on its own ({total}: {summary}):", "",
            *[f"  {x}" for x in clean.table(["file", "lines", "function", "outcome", "why"], rows)]]

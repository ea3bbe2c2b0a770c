"""Evidence files: what verify saw, per patch and backend, as JSON (for tools) and Markdown (for people)."""

from __future__ import annotations

import json
import os
import platform
import shlex
from dataclasses import asdict, dataclass, field
from pathlib import Path

from builder import proc
from builder.compile.cmakebuild import CMAKE_ARGS_ENV, user_cmake_args
from builder.errors import ProcessError
from builder.fsutil import atomic_write_text
from builder.prove import cases


@dataclass(frozen=True)
class Step:
    """One tree's build and test run."""

    tree: str  # before | after | mutation | hunk-N
    commit: str
    tree_id: str
    build_ok: bool
    build_command: str
    build_duration_s: float
    build_errors: tuple[str, ...] = ()
    """Compiler errors (file:line: message) when the build failed."""
    errors_only_in_test_paths: bool = False
    tests: tuple[dict, ...] = ()
    """Per test command: command, exit code, `timed_out` (stopped at its time limit; absent in older
    evidence), signal, verdict, counts, duration, log, failing lines."""
    verdict: str = ""
    """fails | passes | build-fails | build-failed | not-run"""
    label: str = ""
    """Which mutation (its file under patches/) for a mutation tree."""
    comment_only: tuple[str, ...] = ()
    """Files that differ from the tree built before in the same folder in comments and whitespace only:
    what was compiled from them there was kept, the same code (builder.prove.trees)."""
    reference_comments: tuple[str, ...] = ()
    """Files that differ from the series head's in comments and whitespace only: checked out (and compiled,
    where the build compiles them) in the head's version, the same code, as every tree of the run has them
    (builder.prove.trees.with_comments_of)."""


@dataclass(frozen=True)
class Evidence:
    patch: str
    subject: str
    backend: str
    outcome: str
    reason: str
    pin: dict
    steps: tuple[Step, ...]
    key: str
    """What the run depended on (trees, tests, backend); equal keys may reuse this evidence."""
    host: dict = field(default_factory=dict)
    created: str = ""
    reused: bool = False
    note: str = ""
    """What a run on this backend is and is not (the Metal replay: not Apple hardware)."""
    hunks: tuple[dict, ...] = ()
    """`verify --hunks`: per unit of the fix, its file, lines, outcome (caught, not built, exempt,
    unguarded), reason, failing cases or compiler errors (builder.prove.hunks.HunkResult)."""
    hunks_checked: bool = False
    depends: dict = field(default_factory=dict)
    """What the proof depended on (builder.prove.affected): `patch_sha256`, `mutations` (sha256 per
    mutation file), `static` (one digest of backend, tests, metadata, the minimal CMake project,
    the backend's harness, the compiler), `programs`, `trees`
    (names), and `files`: each file of the tree the test programs were built from, with its blob id
    (one id when every tree has the same, else one per tree). Recorded for proven patches."""
    cases: tuple[dict, ...] = ()
    """The case table (builder.prove.cases): per test case the patch added or changed, each case of
    the proof, and where the before run stopped: `command`, `case`, `backend`, `scope` (added,
    changed, existing), `before`, `after`, `role` (proof, guard case, declared guard, cannot tell,
    no proof), `guard` (the declaring trailer). Empty in evidence made before the table existed and
    where the before tree is not run case by case (it fails to compile, or passes)."""
    declared: dict = field(default_factory=dict)
    """What the patch declared for this proof when it was made (builder.prove.evidence_rules.declared):
    `tests` (the commands run on this backend), `before`, `backends`, `mutations` (file -> sha256).
    Empty in older evidence (then its after tree's test commands say which tests it ran)."""
    conditions: dict = field(default_factory=dict)
    """What the verdict depended on besides its trees (builder.prove.proofkeys.ProofKeys.conditions):
    `missing` (backends it needed that the machine lacked), `timeout` (each test program's limit, s),
    `env` (LLAMA_*/GGML_* variables set, name -> value hash), `python` (interpreter, version, packages
    hash) for Python tests, `objc` (clang, toolchain) on metal-linux. Empty in older evidence."""
    holds: dict = field(default_factory=dict)
    """Set when a later verify carried this proof over to other trees: `why`, `checked` (when),
    `trees` (tree name -> the tree id it now holds for), `pin` (the pin commit then)."""


def configured_cxx() -> str:
    """The C++ compiler CMake takes: `-DCMAKE_CXX_COMPILER` of `$PATCHSET_CMAKE_ARGS` (the last one wins,
    as in CMake), else `$CXX`, else `c++`."""
    chosen = [w.split("=", 1)[1] for w in user_cmake_args()
              if w.split("=", 1)[0] in ("-DCMAKE_CXX_COMPILER", "-DCMAKE_CXX_COMPILER:FILEPATH",
                                        "-DCMAKE_CXX_COMPILER:STRING", "-DCMAKE_CXX_COMPILER:PATH") and "=" in w]
    return chosen[-1] if chosen else (os.environ.get("CXX") or "c++")


def host_info(cxx: str | None = None) -> dict:
    """This machine as evidence records it; the compiler is the one CMake takes (configured_cxx)."""
    compiler = ""
    try:
        argv = shlex.split(cxx or configured_cxx())
        compiler = proc.run([*argv, "--version"], timeout=30).stdout.splitlines()[0]
    except (ProcessError, IndexError, ValueError, OSError):
        compiler = "unknown"
    host = {"platform": platform.platform(), "machine": platform.machine(), "cpus": os.cpu_count(),
            "python": platform.python_version(), "compiler": compiler}
    extra = os.environ.get(CMAKE_ARGS_ENV, "").strip()
    if extra:  # configure options the user added change what was built: the evidence says so
        host["cmake_args"] = extra
    return host


def paths(evidence_dir: Path, patch: str, backend: str) -> tuple[Path, Path]:
    stem = patch.removesuffix(".patch")
    return evidence_dir / stem / f"{backend}.json", evidence_dir / stem / f"{backend}.md"


def load(evidence_dir: Path, patch: str, backend: str) -> Evidence | None:
    jpath, _ = paths(evidence_dir, patch, backend)
    if not jpath.exists():
        return None
    try:
        return from_dict(json.loads(jpath.read_text()))
    except (ValueError, TypeError, KeyError):
        return None


def from_dict(data: dict) -> Evidence:
    """The record of an evidence JSON object (raises TypeError/KeyError on another format)."""
    d = dict(data)
    d["steps"] = tuple(Step(**{**s, "build_errors": tuple(s.get("build_errors", ())),
                               "tests": tuple(s.get("tests", ())),
                               "comment_only": tuple(s.get("comment_only", ())),
                               "reference_comments": tuple(s.get("reference_comments", ()))}) for s in d["steps"])
    d["hunks"] = tuple(d.get("hunks", ()))
    d["cases"] = tuple(d.get("cases", ()))
    return Evidence(**d)


def write(evidence_dir: Path, ev: Evidence) -> tuple[Path, Path]:
    """Both files of `ev`, each replaced whole. The JSON is what a later verify reads to reuse the
    proof: both texts are made before anything is touched (a record that cannot be written changes
    nothing), the earlier JSON is removed before the new Markdown is written, and the new JSON is
    written last, so a process killed at any point leaves no JSON beside a Markdown of another run."""
    jpath, mpath = paths(evidence_dir, ev.patch, ev.backend)
    text, page = json.dumps(asdict(ev), indent=1) + "\n", markdown(ev)
    jpath.unlink(missing_ok=True)
    atomic_write_text(mpath, page)
    atomic_write_text(jpath, text)
    return jpath, mpath


def markdown(ev: Evidence) -> str:
    out = [f"# {ev.patch} on {ev.backend}: {ev.outcome}", "", f"**{ev.subject}**", "", ev.reason, ""]
    if ev.note:
        out += [f"> {ev.backend}: {ev.note}", ""]
    pin = ev.pin
    out += [f"- pin: {pin.get('name')} {pin.get('tag', '')} `{pin.get('commit')}` (tree `{pin.get('tree')}`)",
            f"- host: {ev.host.get('platform')}, {ev.host.get('cpus')} CPUs; compiler: {ev.host.get('compiler')}",
            f"- run: {ev.created}" + (" (reused: trees unchanged since that run)" if ev.reused else "")]
    if ev.holds:
        trees = ", ".join(f"{k} `{v}`" for k, v in ev.holds.get("trees", {}).items())
        out.append(f"- earlier proof holds (checked {ev.holds.get('checked')}): {ev.holds.get('why')}; "
                   f"for the trees {trees}, not rebuilt or rerun")
    if ev.depends.get("files"):
        out.append(f"- built from {len(ev.depends['files'])} files of the tree (paths and blob ids in the JSON)")
    out.append("")
    if not ev.steps:
        out += ["Nothing was built or run for this patch on this backend here.", ""]
    for s in ev.steps:
        out += [f"## {s.tree} tree{f' ({s.label})' if s.label else ''}: {s.verdict}", "",
                f"- commit `{s.commit}`, tree `{s.tree_id}`",
                f"- build: {'ok' if s.build_ok else 'FAILED'} in {s.build_duration_s:.1f}s: `{s.build_command}`"]
        if s.comment_only:
            out.append(f"- changed in comments and whitespace only since the tree built before it, so not compiled "
                       f"again: {', '.join(f'`{f}`' for f in s.comment_only)}")
        if s.reference_comments:
            out.append(f"- checked out as the series head has them, which differ from this tree's in comments and "
                       f"whitespace only (the same code): {', '.join(f'`{f}`' for f in s.reference_comments)}")
        if s.build_errors:
            where = "only in the patch's test files" if s.errors_only_in_test_paths else "outside the test files"
            out.append(f"- compiler errors ({where}):")
            out += ["  ```", *[f"  {e}" for e in s.build_errors[:10]], "  ```"]
        for t in s.tests:
            counts = f"{t['passed']} passed, {t['failed']} failed, {t['skipped']} skipped"
            took = f"{t['duration_s']:.2f}s"
            how = f"killed by {t['signal']}" if t.get("signal") else f"exit {t['returncode']}"
            out.append(f"- `{t['command']}`: {how}, {t['verdict']} ({counts}) in {took}")
            if t.get("failing"):
                out += ["  ```", *[f"  {line}" for line in t["failing"][:15]], "  ```"]
            if t.get("notes"):
                out += ["  dispatches:", "  ```", *[f"  {line}" for line in t["notes"][:15]], "  ```"]
        out.append("")
    out += cases.markdown(ev.cases)
    if ev.hunks_checked:
        out += hunk_table(ev.hunks)
    return "\n".join(out)


def hunk_table(hunks: tuple[dict, ...]) -> list[str]:
    """The per-hunk table of `verify --hunks`, in Markdown."""
    counts: dict[str, int] = {}
    for h in hunks:
        counts[h["outcome"]] = counts.get(h["outcome"], 0) + 1
    summary = ", ".join(f"{n} {o}" for o, n in counts.items())
    out = ["## each hunk of the fix reverted on its own", "", f"{len(hunks)} hunk(s): {summary}", "",
           "| file | lines | function | +/- | outcome | why |", "| --- | --- | --- | --- | --- | --- |"]
    for h in hunks:
        why = h["reason"]
        if h.get("failing"):
            why += ": " + "; ".join(f"`{f}`" for f in h["failing"][:3]) + (" ..." if len(h["failing"]) > 3 else "")
        if h.get("errors"):
            why += ": `" + h["errors"][0] + "`"
        section = h.get("section", "").replace("|", "\\|")
        part = f" ({h['part']})" if h.get("part") else ""
        out.append(f"| `{h['file']}` | {h['lines']}{part} | `{section}` | +{h['added']}/-{h['removed']} | "
                   f"{h['outcome']} | {why.replace('|', '/')} |")
    out.append("")
    return out

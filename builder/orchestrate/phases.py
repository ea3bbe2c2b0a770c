"""Where the time of `patchset all` went, phase by phase.

Each phase with its seconds, whether it was reused, and what the compiler cache did in it
(ccache's machine-readable counters, read before and after).

The document `all --json` writes is `AllReport.to_json()`; docs/all.md describes its schema (a test
checks the keys).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from builder.compile.toolchain import CcacheStats, ccache_stats, find_ccache
from builder.fsutil import atomic_write_text
from builder.prove.proofkeys import read_environment

SCHEMA = "patchset-all/1"


@dataclass(frozen=True)
class Phase:
    name: str
    """fetch, apply, build, test or verify."""
    seconds: float
    reused: bool
    """Nothing had to be done: the cache, the applied series, the build or the evidence already held."""
    detail: str = ""
    ccache: CcacheStats | None = None
    """ccache's hits and misses during the phase; None where ccache was not used (or not readable)."""
    patch: str | None = None
    """verify: the patch this phase proved."""
    backend: str | None = None
    outcome: str | None = None
    """verify: the verdict."""
    evidence: str | None = None
    """verify: the evidence file (Markdown) the verdict is recorded in."""

    def to_json(self) -> dict:
        return {"name": self.name, "seconds": round(self.seconds, 3), "reused": self.reused, "detail": self.detail,
                "ccache": _cache_json(self.ccache),
                "patch": self.patch, "backend": self.backend, "outcome": self.outcome, "evidence": self.evidence}


@dataclass
class PhaseClock:
    """Records the phases of one run in order."""

    phases: list[Phase] = field(default_factory=list)
    ccache: str | None = field(default_factory=find_ccache)
    verify_ccache: CcacheStats | None = None
    """ccache during the whole verify (one call proves every patch: its counters are not per patch)."""
    at_once: bool = False
    """The build and test phases ran beside verify (`all` with lanes): `verify_ccache` is theirs too."""

    def stats(self) -> CcacheStats | None:
        return ccache_stats(self.ccache) if self.ccache else None

    @contextmanager
    def phase(self, name: str, *, compiles: bool = True) -> Iterator[dict]:
        """Times the block; the block fills `reused` and `detail` (and may give `ccache` itself).
        `compiles=False`: a phase that runs no compiler (its ccache counters are not read)."""
        before = self.stats() if compiles else None
        start = time.perf_counter()
        info: dict = {"reused": False, "detail": ""}
        try:
            yield info
        finally:
            seconds = time.perf_counter() - start
            cache = info.pop("ccache", None)
            if cache is None and before is not None:
                after = self.stats()
                cache = after.minus(before) if after is not None else None
            self.phases.append(Phase(name, seconds, ccache=cache, **info))

    def add(self, phase: Phase) -> None:
        self.phases.append(phase)

    def report(self, backend: str, started: float) -> AllReport:
        return AllReport(backend, tuple(self.phases), time.perf_counter() - started, self.verify_ccache, self.at_once)


@dataclass(frozen=True)
class AllReport:
    backend: str
    phases: tuple[Phase, ...]
    total_seconds: float
    verify_ccache: CcacheStats | None = None
    at_once: bool = False
    """The build and test phases ran beside verify: their seconds overlap its, and `verify_ccache` counts all three."""

    @property
    def reused(self) -> int:
        return sum(p.reused for p in self.phases)

    @property
    def evidence_reused(self) -> int:
        return sum(p.reused for p in self.phases if p.name == "verify")

    @property
    def ccache(self) -> CcacheStats | None:
        counted = [c for c in (*(p.ccache for p in self.phases), self.verify_ccache) if c is not None]
        if not counted:
            return None
        return CcacheStats(sum(c.hits for c in counted), sum(c.misses for c in counted))

    def to_json(self, tests: dict | None = None) -> dict:
        cache = self.ccache
        return {"format": SCHEMA, "schema": SCHEMA, "backend": self.backend,
                "total_seconds": round(self.total_seconds, 3),
                "phases": [p.to_json() for p in self.phases],
                "reused": {"phases": self.reused, "of": len(self.phases), "evidence": self.evidence_reused},
                "ccache": _cache_json(cache), "verify_ccache": _cache_json(self.verify_ccache),
                "at_once": self.at_once, "tests": tests}


def _cache_json(cache: CcacheStats | None) -> dict | None:
    return None if cache is None else {"hits": cache.hits, "misses": cache.misses}


def tests_key(backend: str, bin_dir: Path, commit: str, tree: str, declared: list[tuple[str, tuple[str, ...]]],
              timeout: float | None, cores: int | None) -> dict:
    """What the tests' results of `all` depend on: the tree built, the programs as built (name, size,
    modification time), the tests the series declares, the time limit, the cores the programs are shown
    (None: the machine's) and the environment the tests read (as a verdict's key holds it:
    builder.prove.proofkeys.read_environment)."""
    programs = sorted((f.name, f.stat().st_size, f.stat().st_mtime_ns) for f in bin_dir.iterdir() if f.is_file()) \
        if bin_dir.is_dir() else []
    return {"backend": backend, "commit": commit, "tree": tree, "programs": [list(p) for p in programs],
            "declared": [[prog, list(args)] for prog, args in declared], "timeout": timeout, "cores": cores,
            "env": read_environment()}


def reusable_tests(record: Path, key: dict) -> dict | None:
    """The test results an earlier `all` recorded for exactly `key`, when they passed; else None (a
    failed or missing record: the tests run again)."""
    try:
        data = json.loads(record.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or data.get("key") != key:
        return None
    tests = data.get("tests")
    if not isinstance(tests, dict) or tests.get("failed") or tests.get("nothing_checked"):
        return None
    return tests


def record_tests(record: Path, key: dict, tests: dict) -> None:
    record.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(record, json.dumps({"key": key, "tests": tests}, indent=1) + "\n")

"""Fault injection: a `patchset` process killed with SIGKILL at many points, then run again.

The points are chosen by a counter over the subprocesses the process starts (the one runner,
builder.proc, kills the process just before its Nth subprocess when PATCHSET_FAULT_KILL_AT=N).
After the kill the same command is run again: it must complete as a run never killed does, and
leave cache, work repository, patches/ and the pin consistent: every ref resolves, `git fsck`
is clean, patches/ and the pin are byte-identical to the never-killed run's. `patchset gc` then
removes what the killed run left behind.

The fast suite tries one point per command; the integration marker six spread over each
command's points, and every point with PATCHSET_FAULT_ALL=1.
"""

from __future__ import annotations

import os
import shutil
import signal
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from helpers import (
    PATCH3_TEST_X_C,
    VERIFY_PATCHES,
    Upstream,
    commit,
    fsck_clean,
    git,
    make_project,
    make_upstream,
    run_patchset,
)

from builder.series.workrepo import WorkRepo

KILLED = -signal.SIGKILL


@dataclass
class Scenario:
    """A project prepared up to the command under test, kept as a template to restore."""

    base: Path
    up: Upstream
    args: tuple[str, ...]

    @property
    def live(self) -> Path:
        return self.base / "w"

    @property
    def template(self) -> Path:
        return self.base / "template"

    @property
    def root(self) -> Path:
        return self.live / "proj"

    @property
    def cache(self) -> Path:
        return self.live / "cache"

    @property
    def env(self) -> dict[str, str]:
        return {"PATCHSET_CACHE": str(self.cache)}

    def run(self, *args: str, **env: str) -> tuple[int, str]:
        r = run_patchset("--project", str(self.root), *(args or self.args), env={**self.env, **env})
        return r.returncode, r.stdout + r.stderr

    def save(self) -> None:
        shutil.copytree(self.live, self.template, symlinks=True)

    def restore(self) -> None:
        # the same absolute paths as the template: alternates and worktrees name them
        shutil.rmtree(self.live)
        shutil.copytree(self.template, self.live, symlinks=True)

    def count_points(self) -> int:
        trace = self.base / "trace"
        trace.unlink(missing_ok=True)
        rc, out = self.run(PATCHSET_FAULT_TRACE=str(trace))
        assert rc in (0, 1), out
        self.restore()
        return len(trace.read_text().splitlines())


@dataclass(frozen=True)
class Outcome:
    """What a finished run leaves that must not depend on whether an earlier run was killed."""

    returncode: int
    patches: dict[str, bytes]
    pin: bytes
    patched_tree: str | None
    evidence: dict[str, str]


def observe(s: Scenario, rc: int) -> Outcome:
    patches = {p.relative_to(s.root / "patches").as_posix(): p.read_bytes()
               for p in sorted((s.root / "patches").rglob("*")) if p.is_file()}
    work = s.root / ".patchset" / "work" / "llama.cpp"
    tree = git(work, "rev-parse", "patched^{tree}") if (work / ".git").is_dir() else None
    evidence = {p.relative_to(s.root).as_posix(): _outcome_line(p)
                for p in sorted((s.root / ".patchset" / "evidence").rglob("*.md"))}
    return Outcome(rc, patches, (s.root / "upstream" / "llama.cpp.toml").read_bytes(), tree, evidence)


def _outcome_line(md: Path) -> str:
    return md.read_text().splitlines()[0]


def consistent(s: Scenario) -> None:
    cache_repo = s.cache / "upstream" / "llama.cpp.git"
    if cache_repo.is_dir():
        fsck_clean(cache_repo)
    work = s.root / ".patchset" / "work" / "llama.cpp"
    if (work / ".git").is_dir():
        fsck_clean(work)
        state = WorkRepo(work).load_state()
        assert state.op is None, f"an operation is left in the state: {state.op}"
        assert not (work / ".git" / "rebase-apply").exists()
    left = [p for p in s.root.rglob("*.tmp")] + [p for p in (s.root / "patches").rglob(".*")]
    assert left == [], f"half-written files left: {left}"


# -- the scenarios -----------------------------------------------------------------------------------
def _base(tmp_path: Path, args: tuple[str, ...]) -> Scenario:
    up = make_upstream(tmp_path)
    s = Scenario(tmp_path, up, args)
    make_project(s.live, up, s.cache)
    return s


def fetch_scenario(tmp_path: Path) -> Scenario:
    return _base(tmp_path, ("fetch",))


def apply_scenario(tmp_path: Path) -> Scenario:
    s = _base(tmp_path, ("apply",))
    assert s.run("fetch")[0] == 0
    return s


def refresh_scenario(tmp_path: Path) -> Scenario:
    s = _base(tmp_path, ("refresh",))
    assert s.run("apply")[0] == 0
    work = s.root / ".patchset" / "work" / "llama.cpp"
    # the last patch amended, and a new commit on top: refresh rewrites one file and adds one
    (work / "tests" / "test-x.c").write_text(PATCH3_TEST_X_C + "/* NULL is covered */\n")
    git(work, "commit", "--quiet", "--all", "--amend", "--no-edit")
    commit(work, {"README": "tiny upstream, with a note\n"}, "README: a note\n")
    return s


def rebase_scenario(tmp_path: Path) -> Scenario:
    s = _base(tmp_path, ("apply",))
    assert s.run("apply")[0] == 0
    new = s.up.advance({"README": "tiny upstream, moved on\n"}, "README: moved on\n")
    s.args = ("rebase", "--onto", new)
    return s


def verify_scenario(tmp_path: Path) -> Scenario:
    # the tiny upstream has no ggml/ to build: verify makes every tree, its refs and its worktree,
    # configures, and records "build failed" evidence, in seconds
    up = make_upstream(tmp_path)
    s = Scenario(tmp_path, up, ("verify", "--backend", "cpu", "-j", "2"))
    make_project(s.live, up, s.cache, patches=VERIFY_PATCHES)
    assert s.run("apply")[0] == 0
    return s


SCENARIOS: dict[str, Callable[[Path], Scenario]] = {
    "fetch": fetch_scenario, "apply": apply_scenario, "refresh": refresh_scenario, "rebase": rebase_scenario,
    "verify": verify_scenario,
}


def kill_and_rerun(s: Scenario, points: list[int]) -> int:
    """Kill at each point, run again, compare with the never-killed run; the number of points tried."""
    rc, out = s.run()
    reference = observe(s, rc)
    consistent(s)
    s.restore()
    tried = 0
    for k in points:
        rc, out = s.run(PATCHSET_FAULT_KILL_AT=str(k))
        assert rc == KILLED, f"point {k}: the run was not killed (exit {rc}): {out}"
        rc, out = s.run()
        assert rc == reference.returncode, f"point {k}: the run after the kill exited {rc}:\n{out}"
        got = observe(s, rc)
        assert got == reference, f"point {k}: the result differs from a run never killed"
        consistent(s)
        rc, out = s.run("gc", "--older-than", "1000")
        assert rc == 0, out
        assert not (s.cache / "tmp").is_dir() or list((s.cache / "tmp").iterdir()) == [], out
        tried += 1
        s.restore()
    return tried


@pytest.mark.parametrize("verb", list(SCENARIOS))
def test_killed_run_then_rerun(tmp_path: Path, verb: str) -> None:
    s = SCENARIOS[verb](tmp_path)
    s.save()
    n = s.count_points()
    assert n >= 2
    # one point in the middle here; every point under the integration marker
    assert kill_and_rerun(s, [n // 2 + 1]) == 1


def _points(n: int) -> list[int]:
    """Every point with PATCHSET_FAULT_ALL=1 (169 points, about half an hour on 2 busy cores);
    else six spread over 1..n, the first and the last among them (the CI budget is shared)."""
    if os.environ.get("PATCHSET_FAULT_ALL") == "1" or n <= 6:
        return list(range(1, n + 1))
    return sorted({1 + round(i * (n - 1) / 5) for i in range(6)})


@pytest.mark.integration
@pytest.mark.parametrize("verb", list(SCENARIOS))
def test_killed_at_many_points(tmp_path: Path, verb: str, record_property: Callable[[str, object], None]) -> None:
    s = SCENARIOS[verb](tmp_path)
    s.save()
    n = s.count_points()
    points = _points(n)
    tried = kill_and_rerun(s, points)
    record_property("kill_points", f"{tried} of {n}")
    print(f"{verb}: {tried} of {n} kill points")
    assert tried == len(points)

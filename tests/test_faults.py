"""Fault injection: a `patchset` process killed with SIGKILL at many points, then run again.

The points are chosen by a counter over the subprocesses the process starts and the files it
writes (builder.proc kills the process just before its Nth point when PATCHSET_FAULT_KILL_AT=N;
PATCHSET_FAULT_TRACE lists them). Each killed run's own trace must end at the point it was meant to
die at: a point that is never reached fails the test instead of passing unseen.
After the kill the same command is run again: it must complete as a run never killed does, and
leave cache, work repository, patches/ and the pin consistent: every ref resolves, `git fsck`
is clean, patches/ and the pin are byte-identical to the never-killed run's. `patchset gc` then
removes what the killed run left behind.

The series verbs `drop`, `move` and `mark` are killed the same way.
The fast suite tries one point per command (verify's: between the two evidence files; verify in two
lanes at once: one lane's evidence half written while the other is at work); the
integration marker six spread over each command's points (verify's test program runs and evidence
writes among them), and every point with PATCHSET_FAULT_ALL=1.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import signal
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from helpers import (
    NOTE,
    PATCH3_TEST_X_C,
    UPSTREAM_FILES,
    Upstream,
    commit,
    fsck_clean,
    git,
    make_project,
    make_upstream,
    run_patchset,
    sdist_first,
    sdist_with_commit,
)

from builder.gitrepo import GitRepo
from builder.series.workrepo import WorkRepo
from builder.upstream.fetch import stand_in
from builder.upstream.pin import SdistSource, load_pin
from tests.test_cli_pipeline import SUB_FIX, UPSTREAM, program

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

    def traced_run(self, trace: Path, **env: str) -> tuple[int, str, dict[int, str]]:
        """A run with its points traced: exit code, output, and each point's label by its number."""
        trace.unlink(missing_ok=True)
        rc, out = self.run(PATCHSET_FAULT_TRACE=str(trace), **env)
        return rc, out, numbered(trace)


def numbered(trace: Path) -> dict[int, str]:
    """The points of a trace (`PID N LABEL` lines) by their number N, without the pid. The lines
    are written as the points are reached, by threads too: N, not the line's place, is the order."""
    points = {}
    for line in trace.read_text().splitlines() if trace.exists() else []:
        _pid, n, label = line.split(" ", 2)
        points[int(n)] = label
    return points


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
    # the calc tree laid out like llama.cpp, one fix with its test program: verify builds the tree
    # with the fix and without it, runs the test on each, and writes its evidence (JSON, Markdown)
    up = make_upstream(tmp_path)
    c0 = up.advance({**UPSTREAM, "src/a.c": None, "src/b.c": None, "tests/test-x.c": None}, "calc\n")
    up = dataclasses.replace(up, commit=c0, tree=up.tree_of(c0))
    s = Scenario(tmp_path, up, ("verify", "--backend", "cpu", "-j", "2"))
    fix = ({"ggml/src/calc.c": SUB_FIX, "tests/test-sub.cpp": program("SUB", "calc_sub(5, 3)", 2)},
           "calc : sub subtracts\n\nPatchset-Status: pending\nPatchset-Backends: cpu\nPatchset-Test: test-sub\n"
           "Patchset-Test-Paths: tests/test-sub.cpp\n")
    make_project(s.live, up, s.cache, patches=[fix])
    assert s.run("apply")[0] == 0
    return s


def verify_lanes_scenario(tmp_path: Path) -> Scenario:
    """verify's scheduler: two patches proven in two lanes at once (two worktrees and build folders, one
    jobserver), killed while one lane has written its evidence and the other is still at work."""
    s = verify_scenario(tmp_path)
    s.args = ("verify", "--backend", "cpu", "-j", "2", "--lanes", "2")
    add = ({"tests/test-add2.cpp": program("ADD2", "calc_add(2, 3)", 5)},
           "calc : a test of add\n\nPatchset-Status: pending\nPatchset-Backends: cpu\nPatchset-Test: test-add2\n"
           "Patchset-Test-Paths: tests/test-add2.cpp\n")
    work = s.root / ".patchset" / "work" / "llama.cpp"
    commit(work, *add)
    assert s.run("refresh")[0] == 0
    return s


def all_at_once_scenario(tmp_path: Path) -> Scenario:
    """`all` with its build and tests beside the proofs (issue 44): the patched tree built and tested in a thread
    of its own while two lanes prove the two patches, on one jobserver; killed anywhere up to the first evidence
    written (the order of the threads' points varies from run to run after that)."""
    s = verify_lanes_scenario(tmp_path)
    s.args = ("all", "-j", "8", "--lanes", "2")
    return s


def series_verb_scenario(*args: str) -> Callable[[Path], Scenario]:
    """A series verb (`drop`, `move`, `mark`) on the applied standard series."""
    def make(tmp_path: Path) -> Scenario:
        s = _base(tmp_path, args)
        assert s.run("apply")[0] == 0
        return s
    return make


def import_scenario(tmp_path: Path) -> Scenario:
    """`import` of a pull request's .patch (two mails) on the applied standard series."""
    pr = tmp_path / "pr.patch"
    s = _base(tmp_path, ("import", str(pr), "--origin", "https://github.com/ggml-org/llama.cpp/pull/1"))
    assert s.run("apply")[0] == 0
    clone = tmp_path / "fork"
    git(tmp_path, "clone", "--quiet", str(s.up.bare), str(clone))
    first = commit(clone, {"docs/a.md": "a\n"}, "docs : a\n")
    commit(clone, {"docs/b.md": "b\n"}, "docs : b\n")
    pr.write_text(git(clone, "format-patch", "--stdout", f"{first}~1..HEAD") + "\n")
    return s


def undo_move_scenario(verb: str) -> Callable[[Path], Scenario]:
    """`undo` of a finished rebase (or of a bump's move, which leaves the same kind of recovery ref)."""
    def make(tmp_path: Path) -> Scenario:
        s = _base(tmp_path, ("undo",))
        assert s.run("apply")[0] == 0
        new = s.up.advance({"README": "tiny upstream, moved on\n"}, "README: moved on\n")
        assert s.run(verb, "--onto", new)[0] == 0
        return s
    return make


def stand_in_scenario(tmp_path: Path) -> Scenario:
    """`apply` on a cache and work repository that an earlier patchset made on a stand-in commit: the
    cache moves onto upstream's own commit read from the sdist, the work repository's branches follow."""
    up = make_upstream(tmp_path)
    c1 = up.advance(NOTE, "upstream: a note\n")
    up = dataclasses.replace(up, commit=c1, tree=up.tree_of(c1))
    archive = sdist_with_commit(tmp_path / "dist" / "pkg-1.0.tar.gz", up, c1, {**UPSTREAM_FILES, **NOTE})
    s = Scenario(tmp_path, up, ("apply",))
    make_project(s.live, up, s.cache, sources=sdist_first(archive, up))
    assert s.run("apply")[0] == 0
    # the cache as the old code left it (the archive marked read while `apply` moves the work onto it)
    cache = s.cache / "upstream" / "llama.cpp.git"
    pin = load_pin(s.root / "upstream" / "llama.cpp.toml")
    src = pin.sources[0]
    assert isinstance(src, SdistSource)
    old = stand_in(GitRepo(cache), pin, src, pin.tree)
    record = cache / "patchset-pins" / f"{pin.commit}.json"
    info = {**json.loads(record.read_text()), "local": old}
    record.write_text(json.dumps({**info, "archive_read": True}))
    git(cache, "update-ref", f"refs/patchset/pins/{pin.commit}", old)
    assert s.run("apply")[0] == 0
    assert git(s.root / ".patchset" / "work" / "llama.cpp", "rev-parse", "upstream") == old
    record.write_text(json.dumps(info))
    (cache / "shallow").unlink()
    (cache / "objects" / c1[:2] / c1[2:]).unlink()
    return s


SCENARIOS: dict[str, Callable[[Path], Scenario]] = {
    "fetch": fetch_scenario, "apply": apply_scenario, "refresh": refresh_scenario, "rebase": rebase_scenario,
    "verify": verify_scenario, "verify-lanes": verify_lanes_scenario, "all-at-once": all_at_once_scenario,
    "drop": series_verb_scenario("drop", "2"), "move": series_verb_scenario("move", "3", "--before", "1"),
    "mark": series_verb_scenario("mark", "1", "sent", "https://github.com/ggml-org/llama.cpp/pull/1"),
    "undo-rebase": undo_move_scenario("rebase"), "apply-stand-in": stand_in_scenario,
    "drop-reason": series_verb_scenario("drop", "2", "--reason", "upstream took another design"),
    "import": import_scenario,
}


def shape(label: str) -> str:
    """What a point is, the same in every run: its program and git's subcommand (or the program
    run) in brackets, or the name of the file written (temporary folders differ between runs)."""
    words = label.split()
    return " ".join([Path(words[0]).name, *([Path(words[1]).name] if words[0] == "write" else []), words[-1]])


@dataclass(frozen=True)
class Reference:
    """A run never killed: what it leaves, and its points in order."""

    outcome: Outcome
    points: list[str]


def reference_run(s: Scenario) -> Reference:
    rc, out, points = s.traced_run(s.base / "trace")
    assert rc in (0, 1, 4), out
    assert sorted(points) == list(range(1, len(points) + 1)), "the points are not numbered 1..N"
    ref = Reference(observe(s, rc), [points[n] for n in sorted(points)])
    consistent(s)
    s.restore()
    return ref


def kill_and_rerun(s: Scenario, ref: Reference, points: list[int], *, ordered: bool = False) -> None:
    """Kill at each point, run again, compare with the never-killed run.

    The killed run must have reached the point (its trace has point k: a point never reached would
    leave the run alive), and the point is one the never-killed run has: the same one at k for a
    command whose points come in one order (`ordered`: verify), else any (apply parses mails and the
    sweep builds two trees in threads, so their points interleave differently in each run).
    """
    for k in points:
        rc, out, got_points = s.traced_run(s.base / "killed-trace", PATCHSET_FAULT_KILL_AT=str(k))
        assert rc == KILLED, f"point {k}: the run was not killed (exit {rc}): {out}"
        assert k in got_points, f"point {k}: the killed run never reached it ({len(got_points)} points)"
        if ordered:
            assert shape(got_points[k]) == shape(ref.points[k - 1]), f"point {k}: killed at {got_points[k]}"
        else:
            assert shape(got_points[k]) in {shape(p) for p in ref.points}, \
                f"point {k}: killed at {got_points[k]}, never reached unkilled"
        rc, out = s.run()
        assert rc == ref.outcome.returncode, f"point {k}: the run after the kill exited {rc}:\n{out}"
        got = observe(s, rc)
        assert got == ref.outcome, f"point {k} ({ref.points[k - 1]}): the result differs from a run never killed"
        consistent(s)
        rc, out = s.run("gc", "--older-than", "1000")
        assert rc == 0, out
        assert not (s.cache / "tmp").is_dir() or list((s.cache / "tmp").iterdir()) == [], out
        s.restore()


def _first(ref: Reference, what: str) -> int:
    """The number of the first point whose label contains `what`; fails when no point does."""
    found = [i for i, label in enumerate(ref.points, 1) if what in label]
    assert found, f"no point '{what}' among the {len(ref.points)} points: {ref.points}"
    return found[0]


def _verify_points(ref: Reference) -> list[int]:
    """Verify's points inside its test runs and its evidence writing: the test program run on the
    tree with the fix, and the second of the two evidence files (JSON, Markdown) written."""
    return [_first(ref, "/test-sub "), max(_first(ref, "/cpu.json [write]"), _first(ref, "/cpu.md [write]"))]


def _one_point(verb: str, ref: Reference) -> list[int]:
    if verb == "verify":
        return _verify_points(ref)[1:]
    if verb in ("verify-lanes", "all-at-once"):
        # one lane's evidence half written (its JSON, not yet its Markdown), the other lane's patch at work
        assert _first(ref, "verify-cpu-minimal-1"), "the second lane never built"
        return [_first(ref, ".md [write]")]
    return [len(ref.points) // 2 + 1]


@pytest.mark.parametrize("verb", list(SCENARIOS))
def test_killed_run_then_rerun(tmp_path: Path, verb: str) -> None:
    s = SCENARIOS[verb](tmp_path)
    s.save()
    ref = reference_run(s)
    assert len(ref.points) >= 2
    # one point here (verify's: one evidence file written, the other not yet); more under the integration marker
    kill_and_rerun(s, ref, _one_point(verb, ref), ordered=verb == "verify")


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
    ref = reference_run(s)
    # two lanes at once: after the first evidence is written, how many children the rest starts depends on
    # which lane took which patch (a CI rehearsal's rerun ended before the reference's last point), so the
    # points are taken up to that first write, which every run reaches
    n = _first(ref, ".md [write]") if verb in ("verify-lanes", "all-at-once") else len(ref.points)
    points = sorted(set(_points(n)) | set(_verify_points(ref) if verb == "verify" else []))
    kill_and_rerun(s, ref, points, ordered=verb == "verify")
    record_property("kill_points", f"{len(points)} of {len(ref.points)}")
    print(f"{verb}: {len(points)} of {len(ref.points)} kill points: {[ref.points[k - 1] for k in points]}")

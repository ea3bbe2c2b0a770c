"""The commands that build, test, verify and slice, through the CLI, on a small tree laid out like
llama.cpp: exit codes 0, 1 and 4, builds and reports that say which tree they are of, a test
program stopped at its limit, slices of another ref, and damaged records as one-line errors."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tarfile
import time
import tomllib
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path

import pytest
from helpers import commit, git, json_document, make_upstream, patchset_argv, pin_toml, write_patches

from builder.cli import main

CALC_H = """\
#pragma once
#ifdef __cplusplus
extern "C" {
#endif
int calc_add(int a, int b);
int calc_sub(int a, int b);
#ifdef __cplusplus
}
#endif
"""
CALC_C = ('#include "calc.h"\nint calc_add(int a, int b) { return a + b; }\n'
          "int calc_sub(int a, int b) { return a + b; }\n")


def program(name: str, expr: str, want: int) -> str:
    # prints like ggml's test programs; hangs when PATCHSET_TEST_HANG names its case, to test the limit
    return f"""\
#include "calc.h"
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <unistd.h>
int main() {{
    printf("Backend 1/1: CPU\\n");
    const char * hang = getenv("PATCHSET_TEST_HANG");
    if (hang && strcmp(hang, "{name}") == 0) {{ printf("  {name}(hang=1): "); fflush(stdout); for (;;) pause(); }}
    bool ok = ({expr}) == {want};
    printf("  {name}(want={want}): %s\\n", ok ? "OK" : "FAIL");
    printf("  %d/1 tests passed\\n", ok ? 1 : 0);
    return ok ? 0 : 1;
}}
"""


UPSTREAM = {
    # an object library: a static one costs an ar and a ranlib per build, and the suite builds it hundreds of times
    "ggml/CMakeLists.txt": "add_library(ggml OBJECT src/calc.c)\ntarget_include_directories(ggml PUBLIC include)\n",
    "ggml/include/calc.h": CALC_H, "ggml/src/calc.c": CALC_C, "README": "mini\n",
    "tests/test-opt.cpp": program("OPT", "calc_add(1, 1)", 2),
    "tests/test-backend-ops.cpp": program("ACC", "calc_add(2, 2)", 4),
}
SUB_FIX = CALC_C.replace("int calc_sub(int a, int b) { return a + b; }", "int calc_sub(int a, int b) { return a - b; }")


@dataclass
class Mini:
    root: Path
    cache: Path

    @property
    def work(self) -> Path:
        return self.root / ".patchset" / "work" / "llama.cpp"

    def cli(self, *args: str) -> int:
        return main(["--project", str(self.root), *args])


@pytest.fixture(scope="module")
def mini(tmp_path_factory: pytest.TempPathFactory) -> Mini:
    base = tmp_path_factory.mktemp("mini")
    up = make_upstream(base)
    c0 = commit(up.src, {**UPSTREAM, "src/a.c": None, "src/b.c": None, "tests/test-x.c": None}, "mini llama\n")
    git(up.src, "push", "--quiet", str(up.bare), "HEAD:refs/heads/main")
    root = base / "proj"
    (root / "upstream").mkdir(parents=True)
    (root / "upstream" / "llama.cpp.toml").write_text(
        pin_toml(c0, up.tree_of(c0), [{"kind": "git", "url": up.url}]))
    scratch = base / "scratch"
    git(base, "clone", "--quiet", str(up.bare), str(scratch))
    fix = commit(scratch, {"ggml/src/calc.c": SUB_FIX, "tests/test-sub.cpp": program("SUB", "calc_sub(5, 3)", 2)},
                 "calc : sub subtracts\n\nPatchset-Status: pending\nPatchset-Backends: cpu\n"
                 "Patchset-Test: test-sub\nPatchset-Test-Paths: tests/test-sub.cpp\n")
    # its test passes without it: not proven, verify exits 4
    doc = commit(scratch, {"ggml/include/calc.h": CALC_H.replace("#pragma once\n", "#pragma once\n// calc\n"),
                           "tests/test-add.cpp": program("ADD", "calc_add(2, 3)", 5)},
                 "calc : document the header\n\nPatchset-Status: pending\nPatchset-Backends: cpu\n"
                 "Patchset-Test: test-add\nPatchset-Test-Paths: tests/test-add.cpp\n")
    (root / "patches").mkdir()
    write_patches(root / "patches", scratch, [fix, doc])
    return Mini(root, base / "cache")


@pytest.fixture(autouse=True)
def _mini_cache(mini: Mini, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATCHSET_CACHE", str(mini.cache))


@pytest.fixture
def built(mini: Mini, capsys: pytest.CaptureFixture[str]) -> None:
    """The mini project applied and built by this test itself (a no-op build after another test's
    build of the same tree): each test runs alone (`pytest -k NAME`) and in any order."""
    assert mini.cli("build", "-j", "2") == 0
    capsys.readouterr()


def test_build_records_the_tree_it_built(mini: Mini, capsys: pytest.CaptureFixture[str]) -> None:
    assert mini.cli("build", "-j", "2") == 0
    record = json.loads((mini.root / ".patchset" / "build" / "cpu-minimal" / ".patchset-built.json").read_text())
    assert record["commit"] == git(mini.work, "rev-parse", "patched")
    assert record["tree"] == git(mini.work, "rev-parse", "patched^{tree}")
    assert "build cpu/minimal ok" in capsys.readouterr().out


@pytest.mark.usefixtures("built")
def test_reports_say_which_tree_was_tested(mini: Mini, tmp_path: Path) -> None:
    js, xml = tmp_path / "r.json", tmp_path / "r.xml"
    assert mini.cli("test", "--json", str(js), "--junit", str(xml)) == 0
    tree = git(mini.work, "rev-parse", "patched^{tree}")
    data = json_document(js.read_text())
    assert data["source"] == {"commit": git(mini.work, "rev-parse", "patched"), "tree": tree}
    assert [p["program"] for p in data["programs"]] == ["test-opt", "test-backend-ops", "test-sub", "test-add"]
    suites = ET.parse(xml).getroot()
    assert {p.get("value") for p in suites.iter("property") if p.get("name") == "source_tree"} == {tree}


def test_test_refuses_a_build_of_another_tree(mini: Mini, capsys: pytest.CaptureFixture[str]) -> None:
    patch = next((mini.root / "patches").glob("0001-*.patch"))
    original = patch.read_bytes()
    try:
        # the series changes and is re-applied; the build is of the tree before
        patch.write_bytes(original.replace(b"+int calc_sub(int a, int b) { return a - b; }",
                                           b"+int calc_sub(int a, int b) { return a - b + 1; }"))
        assert mini.cli("apply") == 0
        capsys.readouterr()
        assert mini.cli("test") == 1
        err = capsys.readouterr().err
        assert "run `patchset build` first" in err and "Traceback" not in err
        # built again, the test runs, and its failure (the broken fix) is exit 1
        assert mini.cli("build", "-j", "2") == 0
        capsys.readouterr()
        assert mini.cli("test") == 1
        assert "FAIL test-sub" in capsys.readouterr().out
        # an edit in the work tree is another tree too
        (mini.work / "README").write_text("mini, edited\n")
        assert mini.cli("test") == 1
        assert "run `patchset build` first" in capsys.readouterr().err
    finally:
        (mini.work / "README").write_text("mini\n")
        patch.write_bytes(original)
    assert mini.cli("apply") == 0
    assert mini.cli("build", "-j", "2") == 0
    assert mini.cli("test") == 0


@pytest.mark.usefixtures("built")
def test_a_hanging_test_program_is_stopped_at_the_limit(mini: Mini, capsys: pytest.CaptureFixture[str],
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    # test-opt hangs (the others run as usual: one limit to wait for, not four)
    monkeypatch.setenv("PATCHSET_TEST_HANG", "OPT")
    assert mini.cli("test", "--timeout", "2") == 1
    out = capsys.readouterr().out
    assert "stopped after 2s (time limit)" in out
    assert "last lines it printed" in out and "OPT(hang=1)" in out


def test_verify_not_proven_is_exit_4(mini: Mini, capsys: pytest.CaptureFixture[str]) -> None:
    assert mini.cli("verify", "--backend", "cpu", "-j", "2") == 4
    out = capsys.readouterr().out
    # one verdict per patch, each on its own row: the fix proven, the patch whose test passes without it not
    rows = {line.split()[1]: line for line in out.splitlines() if line.startswith("│ 000")}
    assert sorted(rows) == ["0001-calc-sub-subtracts.patch", "0002-calc-document-the-header.patch"], out
    assert "│ proven " in rows["0001-calc-sub-subtracts.patch"], out
    assert "│ not proven " in rows["0002-calc-document-the-header.patch"], out


def test_verify_off_a_terminal_says_which_patch_of_how_many_and_ninjas_counts_on_stderr_under_json(
        mini: Mini, capsys: pytest.CaptureFixture[str]) -> None:
    code = mini.cli("verify", "--backend", "cpu", "-j", "2", "--lanes", "1", "--no-reuse", "--json")
    out, err = capsys.readouterr()
    assert code == 4 and json.loads(out)["format"].startswith("patchset-verify/")
    # from the head of the series down: the second patch is the first of two proven
    assert re.search(r"^patch 1/2: 0002-calc-document-the-header\.patch \[cpu\] \w+: building \.\.\.$", err, re.M), err
    assert re.search(r"^patch 2/2: 0001-calc-sub-subtracts\.patch \[cpu\] \w+: building \.\.\.$", err, re.M), err
    assert re.search(r"^  patch \d/2: .*: building: \[(\d+)/\1\]", err, re.M), err


def test_verify_in_lanes_off_a_terminal_prints_each_lanes_lines(mini: Mini,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    assert mini.cli("verify", "--backend", "cpu", "-j", "4", "--lanes", "2", "--no-reuse") == 4
    out = capsys.readouterr().out
    # two lanes, one patch each, both speaking (they were silent but for their verdicts)
    said = dict(re.findall(r"^patch (\d)/2: (\S+) \[cpu\] \w+: building \.\.\.$", out, re.M))
    assert sorted(said) == ["1", "2"], out
    assert sorted(said.values()) == ["0001-calc-sub-subtracts.patch", "0002-calc-document-the-header.patch"], out


def test_the_build_verify_reuses_is_still_the_one_test_runs_on(mini: Mini, capsys: pytest.CaptureFixture[str]) -> None:
    """verify builds the series head's proof in the work tree's own folder (nothing compiled again): the folder's
    record still names the tree built, so `patchset test` runs on it after verify, as after `patchset build` (the
    record was written without a tree there, and test refused it; `all` runs its tests beside verify now)."""
    assert mini.cli("build", "-j", "2") == 0
    assert mini.cli("verify", "--backend", "cpu", "-j", "2", "--no-reuse") == 4
    capsys.readouterr()
    assert mini.cli("test") == 0, capsys.readouterr().err


def test_all_is_exit_4_when_a_patch_is_not_proven(mini: Mini, capsys: pytest.CaptureFixture[str]) -> None:
    assert mini.cli("all", "-j", "2") == 4
    out = capsys.readouterr().out
    assert "build cpu/minimal ok" in out and "not proven" in out


def test_all_says_where_the_time_went_and_reuses_everything_warm(mini: Mini, capsys: pytest.CaptureFixture[str],
                                                                  tmp_path: Path) -> None:
    js = tmp_path / "all.json"
    mini.cli("all", "-j", "2", "--json", str(js))
    out = capsys.readouterr().out
    data = json_document(js.read_text())
    assert data["schema"] == "patchset-all/1" and data["backend"] == "cpu"
    names = [p["name"] for p in data["phases"]]
    assert names == ["fetch", "apply", "build", "test", "verify", "verify"], names
    assert all(isinstance(p["seconds"], float) and p["seconds"] >= 0 for p in data["phases"])
    assert data["total_seconds"] >= sum(p["seconds"] for p in data["phases"][:4])
    verify = {p["patch"]: p for p in data["phases"] if p["name"] == "verify"}
    assert verify["0001-calc-sub-subtracts.patch"]["outcome"] == "proven"
    assert verify["0002-calc-document-the-header.patch"]["outcome"] == "not proven"
    # the test results are in it too, as `test --json` writes them
    assert [p["program"] for p in data["tests"]["programs"]] == ["test-opt", "test-backend-ops", "test-sub",
                                                                  "test-add"]
    assert "where the time went" in out and "total " in out
    # again with nothing changed: everything reused, the tests' passing results included, and said so
    mini.cli("all", "-j", "2", "--json", str(js))
    out = capsys.readouterr().out
    data = json_document(js.read_text())
    reused = {p["name"] + (p["patch"] or ""): p["reused"] for p in data["phases"]}
    assert reused == {"fetch": True, "apply": True, "build": True, "test": True,
                      "verify0001-calc-sub-subtracts.patch": True, "verify0002-calc-document-the-header.patch": True}
    assert data["reused"] == {"phases": 6, "of": 6, "evidence": 2}
    assert "reused 6 of 6 phase(s), evidence reused for 2 of 2 verdict(s)" in out
    assert "passed on it (tree" in out and data["tests"]["programs"]
    # --junit needs a run of the tests: they run again
    mini.cli("all", "-j", "2", "--json", str(js), "--junit", str(tmp_path / "j.xml"))
    capsys.readouterr()
    assert [p["reused"] for p in json_document(js.read_text())["phases"] if p["name"] == "test"] == [False]


def test_all_builds_and_tests_beside_the_proofs_with_the_verdicts_of_one_step_after_another(
        mini: Mini, capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """Issue 44: `all` runs the patched tree's build and tests beside verify's lanes (`--lanes 1`: one step after
    another, as before); the verdicts, each proof's trees and cases, and the tests' results are the same."""
    found = {}
    for label, extra in (("in order", ("--lanes", "1")), ("at once", ())):
        shutil.rmtree(mini.root / ".patchset" / "evidence", ignore_errors=True)
        (mini.root / ".patchset" / "test" / "all-cpu.json").unlink(missing_ok=True)
        js = tmp_path / f"{label}.json"
        assert mini.cli("all", "-j", "8", "--json", str(js), *extra) == 4
        out = capsys.readouterr().out
        data = json_document(js.read_text())
        assert data["at_once"] is (label == "at once")
        assert ("build and test, and verify at once" in out) is (label == "at once"), out
        evidence = {}
        for f in sorted((mini.root / ".patchset" / "evidence").glob("*/cpu.json")):
            e = json.loads(f.read_text())
            evidence[f.parent.name] = (e["outcome"], e["reason"], e["cases"],
                                       [(s["tree"], s["verdict"]) for s in e["steps"]])
        tests = [(p["program"], p["verdict"], p["passed"], p["failed"]) for p in data["tests"]["programs"]]
        found[label] = (evidence, tests)
    assert found["at once"] == found["in order"]
    assert len(found["at once"][0]) == 2


def _running_from(root: Path) -> list[str]:
    """The command lines of the live processes that run a program of `root`."""
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            argv = cmdline.read_bytes().split(b"\0")
        except OSError:
            continue
        if argv and argv[0].startswith(str(root).encode()):
            found.append(b" ".join(argv).decode(errors="replace"))
    return found


@pytest.mark.skipif(sys.platform != "linux", reason="reads /proc")
def test_ctrl_c_stops_all_at_once_with_every_program_killed_and_nothing_half_written(
        mini: Mini, tmp_path: Path) -> None:
    """Ctrl-C while `all` tests the patched tree beside the proofs (its test-opt hangs there): the command ends
    at once with 130, every program it started is gone, no file is left half written, and the next run gives
    the verdicts."""
    shutil.rmtree(mini.root / ".patchset" / "evidence", ignore_errors=True)
    (mini.root / ".patchset" / "test" / "all-cpu.json").unlink(missing_ok=True)
    # SIGINT at its default, as a terminal's Ctrl-C finds it, even where the suite runs with it ignored (a shell's
    # background job): Python leaves an ignored SIGINT ignored
    run = subprocess.Popen(["env", "--default-signal=INT", *patchset_argv(), "--project", str(mini.root), "all",
                            "-j", "8", "--lanes", "2"],
                           env={**os.environ, "PATCHSET_TEST_HANG": "OPT"}, stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 120
        # the tests' test-opt running (it hangs), and the proofs at work beside it
        while not any(c.split()[0].endswith("/test-opt") for c in _running_from(mini.root)):
            assert run.poll() is None and time.monotonic() < deadline, "test-opt never ran"
            time.sleep(0.1)
        time.sleep(1)
        run.send_signal(signal.SIGINT)
        out, _ = run.communicate(timeout=60)
    finally:
        if run.poll() is None:
            run.kill()
    assert run.returncode == 130, out
    # killed with their process groups as the command ended (a moment for the kernel to reap them)
    end = time.monotonic() + 10
    while _running_from(mini.root) and time.monotonic() < end:
        time.sleep(0.1)
    assert _running_from(mini.root) == []
    assert not [p for p in (mini.root / ".patchset").rglob("*.tmp")], "a file was left half written"
    assert mini.cli("all", "-j", "8") == 4
    assert len(list((mini.root / ".patchset" / "evidence").glob("*/cpu.json"))) == 2


def test_all_plans_its_build_and_tests_beside_the_proofs(mini: Mini, capsys: pytest.CaptureFixture[str]) -> None:
    shutil.rmtree(mini.root / ".patchset" / "evidence", ignore_errors=True)  # no proof settled: both chains planned
    # beside on 8 job slots or more (schedule.BESIDE_MIN_SLOTS), with lanes
    for extra, beside in ((("-j", "8"), True), (("-j", "8", "--lanes", "1"), False), (("-j", "2"), False)):
        assert mini.cli("all", "--plan", "--json", "-", *extra) == 0
        out = capsys.readouterr().out
        plan = json_document(out[out.index("{"):])
        assert plan["steps_beside"] is beside
        first = {c["patch"]: plan["nodes"][[n["id"] for n in plan["nodes"]].index(c["nodes"][0])]["waits_for"]
                 for c in plan["chains"]}
        if beside:
            # only the series head's proof waits, for the build it reuses and its tests (as `all` runs it); the
            # other starts at once
            assert first == {"0001-calc-sub-subtracts.patch": [],
                             "0002-calc-document-the-header.patch": ["all:cpu:test"]}, first
        else:
            assert set(map(tuple, first.values())) == {("all:cpu:test",)}, first


def test_all_lists_each_evidence_file_once(mini: Mini, capsys: pytest.CaptureFixture[str]) -> None:
    mini.cli("all", "-j", "2")
    out = capsys.readouterr().out
    files = sorted((mini.root / ".patchset" / "evidence").glob("*/cpu.md"))
    assert len(files) == 2
    for f in files:
        assert out.count(str(f)) == 1, out
    # in the summary, after the phases
    assert out.index("where the time went") < out.index(str(files[0]))


def test_slice_of_patched_and_of_upstream(mini: Mini, tmp_path: Path) -> None:
    tmp_path = tmp_path / "out"
    tmp_path.mkdir()
    assert mini.cli("slice", "--out", str(tmp_path / "patched.tar.gz")) == 0
    with tarfile.open(tmp_path / "patched.tar.gz") as tf:
        names = tf.getnames()
    assert "tests/test-sub.cpp" in names and "CMakeLists.txt" in names
    # upstream has none of the series' own test programs: the slice is made without them
    assert mini.cli("slice", "--ref", "upstream", "--out", str(tmp_path / "up.tar.gz")) == 0
    with tarfile.open(tmp_path / "up.tar.gz") as tf:
        names = tf.getnames()
    assert "tests/test-backend-ops.cpp" in names and "tests/test-sub.cpp" not in names
    assert sorted(p.name for p in tmp_path.iterdir()) == ["patched.tar.gz", "up.tar.gz"]


def test_slice_of_a_ref_that_is_not_there(mini: Mini, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    tmp_path = tmp_path / "out"
    tmp_path.mkdir()
    assert mini.cli("slice", "--ref", "no-such-ref", "--out", str(tmp_path / "x.tar.gz")) == 2
    assert "no-such-ref" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


@pytest.mark.usefixtures("built")
def test_damaged_records_are_one_line_errors(mini: Mini, capsys: pytest.CaptureFixture[str]) -> None:
    state = mini.work / ".git" / "patchset" / "state.json"
    built = mini.root / ".patchset" / "build" / "cpu-minimal" / ".patchset-built.json"
    configured = mini.root / ".patchset" / "build" / "cpu-minimal" / ".patchset-build.json"
    saved = {f: f.read_bytes() for f in (state, built, configured)}
    try:
        state.write_text('{"pin_commit": "abc", "op": {"kind": ')
        for verb in ("apply", "refresh", "status"):
            capsys.readouterr()
            assert mini.cli(verb) == 1
            err = capsys.readouterr().err
            assert "damaged state file" in err and str(state) in err and "Traceback" not in err, verb
            assert len(err.strip().splitlines()) == 1, err
        state.write_bytes(saved[state])
        built.write_text("not json")
        assert mini.cli("test") == 1
        err = capsys.readouterr().err
        assert "damaged build record" in err and "Traceback" not in err
        # a damaged configure record only costs a configure
        configured.write_text("{")
        assert mini.cli("build", "-j", "2") == 0
        assert json.loads(configured.read_text())["generator"] == "Ninja"
        assert mini.cli("test") == 0
    finally:
        for f, data in saved.items():
            f.write_bytes(data)


JSON_FORMATS_ON_MINI = ("status", "check", "rebase", "build", "test", "sweep", "verify", "verify-recorded", "plan",
                        "all", "canary", "export", "evidence", "refresh", "fetch", "gc", "bump", "slice")
"""The formats test_every_reporting_verb_prints_one_json_document prints; tests/test_json_commands.py runs the
others (apply, the series verbs, pin, init, wheel, error), and checks the two cover FORMATS."""


def _json_of(mini: Mini, capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, dict]:
    code = mini.cli(*args)
    out, err = capsys.readouterr()
    try:
        return code, json_document(out)
    except json.JSONDecodeError as e:
        raise AssertionError(f"patchset {' '.join(args)}: stdout is not one JSON document ({e}):\n{out}\n"
                             f"stderr:\n{err}") from None


@pytest.mark.usefixtures("built")
def test_every_reporting_verb_prints_one_json_document(mini: Mini, capsys: pytest.CaptureFixture[str],
                                                        tmp_path: Path) -> None:
    pin = tomllib.loads((mini.root / "upstream" / "llama.cpp.toml").read_text())
    # an upstream commit off the pin's branch that changes the line patch 1 fixes: bump stops at its rebase
    scratch = mini.root.parent / "scratch"
    git(scratch, "checkout", "--quiet", "-B", "moved", pin["commit"])
    moved = commit(scratch, {"ggml/src/calc.c": SUB_FIX.replace("a - b;", "b - a;")}, "upstream moves calc\n")
    git(scratch, "push", "--quiet", pin["source"][0]["url"], "moved:refs/heads/moved")
    runs: dict[str, tuple[str, ...]] = {
        "status": ("status", "--json"),
        "check": ("check", "--json"),
        "rebase": ("rebase", "--dry-run", "--onto", pin["commit"], "--json"),
        "build": ("build", "-j", "2", "--json"),
        "test": ("test", "--json"),
        "sweep": ("test", "--against", "upstream", "-j", "2", "--confirm", "0", "--json"),
        "verify": ("verify", "--backend", "cpu", "-j", "2", "--json"),
        "verify-recorded": ("verify", "--report", "--json"),
        "plan": ("verify", "--plan", "--json"),
        "all": ("all", "-j", "2", "--json"),
        "canary": ("canary", "--range", f"..{moved}", "--json"),
        "export": ("export", "--check", "--author", "Ann Example <ann@example.org>", "--out", str(tmp_path / "x"),
                   "--json"),
        "evidence": ("evidence", "check", "--json"),
        "refresh": ("refresh", "--check", "--json"),
        "fetch": ("fetch", "--json"),
        "gc": ("gc", "--dry-run", "--json"),
        "slice": ("slice", "--out", str(tmp_path / "s.tar.gz"), "--json"),
        "bump": ("bump", "--onto", moved, "-j", "2", "--json"),
    }
    seen = {}
    for name, args in runs.items():
        code, doc = _json_of(mini, capsys, *args)
        assert str(doc.get("format")).startswith(f"patchset-{name}/"), (args, doc)
        seen[name] = (code, doc)
    from builder.commands.jsonout import FORMATS  # noqa: PLC0415
    assert {name: doc["format"] for name, (_, doc) in seen.items()} == {
        name: f"patchset-{name}/{FORMATS[name][0]}" for name in JSON_FORMATS_ON_MINI}
    assert seen["slice"][1]["path"] == str(tmp_path / "s.tar.gz") and seen["slice"][1]["files"] > 0
    assert [p["name"] for p in seen["status"][1]["patches"]] == mini_series(mini)
    assert {v["outcome"] for v in seen["verify"][1]["verdicts"]} == {"proven", "not proven"}
    assert seen["verify"][0] == 4 and seen["all"][0] == 4
    assert [p["program"] for p in seen["test"][1]["programs"]] == ["test-opt", "test-backend-ops", "test-sub",
                                                                   "test-add"]
    assert seen["bump"][0] == 3 and seen["bump"][1]["failed_stage"] == "rebase"
    assert seen["refresh"][1]["check"] and seen["refresh"][1]["current"] and not seen["refresh"][1]["changes"]
    assert seen["fetch"][1]["cached"] and seen["fetch"][1]["commit"] == pin["commit"]
    assert seen["gc"][1]["dry_run"] is True


def mini_series(mini: Mini) -> list[str]:
    return [line for line in (mini.root / "patches" / "series").read_text().splitlines()
            if line.strip() and not line.startswith("#")]

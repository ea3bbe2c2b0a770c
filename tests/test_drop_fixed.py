"""bump and the patches upstream fixed (issue 23, parts 2 and 4): stop and name them, or with
`--drop-fixed` leave them out and record each in the append-only `patches/dropped`, which
`patchset check` reads; the bump's range-diff and its recovery ref.

On the small calc tree of test_bump (two patches, each with its own test program).
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
from helpers import Proj, Upstream, git, json_document

from builder.cli import main
from builder.errors import SeriesError
from builder.series import dropped
from builder.upstream.pin import load_pin
from tests.test_bump import (
    CALC_C,
    MUL_FIX,
    NAMES,
    SUB_FIX,
    TEST_SUB,
    bump_scenario,
    make_mini,
    reports,
    state,
    trailers,
)
from tests.test_faults import KILLED, consistent, observe, reference_run
from tests.test_fixed_upstream import program as cases_program


@pytest.fixture
def mini(tmp_path: Path, up: Upstream, cache_dir: Path) -> Proj:
    return make_mini(tmp_path, up, cache_dir)


def bump(proj: Proj, onto: str, *more: str) -> int:
    return main(["--project", str(proj.root), "bump", "--onto", onto, "-j", "2", "--confirm", "0", *more])


def records(proj: Proj) -> list[list[str]]:
    """The log's records, each split at its tabs."""
    text = (proj.patches / "dropped").read_text()
    return [line.split("\t") for line in text.splitlines() if line and not line.startswith("#")]


def patch_id(mail: bytes) -> str:
    """`git patch-id --stable` of a mail, by git itself."""
    out = subprocess.run(["git", "patch-id", "--stable"], input=mail, capture_output=True, check=True).stdout
    return out.decode().split()[0]


def check(proj: Proj, capsys: pytest.CaptureFixture[str]) -> tuple[int, list[str]]:
    rc = main(["--project", str(proj.root), "check"])
    return rc, capsys.readouterr().out.splitlines()


def test_drop_fixed_drops_records_and_a_second_drop_appends(
        mini: Proj, capsys: pytest.CaptureFixture[str]) -> None:
    old = load_pin(mini.project.pin_file)
    old_head = mini.wgit("rev-parse", "patched")
    sub_mail = (mini.patches / NAMES[0]).read_bytes()
    # upstream takes patch 1 as it is, its test too: its own test passes there, and the commit has its patch-id
    new = mini.upstream.advance({"ggml/src/calc.c": SUB_FIX, "tests/test-sub.cpp": TEST_SUB}, "calc: fix sub\n")
    before = state(mini)

    # without --drop-fixed: it stops before changing anything, naming the patch with its evidence
    assert bump(mini, new) == 5
    out = " ".join(capsys.readouterr().out.split())
    assert f"failed at rebase ({NAMES[0]})" in out
    assert f"upstream fixed {NAMES[0]}: fixed-upstream" in out and "test-sub passed (1 passed, 0 failed)" in out
    assert f"upstream commit {new} has its patch-id" in out
    assert state(mini) == before and not (mini.patches / "dropped").exists()

    # with it: left out, and recorded
    assert bump(mini, new, "--drop-fixed") == 0, capsys.readouterr()
    out = capsys.readouterr().out
    assert mini.series() == ["0001-calc-mul-multiplies.patch"]
    assert not (mini.patches / NAMES[0]).exists()
    assert load_pin(mini.project.pin_file).commit == new
    assert mini.wgit("rev-list", "--count", "upstream..patched") == "1"
    [first] = records(mini)
    assert first[:4] == [NAMES[0], patch_id(sub_mail), new, dropped.FIXED_UPSTREAM]
    assert "test-sub passed" in first[4] and f"upstream commit {new} has its patch-id" in first[4]
    log_after_first = (mini.patches / "dropped").read_bytes()
    assert log_after_first.startswith(dropped.HEADER.encode())
    assert f"dropped {NAMES[0]} (fixed-upstream in {new[:12]}), recorded in patches/dropped" in " ".join(out.split())

    # the report: the table with the upstream column, what each patch became, and the way back
    text = reports(mini)[0].read_text()
    assert f"| 1 | {NAMES[0]} | dropped | fixed upstream; merged as {new[:12]} |" in text
    assert f"| 2 | {NAMES[1]} | clean | not fixed upstream |" in text
    assert "| 0001-calc-mul-multiplies.patch | cpu | proven |" in text
    diff = text.split("### What each patch became (git range-diff, old series .. new)\n\n```\n", 1)[1].split("```")[0]
    pairs = [m.group(1) for m in re.finditer(r"^\S+:\s+\S+ ([<>=!]) ", diff, re.M)]
    assert pairs[0] == "<" and len(pairs) == 2 and "calc : sub subtracts" in diff.splitlines()[0]
    ref = f"refs/patchset/before-{old.commit[:7]}"
    assert f"The series as it was: `{ref}` in the work repository" in text
    assert mini.wgit("rev-parse", ref) == old_head
    assert "git range-diff" in out and ref in out.replace("\n", "")

    # status shows the record, --json too
    assert main(["--project", str(mini.root), "status", "--json"]) == 0
    assert [d["patch"] for d in json_document(capsys.readouterr().out)["dropped"]] == [NAMES[0]]

    # a second drop: upstream fixes mul its own way (add multiplies: mul's test passes without the fix)
    pin2, patches2 = mini.project.pin_file.read_bytes(), mini.snapshot()
    head2 = mini.wgit("rev-parse", "patched")
    newer = mini.upstream.advance({"ggml/src/calc.c": SUB_FIX.replace(
        "calc_add(int a, int b) { return a + b; }", "calc_add(int a, int b) { return a * b; }")}, "calc: add\n")
    assert bump(mini, newer, "--drop-fixed") == 0, capsys.readouterr()
    capsys.readouterr()
    assert mini.series() == []
    log = (mini.patches / "dropped").read_bytes()
    # appended: the first record byte for byte where it was
    assert log.startswith(log_after_first)
    second = records(mini)[1]
    assert second[:4] == ["0001-calc-mul-multiplies.patch", patch_id(patches2["0001-calc-mul-multiplies.patch"]),
                          newer, dropped.FIXED_UPSTREAM]
    assert "test-mul passed" in second[4]
    assert check(mini, capsys)[0] == 0

    # the way back (docs/upstream.md): the pin and patches/ as the fork's git held them, then apply --force
    ref2 = f"refs/patchset/before-{new[:7]}"
    assert mini.wgit("rev-parse", ref2) == head2
    mini.put_back(pin2, patches2)
    assert main(["--project", str(mini.root), "apply", "--force"]) == 0
    assert mini.wgit("rev-parse", "patched^{tree}") == mini.wgit("rev-parse", f"{ref2}^{{tree}}")


def test_check_reads_the_log(mini: Proj, capsys: pytest.CaptureFixture[str]) -> None:
    """A record names a patch still in the series (by name, or by patch-id under another name), or
    a line is malformed: `check` fails with one line naming patches/dropped and the line."""
    log = mini.patches / "dropped"
    mail = (mini.patches / NAMES[1]).read_bytes()
    commit = "a" * 40
    record = "\t".join(["0007-calc-mul-multiplies.patch", patch_id(mail), commit, "merged", "by hand"])
    log.write_text(dropped.HEADER + record + "\n")
    header_lines = dropped.HEADER.count("\n")

    # the same name less its number (the series is renumbered when a patch goes)
    rc, lines = check(mini, capsys)
    assert rc == 1
    assert lines[0] == (f"{log}:{header_lines + 1}: 0007-calc-mul-multiplies.patch was dropped (merged in "
                        f"{commit[:12]}) but {NAMES[1]} is in the series (the same name): drop it again, or "
                        "remove the record in a commit that says why")
    # the same diff under another name
    log.write_text(dropped.HEADER + record.replace("0007-calc-mul-multiplies", "0007-calc-old-name") + "\n")
    rc, lines = check(mini, capsys)
    assert rc == 1 and f"but {NAMES[1]} is in the series (the same patch-id)" in lines[0]
    # neither: fine
    other = record.replace("0007-calc-mul-multiplies", "0007-calc-old-name").replace(patch_id(mail), "b" * 40)
    log.write_text(dropped.HEADER + other + "\n")
    rc, lines = check(mini, capsys)
    assert rc == 0 and lines[-1] == "series OK: 2 patch(es)" and not [ln for ln in lines if "dropped" in ln]

    # malformed lines, each named
    for bad, why in [(other.rsplit("\t", 1)[0], "a record has 5 fields separated by tabs"),
                     (other.replace("b" * 40, "b" * 39), "patch-id '" + "b" * 39 + "' is not 40 hex digits"),
                     (other.replace(commit, "HEAD"), "upstream commit 'HEAD' is not 40 hex digits"),
                     (other.replace("\tmerged\t", "\tgone\t"), "why 'gone' is not one of"),
                     (other.replace("0007-calc-old-name.patch", "x/y.patch"), "'x/y.patch' is not a patch file name"),
                     (other.rsplit("\t", 1)[0] + "\t ", "the evidence is empty")]:
        log.write_text(dropped.HEADER + other + "\n\n" + bad + "\n")
        rc, lines = check(mini, capsys)
        assert rc == 1 and lines[0].startswith(f"{log}:{header_lines + 3}: {why}"), (bad, lines)
        assert [ln for ln in lines if "dropped" in ln] == [lines[0]], lines  # one line, the record before it fine
        # and bump never adds to a damaged log
        with pytest.raises(SeriesError, match=rf"^{re.escape(str(log))}:{header_lines + 3}: .*damaged log"):
            dropped.append(mini.patches, [])
    # nor writes a record that the next reader would refuse (a patch without a patch-id)
    log.write_text(dropped.HEADER + other + "\n")
    with pytest.raises(SeriesError, match=re.escape("of 0001-x.patch: patch-id '' is not 40 hex")):
        dropped.append(mini.patches, [dropped.DropRecord("0001-x.patch", "", commit, "merged", "e")])
    assert log.read_text() == dropped.HEADER + other + "\n"


def test_check_finds_an_earlier_record_changed_since_the_last_commit(
        mini: Proj, capsys: pytest.CaptureFixture[str]) -> None:
    """The fork's git holds the log: a line of the committed log that is changed or gone is an error
    until the change is committed (on purpose, with why); new lines after it are what bumps add."""
    log = mini.patches / "dropped"
    first = "\t".join(["0009-calc-gone.patch", "c" * 40, "a" * 40, "merged", "by hand"])
    log.write_text(dropped.HEADER + first + "\n")
    git(mini.root, "init", "-q")
    git(mini.root, "add", "patches")
    git(mini.root, "commit", "-q", "-m", "the fork")
    assert check(mini, capsys)[0] == 0
    second = first.replace("0009-calc-gone", "0010-calc-gone-too").replace("c" * 40, "d" * 40)
    log.write_text(dropped.HEADER + first + "\n" + second + "\n")
    assert check(mini, capsys)[0] == 0
    n = dropped.HEADER.count("\n") + 1
    for text in (dropped.HEADER + first.replace("by hand", "by a hand") + "\n" + second + "\n",
                 dropped.HEADER + second + "\n"):
        log.write_text(text)
        rc, lines = check(mini, capsys)
        assert rc == 1 and lines[0].startswith(f"{log}:{n}: a line of the last commit's log (HEAD) is changed or gone")
    git(mini.root, "commit", "-q", "-am", "calc-gone is needed again: upstream reverted its fix")
    assert check(mini, capsys)[0] == 0


SUB2_FIX = CALC_C.replace("calc_sub(int a, int b) { return a + b; }", "calc_sub(int a, int b) { return a - b; }")
# two cases, both failing without the fix (a + b)
TEST_SUB2 = cases_program([("sub(a=5,b=3)", "calc_sub(5, 3)", 2), ("sub(a=1,b=1)", "calc_sub(1, 1)", 0)])


def test_a_patch_upstream_fixed_in_part_is_never_dropped(tmp_path: Path, up: Upstream, cache_dir: Path,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    proj = make_mini(tmp_path, up, cache_dir, patches=[({"ggml/src/calc.c": SUB2_FIX, "tests/test-sub2.cpp": TEST_SUB2},
                                                         "calc : sub subtracts" + trailers("test-sub2"))])
    # upstream fixes the equal case only: sub(1,1) passes without the fix, sub(5,3) still fails
    new = up.advance({"ggml/src/calc.c": CALC_C.replace(
        "calc_sub(int a, int b) { return a + b; }", "calc_sub(int a, int b) { return a == b ? 0 : a + b; }")},
        "calc: sub of equals\n")
    before = state(proj)

    assert bump(proj, new, "--drop-fixed") == 5
    out = " ".join(capsys.readouterr().out.split())
    assert "partly fixed upstream, still failing: test-sub2 sub(a=5,b=3); now passing: test-sub2 sub(a=1,b=1)" in out
    assert "needs a person" in out
    assert state(proj) == before and not (proj.patches / "dropped").exists()
    text = reports(proj)[0].read_text()
    assert "FAILED at rebase (fixed upstream)" in text
    assert "partly fixed upstream (still failing: test-sub2 sub(a=5,b=3))" in text


def test_a_drop_killed_leaves_patches_and_the_log_consistent(tmp_path: Path) -> None:
    """SIGKILL while the scratch project's log is written (before the commit point: the next bump does
    it all again), and while the pin is written after patches/ was swapped (past it: the next bump
    finishes the switch): either way patches/, its log and the pin end as a run never killed leaves them."""
    s, _ = bump_scenario(tmp_path, {"ggml/src/calc.c": SUB_FIX, "tests/test-sub.cpp": TEST_SUB})
    s.args = (*s.args, "--drop-fixed")
    old = load_pin(s.template / "proj" / "upstream" / "llama.cpp.toml").commit
    ref = reference_run(s)
    assert ref.outcome.returncode == 0 and "dropped" in ref.outcome.patches
    log_write = [i for i, p in enumerate(ref.points, 1) if p.endswith("/scratch/project/patches/dropped [write]")]
    pin_write = [i for i, p in enumerate(ref.points, 1) if p.endswith("/proj/upstream/llama.cpp.toml [write]")]
    assert len(log_write) == 1 and pin_write, ref.points
    for point, label in ((log_write[0], "patches/dropped [write]"), (pin_write[-1], "llama.cpp.toml [write]")):
        rc, out, killed = s.traced_run(tmp_path / "killed-trace", PATCHSET_FAULT_KILL_AT=str(point))
        assert rc == KILLED and killed[point].endswith(label), (out, killed.get(point))
        # patches/ is the old one with no log, or the new one with it: never a mix
        files = {p.name for p in (s.root / "patches").iterdir()}
        assert ("dropped" in files) == (NAMES[0] not in files), files
        rc, out = s.run()
        assert rc == 0, out
        assert observe(s, rc) == ref.outcome
        consistent(s)
        assert git(s.root / ".patchset" / "work" / "llama.cpp", "rev-parse", "--verify", "-q",
                   f"refs/patchset/before-{old[:7]}")
        s.restore()


# a test of patch 1 that passes without the fix too: 0 - 0 and 0 + 0 agree
TEST_SUB_ZERO = cases_program([("sub(a=0,b=0)", "calc_sub(0, 0)", 0)])


def flaky_program(counter: Path) -> str:
    """test-mul that fails one run in two: it checks calc_mul only on its even runs (a counter file)."""
    return f"""\
#include "calc.h"
#include <cstdio>
int main() {{
    int n = 0;
    FILE * f = fopen("{counter}", "r");
    if (f) {{ if (fscanf(f, "%d", &n) != 1) n = 0; fclose(f); }}
    f = fopen("{counter}", "w");
    fprintf(f, "%d\\n", ++n);
    fclose(f);
    printf("Backend 1/1: CPU\\n");
    bool ok = n % 2 == 1 || calc_mul(3, 3) == 9;
    printf("  MUL(want=9): %s\\n", ok ? "OK" : "FAIL");
    printf("  %d/1 tests passed\\n", ok ? 1 : 0);
    return ok ? 0 : 1;
}}
"""


def test_a_test_that_passes_on_the_old_pin_too_or_is_flaky_is_never_fixed_upstream_nor_dropped(
        tmp_path: Path, up: Upstream, cache_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Upstream changed nothing either patch touches. Patch 1's test passes there without the fix,
    and on the old pin as well: it shows nothing about the bug. Patch 2's test fails one run in two,
    and its first run there passes: one run is no evidence, and run again (and on the old pin) it
    is seen flaky. Both `cannot tell`, both stay, and verify then says why patch 1 is not proven."""
    counter = tmp_path / "runs"
    proj = make_mini(tmp_path, up, cache_dir, patches=[
        ({"ggml/src/calc.c": SUB_FIX, "tests/test-sub0.cpp": TEST_SUB_ZERO},
         "calc : sub subtracts" + trailers("test-sub0")),
        ({"ggml/src/calc.c": MUL_FIX, "tests/test-flaky.cpp": flaky_program(counter)},
         "calc : mul multiplies" + trailers("test-flaky"))])
    names = proj.series()
    new = up.advance({"README": "moved\n"}, "readme\n")

    assert bump(proj, new, "--drop-fixed") == 4
    out = " ".join(capsys.readouterr().out.split())
    assert proj.series() == names and not (proj.patches / "dropped").exists()
    assert "dropped" not in out
    assert int(counter.read_text()) >= 3  # the new upstream twice, the old pin at least once
    text = reports(proj)[0].read_text()
    assert f"| 1 | {names[0]} | clean | cannot tell |" in text
    assert f"| 2 | {names[1]} | clean | cannot tell |" in text
    assert "passes on the old pin too: the test does not show the bug here" in text


def test_a_diff_upstream_holds_while_its_test_fails_stops_the_bump_as_a_regression(
        mini: Proj, capsys: pytest.CaptureFixture[str]) -> None:
    """Upstream takes patch 1's diff byte for byte (it applies in reverse: `already upstream`) but
    then breaks calc_sub another way: a header macro outside the patch's lines. Patch 1's own test
    fails on the new upstream (`not fixed upstream`). Upstream holding the diff while the test
    fails is a regression upstream: the bump stops (exit 1, "a patch regressed"), drops nothing and
    changes nothing, with --drop-fixed too (issue 47 point 7)."""
    header = git(mini.upstream.src, "show", "HEAD:ggml/include/calc.h") + "\n"
    new = mini.upstream.advance({
        "ggml/src/calc.c": "#define CALC_IMPL\n" + SUB_FIX, "tests/test-sub.cpp": TEST_SUB,
        "ggml/include/calc.h": header + "#ifndef CALC_IMPL\n#define calc_sub(a, b) calc_add(a, b)\n#endif\n"},
        "calc: fix sub, and route it through add\n")
    before = state(mini)

    assert bump(mini, new, "--drop-fixed") == 1
    out = " ".join(capsys.readouterr().out.split())
    assert f"failed at rebase ({NAMES[0]})" in out
    assert (f"{NAMES[0]}: upstream holds its diff byte for byte, but its own test fails there "
            "(not fixed upstream): a regression upstream") in out
    assert state(mini) == before and not (mini.patches / "dropped").exists()
    text = reports(mini)[0].read_text()
    assert "FAILED at rebase (regressed upstream)" in text

"""rebase --dry-run (every patch's fate on a new base, nothing moved), --skip, and the rebase table."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from helpers import (
    B_C,
    PATCH1_A_C,
    PATCH3_TEST_X_C,
    STANDARD_NAMES,
    STANDARD_PATCHES,
    TEST_X_C,
    Proj,
    json_document,
    make_project,
    make_upstream,
    run_patchset,
)

from builder.cli import main
from builder.commands import jsonout
from builder.errors import ConflictError
from builder.series.apply import apply
from builder.series.dryrun import CLEAN, CONFLICT, DEPENDS, THREE_WAY, UPSTREAM
from builder.series.rebase import dry_run_rebase, rebase, skip_rebase
from builder.series.refresh import refresh
from builder.series.workrepo import OUTCOME_CLEAN, OUTCOME_SKIPPED, OUTCOME_UPSTREAM

# a fourth patch that edits the line patch 3 adds: it cannot apply without patch 3
PATCH4_TEST_X_C = PATCH3_TEST_X_C.replace("assert(b_len(NULL) == 0);", 'assert(b_len(NULL) == 0 && "empty");')
PATCH4_MSG = "tests: say why NULL is 0\n\nPatchset-Status: pending\n"
PATCH4_NAME = "0004-tests-say-why-NULL-is-0.patch"


def _state(proj: Proj) -> dict[str, object]:
    """Everything a dry run must leave alone: refs, HEAD, index and work tree, pin, patches/."""
    return {
        "refs": proj.wgit("for-each-ref", "--format=%(refname) %(objectname)"),
        "head": proj.wgit("symbolic-ref", "HEAD"),
        "status": proj.wgit("status", "--porcelain=v1", "--untracked-files=all"),
        "index": (proj.work / ".git" / "index").read_bytes(),
        "alternates": (proj.work / ".git" / "objects" / "info" / "alternates").read_bytes(),
        "state": (proj.work / ".git" / "patchset" / "state.json").read_bytes(),
        "pin": proj.project.pin_file.read_bytes(),
        "patches": proj.snapshot(),
    }


@pytest.fixture
def four(tmp_path: Path, cache_dir: Path) -> Proj:
    """The standard series plus patch 4, which builds on patch 3."""
    up = make_upstream(tmp_path)
    patches = [*STANDARD_PATCHES, ({"tests/test-x.c": PATCH4_TEST_X_C}, PATCH4_MSG)]
    return make_project(tmp_path, up, cache_dir, patches=patches)


def _hunk_line(patch: Path) -> str:
    m = re.search(r"^@@ -(\d+)", patch.read_text(), re.M)
    assert m
    return m.group(1)


def _advance_four(four: Proj) -> str:
    """Upstream takes patch 1 as is, moves a line of patch 2's context (3-way), and rewrites the
    line patch 3 inserts after (conflict); patch 4 edits what patch 3 adds."""
    return four.upstream.advance({
        "src/a.c": PATCH1_A_C,
        "src/b.c": B_C.replace("    while (s[n]) n++;", "    while (s[n] != 0) n++;"),
        "tests/test-x.c": TEST_X_C.replace('assert(b_len("ab") == 2);', 'assert(b_len("abc") == 3);'),
    }, "upstream moves on\n")


def test_dry_run_reports_every_patch_and_changes_nothing(four: Proj, capsys: pytest.CaptureFixture[str]) -> None:
    apply(four.project)
    new = _advance_four(four)
    before = _state(four)

    report = dry_run_rebase(four.project, new)

    names = [*STANDARD_NAMES, PATCH4_NAME]
    third = four.patches / names[2]
    assert [(p.patch, p.outcome, p.files, p.hunks, p.depends_on) for p in report.patches] == [
        (names[0], UPSTREAM, (), (), ""),
        (names[1], THREE_WAY, (), (), ""),
        (names[2], CONFLICT, ("tests/test-x.c",), (f"tests/test-x.c:{_hunk_line(third)}",), ""),
        (names[3], DEPENDS, (), (), names[2]),
    ]
    assert (report.old_commit, report.new_commit, report.dry_run) == (four.upstream.commit, new, True)
    assert _state(four) == before

    # the command: the same table as JSON, exit 3 because some patch conflicts, still nothing moved
    capsys.readouterr()
    assert main(["--project", str(four.root), "rebase", "--onto", new, "--dry-run", "--json"]) == 3
    data = json_document(capsys.readouterr().out)
    assert data == jsonout.document("rebase", report.as_json(), code=3)
    assert _state(four) == before


def test_dry_run_without_conflicts_exits_0(proj: Proj, capsys: pytest.CaptureFixture[str]) -> None:
    apply(proj.project)
    new = proj.upstream.advance({"README": "moved\n"}, "readme\n")
    before = _state(proj)

    assert main(["--project", str(proj.root), "rebase", "--onto", new, "--dry-run"]) == 0

    out = capsys.readouterr().out
    assert "every patch would apply" in out
    for name in STANDARD_NAMES:
        assert re.search(rf"{re.escape(name)}\s+.*{CLEAN}", out)
    assert _state(proj) == before


def test_a_patch_independent_of_the_conflicting_one_is_still_tried(tmp_path: Path, cache_dir: Path) -> None:
    """Patch 2 conflicts; patch 3 touches another file and applies on the old base without it."""
    up = make_upstream(tmp_path)
    proj = make_project(tmp_path, up, cache_dir)
    apply(proj.project)
    new = up.advance({"src/b.c": B_C.replace("int b_len(const char *s) {\n",
                                             "int b_len(const char *s) {\n    if (!s) return -1;\n")}, "b\n")

    report = dry_run_rebase(proj.project, new)

    assert [p.outcome for p in report.patches] == [CLEAN, CONFLICT, CLEAN]
    assert report.patches[1].files == ("src/b.c",)


def test_skip_drops_the_patch_and_the_rest_lands(proj: Proj) -> None:
    apply(proj.project)
    proj.upstream.advance({"src/a.c": PATCH1_A_C}, "a: widen the sum (upstream)\n")
    upstream_b_c = B_C.replace("int b_len(const char *s) {\n", "int b_len(const char *s) {\n    if (!s) return -1;\n")
    new = proj.upstream.advance({"src/b.c": upstream_b_c}, "b: reject NULL\n")
    with pytest.raises(ConflictError):
        rebase(proj.project, new)

    result = skip_rebase(proj.project)

    assert [(o.name, o.outcome) for o in result.outcomes] == [
        (STANDARD_NAMES[0], OUTCOME_UPSTREAM), (STANDARD_NAMES[1], OUTCOME_SKIPPED), (STANDARD_NAMES[2], OUTCOME_CLEAN),
    ]
    assert result.skipped == [STANDARD_NAMES[1]]
    assert proj.series() == ["0001-tests-cover-NULL-in-b_len.patch"]
    assert proj.wgit("show", "patched:src/b.c") == upstream_b_c.rstrip("\n")
    assert proj.wgit("show", "patched:tests/test-x.c") == PATCH3_TEST_X_C.rstrip("\n")
    assert proj.wgit("status", "--porcelain") == ""
    # refresh writes the series without it: nothing left to change
    snapshot = proj.snapshot()
    assert all(c.change == "unchanged" for c in refresh(proj.project).changes)
    assert proj.snapshot() == snapshot
    # the summary records the skip
    assert result.report_file is not None
    data = json.loads(result.report_file.read_text())
    assert [(p["patch"], p["outcome"]) for p in data["patches"]] == [
        (STANDARD_NAMES[0], "already-upstream"), (STANDARD_NAMES[1], "skipped"), (STANDARD_NAMES[2], "clean"),
    ]
    assert apply(proj.project).noop


def test_completed_rebase_writes_its_table(proj: Proj, capsys: pytest.CaptureFixture[str]) -> None:
    apply(proj.project)
    new = proj.upstream.advance({"README": "moved\n"}, "readme\n")

    assert main(["--project", str(proj.root), "rebase", "--onto", new]) == 0

    report = proj.project.state_dir / f"rebase-{proj.upstream.commit[:7]}-{new[:7]}.json"
    data = json.loads(report.read_text())
    assert (data["old"], data["new"], data["dry_run"]) == (proj.upstream.commit, new, False)
    assert [(p["patch"], p["outcome"]) for p in data["patches"]] == [(n, CLEAN) for n in STANDARD_NAMES]
    out = capsys.readouterr().out
    assert all(n in out for n in STANDARD_NAMES)
    assert str(report.name) in out.replace("\n", "")


def test_skip_without_a_stopped_rebase_is_refused(proj: Proj, capsys: pytest.CaptureFixture[str]) -> None:
    apply(proj.project)
    assert main(["--project", str(proj.root), "rebase", "--skip"]) == 2
    assert "no rebase is stopped" in capsys.readouterr().err


def test_the_rebase_does_what_the_dry_run_said(four: Proj) -> None:
    """Same scenario for real: it stops at patch 3, then (patch 3 skipped) at patch 4."""
    apply(four.project)
    new = _advance_four(four)
    predicted = dry_run_rebase(four.project, new)

    with pytest.raises(ConflictError, match=re.escape(predicted.patches[2].patch)):
        rebase(four.project, new)
    with pytest.raises(ConflictError, match=re.escape(predicted.patches[3].patch)):
        skip_rebase(four.project)
    result = skip_rebase(four.project)

    assert result.report is not None
    assert [p.outcome for p in result.report.patches][:2] == [p.outcome for p in predicted.patches][:2]
    assert result.skipped == [predicted.patches[2].patch, predicted.patches[3].patch]
    assert four.series() == ["0001-b-accept-NULL.patch"]


def _scratch_processes(proj: Proj, onto: str, trace: Path) -> int:
    """The git processes a `rebase --dry-run` starts in its scratch repository."""
    env = {"PATCHSET_CACHE": str(proj.project.cache_dir), "PATCHSET_FAULT_TRACE": str(trace)}
    r = run_patchset("--project", str(proj.root), "rebase", "--onto", onto, "--dry-run", env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    return sum("/scratch.git " in line for line in trace.read_text().splitlines())


def test_a_clean_move_is_one_git_apply_whatever_the_length(proj: Proj, tmp_path: Path, cache_dir: Path) -> None:
    (tmp_path / "four").mkdir()
    patches = [*STANDARD_PATCHES, ({"tests/test-x.c": PATCH4_TEST_X_C}, PATCH4_MSG)]
    four = make_project(tmp_path / "four", make_upstream(tmp_path / "four"), cache_dir, patches=patches)
    counts = []
    for p in (proj, four):
        apply(p.project)
        new = p.upstream.advance({"README": "moved\n"}, "readme\n")
        counts.append(_scratch_processes(p, new, tmp_path / f"{len(p.series())}.trace"))
        # patch 4 edits the line patch 3 adds: the one `git apply` applies each on the one before
        assert [r.outcome for r in dry_run_rebase(p.project, new).patches] == [CLEAN] * len(p.series())
    assert counts[0] == counts[1]

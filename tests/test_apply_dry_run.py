"""apply --dry-run: the rebase --dry-run table for a series that has no base here, nothing touched."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from helpers import (
    A_C,
    B_C,
    STANDARD_NAMES,
    STANDARD_PATCHES,
    Proj,
    commit,
    json_document,
    make_project,
    make_upstream,
    pin_toml,
    write_patches,
)
from test_rebase_dry_run import PATCH4_MSG, PATCH4_NAME, PATCH4_TEST_X_C, _advance_four, _state

from builder.cli import main
from builder.commands import jsonout
from builder.series.apply import apply, dry_run_apply
from builder.series.dryrun import CLEAN, CONFLICT, DEPENDS, THREE_WAY, UPSTREAM
from builder.series.rebase import dry_run_rebase


def _foreign(proj: Proj) -> list[str]:
    """A series written on a base this project never sees (a commit only in the scratch clone):
    on the pin, patch 1 applies, patch 2 conflicts, patch 3 edits what patch 2 adds, patch 4
    undoes a change of the foreign base (so the pin already has it), and patch 5 starts from
    patch 3's b.c but edits its first line, whose context the pin has (it applies as is)."""
    s = proj.scratch
    commit(s, {"src/b.c": B_C.replace("    int n = 0;", "    size_t n = 0;"),
               "src/a.c": A_C.replace("return v * 2;", "return v * 3;")}, "foreign base\n")
    p2_b = B_C.replace("    int n = 0;", "    size_t n = 0;").replace(
        "    while (s[n]) n++;", "    while (s != NULL && s[n]) n++;")
    commits = [
        commit(s, {"README": "tiny upstream, forked\n"}, "readme : say it is a fork\n\nPatchset-Status: pending\n"),
        commit(s, {"src/b.c": p2_b}, "b : accept NULL\n\nPatchset-Status: pending\n"),
        commit(s, {"src/b.c": p2_b.replace("s != NULL && s[n]", "s && s[n]")},
               "b : shorter\n\nPatchset-Status: pending\n"),
        commit(s, {"src/a.c": A_C}, "a : twice is twice\n\nPatchset-Status: pending\n"),
        commit(s, {"src/b.c": p2_b.replace("s != NULL && s[n]", "s && s[n]").replace("/* b.c */", "/* b.c: length */")},
               "b : say what it is\n\nPatchset-Status: pending\n"),
    ]
    return write_patches(proj.patches, s, commits)


def _touched(proj: Proj) -> dict[str, object]:
    """patches/, the pin, and the state folder (the project lock's own files aside: a dry run takes
    the lock so that it reads one series, not one half-refreshed)."""
    state = proj.project.state_dir
    return {"patches": proj.snapshot(), "pin": proj.project.pin_file.read_bytes(), "work": proj.work.exists(),
            "state": sorted(p.relative_to(state).as_posix() for p in state.rglob("*")
                            if not p.name.startswith("lock")) if state.exists() else []}


@pytest.mark.parametrize("abbreviated", [False, True], ids=["full-index", "abbreviated-index"])
def test_a_foreign_series_gets_the_whole_table(proj: Proj, capsys: pytest.CaptureFixture[str],
                                               abbreviated: bool) -> None:
    names = _foreign(proj)
    if abbreviated:  # as most tools write mails (Ollama's patches too): `index 1a2b3c4..5d6e7f8`;
        # patch 2 keeps its full ids: the ids are compared on their common prefix
        for name in (names[0], names[2], names[3], names[4]):
            path = proj.patches / name
            path.write_text(re.sub(r"^index ([0-9a-f]{7})[0-9a-f]{33}\.\.([0-9a-f]{7})[0-9a-f]{33}",
                                   r"index \1..\2", path.read_text(), flags=re.M))
        assert re.search(r"^index [0-9a-f]{7}\.\.", (proj.patches / names[2]).read_text(), re.M)
    before = _touched(proj)

    report = dry_run_apply(proj.project)

    hunk = re.search(r"^@@ -(\d+)", (proj.patches / names[1]).read_text(), re.M)
    assert hunk
    assert [(p.patch, p.outcome, p.files, p.hunks, p.depends_on) for p in report.patches] == [
        (names[0], CLEAN, (), (), ""),
        (names[1], CONFLICT, ("src/b.c",), (f"src/b.c:{hunk.group(1)}",), ""),
        (names[2], DEPENDS, (), (), names[1]),
        (names[3], UPSTREAM, (), (), ""),
        (names[4], CLEAN, (), (), ""),
    ]
    assert (report.old_commit, report.new_commit, report.dry_run) == ("", proj.upstream.commit, True)
    assert not proj.work.exists()
    assert _touched(proj) == before

    # the command: exit 3 (some patch would not apply), the same table as JSON, still nothing written
    capsys.readouterr()
    assert main(["--project", str(proj.root), "apply", "--dry-run", "--json"]) == 3
    doc = json_document(capsys.readouterr().out)
    assert (doc["ok"], doc["exit"], doc["problems"]) == (False, 3, [])
    assert doc == jsonout.document("apply", report.as_json(), code=3)
    assert main(["--project", str(proj.root), "apply", "--dry-run"]) == 3
    out = capsys.readouterr().out
    assert "2 of 5 patch(es) would not apply" in out and f"needs {names[1]}" in out.replace("\n", "")
    assert _touched(proj) == before


def test_a_series_whose_base_is_gone_gets_the_rebase_table(tmp_path: Path, cache_dir: Path) -> None:
    """The pin was moved by hand under an applied series: apply --dry-run on the new pin says what
    rebase --dry-run says from the old one, and leaves the work repository as it was."""
    up = make_upstream(tmp_path)
    four = make_project(tmp_path, up, cache_dir,
                        patches=[*STANDARD_PATCHES, ({"tests/test-x.c": PATCH4_TEST_X_C}, PATCH4_MSG)])
    apply(four.project)
    new = _advance_four(four)
    predicted = dry_run_rebase(four.project, new)
    four.project.pin_file.write_text(pin_toml(new, up.tree_of(new), [{"kind": "git", "url": up.url}]))
    before = _state(four)

    report = dry_run_apply(four.project)

    assert report.patches == predicted.patches
    assert [p.outcome for p in report.patches] == [UPSTREAM, THREE_WAY, CONFLICT, DEPENDS]
    assert report.patches[3].depends_on == STANDARD_NAMES[2] and report.patches[3].patch == PATCH4_NAME
    assert _state(four) == before


def test_a_series_that_applies_is_all_clean_and_exits_0(proj: Proj, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--project", str(proj.root), "apply", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "every patch would apply" in out
    assert all(re.search(rf"{re.escape(n)}\s+.*{CLEAN}", out) for n in STANDARD_NAMES)
    assert not proj.work.exists()


def test_dry_run_refuses_force(proj: Proj, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--project", str(proj.root), "apply", "--dry-run", "--force"]) == 2
    assert "--force" in capsys.readouterr().err

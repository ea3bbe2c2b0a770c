"""refresh: patches/ written back from `patched`, byte-stable, one file per commit."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from helpers import PATCH2_B_C, STANDARD_NAMES, Proj

from builder.cli import main
from builder.errors import SeriesError, WorkTreeError
from builder.series import refresh as refresh_mod
from builder.series.apply import apply
from builder.series.load import load_series
from builder.series.refresh import check_current, refresh
from builder.series.status import status


def _no_temp_files(patches: Path) -> None:
    left = [p.name for p in patches.rglob("*") if p.name.endswith(".tmp") or p.name.startswith(".")]
    assert left == []


def _changes(result: object) -> dict[str, str]:
    return {c.name: c.change for c in result.changes}  # type: ignore[attr-defined]


def test_apply_then_refresh_is_byte_identical(proj: Proj) -> None:
    before = proj.snapshot()
    assert set(before) == {"series", "mutations/0002-b-null.patch", *STANDARD_NAMES}
    apply(proj.project)

    result = refresh(proj.project)

    assert _changes(result) == dict.fromkeys(STANDARD_NAMES, "unchanged")
    assert result.warnings == ()
    assert proj.snapshot() == before
    _no_temp_files(proj.patches)
    # refresh records what patched was built from: nothing to re-apply
    assert apply(proj.project).noop


def test_amended_commit_rewrites_that_patch_only(proj: Proj) -> None:
    apply(proj.project)
    before = proj.snapshot()
    _c1, c2, c3 = proj.wgit("rev-list", "--reverse", "upstream..patched").split()
    # rebase -i 'edit' on patch 2, by hand: reset, amend, replay patch 3
    proj.wgit("reset", "--quiet", "--hard", c2)
    (proj.work / "src" / "b.c").write_text(PATCH2_B_C.replace("return 0;\n", "return 0; /* empty */\n", 1))
    proj.wgit("commit", "--quiet", "--all", "--amend", "--no-edit")
    proj.wgit("cherry-pick", c3)

    result = refresh(proj.project)

    assert _changes(result) == {STANDARD_NAMES[0]: "unchanged", STANDARD_NAMES[1]: "updated",
                                STANDARD_NAMES[2]: "unchanged"}
    after = proj.snapshot()
    assert {k for k in after if after[k] != before.get(k)} == {STANDARD_NAMES[1]}
    assert b"+    if (s == NULL) return 0; /* empty */" in after[STANDARD_NAMES[1]]
    # message, trailers and authorship of the amended patch are kept
    assert b"Patchset-Mutation: mutations/0002-b-null.patch" in after[STANDARD_NAMES[1]]
    assert b"From: Grace Hopper <grace@example.org>" in after[STANDARD_NAMES[1]]
    _no_temp_files(proj.patches)
    assert apply(proj.project).noop
    assert [p.name for p in load_series(proj.patches).patches] == STANDARD_NAMES


def test_added_commit_adds_file_and_series_entry(proj: Proj) -> None:
    apply(proj.project)
    before = proj.snapshot()
    (proj.work / "README").write_text("tiny upstream\nwith a fork note\n")
    proj.wgit("commit", "--quiet", "--all", "-m", "docs: note the fork\n\nPatchset-Status: fork-only")

    result = refresh(proj.project)

    new = "0004-docs-note-the-fork.patch"
    assert _changes(result)[new] == "added"
    assert proj.series() == [*STANDARD_NAMES, new]
    after = proj.snapshot()
    assert b"Patchset-Status: fork-only" in after[new]
    assert {k: v for k, v in after.items() if k not in (new, "series")} == \
        {k: v for k, v in before.items() if k != "series"}
    # the series file's comment header is kept
    assert (proj.patches / "series").read_text().startswith("# patchset series")
    _no_temp_files(proj.patches)
    assert apply(proj.project).noop


def test_dropped_commit_removes_file_and_entry(proj: Proj) -> None:
    apply(proj.project)
    before = proj.snapshot()
    c1, _c2, c3 = proj.wgit("rev-list", "--reverse", "upstream..patched").split()
    # rebase -i 'drop' on patch 2, by hand
    proj.wgit("reset", "--quiet", "--hard", c1)
    proj.wgit("cherry-pick", c3)

    result = refresh(proj.project)

    renumbered = "0002-tests-cover-NULL-in-b_len.patch"
    changes = _changes(result)
    assert changes[STANDARD_NAMES[1]] == "removed"
    assert changes[STANDARD_NAMES[2]] == "removed"
    assert changes[renumbered] == "added"  # a new name: format-patch numbers by position
    assert proj.series() == [STANDARD_NAMES[0], renumbered]
    assert not (proj.patches / STANDARD_NAMES[1]).exists()
    assert not (proj.patches / STANDARD_NAMES[2]).exists()
    after = proj.snapshot()
    assert after[STANDARD_NAMES[0]] == before[STANDARD_NAMES[0]]
    # same commit, so the same mail as before under its new number
    assert after[renumbered] == before[STANDARD_NAMES[2]]
    assert "mutations/0002-b-null.patch" in after
    _no_temp_files(proj.patches)


def _hand_edit(proj: Proj, name: str) -> bytes:
    """An edit of the kind people make in patches/: a word of the message."""
    path = proj.patches / name
    edited = path.read_bytes().replace(b"Callers pass NULL", b"Callers may pass NULL")
    assert edited != path.read_bytes()
    path.write_bytes(edited)
    return edited


def test_hand_edit_in_patches_survives_a_refresh(proj: Proj, capsys: pytest.CaptureFixture[str]) -> None:
    apply(proj.project)
    edited = _hand_edit(proj, STANDARD_NAMES[1])
    # patched still holds the old message: a refresh would write it over the edit
    with pytest.raises(WorkTreeError) as ei:
        refresh(proj.project)
    assert STANDARD_NAMES[1] in str(ei.value)
    assert STANDARD_NAMES[0] not in str(ei.value)
    assert "--force" in str(ei.value)
    assert (proj.patches / STANDARD_NAMES[1]).read_bytes() == edited

    # through the command: a one-line error, exit 2, the edit still there
    assert main(["--project", str(proj.root), "refresh"]) == 2
    err = capsys.readouterr().err
    assert STANDARD_NAMES[1] in err and "Traceback" not in err
    assert (proj.patches / STANDARD_NAMES[1]).read_bytes() == edited

    # apply takes the edit in; then refresh has nothing to lose
    assert not apply(proj.project).noop
    assert _changes(refresh(proj.project)) == dict.fromkeys(STANDARD_NAMES, "unchanged")
    assert (proj.patches / STANDARD_NAMES[1]).read_bytes() == edited


def test_refresh_force_overwrites_and_keeps_a_copy(proj: Proj) -> None:
    apply(proj.project)
    before = proj.snapshot()
    edited = _hand_edit(proj, STANDARD_NAMES[1])

    result = refresh(proj.project, force=True)

    assert proj.snapshot() == before
    assert result.backup is not None and result.backup.is_relative_to(proj.project.state_dir)
    assert (result.backup / STANDARD_NAMES[1]).read_bytes() == edited
    assert sorted(p.name for p in result.backup.iterdir()) == [STANDARD_NAMES[1]]


def test_refresh_writes_over_its_own_files_after_an_amend(proj: Proj) -> None:
    # a commit amended in the work repository is what refresh is for: no hand edit, no refusal
    apply(proj.project)
    (proj.work / "tests" / "test-x.c").write_text((proj.work / "tests" / "test-x.c").read_text() + "/* more */\n")
    proj.wgit("commit", "--quiet", "--all", "--amend", "--no-edit")
    assert _changes(refresh(proj.project))[STANDARD_NAMES[2]] == "updated"
    # and a hand edit to a file refresh leaves as it is costs nothing either
    (proj.patches / "mutations" / "0002-b-null.patch").write_text("edited\n")
    assert _changes(refresh(proj.project)) == dict.fromkeys(STANDARD_NAMES, "unchanged")


def _format_patch_runs(proj: Proj, trace: Path) -> int:
    os.environ["PATCHSET_FAULT_TRACE"] = str(trace)
    try:
        refresh(proj.project)
    finally:
        del os.environ["PATCHSET_FAULT_TRACE"]
    return sum(line.endswith("[format-patch]") for line in trace.read_text().splitlines()) if trace.exists() else 0


def test_refresh_formats_only_the_commits_that_changed(proj: Proj, tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    apply(proj.project)
    before = proj.snapshot()
    # apply formatted the commits it made, once: the refresh right after it formats nothing
    assert _format_patch_runs(proj, tmp_path / "first.trace") == 0
    assert proj.snapshot() == before
    # nothing changed since that refresh: nothing to format
    assert _format_patch_runs(proj, tmp_path / "noop.trace") == 0
    assert _changes(refresh(proj.project)) == dict.fromkeys(STANDARD_NAMES, "unchanged")
    # the middle commit amended (the later one is replayed): only those two are formatted, and the
    # files are what a full format-patch gives
    proj.wgit("checkout", "--quiet", "HEAD~1")
    (proj.work / "tests" / "test-x.c").write_text((proj.work / "tests" / "test-x.c").read_text() + "/* mid */\n")
    proj.wgit("commit", "--quiet", "--all", "--amend", "--no-edit")
    proj.wgit("cherry-pick", "patched")
    proj.wgit("checkout", "--quiet", "-B", "patched")
    asked: list[tuple[str, ...]] = []
    real = refresh_mod.format_mails
    monkeypatch.setattr(refresh_mod, "format_mails", lambda git, *revs: asked.append(revs) or real(git, *revs))
    changes = _changes(refresh(proj.project))
    assert len(asked) == 1 and asked[0][0] == "--start-number=2"  # patches 2 and 3, not 1
    assert changes[STANDARD_NAMES[0]] == "unchanged" and changes[STANDARD_NAMES[1]] == "updated"
    assert check_current(proj.project) == ()  # byte for byte what a format-patch of the range gives


def test_refresh_after_apply_rewrites_files_that_are_not_format_patch_output(proj: Proj, tmp_path: Path) -> None:
    # a patch written by another tool (here: the real commit id in its From line): what apply
    # formatted does not match the file, so the refresh right after apply formats and rewrites it
    name = STANDARD_NAMES[1]
    mail = (proj.patches / name).read_bytes()
    assert mail.startswith(b"From 0000000000000000000000000000000000000000 ")
    (proj.patches / name).write_bytes(b"From 1234567890abcdef1234567890abcdef12345678 " + mail.split(b" ", 2)[2])
    apply(proj.project)
    assert _format_patch_runs(proj, tmp_path / "trace") == 1
    assert (proj.patches / name).read_bytes() == mail
    assert check_current(proj.project) == ()


def test_refresh_does_not_skip_a_missing_patch_file_or_an_amended_commit(proj: Proj, tmp_path: Path) -> None:
    apply(proj.project)
    before = proj.snapshot()
    # a patch file removed by hand: the short cut must not hide it (refresh names it, as before)
    gone = (proj.patches / STANDARD_NAMES[0]).read_bytes()
    (proj.patches / STANDARD_NAMES[0]).unlink()
    with pytest.raises(SeriesError, match=STANDARD_NAMES[0]):
        refresh(proj.project)
    (proj.patches / STANDARD_NAMES[0]).write_bytes(gone)
    assert proj.snapshot() == before
    # a commit amended on patched: the head is not the one the files were written for
    (proj.work / "tests" / "test-x.c").write_text((proj.work / "tests" / "test-x.c").read_text() + "/* more */\n")
    proj.wgit("commit", "--quiet", "--all", "--amend", "--no-edit")
    assert _format_patch_runs(proj, tmp_path / "amend.trace") == 1
    assert proj.snapshot() != before


def test_status_after_a_refresh_reads_the_files_back_and_still_sees_changes(proj: Proj, tmp_path: Path) -> None:
    apply(proj.project)
    refresh(proj.project)
    trace = tmp_path / "status.trace"
    os.environ["PATCHSET_FAULT_TRACE"] = str(trace)
    try:
        st = status(proj.project)
    finally:
        del os.environ["PATCHSET_FAULT_TRACE"]
    assert [p.dirty for p in st.patches] == [False, False, False]
    assert not any(line.endswith("[format-patch]") for line in trace.read_text().splitlines())
    # a file changed by hand and a commit amended: both are seen, each on its own patch
    _hand_edit(proj, STANDARD_NAMES[1])
    assert [p.dirty for p in status(proj.project).patches] == [False, True, False]
    (proj.work / "tests" / "test-x.c").write_text((proj.work / "tests" / "test-x.c").read_text() + "/* more */\n")
    proj.wgit("commit", "--quiet", "--all", "--amend", "--no-edit")
    assert [p.dirty for p in status(proj.project).patches] == [False, True, True]


def test_refresh_sets_context_only_churn_apart_from_changes_to_review(
        proj: Proj, capsys: pytest.CaptureFixture[str]) -> None:
    apply(proj.project)
    c1, c2, c3 = proj.wgit("rev-list", "--reverse", "upstream..patched").split()
    # patch 1 amended to also add a line on top of b.c: patch 2, replayed, moves down a line (its
    # hunk header and the blob it starts from change; its message and its own lines do not)
    proj.wgit("reset", "--quiet", "--hard", c1)
    (proj.work / "src" / "b.c").write_text("/* b: strings */\n" + (proj.work / "src" / "b.c").read_text())
    proj.wgit("commit", "--quiet", "--all", "--amend", "--no-edit")
    proj.wgit("cherry-pick", c2, c3)

    capsys.readouterr()
    assert main(["--project", str(proj.root), "refresh", "--check"]) == 1
    out = capsys.readouterr().out
    assert f"updated patches/{STANDARD_NAMES[0]} (changed)" in out
    assert f"context only (message and own lines unchanged, nothing new to review): {STANDARD_NAMES[1]}" in out
    assert f"patches/{STANDARD_NAMES[1]}" not in out

    result = refresh(proj.project)
    assert [(c.name, c.change, c.review) for c in result.changes] == [
        (STANDARD_NAMES[0], "updated", "changed"), (STANDARD_NAMES[1], "updated", "context only"),
        (STANDARD_NAMES[2], "unchanged", "")]
    # a message edit is a change to review, whatever the diff does
    assert refresh_mod.review_class(b"Subject: a\n\ndiff --git x\n", b"Subject: b\n\ndiff --git x\n") == "changed"

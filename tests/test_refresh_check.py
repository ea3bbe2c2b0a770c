"""refresh --check: patches/ must be exactly what refresh writes from `patched`; nothing is written."""

from __future__ import annotations

import pytest
from helpers import STANDARD_NAMES, Proj

from builder.cli import main
from builder.errors import WorkTreeError
from builder.series.apply import apply
from builder.series.refresh import check_current, refresh


def _check(proj: Proj, capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    capsys.readouterr()
    rc = main(["--project", str(proj.root), "refresh", "--check"])
    return rc, capsys.readouterr().out


def _stale(proj: Proj) -> dict[str, str]:
    return {c.name: c.change for c in check_current(proj.project)}


def test_fresh_series_passes(proj: Proj, capsys: pytest.CaptureFixture[str]) -> None:
    apply(proj.project)
    rc, out = _check(proj, capsys)
    assert rc == 0, out
    assert "patches/ is current" in out


def test_hand_edited_patch_fails_and_nothing_is_written(proj: Proj, capsys: pytest.CaptureFixture[str]) -> None:
    apply(proj.project)
    path = proj.patches / STANDARD_NAMES[1]
    path.write_bytes(path.read_bytes().replace(b"Callers pass NULL", b"Callers may pass NULL"))
    before = proj.snapshot()

    rc, out = _check(proj, capsys)

    assert rc == 1
    assert f"updated patches/{STANDARD_NAMES[1]}" in out
    assert _stale(proj) == {STANDARD_NAMES[1]: "updated"}
    assert proj.snapshot() == before
    # a plain refresh keeps the hand edit; --force puts the file back, then the check passes
    with pytest.raises(WorkTreeError, match=STANDARD_NAMES[1]):
        refresh(proj.project)
    refresh(proj.project, force=True)
    assert _check(proj, capsys)[0] == 0


def test_commit_not_written_back_is_a_missing_file(proj: Proj, capsys: pytest.CaptureFixture[str]) -> None:
    apply(proj.project)
    (proj.work / "README").write_text("tiny upstream\nwith a fork note\n")
    proj.wgit("commit", "--quiet", "--all", "-m", "docs: note the fork")

    rc, out = _check(proj, capsys)

    assert rc == 1
    assert _stale(proj) == {"0004-docs-note-the-fork.patch": "added", "series": "updated"}
    assert "added patches/0004-docs-note-the-fork.patch" in out


def test_dropped_commit_and_stray_file_are_listed(proj: Proj, capsys: pytest.CaptureFixture[str]) -> None:
    apply(proj.project)
    proj.wgit("reset", "--quiet", "--hard", "patched~1")
    (proj.patches / "0009-stray.patch").write_text("not in the series\n")

    rc, _out = _check(proj, capsys)

    assert rc == 1
    assert _stale(proj) == {STANDARD_NAMES[2]: "removed", "0009-stray.patch": "unlisted", "series": "updated"}

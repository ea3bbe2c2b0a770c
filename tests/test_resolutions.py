"""Resolutions remembered (issue 35, part 3): a conflict resolved by hand at `rebase --continue` is
kept in patches/resolutions/ and reused where the same conflict comes back: a later rebase, its dry
run and canary; a wrong one is refused in one line, a stale one named by `check`."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import A_C, CONFLICT_A_C, STANDARD_NAMES, Proj

from builder.cli import main
from builder.errors import ConflictError
from builder.series import resolutions as rr
from builder.series.apply import apply
from builder.series.canary import canary
from builder.series.dryrun import CONFLICT, REUSED
from builder.series.rebase import continue_rebase, dry_run_rebase, rebase
from builder.series.workrepo import OUTCOME_CLEAN, OUTCOME_RESOLVED, OUTCOME_REUSED
from builder.upstream.pin import load_pin

# upstream clamps the sum on the line patch 1 widens: a conflict
RESOLVED_A_C = A_C.replace("    return x + y;", "    return (long)x + y > 100 ? 100 : (long)x + y;")


def _resolve_by_hand(proj: Proj, onto: str, text: str = RESOLVED_A_C) -> None:
    with pytest.raises(ConflictError) as ei:
        rebase(proj.project, onto)
    assert "src/a.c" in str(ei.value)
    (proj.work / "src" / "a.c").write_text(text)
    proj.wgit("add", "src/a.c")


def _recorded(proj: Proj) -> list[Path]:
    return sorted(p for p in (proj.patches / rr.FOLDER).iterdir()) if (proj.patches / rr.FOLDER).is_dir() else []


def test_a_resolution_is_recorded_then_reused_by_rebase_dry_run_and_canary(proj: Proj) -> None:
    apply(proj.project)
    pin, before = proj.project.pin_file.read_bytes(), proj.snapshot()
    clamp = proj.upstream.advance({"src/a.c": CONFLICT_A_C}, "a: clamp the sum\n")

    # the first move: the maintainer resolves by hand; --continue records the resolution
    _resolve_by_hand(proj, clamp)
    result = continue_rebase(proj.project)
    assert [o.outcome for o in result.outcomes] == [OUTCOME_RESOLVED, OUTCOME_CLEAN, OUTCOME_CLEAN]
    [folder] = _recorded(proj)
    assert (folder / "postimage").read_text() == RESOLVED_A_C
    about = (folder / "about").read_text()
    assert f"patch {STANDARD_NAMES[0]}\n" in about and "path src/a.c\n" in about
    assert result.report and result.report.patches[0].resolutions == (folder.name,)
    # the key is the conflict's: its hunks, sides sorted, without labels
    assert folder.name == rr.key_of((folder / "preimage").read_bytes())
    assert b"<<<<<<<\n" in (folder / "preimage").read_bytes()
    assert main(["--project", str(proj.root), "check"]) == 0

    # the fork goes back to the old pin, keeping the recorded resolution (committed with patches/)
    kept = {k: v for k, v in proj.snapshot().items() if k.startswith(rr.FOLDER + "/")}
    proj.put_back(pin, {**before, **kept})
    apply(proj.project, force=True)
    # upstream moved on after the clamp, elsewhere in the same file: the same conflict, another file
    later = proj.upstream.advance({"src/a.c": CONFLICT_A_C.replace("return v * 2;", "return v + v;")},
                                  "a: twice by addition\n")

    # the dry run and canary see the conflict resolved by the recorded resolution
    dry = dry_run_rebase(proj.project, later)
    assert (dry.patches[0].outcome, dry.patches[0].resolutions) == (REUSED, (folder.name,))
    report = canary(proj.project, later)
    assert report.broken == () and report.patches[0].resolutions == (folder.name,)

    # the rebase does not stop: the resolution is carried onto the file, upstream's other change kept
    result = rebase(proj.project, later)
    assert [o.outcome for o in result.outcomes] == [OUTCOME_REUSED, OUTCOME_CLEAN, OUTCOME_CLEAN]
    assert result.report and result.report.patches[0].outcome == REUSED
    assert (proj.work / "src" / "a.c").read_text() == RESOLVED_A_C.replace("return v * 2;", "return v + v;")
    assert load_pin(proj.project.pin_file).commit == later

    # without the folder, the same canary and dry run name the conflict
    for d in _recorded(proj):
        for f in d.iterdir():
            f.unlink()
        d.rmdir()
    proj.put_back(pin, before)
    assert canary(proj.project, later).patches[0].broken_at is not None
    assert dry_run_rebase(proj.project, later).patches[0].outcome == CONFLICT


def test_a_wrong_resolution_is_refused_in_one_line_and_a_stale_one_named_by_check(
        proj: Proj, capsys: pytest.CaptureFixture[str]) -> None:
    apply(proj.project)
    pin, before = proj.project.pin_file.read_bytes(), proj.snapshot()
    clamp = proj.upstream.advance({"src/a.c": CONFLICT_A_C}, "a: clamp the sum\n")
    # the maintainer's resolution also touches the file's first line
    _resolve_by_hand(proj, clamp, RESOLVED_A_C.replace("/* a.c */", "/* a.c: clamped */"))
    continue_rebase(proj.project)
    [folder] = _recorded(proj)
    kept = {k: v for k, v in proj.snapshot().items() if k.startswith(rr.FOLDER + "/")}

    # upstream rewrote that first line too: the recorded resolution does not fit (stale): the rebase
    # stops at the conflict as it would without it, saying so in one line
    proj.put_back(pin, {**before, **kept})
    apply(proj.project, force=True)
    later = proj.upstream.advance({"src/a.c": CONFLICT_A_C.replace("/* a.c */", "/* a.c, sums */")}, "a: note\n")
    with pytest.raises(ConflictError) as ei:
        rebase(proj.project, later)
    unfit = [ln for ln in str(ei.value).splitlines() if folder.name[:12] in ln]
    assert len(unfit) == 1 and "does not fit" in unfit[0]
    assert main(["--project", str(proj.root), "rebase", "--abort"]) == 0

    # a postimage edited to hold conflict markers: wrong, refused before anything moves (exit 2)
    post = folder / "postimage"
    post.write_text("<<<<<<< HEAD\nx\n=======\ny\n>>>>>>> theirs\n")
    capsys.readouterr()
    assert main(["--project", str(proj.root), "rebase", "--onto", later]) == 2
    err = capsys.readouterr().err
    assert len([ln for ln in err.splitlines() if ln.startswith("error:")]) == 1
    assert "wrong resolution" in err and folder.name in err
    assert load_pin(proj.project.pin_file).commit == proj.upstream.commit
    assert main(["--project", str(proj.root), "check"]) == 1
    assert "wrong resolution" in capsys.readouterr().out

    # recorded for a patch that is no longer in the series: stale, named by check
    post.write_text(RESOLVED_A_C)
    about = folder / "about"
    about.write_text(about.read_text().replace(STANDARD_NAMES[0], "0009-gone.patch")
                     .replace("a: widen the sum", "gone"))
    capsys.readouterr()
    assert main(["--project", str(proj.root), "check"]) == 1
    out = capsys.readouterr().out
    assert "stale resolution" in out and "0009-gone.patch" in out

"""Renames followed: upstream moved a file a patch touches; rebase, its dry run (and so bump's) and
the canary rewrite the patch's paths to the new names and say so, instead of failing."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from helpers import B_C, Proj, make_project, make_upstream, pin_toml

from builder.cli import main
from builder.series.apply import apply
from builder.series.dryrun import CLEAN, CONFLICT, dry_run_apply
from builder.series.rebase import dry_run_rebase, rebase
from builder.series.scratch import CHANGED, CONTEXT_ONLY, UNCHANGED, change_class, follow_renames

MOVED = "src/b.c -> lib/b.c"


@pytest.fixture
def moved(tmp_path: Path, cache_dir: Path) -> tuple[Proj, str]:
    """Ollama's case: upstream moved a file patch 2 touches, and changed a line of it on the way."""
    up = make_upstream(tmp_path)
    proj = make_project(tmp_path, up, cache_dir)
    new = up.advance({"src/b.c": None, "lib/b.c": B_C.replace("/* b.c */", "/* b.c, now in lib/ */")},
                     "move b.c to lib/\n")
    return proj, new


def test_plain_git_cannot_apply_a_patch_on_a_moved_file(moved: tuple[Proj, str]) -> None:
    """What the renames are followed for: the mail as written does not apply on the new tree at all."""
    proj, _new = moved
    mail = proj.patches / proj.series()[1]
    for flags in ([], ["--3way"]):
        r = subprocess.run(["git", "-C", str(proj.upstream.src), "apply", "--check", *flags, str(mail)],
                           capture_output=True, check=False)
        assert r.returncode != 0
    data, done = follow_renames(mail.read_bytes(), {"src/b.c": "lib/b.c"})
    assert done == (MOVED,)
    diff = data[data.index(b"diff --git "):]
    assert diff.startswith(b"diff --git a/lib/b.c b/lib/b.c") and b"src/b.c" not in diff


def test_rebase_dry_run_follows_an_upstream_rename(moved: tuple[Proj, str],
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    proj, new = moved
    report = dry_run_rebase(proj.project, new)

    assert [p.outcome != CONFLICT for p in report.patches] == [True, True, True]
    assert [p.renamed for p in report.patches] == [(), (MOVED,), ()]
    capsys.readouterr()
    assert main(["--project", str(proj.root), "rebase", "--onto", new, "--dry-run"]) == 0
    assert MOVED in capsys.readouterr().out


def test_rebase_follows_an_upstream_rename(moved: tuple[Proj, str]) -> None:
    proj, new = moved
    apply(proj.project)

    result = rebase(proj.project, new)

    assert result.report is not None
    assert [p.renamed for p in result.report.patches] == [(), (MOVED,), ()]
    mail = (proj.patches / proj.series()[1]).read_text()
    assert "diff --git a/lib/b.c b/lib/b.c" in mail and "if (s == NULL) return 0;" in mail
    assert "/* b.c, now in lib/ */" in proj.wgit("show", "patched:lib/b.c")
    assert "if (s == NULL) return 0;" in proj.wgit("show", "patched:lib/b.c")


def test_a_finished_rebase_separates_context_only_changes_from_changed_patches(moved: tuple[Proj, str]) -> None:
    """Range-diff in classes: upstream adds a line above patch 1's hunk (its line numbers move) and
    changes a line of patch 3's context: both context only; patch 2 follows the move unchanged. A
    patch whose own lines differ is `changed`."""
    proj, _ = moved
    apply(proj.project)
    up = proj.upstream
    a_c = (up.src / "src" / "a.c").read_text()
    x_c = (up.src / "tests" / "test-x.c").read_text()
    new = up.advance({"src/a.c": a_c.replace("#include <stdio.h>\n", "#include <stdio.h>\n#include <stdlib.h>\n"),
                      "tests/test-x.c": x_c.replace("int main(void) {", "int main(void) { /* x */")},
                     "upstream moves on\n")

    result = rebase(proj.project, new)

    assert result.report is not None
    assert [p.change for p in result.report.patches] == [CONTEXT_ONLY, UNCHANGED, CONTEXT_ONLY]
    assert [p.renamed for p in result.report.patches] == [(), (MOVED,), ()]
    mail = (proj.patches / proj.series()[0]).read_bytes()
    assert change_class(mail, mail.replace(b"+    return (long)x + y;", b"+    return (long long)x + y;")) == CHANGED


def test_apply_dry_run_follows_a_file_moved_as_it_was(tmp_path: Path, cache_dir: Path) -> None:
    """A series written on an older upstream, pinned on one where a file it touches moved unchanged:
    with no old base to compare with, the file is found by the blob id the patch starts from."""
    up = make_upstream(tmp_path)
    proj = make_project(tmp_path, up, cache_dir)
    new = up.advance({"src/b.c": None, "lib/b.c": B_C}, "move b.c to lib/\n")
    proj.project.pin_file.write_text(pin_toml(new, up.tree_of(new), [{"kind": "git", "url": up.url}]))

    report = dry_run_apply(proj.project)

    assert [(p.outcome, p.renamed) for p in report.patches] == [(CLEAN, ()), (CLEAN, (MOVED,)), (CLEAN, ())]

"""rebase: moving the series to a new upstream commit, patch by patch."""

from __future__ import annotations

import pytest
from helpers import A_C, B_C, PATCH1_A_C, PATCH2_B_C, STANDARD_NAMES, Proj

from builder.errors import ConflictError, SourceError, WorkTreeError
from builder.series.apply import apply
from builder.series.load import load_series
from builder.series.rebase import abort_rebase, continue_rebase, rebase
from builder.series.workrepo import OUTCOME_3WAY, OUTCOME_CLEAN, OUTCOME_RESOLVED, OUTCOME_UPSTREAM, WorkRepo
from builder.upstream.pin import load_pin

# upstream's own NULL check, where patch 2 puts its own: a conflict
UPSTREAM_B_C = B_C.replace("int b_len(const char *s) {\n", "int b_len(const char *s) {\n    if (!s) return -1;\n")


def _advance_with_conflict(proj: Proj) -> str:
    """Upstream takes patch 1 as is, then changes b.c where patch 2 does; the new head."""
    proj.upstream.advance({"src/a.c": PATCH1_A_C}, "a: widen the sum (upstream)\n")
    return proj.upstream.advance({"src/b.c": UPSTREAM_B_C}, "b: reject NULL\n")


def test_rebase_drops_upstreamed_patch_and_stops_on_conflict(proj: Proj) -> None:
    apply(proj.project)
    new = _advance_with_conflict(proj)

    with pytest.raises(ConflictError) as ei:
        rebase(proj.project, new)
    msg = str(ei.value)
    assert "patch 2/3" in msg
    assert STANDARD_NAMES[1] in msg
    assert "src/b.c" in msg
    assert "rebase --continue" in msg
    # nothing in the project is rewritten until the rebase finishes
    assert load_pin(proj.project.pin_file).commit == proj.upstream.commit

    resolved = UPSTREAM_B_C.replace("    if (!s) return -1;\n", "    if (s == NULL) return 0;\n")
    (proj.work / "src" / "b.c").write_text(resolved)
    proj.wgit("add", "src/b.c")
    result = continue_rebase(proj.project)

    assert [(o.name, o.outcome) for o in result.outcomes] == [
        (STANDARD_NAMES[0], OUTCOME_UPSTREAM),
        (STANDARD_NAMES[1], OUTCOME_RESOLVED),
        (STANDARD_NAMES[2], OUTCOME_CLEAN),
    ]
    assert result.dropped == [STANDARD_NAMES[0]]
    pin = load_pin(proj.project.pin_file)
    assert pin.commit == new
    assert pin.tree == proj.upstream.tree_of(new)
    assert result.new_pin.commit == new
    assert result.old_pin.commit == proj.upstream.commit
    # patches/ refreshed: patch 1 gone, the others renumbered
    assert proj.series() == ["0001-b-accept-NULL.patch", "0002-tests-cover-NULL-in-b_len.patch"]
    assert not (proj.patches / STANDARD_NAMES[0]).exists()
    assert [p.subject for p in load_series(proj.patches).patches] == ["b: accept NULL", "tests: cover NULL in b_len"]
    assert proj.wgit("rev-parse", "upstream") == new
    assert len(proj.wgit("rev-list", "upstream..patched").split()) == 2
    assert proj.wgit("show", "patched:src/b.c") == resolved.rstrip("\n")
    assert WorkRepo(proj.work).load_state().op is None
    # the project is consistent: apply has nothing to do
    assert apply(proj.project).noop


def test_clean_rebase_reports_each_patch(proj: Proj) -> None:
    apply(proj.project)
    before = proj.snapshot()
    # a change inside patch 1's context (plain apply fails, a 3-way merge succeeds) and an unrelated one
    new = proj.upstream.advance({"src/a.c": A_C.replace("int x = 1;", "int x = 10;"),
                                 "README": "tiny upstream, now bigger\n"}, "upstream moves on\n")

    result = rebase(proj.project, new)

    assert [(o.name, o.outcome) for o in result.outcomes] == [
        (STANDARD_NAMES[0], OUTCOME_3WAY),
        (STANDARD_NAMES[1], OUTCOME_CLEAN),
        (STANDARD_NAMES[2], OUTCOME_CLEAN),
    ]
    assert result.dropped == []
    pin = load_pin(proj.project.pin_file)
    assert (pin.commit, pin.tree) == (new, proj.upstream.tree_of(new))
    assert proj.series() == STANDARD_NAMES
    after = proj.snapshot()
    changed = {k for k in after if after[k] != before[k]}
    assert changed == {STANDARD_NAMES[0]}  # its context and blob ids moved; the others did not
    assert proj.wgit("show", "patched:src/a.c") == \
        PATCH1_A_C.replace("int x = 1;", "int x = 10;").rstrip("\n")
    assert proj.wgit("show", "patched:src/b.c") == PATCH2_B_C.rstrip("\n")
    assert apply(proj.project).noop


def test_abort_rebase_restores_everything(proj: Proj) -> None:
    head = apply(proj.project).head
    pin_bytes = proj.project.pin_file.read_bytes()
    before = proj.snapshot()
    new = _advance_with_conflict(proj)
    with pytest.raises(ConflictError):
        rebase(proj.project, new)

    abort_rebase(proj.project)

    assert proj.project.pin_file.read_bytes() == pin_bytes
    assert proj.snapshot() == before
    assert proj.wgit("rev-parse", "upstream") == proj.upstream.commit
    assert proj.wgit("rev-parse", "patched") == head
    assert proj.wgit("symbolic-ref", "--short", "HEAD") == "patched"
    assert proj.wgit("status", "--porcelain", "--untracked-files=all") == ""
    assert not (proj.work / ".git" / "rebase-apply").exists()
    assert WorkRepo(proj.work).load_state().op is None
    assert apply(proj.project).noop
    with pytest.raises(WorkTreeError, match="no rebase is stopped"):
        continue_rebase(proj.project)


def test_rebase_refuses_unsaved_commits(proj: Proj) -> None:
    apply(proj.project)
    proj.wgit("commit", "--quiet", "--allow-empty", "-m", "not refreshed")
    head = proj.wgit("rev-parse", "patched")
    new = proj.upstream.advance({"README": "moved\n"}, "readme\n")
    with pytest.raises(WorkTreeError, match="patchset refresh"):
        rebase(proj.project, new)
    assert proj.wgit("rev-parse", "patched") == head
    assert load_pin(proj.project.pin_file).commit == proj.upstream.commit


def test_conflict_resolved_to_upstream_version_drops_the_patch(proj: Proj) -> None:
    apply(proj.project)
    new = _advance_with_conflict(proj)
    with pytest.raises(ConflictError):
        rebase(proj.project, new)
    b_c = proj.work / "src" / "b.c"
    # take upstream's version: patch 2 is upstream in another form
    b_c.write_text(UPSTREAM_B_C)
    proj.wgit("add", "src/b.c")
    # an edit made after `git add` is not lost by continuing: it is refused
    b_c.write_text(UPSTREAM_B_C + "/* not added */\n")
    with pytest.raises(WorkTreeError, match="git add"):
        continue_rebase(proj.project)
    assert b_c.read_text().endswith("/* not added */\n")
    b_c.write_text(UPSTREAM_B_C)

    result = continue_rebase(proj.project)

    assert result.dropped == STANDARD_NAMES[:2]
    assert [o.outcome for o in result.outcomes] == [OUTCOME_UPSTREAM, OUTCOME_UPSTREAM, OUTCOME_CLEAN]
    assert proj.series() == ["0001-tests-cover-NULL-in-b_len.patch"]
    assert proj.wgit("show", "patched:src/b.c") == UPSTREAM_B_C.rstrip("\n")
    assert load_pin(proj.project.pin_file).commit == new
    assert apply(proj.project).noop


def test_rebase_onto_a_pin_file(proj: Proj, tmp_path) -> None:
    apply(proj.project)
    new = proj.upstream.advance({"README": "tiny upstream, moved on\n"}, "upstream moves on\n")
    target = tmp_path / "next.toml"
    target.write_text(
        f'name = "llama.cpp"\nrepository = "{proj.upstream.url}"\ncommit = "{new}"\ntag = "b2"\n'
        f'date = "2026-11-01"\ntree = "{proj.upstream.tree_of(new)}"\n\n'
        f'[[source]]\nkind = "git"\nurl = "{proj.upstream.url}"\n')

    result = rebase(proj.project, str(target))

    assert [o.outcome for o in result.outcomes] == [OUTCOME_CLEAN] * 3
    pin = load_pin(proj.project.pin_file)
    # the project's pin becomes the given one, tag and date included
    assert pin == load_pin(target)
    assert proj.wgit("rev-parse", "upstream") == new
    assert apply(proj.project).noop


def test_rebase_onto_a_pin_file_with_a_wrong_tree_is_refused(proj: Proj, tmp_path) -> None:
    apply(proj.project)
    pin_bytes = proj.project.pin_file.read_bytes()
    new = proj.upstream.advance({"README": "moved\n"}, "upstream moves on\n")
    target = tmp_path / "bad.toml"
    target.write_text(
        f'name = "llama.cpp"\nrepository = "x"\ncommit = "{new}"\ntree = "{"0" * 40}"\n\n'
        f'[[source]]\nkind = "git"\nurl = "{proj.upstream.url}"\n')
    with pytest.raises(SourceError, match="tree"):
        rebase(proj.project, str(target))
    assert proj.project.pin_file.read_bytes() == pin_bytes
    assert proj.wgit("rev-parse", "upstream") == proj.upstream.commit

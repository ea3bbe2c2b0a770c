"""The series verbs (`new`, `edit`, `drop`, `move`, `mark`, `undo`) and `init`, through the CLI on a
synthetic upstream: each leaves `patched` and patches/ in step (`refresh --check` clean, `apply` a
no-op), leaves a recovery ref that `undo` goes back to, and refuses a series out of step."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import (
    PATCH3_TEST_X_C,
    STANDARD_NAMES,
    Proj,
    commit,
    git,
    make_upstream,
    run_patchset,
)

from builder.series.edit import set_upstream_trailer
from builder.series.load import load_series


def ps(p: Proj, *args: str) -> tuple[int, str]:
    r = run_patchset("--project", str(p.root), *args)
    return r.returncode, r.stdout + r.stderr


def in_step(p: Proj) -> None:
    """patches/ is what refresh writes from `patched`, and apply has nothing to do."""
    rc, out = ps(p, "refresh", "--check")
    assert rc == 0, out
    rc, out = ps(p, "apply")
    assert rc == 0 and "up to date" in out, out


def subjects(p: Proj) -> list[str]:
    return [x.subject for x in load_series(p.patches).patches]


@pytest.fixture
def applied(proj: Proj) -> Proj:
    rc, out = ps(proj, "apply")
    assert rc == 0, out
    return proj


def test_drop_then_undo(applied: Proj) -> None:
    before = applied.snapshot()
    rc, out = ps(applied, "drop", "2")
    assert rc == 0, out
    assert applied.series() == ["0001-a-widen-the-sum.patch", "0002-tests-cover-NULL-in-b_len.patch"]
    assert "refs/patchset/undo/0001-drop" in out
    in_step(applied)
    rc, out = ps(applied, "undo")
    assert rc == 0, out
    assert applied.snapshot() == before
    assert "no other recovery ref" in out
    in_step(applied)
    rc, out = ps(applied, "undo")
    assert rc == 2 and "nothing to undo" in out


def test_move_reorders_and_keeps_bytes_of_each_patch(applied: Proj) -> None:
    rc, out = ps(applied, "move", "3", "--before", "1")
    assert rc == 0, out
    assert subjects(applied) == ["tests: cover NULL in b_len", "a: widen the sum", "b: accept NULL"]
    in_step(applied)
    # the work tree holds every change, whatever the order
    assert (applied.work / "tests" / "test-x.c").read_text() == PATCH3_TEST_X_C


def test_move_that_does_not_apply_changes_nothing(applied: Proj) -> None:
    # a fourth patch that changes the line patch 1 changed: it cannot come before patch 1
    commit(applied.work, {"src/a.c": (applied.work / "src/a.c").read_text().replace("(long)x + y", "(long)x + y + 0")},
           "a: plus zero\n")
    assert ps(applied, "refresh")[0] == 0
    before = applied.snapshot()
    rc, out = ps(applied, "move", "4", "--before", "1")
    assert rc == 3 and "does not apply" in out, out
    assert applied.snapshot() == before
    in_step(applied)


def test_mark_sets_the_upstream_trailer(applied: Proj) -> None:
    url = "https://github.com/ggml-org/llama.cpp/pull/4242"
    before = {name: (applied.patches / name).read_text() for name in STANDARD_NAMES}
    rc, out = ps(applied, "mark", "1", "sent", url)
    assert rc == 0, out
    p1 = load_series(applied.patches).patches[0]
    assert p1.meta.upstream == "sent" and url in (applied.patches / STANDARD_NAMES[0]).read_text()
    # the later patches made again on the new patch 1 with their authors, dates and messages: the same bytes;
    # patch 1 the same but for its trailer
    for name in STANDARD_NAMES[1:]:
        assert (applied.patches / name).read_text() == before[name]
    first = (applied.patches / STANDARD_NAMES[0]).read_text()
    assert set(first.splitlines()) - set(before[STANDARD_NAMES[0]].splitlines()) == {f"Patchset-Upstream: sent {url}"}
    assert "Patchset-Status" not in (applied.patches / STANDARD_NAMES[0]).read_text()
    assert (applied.patches / STANDARD_NAMES[1]).read_text().count("Patchset-Upstream") == 0  # only patch 1
    in_step(applied)
    rc, out = ps(applied, "mark", "1", "sent", "not-a-url")
    assert rc == 2 and "URL" in out


def test_mark_fork_only_needs_a_reason_and_status_shows_it(applied: Proj) -> None:
    rc, out = ps(applied, "mark", "2", "fork-only", "upstream", "asserts", "instead")
    assert rc == 0, out
    assert "Patchset-Upstream: fork-only upstream asserts instead" in (applied.patches / STANDARD_NAMES[1]).read_text()
    assert load_series(applied.patches).patches[1].meta.fork_only
    in_step(applied)
    rc, out = ps(applied, "status")
    assert rc == 0 and "fork-only upstream asserts instead" in out.replace("\n", ""), out
    rc, out = ps(applied, "mark", "2", "fork-only", "")
    assert rc == 2 and "needs a reason" in out, out


def test_set_upstream_trailer_replaces_or_adds() -> None:
    msg = "s\n\nbody\n\nPatchset-Status: pending\nPatchset-Backends: cpu\n"
    assert set_upstream_trailer(msg, "sent https://x/1") == "s\n\nbody\n\nPatchset-Upstream: sent https://x/1\n" \
        "Patchset-Backends: cpu\n"
    assert set_upstream_trailer("s\n\nbody\n", "merged abc1234") == "s\n\nbody\n\nPatchset-Upstream: merged abc1234\n"


def test_new_then_refresh_adds_a_patch(applied: Proj, tmp_path: Path) -> None:
    msg = tmp_path / "msg"
    msg.write_text("The README says too little.\n\nPatchset-Upstream: not-sent fork-only\nPatchset-Backends: cpu\n")
    rc, out = ps(applied, "new", "README: say more", "--message-file", str(msg), "--author", "Ann <ann@example.org>")
    assert rc == 0, out
    assert "editing patch: README: say more" in out
    (applied.work / "README").write_text("tiny upstream, and more\n")
    rc, out = ps(applied, "refresh")
    assert rc == 0, out
    assert applied.series()[-1] == "0004-README-say-more.patch"
    text = (applied.patches / "0004-README-say-more.patch").read_text()
    assert "From: Ann <ann@example.org>" in text and "+tiny upstream, and more" in text
    in_step(applied)


def test_new_with_no_change_is_refused_at_refresh(applied: Proj) -> None:
    assert ps(applied, "new", "empty one")[0] == 0
    rc, out = ps(applied, "refresh")
    assert rc == 2 and "changes nothing" in out, out
    rc, out = ps(applied, "undo")
    assert rc == 0, out
    in_step(applied)


def test_edit_amends_a_middle_patch(applied: Proj) -> None:
    rc, out = ps(applied, "edit", "2")
    assert rc == 0, out
    assert (applied.work / "tests" / "test-x.c").read_text() != PATCH3_TEST_X_C  # patch 3 waits
    rc, out = ps(applied, "drop", "1")
    assert rc == 2 and "being edited" in out
    b = applied.work / "src" / "b.c"
    b.write_text(b.read_text().replace("if (s == NULL) return 0;", "if (s == NULL) return 0; /* none */"))
    rc, out = ps(applied, "refresh")
    assert rc == 0, out
    assert "/* none */" in (applied.patches / STANDARD_NAMES[1]).read_text()
    assert (applied.work / "tests" / "test-x.c").read_text() == PATCH3_TEST_X_C  # replayed on it
    in_step(applied)


def test_verbs_refuse_a_series_out_of_step(applied: Proj) -> None:
    (applied.work / "README").write_text("changed\n")
    rc, out = ps(applied, "drop", "1")
    assert rc == 2 and "uncommitted" in out
    git(applied.work, "checkout", "--", "README")
    f = applied.patches / STANDARD_NAMES[0]
    f.write_text(f.read_text() + "\n")
    rc, out = ps(applied, "mark", "1", "not-needed", "gone upstream")
    assert rc == 2 and "not what `patchset refresh` writes" in out
    rc, out = ps(applied, "drop", "7")
    assert rc == 2


def test_init_starts_a_project(tmp_path: Path) -> None:
    (tmp_path / "u").mkdir()
    up = make_upstream(tmp_path / "u")
    root = tmp_path / "fork"
    source = "git+https://example.org/owner/patchset@" + "0" * 40
    r = run_patchset("init", str(root), "--git", up.url, "main", "--patchset-source", source)
    assert r.returncode == 0, r.stdout + r.stderr
    pin = (root / "upstream" / "llama.cpp.toml").read_text()
    assert up.commit in pin and up.tree in pin
    assert (root / "patches" / "series").read_text().startswith("#")
    assert (root / ".github" / "workflows" / "patchset.yml").is_file()
    assert ".patchset/" in (root / ".gitignore").read_text()
    r = run_patchset("--project", str(root), "apply")
    assert r.returncode == 0, r.stdout + r.stderr
    r = run_patchset("init", str(root), "--git", up.url, "main", "--patchset-source", source)
    assert r.returncode == 2 and "already holds" in r.stderr


def test_help_and_version(applied: Proj) -> None:
    r = run_patchset()
    assert r.returncode == 0 and "COMMAND" in r.stdout
    r = run_patchset("help", "mark")
    assert r.returncode == 0 and "example:" in r.stdout and "patchset mark 2 sent" in r.stdout
    r = run_patchset("help", "nosuch")
    assert r.returncode == 2
    r = run_patchset("--project", str(applied.root), "--version")
    assert r.returncode == 0 and "series: 3 patch(es)" in r.stdout and applied.upstream.commit in r.stdout


@pytest.mark.parametrize("verb", ["init", "import", "new", "edit", "drop", "move", "mark", "undo"])
def test_each_new_verb_has_help_with_an_example(verb: str) -> None:
    r = run_patchset(verb, "--help")
    assert r.returncode == 0 and "example:" in r.stdout and f"patchset {verb}" in r.stdout.split("example:")[1]


def test_an_edit_that_breaks_a_later_patch_stays_an_edit(applied: Proj) -> None:
    assert ps(applied, "edit", "2")[0] == 0
    # patch 3 adds a line after this one: rewriting it makes patch 3 fail to apply
    (applied.work / "tests" / "test-x.c").write_text(
        (applied.work / "tests" / "test-x.c").read_text().replace('b_len("ab") == 2', 'b_len("abc") == 3'))
    rc, out = ps(applied, "refresh")
    assert rc == 3 and "still being edited" in out, out
    rc, out = ps(applied, "undo")
    assert rc == 0, out
    in_step(applied)


def test_undo_takes_back_a_rebase_then_the_verb_before_it(applied: Proj) -> None:
    def state() -> tuple[bytes, dict[str, bytes]]:
        return applied.project.pin_file.read_bytes(), applied.snapshot()

    start = state()
    rc, out = ps(applied, "drop", "2")
    assert rc == 0, out
    dropped = state()
    old_up, old_head = applied.wgit("rev-parse", "upstream"), applied.wgit("rev-parse", "patched")
    new = applied.upstream.advance({"README": "tiny upstream, moved on\n"}, "README: moved on\n")
    rc, out = ps(applied, "rebase", "--onto", new)
    assert rc == 0, out
    assert state()[0] != dropped[0] and applied.wgit("rev-parse", "upstream") == new
    # the pin, patches/ and the work repository's refs as they were before the rebase
    rc, out = ps(applied, "undo")
    assert rc == 0, out
    assert "before rebase" in out, out
    assert state() == dropped
    assert applied.wgit("rev-parse", "upstream") == old_up and applied.wgit("rev-parse", "patched") == old_head
    in_step(applied)
    # then the drop made before it
    rc, out = ps(applied, "undo")
    assert rc == 0 and "before drop" in out, out
    assert state() == start
    in_step(applied)

"""A fork's first day: `drop --reason` writes the drop log, `import` brings a branch range, an mbox or a
pull request's .patch file into the series. Through the CLI on the synthetic upstream; each verb
leaves `patched` and patches/ in step and `undo` takes it back."""

from __future__ import annotations

from pathlib import Path

from helpers import A_C, STANDARD_NAMES, Proj, commit, git, run_patchset
from test_series_verbs import in_step, ps

from builder.series.dropped import BY_HAND, parse
from builder.series.importer import is_range


def applied(proj: Proj) -> Proj:
    assert ps(proj, "apply")[0] == 0
    return proj


def test_drop_with_a_reason_logs_it_and_undo_takes_both_back(proj: Proj) -> None:
    applied(proj)
    before = proj.snapshot()
    pin = proj.upstream.commit
    rc, out = ps(proj, "drop", "2", "--reason", "upstream took another design\t(see #12)")
    assert rc == 0, out
    assert STANDARD_NAMES[1] not in proj.series()
    [(_, record)] = parse(proj.patches / "dropped")[0]
    assert (record.patch, record.commit, record.why) == (STANDARD_NAMES[1], pin, BY_HAND)
    assert record.evidence == "upstream took another design (see #12)" and len(record.patch_id) == 40
    in_step(proj)
    assert run_patchset("--project", str(proj.root), "check").returncode == 0
    # a second drop appends; undo takes back only its own record
    rc, out = ps(proj, "drop", "1", "--reason", "not needed on our hardware")
    assert rc == 0, out
    assert [r.patch for _, r in parse(proj.patches / "dropped")[0]] == [STANDARD_NAMES[1], STANDARD_NAMES[0]]
    rc, out = ps(proj, "undo")
    assert rc == 0, out
    assert [r.patch for _, r in parse(proj.patches / "dropped")[0]] == [STANDARD_NAMES[1]]
    rc, out = ps(proj, "undo")
    assert rc == 0, out
    assert proj.snapshot() == before  # the log the first drop made went with its record
    assert run_patchset("--project", str(proj.root), "check").returncode == 0
    in_step(proj)


def test_drop_without_a_reason_or_with_an_empty_one(proj: Proj) -> None:
    applied(proj)
    rc, out = ps(proj, "drop", "3", "--reason", "  ")
    assert rc == 2 and "--reason" in out
    assert len(proj.series()) == 3 and not (proj.patches / "dropped").exists()
    rc, out = ps(proj, "drop", "3")
    assert rc == 0, out
    assert not (proj.patches / "dropped").exists()


def fork_clone(proj: Proj, tmp_path: Path) -> Path:
    """A clone of the upstream with a branch `fixes` of two commits (a fork's own), by another author."""
    clone = tmp_path / "my-fork"
    git(tmp_path, "clone", "--quiet", str(proj.upstream.bare), str(clone))
    git(clone, "checkout", "--quiet", "-b", "fixes")
    commit(clone, {"docs/notes.md": "our notes\n"}, "docs : our notes\n\nWhy we keep notes.\n",
           author=("Fork Dev", "dev@fork.example", "2024-05-01T00:00:00+00:00"))
    commit(clone, {"README": "tiny upstream, our build\n"},
           "readme : say it is our build\n\nPatchset-Upstream: not-sent fork-only\n",
           author=("Fork Dev", "dev@fork.example", "2024-05-02T00:00:00+00:00"))
    return clone


def messages(proj: Proj, n: int) -> list[str]:
    return proj.wgit("log", "--format=%an <%ae> %ad%n%B%x00", "--date=short", f"-{n}", "--reverse",
                     "patched").split("\0")[:n]


def test_import_a_range_of_a_fork_s_clone_then_undo(proj: Proj, tmp_path: Path) -> None:
    applied(proj)
    before = proj.snapshot()
    clone = fork_clone(proj, tmp_path)
    rc, out = ps(proj, "import", "--repo", str(clone), "main..fixes")
    assert rc == 0, out
    assert proj.series()[3:] == ["0004-docs-our-notes.patch", "0005-readme-say-it-is-our-build.patch"]
    first, second = (m.strip() for m in messages(proj, 2))
    c1 = git(clone, "rev-parse", "fixes~1")
    # the author and date kept; the trailers of `patchset new`'s template added to fill, the commit as origin
    assert first.startswith("Fork Dev <dev@fork.example> 2024-05-01\ndocs : our notes\n\nWhy we keep notes.\n\n")
    assert f"Patchset-Origin: {c1}" in first and "Patchset-Upstream: not-sent\n" in first
    assert "Patchset-Backends: cpu" in first and "Patchset-Test" not in first
    assert "to fill in each: Patchset-Test, Patchset-Test-Paths" in " ".join(out.split())
    # a trailer the commit had is kept as it was, not doubled
    assert second.count("Patchset-Upstream:") == 1 and "Patchset-Upstream: not-sent fork-only" in second
    in_step(proj)
    rc, out = ps(proj, "undo")
    assert rc == 0, out
    assert proj.snapshot() == before
    in_step(proj)


def test_import_an_mbox_and_a_range_of_the_work_repository(proj: Proj, tmp_path: Path) -> None:
    applied(proj)
    clone = fork_clone(proj, tmp_path)
    # a pull request's .patch: format-patch's mbox, its subjects numbered "[PATCH 1/2]"
    pr = tmp_path / "12345.patch"
    pr.write_text(git(clone, "format-patch", "--stdout", "--numbered", "main..fixes") + "\n")
    url = "https://github.com/ggml-org/llama.cpp/pull/12345"
    rc, out = ps(proj, "import", str(pr), "--origin", url)
    assert rc == 0, out
    assert [p for p in proj.series()[3:]] == ["0004-docs-our-notes.patch", "0005-readme-say-it-is-our-build.patch"]
    assert all(f"Patchset-Origin: {url}" in m for m in messages(proj, 2))
    in_step(proj)
    # the work repository's own range: a branch made there (e.g. fetched from the fork)
    git(proj.work, "branch", "side", "upstream")
    git(proj.work, "worktree", "add", "--quiet", str(tmp_path / "side"), "side")
    commit(tmp_path / "side", {"docs/side.md": "side\n"}, "docs : a side note\n")
    rc, out = ps(proj, "import", "upstream..side")
    assert rc == 0, out
    assert proj.series()[-1] == "0006-docs-a-side-note.patch"
    in_step(proj)


def test_import_refuses_bad_input_in_one_line_and_changes_nothing(proj: Proj, tmp_path: Path) -> None:
    applied(proj)
    clone = fork_clone(proj, tmp_path)
    junk = tmp_path / "notes.txt"
    junk.write_text("hello\n")
    # mail 3 does not apply on the series: patch 1 of the series changes the line it changes
    conflict = tmp_path / "conflict.mbox"
    commit(clone, {"src/a.c": A_C.replace("    return x + y;", "    return x - y;")}, "a : subtract\n")
    conflict.write_text(git(clone, "format-patch", "--stdout", "main..fixes") + "\n")
    git(clone, "checkout", "--quiet", "-b", "merged", "main")
    commit(clone, {"docs/x.md": "x\n"}, "docs : x\n")
    git(clone, "merge", "--quiet", "--no-ff", "-m", "merge fixes", "fixes")
    before, refs = proj.snapshot(), proj.wgit("for-each-ref")
    for args, words in (([str(tmp_path / "missing.patch")], "missing.patch: no such file"),
                        ([str(junk)], "notes.txt: not an mbox"),
                        (["--repo", str(clone), "main..nosuch"], "main..nosuch: not a range of"),
                        (["--repo", str(clone), "fixes..fixes"], "no commits"),
                        (["--repo", str(clone), "main..merged"], "is a merge"),
                        ([str(conflict)], "conflict.mbox mail 3 (a : subtract) does not apply on the series")):
        rc, out = ps(proj, "import", *args)
        errors = [ln for ln in out.splitlines() if ln.startswith("error:")]
        assert rc == 2 and len(errors) == 1 and words in errors[0], out
        assert "Traceback" not in out
    assert proj.snapshot() == before and proj.wgit("for-each-ref") == refs
    in_step(proj)


def test_a_range_is_told_from_a_file_name() -> None:
    assert [is_range(x) for x in ("b7000..my-fixes", "v1.2..v1.3", "a..b")] == [True] * 3
    assert [is_range(x) for x in ("12345.patch", "a...b", "..b", "a..", "a ..b")] == [False] * 5


def test_the_test_trailers_of_an_imported_patch_are_filled_by_edit_and_refresh(proj: Proj, tmp_path: Path) -> None:
    """What import's output and the README say to do next: `patchset edit N`, amend the message in the
    work repository, `patchset refresh`."""
    applied(proj)
    clone = fork_clone(proj, tmp_path)
    assert ps(proj, "import", "--repo", str(clone), "main..fixes")[0] == 0
    rc, out = ps(proj, "edit", "4")
    assert rc == 0, out
    message = (proj.wgit("log", "-1", "--format=%B")
               + "\nPatchset-Test: test-notes\nPatchset-Test-Paths: tests/test-notes.cpp\n")
    git(proj.work, "commit", "--quiet", "--amend", "-m", message)
    rc, out = ps(proj, "refresh")
    assert rc == 0, out
    text = (proj.patches / "0004-docs-our-notes.patch").read_text()
    assert "Patchset-Test: test-notes\n" in text and "Patchset-Origin: " in text
    in_step(proj)

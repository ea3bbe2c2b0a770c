"""apply: the work repository's branches, idempotence, conflicts, and never clobbering work."""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import pytest
from helpers import (
    A_C,
    AUTHORS,
    CONFLICT_A_C,
    CONFLICT_MSG,
    PATCH1_A_C,
    PATCH2_B_C,
    STANDARD_NAMES,
    STANDARD_PATCHES,
    Proj,
    Upstream,
    commit,
    git,
    make_project,
    run_patchset,
)

from builder.cli import main
from builder.errors import ConflictError, StateError, WorkTreeError
from builder.gitrepo import COMMITTER
from builder.series.apply import abort_apply, apply, continue_apply
from builder.series.status import status
from builder.series.workrepo import OUTCOME_3WAY, OUTCOME_CLEAN, OUTCOME_RESOLVED, OUTCOME_UPSTREAM, WorkRepo


def _conflicting_series(proj: Proj) -> list[str]:
    """Series: patch 1, a patch made on upstream that changes patch 1's line, patch 3."""
    git(proj.scratch, "checkout", "--quiet", "-b", "side", proj.upstream.commit)
    clash = commit(proj.scratch, {"src/a.c": CONFLICT_A_C}, CONFLICT_MSG, author=AUTHORS[1])
    return proj.set_series([proj.commits[0], clash, proj.commits[2]])


def test_apply_builds_upstream_and_patched(proj: Proj) -> None:
    result = apply(proj.project)

    assert not result.noop
    assert [o.name for o in result.outcomes] == STANDARD_NAMES
    assert all(o.outcome == OUTCOME_CLEAN for o in result.outcomes)
    # upstream is the pinned commit and tree; patched = upstream + one commit per patch
    assert proj.wgit("rev-parse", "upstream") == proj.upstream.commit
    assert proj.wgit("rev-parse", "upstream^{tree}") == proj.upstream.tree
    applied = proj.wgit("rev-list", "--reverse", "upstream..patched").split()
    assert len(applied) == 3
    assert proj.wgit("rev-parse", "patched") == result.head
    assert proj.wgit("symbolic-ref", "--short", "HEAD") == "patched"
    assert proj.wgit("status", "--porcelain") == ""
    for c_new, c_orig, (name, email, date) in zip(applied, proj.commits, AUTHORS, strict=True):
        fmt = "--format=%an%n%ae%n%aI%n%B"
        assert proj.wgit("log", "-1", fmt, c_new) == git(proj.scratch, "log", "-1", fmt, c_orig)
        assert proj.wgit("log", "-1", "--format=%an <%ae> %aI", c_new) == f"{name} <{email}> {date}"
        # same content as the commit the patch was made from
        assert proj.wgit("rev-parse", f"{c_new}^{{tree}}") == git(proj.scratch, "rev-parse", f"{c_orig}^{{tree}}")
    body = proj.wgit("log", "-1", "--format=%B", applied[1])
    assert "Patchset-Status: submitted https://github.com/ggml-org/llama.cpp/pull/1" in body
    assert "Patchset-Mutation: mutations/0002-b-null.patch" in body
    assert (proj.work / "src" / "a.c").read_text() == PATCH1_A_C


def test_reapply_is_a_noop_until_a_patch_changes(proj: Proj) -> None:
    first = apply(proj.project)
    again = apply(proj.project)
    assert again.noop
    assert again.head == first.head == proj.wgit("rev-parse", "patched")

    # a changed message (not even the diff) is a new series: apply again
    p1 = proj.patches / STANDARD_NAMES[0]
    p1.write_bytes(p1.read_bytes().replace(b"could overflow.", b"could overflow an int."))
    third = apply(proj.project)
    assert not third.noop
    assert third.head != first.head
    assert proj.wgit("rev-parse", "patched") == third.head
    first_commit = proj.wgit("rev-list", "--reverse", "upstream..patched").split()[0]
    assert "could overflow an int." in proj.wgit("log", "-1", "--format=%B", first_commit)
    assert apply(proj.project).noop


def test_conflict_names_patch_and_file_then_continue(proj: Proj) -> None:
    names = _conflicting_series(proj)
    with pytest.raises(ConflictError) as ei:
        apply(proj.project)
    msg = str(ei.value)
    assert "patch 2/3" in msg
    assert names[1] in msg  # the series' file name, not an internal queue name
    assert "src/a.c" in msg
    assert "<<<<<<<" in (proj.work / "src" / "a.c").read_text()

    # status sees the stopped operation; refresh/apply refuse to run meanwhile
    assert status(proj.project).operation == "apply"
    with pytest.raises(WorkTreeError, match="--continue"):
        apply(proj.project)

    resolved = PATCH1_A_C.replace("    return (long)x + y;", "    return (long)x + y > 100 ? 100 : (long)x + y;")
    (proj.work / "src" / "a.c").write_text(resolved)
    proj.wgit("add", "src/a.c")
    result = continue_apply(proj.project)

    assert [o.outcome for o in result.outcomes] == [OUTCOME_CLEAN, OUTCOME_RESOLVED, OUTCOME_CLEAN]
    assert [o.name for o in result.outcomes] == names
    applied = proj.wgit("rev-list", "--reverse", "upstream..patched").split()
    assert len(applied) == 3
    assert proj.wgit("log", "-1", "--format=%s|%an", applied[1]) == f"a: clamp the sum|{AUTHORS[1][0]}"
    assert proj.wgit("show", f"{applied[1]}:src/a.c") == resolved.rstrip("\n")
    assert proj.wgit("status", "--porcelain") == ""
    assert not (proj.work / ".git" / "rebase-apply").exists()
    st = status(proj.project)
    assert st.operation is None
    assert [p.dirty for p in st.patches] == [False, True, False]


def test_conflict_exit_code_3(proj: Proj, capsys: pytest.CaptureFixture[str]) -> None:
    names = _conflicting_series(proj)
    assert main(["--project", str(proj.root), "apply"]) == 3
    err = capsys.readouterr().err
    assert "patch 2/3" in err
    assert names[1] in err
    assert "Traceback" not in err
    assert main(["--project", str(proj.root), "apply", "--abort"]) == 0


def test_abort_restores_previous_patched(proj: Proj) -> None:
    before = apply(proj.project).head
    _conflicting_series(proj)
    with pytest.raises(ConflictError):
        apply(proj.project)
    assert proj.wgit("status", "--porcelain") != ""

    abort_apply(proj.project)

    assert proj.wgit("rev-parse", "patched") == before
    assert proj.wgit("symbolic-ref", "--short", "HEAD") == "patched"
    assert proj.wgit("status", "--porcelain", "--untracked-files=all") == ""
    assert (proj.work / "src" / "a.c").read_text() == PATCH1_A_C
    assert not (proj.work / ".git" / "rebase-apply").exists()
    assert WorkRepo(proj.work).load_state().op is None
    with pytest.raises(WorkTreeError, match="no apply is stopped"):
        abort_apply(proj.project)


def test_abort_of_a_first_apply_leaves_no_patched(proj: Proj) -> None:
    _conflicting_series(proj)
    with pytest.raises(ConflictError):
        apply(proj.project)
    abort_apply(proj.project)
    assert proj.wgit("rev-parse", "--verify", "--quiet", "refs/heads/patched", check=False) == ""
    assert proj.wgit("status", "--porcelain") == ""


def test_uncommitted_change_is_never_clobbered(proj: Proj, capsys: pytest.CaptureFixture[str]) -> None:
    apply(proj.project)
    edited = proj.work / "src" / "b.c"
    edited.write_text(edited.read_text() + "/* my work in progress */\n")
    (proj.work / "notes.txt").write_text("untracked work\n")
    p1 = proj.patches / STANDARD_NAMES[0]
    p1.write_bytes(p1.read_bytes().replace(b"could overflow.", b"could overflow an int."))

    with pytest.raises(WorkTreeError, match="uncommitted changes"):
        apply(proj.project)
    assert "my work in progress" in edited.read_text()
    assert (proj.work / "notes.txt").exists()

    assert main(["--project", str(proj.root), "apply"]) == 2
    err = capsys.readouterr().err
    assert "refusing to re-apply" in err
    assert "Traceback" not in err
    assert "my work in progress" in edited.read_text()

    result = apply(proj.project, force=True)
    assert not result.noop
    saved = proj.wgit("for-each-ref", "--format=%(refname)", "refs/patchset/backup/").split()
    wt = [r for r in saved if r.endswith("-worktree")]
    assert len(wt) == 1
    assert "my work in progress" in proj.wgit("show", f"{wt[0]}:src/b.c")
    assert "my work in progress" not in edited.read_text()
    assert proj.wgit("status", "--porcelain") == ""


def test_unrefreshed_commit_is_refused_then_backed_up_with_force(proj: Proj) -> None:
    apply(proj.project)
    proj.wgit("commit", "--quiet", "--allow-empty", "-m", "my unsaved fix")
    old_head = proj.wgit("rev-parse", "patched")

    with pytest.raises(WorkTreeError) as ei:
        apply(proj.project)
    assert "patchset refresh" in str(ei.value)
    assert "1 commit(s)" in str(ei.value)
    assert proj.wgit("rev-parse", "patched") == old_head

    result = apply(proj.project, force=True)

    refs = proj.wgit("for-each-ref", "--format=%(refname) %(objectname)", "refs/patchset/backup/").splitlines()
    assert len(refs) == 1
    ref, target = refs[0].split()
    assert re.fullmatch(r"refs/patchset/backup/\d{8}-\d{6}", ref)
    assert target == old_head
    assert any(ref in b for b in result.backups)
    assert not result.noop
    assert proj.wgit("rev-parse", "patched") == result.head != old_head
    assert "my unsaved fix" not in proj.wgit("log", "--format=%s", "upstream..patched")
    assert len(proj.wgit("rev-list", "upstream..patched").split()) == 3


# -- one `git am` for the whole queue -------------------------------------------------------------
def _mixed_series(proj: Proj) -> list[str]:
    """Clean, clean, a patch that needs a 3-way merge, one already applied, clean."""
    git(proj.scratch, "checkout", "--quiet", "-b", "side", proj.upstream.commit)
    # made on upstream: its context holds the line patch 1 changes, but its own change is further down
    threeway = commit(proj.scratch, {"src/a.c": A_C.replace("int a_twice(int v) {", "int a_twice(int v) { /* x2 */")},
                      "a: say what a_twice does\n\nPatchset-Status: pending\n", author=AUTHORS[1])
    # patch 2's change again, made on upstream: already there once patch 2 is
    again = commit(proj.scratch, {"src/b.c": PATCH2_B_C}, "b: accept NULL, again\n",
                   author=AUTHORS[2])
    return proj.set_series([proj.commits[0], proj.commits[1], threeway, again, proj.commits[2]])


def _am_one_at_a_time(proj: Proj, mails: list[Path], dest: Path) -> list[str]:
    """The reference, in plain git: one `git am` per mail as the tool always ran it (3-way when a
    mail does not apply, skipped when that changes nothing); the commits made."""
    git(dest.parent, "clone", "--quiet", "--no-checkout", str(proj.upstream.bare), str(dest))
    git(dest, "checkout", "--quiet", "-B", "patched", proj.upstream.commit)
    env = dict(COMMITTER)
    flags = ("-c", "commit.gpgsign=false", "-c", "core.hooksPath=/dev/null", "am", "--keep",
             "--committer-date-is-author-date", "--quiet")
    for mail in mails:
        if subprocess.run(["git", "-C", str(dest), *flags, str(mail)], env={**os.environ, **env},
                          capture_output=True, check=False).returncode == 0:
            continue
        git(dest, "am", "--abort")
        r = subprocess.run(["git", "-C", str(dest), *flags, "--3way", str(mail)], env={**os.environ, **env},
                           capture_output=True, check=False)
        if r.returncode != 0:
            assert git(dest, "diff", "--cached", "HEAD") == "", f"{mail.name}: a real conflict in the reference"
            git(dest, "am", "--skip")
    return git(dest, "rev-list", "--reverse", f"{proj.upstream.commit}..HEAD").split()


def test_batched_apply_makes_the_commits_one_am_per_patch_makes(proj: Proj, tmp_path: Path) -> None:
    names = _mixed_series(proj)
    result = apply(proj.project)

    assert [o.outcome for o in result.outcomes] == [OUTCOME_CLEAN, OUTCOME_CLEAN, OUTCOME_3WAY, OUTCOME_UPSTREAM,
                                                    OUTCOME_CLEAN]
    assert [o.name for o in result.outcomes] == names
    applied = proj.wgit("rev-list", "--reverse", "upstream..patched").split()
    assert [o.commit for o in result.outcomes if o.outcome != OUTCOME_UPSTREAM] == applied
    # byte for byte the commits (ids) of one `git am` per mail, the way apply worked before it batched
    assert applied == _am_one_at_a_time(proj, [proj.patches / n for n in names], tmp_path / "reference")
    assert proj.wgit("status", "--porcelain") == ""
    assert not (proj.work / ".git" / "rebase-apply").exists()
    assert apply(proj.project).noop


def _work_repo_processes(proj: Proj, trace: Path) -> int:
    """How many git processes a first `patchset apply` starts in the work repository (parsing the
    series' mails, cached by their digests, is not counted)."""
    env = {"PATCHSET_CACHE": str(proj.project.cache_dir)}
    assert run_patchset("--project", str(proj.root), "fetch", env=env).returncode == 0
    r = run_patchset("--project", str(proj.root), "apply", env={**env, "PATCHSET_FAULT_TRACE": str(trace)})
    assert r.returncode == 0, r.stdout + r.stderr
    return sum(f" -C {proj.work} " in line for line in trace.read_text().splitlines())


def test_a_longer_clean_series_starts_no_more_processes(up: Upstream, cache_dir: Path, tmp_path: Path) -> None:
    more = [({f"src/new{i}.c": f"int new{i};\n"}, f"new{i}: add\n\nPatchset-Status: pending\n") for i in range(6)]
    short = make_project(tmp_path / "short", up, cache_dir)
    long = make_project(tmp_path / "long", up, cache_dir, patches=STANDARD_PATCHES + more)
    n_short = _work_repo_processes(short, tmp_path / "short.trace")
    n_long = _work_repo_processes(long, tmp_path / "long.trace")
    assert len(long.wgit("rev-list", "upstream..patched").split()) == 9
    # the whole queue goes through one `git am`: a series three times as long costs no more git processes
    assert n_long == n_short


def test_a_state_file_of_the_first_versions_still_loads(tmp_path: Path) -> None:
    """An operation stopped at a conflict by a first version kept some values in a bag `extra`."""
    work = WorkRepo(tmp_path)
    work.meta_dir.mkdir(parents=True)
    op = {"kind": "rebase", "queue": ["0002.patch"], "pre_head": "a" * 40, "pre_branch": "patched",
          "pre_upstream": "b" * 40, "done": [{"name": "0001.patch", "outcome": OUTCOME_CLEAN, "commit": "c" * 40}],
          "detect_upstream": True, "extra": {"names": ["0001-x.patch", "0002-y.patch"], "fingerprint": "f",
                                             "new_pin": {"toml": 'commit = "d"\n'}, "new_upstream": "e" * 40}}
    work.state_file.write_text(json.dumps({"op": op}))
    loaded = work.load_state().op
    assert loaded is not None
    assert (loaded.names, loaded.fingerprint, loaded.new_pin_toml, loaded.new_upstream, loaded.stopped) == (
        ["0001-x.patch", "0002-y.patch"], "f", 'commit = "d"\n', "e" * 40, True)
    assert loaded.named(loaded.done)[0].name == "0001-x.patch"

    op["extra"] = {"no_such_value": 1}
    work.state_file.write_text(json.dumps({"op": op}))
    with pytest.raises(StateError, match="damaged state file"):
        work.load_state()

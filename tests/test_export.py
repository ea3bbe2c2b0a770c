"""`patchset export`: PR packages on synthetic upstreams that carry their own templates and rules."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
from helpers import AUTHORS, STANDARD_PATCHES, Proj, Upstream, commit, git, make_project, make_upstream

from builder.cli import main
from builder.deliver import diffparse
from builder.deliver.clean import check_tree
from builder.deliver.export import export
from builder.deliver.export_commits import strip_trailers
from builder.deliver.export_package import ExportOptions
from builder.deliver.templates import placeholder_pattern
from builder.errors import InputError, PatchsetError
from builder.series.load import lint

AUTHOR = "Jane Doe <jane@example.org>"

PR_TEMPLATE = """\
## Overview

<!-- Describe what this PR does and why. Be concise but complete -->

## Additional information

<!-- You can provide more details and link related discussions here. Delete this section if not applicable -->

## Requirements

<!-- IMPORTANT: Please do NOT delete this section, otherwise your PR may be rejected -->

- I have read and agree with the contributing guidelines
- AI usage disclosure: <!-- mention: YES / NO - if yes, describe how AI was used -->
"""

BUG_FORM = """\
name: Bug (misc.)
description: Something is not working the way it should.
title: "Misc. bug: "
labels: ["bug-unconfirmed"]
body:
  - type: markdown
    attributes:
      value: Please fill out this template yourself.
  - type: textarea
    id: version
    attributes:
      label: Name and Version
    validations:
      required: true
  - type: textarea
    id: command
    attributes:
      label: Command line
      render: shell
  - type: textarea
    id: info
    attributes:
      label: Problem description & steps to reproduce
      description: Please give us a summary of the problem.
    validations:
      required: true
  - type: textarea
    id: logs
    attributes:
      label: Relevant log output
      value: |
        <details>
        <summary>Logs</summary>

        ```console

        ```
        </details>
"""

FEATURE_FORM = """\
name: Enhancement
description: Suggest a new feature.
title: "Feature Request: "
labels: ["enhancement"]
body:
  - type: textarea
    id: idea
    attributes:
      label: Idea
    validations:
      required: true
"""

EDITORCONFIG = """\
root = true

[*]
end_of_line = lf
insert_final_newline = true
trim_trailing_whitespace = true
indent_style = space
indent_size = 4

[Makefile]
indent_style = tab
"""

CLANG_FORMAT = """\
---
Language: Cpp
BasedOnStyle: LLVM
IndentWidth: 4
ColumnLimit: 120
SortIncludes: Never
AllowShortFunctionsOnASingleLine: None
...
"""

TEMPLATE_FILES = {
    ".github/pull_request_template.md": PR_TEMPLATE,
    ".github/ISSUE_TEMPLATE/010-bug.yml": BUG_FORM,
    ".github/ISSUE_TEMPLATE/020-enhancement.yml": FEATURE_FORM,
    ".github/ISSUE_TEMPLATE/config.yml": "blank_issues_enabled: false\n",
    ".editorconfig": EDITORCONFIG,
    ".clang-format": CLANG_FORMAT,
}


def with_files(up: Upstream, files: dict[str, str | bytes | None], message: str = "upstream: rules") -> Upstream:
    """Advance the synthetic upstream by one commit and make that the commit the project pins."""
    up.commit = up.advance(files, message)
    up.tree = up.tree_of("HEAD")
    return up


@pytest.fixture
def tproj(tmp_path: Path, cache_dir: Path) -> Proj:
    """The standard three-patch series on an upstream that carries llama.cpp-like templates and rules."""
    up = with_files(make_upstream(tmp_path), dict(TEMPLATE_FILES))
    return make_project(tmp_path, up, cache_dir, patches=UPSTREAM_SHAPED)


# the standard series with subjects in upstream's form ("a: x" -> "a : x")
UPSTREAM_SHAPED = [(files, re.sub(r"^(\w+): ", r"\1 : ", msg)) for files, msg in STANDARD_PATCHES]


def run_export(p: Proj, **kw: object) -> object:
    kw.setdefault("author", AUTHOR)
    return export(p.project, ExportOptions(**kw))  # type: ignore[arg-type]


def package_files(vdir: Path) -> dict[str, str]:
    return {f.relative_to(vdir).as_posix(): f.read_text() for f in sorted(vdir.rglob("*")) if f.is_file()}


def diff_part(mail: str) -> str:
    return mail[mail.index("diff --git "):]


def am(repo: Path, *mails: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["git", "-C", str(repo), "am", "--quiet", *[str(m) for m in mails]],
                          capture_output=True, text=True, check=False)


def clean_checkout(up: Upstream, where: Path) -> Path:
    git(where.parent, "clone", "--quiet", str(up.bare), str(where))
    git(where, "checkout", "--quiet", "--detach", up.commit)
    return where


# -- the package ----------------------------------------------------------------------------------
def test_every_mail_applies_alone_equals_the_patch_and_carries_no_trailer(tproj: Proj, tmp_path: Path) -> None:
    result = run_export(tproj)

    assert len(result.packages) == 3
    checkout = clean_checkout(tproj.upstream, tmp_path / "clean")
    for pkg, name in zip(result.packages, tproj.series(), strict=True):
        files = package_files(pkg.directory)
        assert set(files) >= {f"{name}", "PR.md", "ISSUE.md", "submit.txt"}, files.keys()
        for rel, text in files.items():
            assert "Patchset-" not in text, f"{rel} of {name} carries our trailer"
        mail = files[name]
        assert re.search(r"^From: Jane Doe <jane@example.org>$", mail, re.M)
        assert "patchset@invalid" not in mail
        original = (tproj.patches / name).read_text()
        assert diff_part(mail) == diff_part(original)
        git(checkout, "checkout", "--quiet", "--detach", "--force", tproj.upstream.commit)
        r = am(checkout, pkg.directory / name)
        assert r.returncode == 0, r.stderr
        assert git(checkout, "log", "-1", "--format=%an <%ae>") == AUTHOR
        # the commit message is the author's to write: the subject, then a placeholder for the body;
        # the series' message (minus our trailers) is offered as notes, marked as such, in NOTES.md
        series_message = strip_trailers(
            git(tproj.scratch, "log", "-1", "--format=%B", tproj.commits[int(name[:4]) - 1])).strip()
        subject, _, body = series_message.partition("\n\n")
        sent = git(checkout, "log", "-1", "--format=%B").strip()
        assert sent.startswith(subject + "\n\n[FILL IN: the commit message in your own words")
        assert not body or body not in sent
        notes = files["NOTES.md"]
        assert notes.startswith("# Notes for the author: not for upstream\n")
        assert "written by AI" in notes and series_message in notes
        assert pkg.deps == ()
        assert git(tproj.work, "rev-parse", f"refs/heads/pr/{pkg.slug}^") == tproj.upstream.commit


def test_a_patch_that_needs_an_earlier_one_names_it_and_applies_with_it(tmp_path: Path, cache_dir: Path) -> None:
    up = with_files(make_upstream(tmp_path), dict(TEMPLATE_FILES))
    series = [
        ({"src/a.c": (up.src / "src/a.c").read_text().replace("    int y = 2;", "    int y = 3;")},
         "a : three\n\nPatchset-Status: pending\n"),
        ({"src/b.c": (up.src / "src/b.c").read_text().replace("n++", "n += 1")}, "b : count up\n"),
        ({"src/a.c": (up.src / "src/a.c").read_text().replace("    int y = 2;", "    int y = 4;")},
         "a : four\n\nPatchset-Status: pending\n"),
    ]
    # the third patch's context ("int y = 3") exists only after the first
    p = make_project(tmp_path, up, cache_dir, patches=series)

    result = run_export(p)

    third = result.packages[2]
    assert third.deps == (p.series()[0],)
    pr = (third.directory / "PR.md").read_text()
    assert "Depends on: this branch also carries" in pr and "`a : three`" in pr
    assert "`b : count up`" not in pr
    # the branch: pin, the dependency, the patch
    log = git(p.work, "log", "--format=%s", f"{up.commit}..refs/heads/pr/{third.slug}").splitlines()
    assert log == ["a : four", "a : three"]
    checkout = clean_checkout(up, tmp_path / "clean")
    assert am(checkout, third.directory / p.series()[2]).returncode != 0
    git(checkout, "am", "--abort")
    deps = sorted((third.directory / "deps").glob("*.patch"))
    assert [d.name[:4] for d in deps] == ["0001"]
    r = am(checkout, *deps, third.directory / p.series()[2])
    assert r.returncode == 0, r.stderr


def two_apart(tmp_path: Path, cache_dir: Path, second_trailers: str) -> tuple[Upstream, Proj]:
    """`a : three` and `b : count up`, which touch other files (each applies alone on the pin); the second
    with `second_trailers`."""
    up = with_files(make_upstream(tmp_path), dict(TEMPLATE_FILES))
    series = [
        ({"src/a.c": (up.src / "src/a.c").read_text().replace("    int y = 2;", "    int y = 3;")},
         "a : three\n\nPatchset-Upstream: not-sent\n"),
        ({"src/b.c": (up.src / "src/b.c").read_text().replace("n++", "n += 1")},
         f"b : count up\n\nPatchset-Upstream: not-sent\n{second_trailers}"),
    ]
    return up, make_project(tmp_path, up, cache_dir, patches=series)


def test_a_declared_dependency_rides_on_the_branch_and_is_named(tmp_path: Path, cache_dir: Path) -> None:
    first = "0001-a-three.patch"
    # applies alone (another file), but needs the first (say, its API): the series declares it
    up, p = two_apart(tmp_path, cache_dir, f"Patchset-Depends: {first}\n")
    assert p.series()[0] == first

    result = run_export(p, cover=True)

    second = result.packages[1]
    assert second.deps == (first,)
    pr = (second.directory / "PR.md").read_text()
    assert re.search(r"^  - `a : three` \(#\[FILL IN: the PR number of a-three\]; declared by the series\)$",
                     pr, re.M), pr
    log = git(p.work, "log", "--format=%s", f"{up.commit}..refs/heads/pr/{second.slug}").splitlines()
    assert log == ["b : count up", "a : three"]
    # the submit plan: the dependency's pull request first, one open at a time
    submit = (second.directory / "submit.txt").read_text()
    assert "It needs the changes of: a : three. Send it after their pull requests are merged" in submit
    assert result.cover is not None
    cover = result.cover.read_text()
    assert re.search(r"^1\. a : three: .*the pull request \(0001-a-three/v1/submit.txt\)$", cover, re.M), cover
    assert re.search(rf"^2\. b : count up: .*the pull request, once the pull requests of {first} are merged", cover,
                     re.M), cover


def test_the_submit_plan_opens_the_issue_first_and_one_pull_request_at_a_time(tproj: Proj) -> None:
    pkg = run_export(tproj).packages[0]
    submit = (pkg.directory / "submit.txt").read_text()
    issue, branch, pr = (submit.index(x) for x in ("gh issue create", "git am ", "gh pr create"))
    assert issue < branch < pr
    assert "# 1. The issue (its number goes into PR.md):" in submit
    assert "keep one pull request open at a time" in submit
    # the mail applied with the author's commit message in their own clone, never the work repository's branch
    assert "git -C" not in submit and f'git am "$PKG/{tproj.series()[0]}"' in submit


def test_no_author_is_refused_and_our_own_identity_too(tproj: Proj, monkeypatch: pytest.MonkeyPatch,
                                                       tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.delenv("GIT_AUTHOR_NAME")
    monkeypatch.delenv("GIT_AUTHOR_EMAIL")
    empty = tmp_path / "empty-gitconfig"
    empty.write_text("")
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(empty))
    with pytest.raises(InputError, match="--author"):
        export(tproj.project, ExportOptions())
    assert main(["--project", str(tproj.root), "export", "--author", "patchset <patchset@invalid>"]) == 2
    assert "placeholder identity" in capsys.readouterr().err
    # any address that receives no mail (RFC 6761), as a machine's guess user@host.localdomain
    assert main(["--project", str(tproj.root), "export", "--author", "Build Bot <bot@ci.invalid>"]) == 2
    assert main(["--project", str(tproj.root), "export", "--author", "Root <root@host.localdomain>"]) == 2
    err = capsys.readouterr().err
    assert "receives no mail" in err and len(err.strip().splitlines()) == 2
    assert not (tproj.project.state_dir / "export").exists()
    # the user's git identity is used when there is one
    monkeypatch.setenv("GIT_AUTHOR_NAME", "Git User")
    monkeypatch.setenv("GIT_AUTHOR_EMAIL", "git.user@example.org")
    result = export(tproj.project, ExportOptions())
    mail = next(result.packages[0].directory.glob("*.patch")).read_text()
    assert "From: Git User <git.user@example.org>" in mail


# -- templates ------------------------------------------------------------------------------------
def headings(text: str) -> list[str]:
    return [ln for ln in text.splitlines() if ln.startswith("#")]


def test_pr_and_issue_follow_the_tree_templates(tproj: Proj, tmp_path: Path, cache_dir: Path) -> None:
    result = run_export(tproj)
    pr = (result.packages[0].directory / "PR.md").read_text()
    assert headings(pr) == ["## Overview", "## Additional information", "## Requirements"]
    # the facts go into the section the data names; the words are the submitter's
    overview = pr.split("## Additional information")[0]
    assert "[FILL IN: Overview" in overview and "Files touched" not in overview
    assert "- `src/a.c` (+1 -1)" in pr.split("## Additional information")[1].split("## Requirements")[0]
    assert re.search(r"AI usage disclosure: <!--.*--> \[FILL IN: AI usage disclosure", pr)
    assert "not run on CPU" in pr
    issue = (result.packages[0].directory / "ISSUE.md").read_text()
    assert headings(issue) == ["### Name and Version", "### Command line", "### Problem description & steps "
                               "to reproduce", "### Relevant log output"]
    assert "b1 (commit " in issue and "./build/bin/test-x" in issue
    assert "git apply --include=tests/test-x.c" in issue
    submit = (result.packages[0].directory / "submit.txt").read_text()
    assert "gh issue create" in submit and "--title 'Misc. bug: [FILL IN" in submit
    assert "gh pr create --draft" in submit and "--title 'a : widen the sum'" in submit
    assert f"push \"$FORK\" pr/{result.packages[0].slug}" in submit and "--body-file PR.md" in submit
    # after sending, how to record it (issue 23): the trailer to set and the verb that writes it back
    assert "upstream status" in submit and "`sent <the pull request's URL>`" in submit
    assert "`patchset refresh`" in submit

    # another tree, other templates: another layout
    other = tmp_path / "other"
    other.mkdir()
    files = dict(TEMPLATE_FILES)
    files[".github/pull_request_template.md"] = (
        "# Summary\n\n<!-- what and why -->\n\n# How was this tested?\n\n<!-- commands -->\n\n"
        "# Checklist\n\n- [ ] I ran the tests\n")
    files[".github/ISSUE_TEMPLATE/010-bug.yml"] = BUG_FORM.replace("label: Command line", "label: Steps (command)")\
        .replace("label: Name and Version", "label: Version of the library")
    p2 = make_project(other, with_files(make_upstream(other), files), cache_dir.parent / "cache-other",
                      patches=UPSTREAM_SHAPED)
    pr2 = (run_export(p2).packages[0].directory / "PR.md").read_text()
    assert headings(pr2) == ["# Summary", "# How was this tested?", "# Checklist"]
    tested = pr2.split("# How was this tested?")[1].split("# Checklist")[0]
    assert "Files touched" in tested and "[FILL IN: How was this tested?" in tested
    issue2 = (p2.project.state_dir / "export" / result.packages[0].directory.parent.name / "v1" / "ISSUE.md")
    assert headings(issue2.read_text())[:2] == ["### Version of the library", "### Steps (command)"]


def test_check_fails_on_a_placeholder_and_passes_once_filled(tproj: Proj,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["--project", str(tproj.root), "export", "--author", AUTHOR, "--check"]
    assert main(argv) == 1
    out = capsys.readouterr().out
    listed = re.findall(r"^(\S+/(?:PR|ISSUE)\.md|\S+/submit\.txt):(\d+): unfilled", out, re.M)
    assert listed, out
    path, line = Path(listed[0][0]), int(listed[0][1])
    assert placeholder_pattern().search(path.read_text().splitlines()[line - 1])

    # the mail waits for the commit message in the author's words
    mails = re.findall(r"^(\S+/\d{4}-[^/\s]+\.patch):(\d+): unfilled \[FILL IN: the commit message", out, re.M)
    assert len(mails) == 3, out

    pat = placeholder_pattern()
    for f in (tproj.project.state_dir / "export").rglob("*"):
        if f.name in ("PR.md", "ISSUE.md", "submit.txt") or f.suffix == ".patch":
            f.write_text(pat.sub("filled in by a person", f.read_text()))
    assert main(argv) == 0, capsys.readouterr().out
    # filled packages are left as they are by a re-export, the mail with the author's message too
    assert "filled in by a person" in next((tproj.project.state_dir / "export").rglob("PR.md")).read_text()
    mail = Path(mails[0][0]).read_text()
    assert "filled in by a person" in mail and "FILL IN" not in mail


def test_v2_keeps_v1_and_writes_the_range_diff(tproj: Proj) -> None:
    first = run_export(tproj).packages[0]
    v1 = package_files(first.directory)
    assert run_export(tproj).packages[0].state == "unchanged"
    # the first patch changes: another value
    git(tproj.scratch, "checkout", "--quiet", "--detach", tproj.upstream.commit)
    changed = commit(tproj.scratch, {"src/a.c": (tproj.upstream.src / "src/a.c").read_text().replace(
        "    return x + y;", "    return (long long)x + y;")}, (tproj.patches / tproj.series()[0]).read_text()
        .split("Subject: ", 1)[1].split("\n", 1)[0] + "\n\nThe sum of x and y could overflow.\n\n"
        "Patchset-Status: pending\nPatchset-Backends: cpu\nPatchset-Test: test-x\n"
        "Patchset-Test-Paths: tests/test-x.c\n", author=AUTHORS[0])
    tproj.set_series([changed, *tproj.commits[1:]])

    second = run_export(tproj).packages[0]

    assert second.version == 2 and second.directory.name == "v2"
    assert second.directory.parent == first.directory.parent
    assert package_files(first.directory) == v1
    rd = second.range_diff
    assert rd is not None and rd.name == "range-diff-v1-v2.txt"
    text = rd.read_text()
    assert re.search(r"^1: +[0-9a-f]+ ! 1: +[0-9a-f]+ a : widen the sum", text, re.M), text
    assert "(long long)x" in text
    assert git(tproj.work, "rev-parse", f"refs/heads/pr/{second.slug}") != git(
        tproj.work, "rev-parse", f"refs/patchset/export/{second.slug}/v1")
    # both versions and the range-diff carry nothing of this machine (builder/deliver/clean.py)
    assert [str(p) for p in check_tree(tproj.project.state_dir / "export")] == []


def test_a_branch_with_someone_elses_commit_is_not_moved(tproj: Proj) -> None:
    pkg = run_export(tproj).packages[0]
    branch = f"refs/heads/pr/{pkg.slug}"
    tree = git(tproj.work, "rev-parse", f"{branch}^{{tree}}")
    mine = git(tproj.work, "commit-tree", tree, "-p", branch, "-m", "review fixup")
    git(tproj.work, "update-ref", branch, mine)
    # a change to the patch would move the branch: refused
    (tproj.patches / tproj.series()[0]).write_text((tproj.patches / tproj.series()[0]).read_text()
                                                   .replace("could overflow.", "could overflow, rarely."))
    with pytest.raises(PatchsetError, match="holds commits export did not make"):
        run_export(tproj)
    assert git(tproj.work, "rev-parse", branch) == mine


def test_cover_lists_the_series(tproj: Proj) -> None:
    result = run_export(tproj, cover=True)
    assert result.cover is not None
    cover = result.cover.read_text()
    for n, name in enumerate(tproj.series(), 1):
        assert re.search(rf"^\| {n} \| .* \| {name.removesuffix('.patch')}/v1 \|", cover, re.M), cover
    # the deprecated `Patchset-Status: submitted URL` of the fixture, in Patchset-Upstream's words
    assert "sent https://github.com/ggml-org/llama.cpp/pull/1" in cover


# -- pieces ---------------------------------------------------------------------------------------
def test_strip_trailers_removes_ours_with_their_continuation_lines_only() -> None:
    msg = ("x : y\n\nBody line.\n\nSigned-off-by: A <a@b.c>\nPatchset-Test: t\n  --more\n"
           "patchset-status: pending\nAcked-by: B <b@c.d>\n")
    assert strip_trailers(msg) == "x : y\n\nBody line.\n\nSigned-off-by: A <a@b.c>\nAcked-by: B <b@c.d>\n"
    assert strip_trailers("x : y\n\nBody.\n\nPatchset-Status: pending\n") == "x : y\n\nBody.\n"


def test_diffparse_takes_a_hunk_line_that_looks_like_a_header_as_a_body_line() -> None:
    mail = ("Subject: x\n\n---\ndiff --git a/f b/f\nindex 1..2 100644\n--- a/f\n+++ b/f\n@@ -1,2 +1,2 @@\n"
            "--- a/g\n+++ b/g\n keep\n")
    m = diffparse.parse(mail)
    assert len(m.files) == 1
    f = m.files[0]
    assert (f.old_path, f.new_path) == ("f", "f")
    assert [ln.text for ln in f.removed()] == ["-- a/g"]
    assert [(ln.number, ln.text) for ln in f.added()] == [(1, "++ b/g")]


def test_an_ack_trailer_is_linted_and_a_rule_error_fails_check(tmp_path: Path, cache_dir: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    up = with_files(make_upstream(tmp_path), dict(TEMPLATE_FILES))
    series = [({"README": "tiny upstream, documented\n"},
               "docs : readme\n\nPatchset-Status: pending\nPatchset-Ack: new-test-file\n")]
    p = make_project(tmp_path, up, cache_dir, patches=series)
    assert main(["--project", str(p.root), "check"]) == 1
    assert "Patchset-Ack: expected '<rule> <reason>'" in capsys.readouterr().out

    (p.patches / p.series()[0]).write_text((p.patches / p.series()[0]).read_text()
                                           .replace("Subject: docs : readme", "Subject: update the readme"))
    assert main(["--project", str(p.root), "check"]) == 1  # the ack is still malformed
    text = (p.patches / p.series()[0]).read_text().replace("Patchset-Ack: new-test-file\n",
                                                         "Patchset-Ack: new-test-file asked for in #1\n")
    (p.patches / p.series()[0]).write_text(text)
    assert main(["--project", str(p.root), "check"]) == 0
    capsys.readouterr()
    assert main(["--project", str(p.root), "export", "--author", AUTHOR]) == 1
    out = capsys.readouterr().out
    assert re.search(r"^0001-\S+: patches/0001-\S+\.patch:4: error subject: subject 'update the readme'", out, re.M)
    assert "1 error(s)" in out
    # an acknowledgement of a rule that does not exist is an error; so is our trailer name in the body
    (p.patches / p.series()[0]).write_text(text.replace("new-test-file asked", "no-such-rule asked"))
    assert main(["--project", str(p.root), "export", "--author", AUTHOR]) == 1
    assert "acknowledges an unknown rule 'no-such-rule'" in capsys.readouterr().out
    leaky = text.replace("\n\nPatchset-Status", "\n\nSee Patchset-Test.\n\nPatchset-Status")
    (p.patches / p.series()[0]).write_text(leaky)
    assert main(["--project", str(p.root), "export", "--author", AUTHOR]) == 2
    assert "mentions 'Patchset-' outside the trailer block" in capsys.readouterr().err


# -- fork-only patches, test dependencies, what leaves ---------------------------------------------
def test_a_fork_only_patch_is_never_packaged_and_says_so_in_one_line(tproj: Proj, capsys: pytest.CaptureFixture[str]
                                                                      ) -> None:
    third = tproj.patches / tproj.series()[2]
    third.write_text(third.read_text().replace("Patchset-Status: fork-only\n",
                                               "Patchset-Upstream: fork-only upstream wants an assert\n"))
    out_dir = tproj.root / "outbox"
    argv = ["--project", str(tproj.root), "export", "--author", AUTHOR, "--out", str(out_dir)]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert [ln for ln in out.splitlines() if "fork-only" in ln] == \
        [f"{tproj.series()[2]}: fork-only, not exported (upstream wants an assert)"]
    assert sorted(d.name for d in out_dir.iterdir()) == [n.removesuffix(".patch") for n in tproj.series()[:2]]
    assert git(tproj.work, "branch", "--list", "pr/tests-cover-NULL-in-b_len") == ""
    # asked for by name: the same line, the same exit, nothing written
    assert main([*argv, "3"]) == 0
    assert f"{tproj.series()[2]}: fork-only, not exported" in capsys.readouterr().out
    assert len(list(out_dir.iterdir())) == 2


def test_a_test_dependency_is_named_and_left_off_the_branch(tmp_path: Path, cache_dir: Path) -> None:
    # applies and builds alone; only its test needs the first
    up, p = two_apart(tmp_path, cache_dir, "Patchset-Test-Depends: 0001-a-three.patch\n")

    second = run_export(p).packages[1]

    assert second.deps == ()
    pr = (second.directory / "PR.md").read_text()
    assert "- Depends on: nothing; applies alone on the base" in pr
    assert re.search(r"^- Test depends on: the test of this change needs the earlier change\(s\) below, which this "
                     r"branch does not carry", pr, re.M), pr
    assert re.search(r"^  - `a : three` \(#\[FILL IN: the PR number of a-three\]\)$", pr, re.M), pr
    log = git(p.work, "log", "--format=%s", f"{up.commit}..refs/heads/pr/{second.slug}").splitlines()
    assert log == ["b : count up"]
    assert not (second.directory / "deps").exists()


def test_no_patchset_trailer_leaves_and_the_sender_is_the_author(tmp_path: Path, cache_dir: Path) -> None:
    up = with_files(make_upstream(tmp_path), dict(TEMPLATE_FILES))
    first = "0001-a-three.patch"
    ours = ("Patchset-Upstream: not-sent\nPatchset-Origin: https://example.org/fork/pull/1 (the fork's\n"
            "  own pull request)\nPatchset-Backends: cpu metal\nPatchset-Test: test-x\n"
            "Patchset-Test-Paths: tests/test-x.c\nPatchset-Before: test-fails\n"
            "Patchset-Effect: test-x fails without it\nPatchset-Ack: clang-format kept as it was\n"
            f"Patchset-Depends: {first}\nPatchset-Not-In-CI: test-x: not registered\n"
            "Patchset-Guard: test-x keep(*): passes before too\n")
    series = [
        ({"src/a.c": (up.src / "src/a.c").read_text().replace("    int y = 2;", "    int y = 3;")},
         "a : three\n\nThe body.\n\nSigned-off-by: Someone Else <else@example.org>\nPatchset-Upstream: not-sent\n"
         "Patchset-Origin: 0123abcd\n"),
        ({"src/b.c": (up.src / "src/b.c").read_text().replace("n++", "n += 1")},
         f"b : count up\n\nWhy it counts up.\n\nSigned-off-by: Someone Else <else@example.org>\n{ours}"),
    ]
    p = make_project(tmp_path, up, cache_dir, patches=series)
    assert lint(p.patches)[1] == []

    result = run_export(p, cover=True)

    written = [f for f in sorted(result.out.rglob("*")) if f.is_file()]
    assert any(f.name == "0001-a-three.patch" and f.parent.name == "deps" for f in written), written
    for f in written:
        assert "Patchset-" not in f.read_text(), f"{f} carries our trailer"
    for pkg in result.packages:
        for mail in [*pkg.directory.glob("[0-9]*.patch"), *pkg.directory.glob("deps/*.patch")]:
            text = mail.read_text()
            assert re.search(r"^From: Jane Doe <jane@example.org>$", text, re.M), mail
            # other people's trailers are theirs to keep
            assert "Signed-off-by: Someone Else <else@example.org>" in text
    # a Metal patch's package says whether the Apple-hardware before and after exists, and what makes it
    pr = (result.packages[1].directory / "PR.md").read_text()
    assert re.search(r"^- Apple hardware \(the before and after a Metal pull request shows\): none; the fork's macOS "
                     r"workflow \(`.github/workflows/metal.yml`", pr, re.M), pr
    assert "Apple hardware" not in (result.packages[0].directory / "PR.md").read_text()


def test_a_patch_that_applies_only_after_a_fork_only_one_is_refused(tmp_path: Path, cache_dir: Path) -> None:
    up = with_files(make_upstream(tmp_path), dict(TEMPLATE_FILES))
    series = [
        ({"src/a.c": (up.src / "src/a.c").read_text().replace("    int y = 2;", "    int y = 3;")},
         "a : three\n\nPatchset-Upstream: fork-only the fork's own constant\n"),
        # its context ("int y = 3") exists only after the fork-only patch, which no branch may carry
        ({"src/a.c": (up.src / "src/a.c").read_text().replace("    int y = 2;", "    int y = 4;")},
         "a : four\n\nPatchset-Upstream: not-sent\n"),
    ]
    p = make_project(tmp_path, up, cache_dir, patches=series)
    with pytest.raises(InputError, match="does not apply on the pin even with every earlier patch that is not "
                                         "fork-only"):
        run_export(p, patches=(p.series()[1],))

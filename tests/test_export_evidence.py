"""PR.md and ISSUE.md filled from real verify evidence: a tiny llama.cpp-shaped library, one patch
proven on the CPU (with a mutation), its test also declared for CUDA (not run here)."""

from __future__ import annotations

import json
import subprocess

import pytest
from helpers import pin_toml
from test_export import AUTHOR, BUG_FORM, PR_TEMPLATE
from test_verify import CALC_C, CALC_H, GGML_CMAKE, commit_files, git, mutation, program_source

from builder.deliver.export import ExportOptions, export
from builder.gitrepo import GitRepo
from builder.project import load_project
from builder.prove.verify import PROVEN, verify
from builder.series.refresh import format_mails, write_series


@pytest.fixture(scope="module")
def verified(tmp_path_factory: pytest.TempPathFactory) -> object:
    base = tmp_path_factory.mktemp("export-evidence")
    src = base / "src"
    src.mkdir()
    git(src, "init", "-q", "-b", "main")
    git(src, "config", "user.name", "Up Stream")
    git(src, "config", "user.email", "up@example.invalid")
    git(src, "config", "commit.gpgsign", "false")
    commit_files(src, {"ggml/CMakeLists.txt": GGML_CMAKE, "ggml/include/calc.h": CALC_H, "ggml/src/calc.c": CALC_C,
                       ".github/pull_request_template.md": PR_TEMPLATE,
                       ".github/ISSUE_TEMPLATE/bug.yml": BUG_FORM}, "calc : initial")
    pin_commit, pin_tree = git(src, "rev-parse", "HEAD"), git(src, "rev-parse", "HEAD^{tree}")
    bare = base / "remote.git"
    subprocess.run(["git", "clone", "-q", "--bare", str(src), str(bare)], check=True)
    commit_files(src, {"ggml/src/calc.c": CALC_C.replace("return a - b;", "return a + b;"),
                       "tests/test-add.cpp": program_source("add", "calc_add(2, 3)", 5)},
                 "calc : add adds\n\nPatchset-Status: pending\nPatchset-Backends: cpu\n"
                 "Patchset-Test: [cpu,cuda] test-add\nPatchset-Test-Paths: tests/test-add.cpp\n"
                 "Patchset-Mutation: mutations/add-multiplies.patch\n")
    bad = mutation(src, "return a + b; }", "return a * b; }")
    project_dir = base / "project"
    (project_dir / "upstream").mkdir(parents=True)
    (project_dir / "patches" / "mutations").mkdir(parents=True)
    (project_dir / "upstream" / "llama.cpp.toml").write_text(
        pin_toml(pin_commit, pin_tree, [{"kind": "git", "url": f"file://{bare}"}],
                 repository="https://github.com/ggml-org/llama.cpp", date="2026-10-01"))
    write_series(project_dir / "patches", format_mails(GitRepo(src), f"{pin_commit}..HEAD"))
    (project_dir / "patches" / "mutations" / "add-multiplies.patch").write_text(bad)
    project = load_project(root=project_dir, cache_dir=tmp_path_factory.mktemp("cache"))
    report = verify(project, backends=["cpu"])
    assert [v.outcome for v in report.verdicts] == [PROVEN]
    return project


def test_pr_and_issue_carry_the_evidence(verified: object) -> None:
    project = verified
    pkg = export(project, ExportOptions(author=AUTHOR)).packages[0]  # type: ignore[arg-type]
    pr = (pkg.directory / "PR.md").read_text()
    assert "- CPU:" in pr and "./build/bin/test-add" in pr
    assert "before (without the fix): `test-add`: failed (0 passed, 1 failed, 0 skipped)" in pr
    assert "add(want=5): FAIL" in pr
    assert "after (with the fix): `test-add`: passed (1 passed, 0 failed, 0 skipped)" in pr
    assert "mutation (a known-bad variant of the fix): caught, the test fails" in pr
    assert "- CUDA:" in pr and "not run on CUDA" in pr and "-DGGML_CUDA=ON" in pr
    assert "hunks" not in pr.lower()
    issue = (pkg.directory / "ISSUE.md").read_text()
    assert "```console\n$ test-add\n" in issue and "add(want=5): FAIL" in issue
    assert "[FILL IN: Relevant log output" not in issue
    assert "Patchset-" not in pr + issue


def test_a_hunks_table_is_shown_when_the_evidence_has_one(verified: object) -> None:
    project = verified
    ev = project.evidence_dir / "0001-calc-add-adds" / "cpu.json"  # type: ignore[attr-defined]
    data = json.loads(ev.read_text())
    data["hunks"] = [{"hunk": "ggml/src/calc.c:2", "reverted": "test fails"}]
    ev.write_text(json.dumps(data))
    out = project.state_dir / "other-out"  # type: ignore[attr-defined]
    pkg = export(project, ExportOptions(author=AUTHOR, out=out)).packages[0]  # type: ignore[arg-type]
    pr = (pkg.directory / "PR.md").read_text()
    assert "| hunk | reverted |" in pr and "| ggml/src/calc.c:2 | test fails |" in pr


def test_a_re_export_brings_facts_up_to_date_but_keeps_hand_edits(verified: object) -> None:
    project = verified
    evidence = project.evidence_dir  # type: ignore[attr-defined]
    hidden = evidence.with_name("evidence-hidden")
    out = project.state_dir / "refresh-out"  # type: ignore[attr-defined]
    evidence.rename(hidden)
    try:
        first = export(project, ExportOptions(author=AUTHOR, out=out)).packages[0]  # type: ignore[arg-type]
    finally:
        hidden.rename(evidence)
    pr = first.directory / "PR.md"
    assert "not run on CPU" in pr.read_text()
    # verify's evidence is there now: the untouched PR.md gets the facts, in the same version
    again = export(project, ExportOptions(author=AUTHOR, out=out)).packages[0]  # type: ignore[arg-type]
    assert again.state == "unchanged" and again.directory == first.directory
    assert "PR.md: facts updated" in again.notes
    assert "add(want=5): FAIL" in pr.read_text()
    # the submitter wrote in it; the facts change again: their PR.md stays, the new facts go beside it
    edited = pr.read_text().replace("[FILL IN: Overview", "My own words. [FILL IN: Overview")
    pr.write_text(edited)
    evidence.rename(hidden)
    try:
        third = export(project, ExportOptions(author=AUTHOR, out=out)).packages[0]  # type: ignore[arg-type]
    finally:
        hidden.rename(evidence)
    assert pr.read_text() == edited
    assert any("PR.md.new" in n for n in third.notes)
    assert "not run on CPU" in (first.directory / "PR.md.new").read_text()


def test_evidence_of_another_version_is_not_used(verified: object) -> None:
    project = verified
    mail = project.patches_dir / "0001-calc-add-adds.patch"  # type: ignore[attr-defined]
    mail.write_text(mail.read_text().replace('printf("Backend 1/1: CPU\\n");', 'printf("Backend 1/1: CPU \\n");'))
    out = project.state_dir / "stale-out"  # type: ignore[attr-defined]
    pkg = export(project, ExportOptions(author=AUTHOR, out=out)).packages[0]  # type: ignore[arg-type]
    pr = (pkg.directory / "PR.md").read_text()
    assert "not run on CPU for this version of the patch" in pr
    assert "add(want=5): FAIL" not in pr

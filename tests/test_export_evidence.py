"""PR.md and ISSUE.md filled from real verify evidence: a tiny llama.cpp-shaped library, one patch
proven on the CPU (with a mutation), its test also declared for CUDA (not run here)."""

from __future__ import annotations

import json
import subprocess

import pytest
from helpers import pin_toml
from test_export import AUTHOR, BUG_FORM, PR_TEMPLATE
from test_verify import CALC_C, CALC_H, GGML_CMAKE, commit_files, git, mutation, program_source

from builder.compile.backends import PROFILES
from builder.deliver import clean
from builder.deliver import evidence_facts as facts
from builder.deliver.export import export
from builder.deliver.export_package import ExportOptions
from builder.gitrepo import GitRepo
from builder.project import load_project
from builder.prove.verify import verify
from builder.series.refresh import format_mails, write_series
from builder.words import PROVEN


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
    assert ("cases that fail without the fix and pass with it: 1\n"
            "    - `test-add` CPU `add(want=5)` (before: fail)") in pr
    assert "guard cases" not in pr
    assert "mutation (a known-bad variant of the fix): caught, the test fails" in pr
    assert "- CUDA:" in pr and "not run on CUDA" in pr and "-DGGML_CUDA=ON" in pr
    assert "hunks" not in pr.lower()
    issue = (pkg.directory / "ISSUE.md").read_text()
    assert "```console\n$ test-add\n" in issue and "add(want=5): FAIL" in issue
    assert "[FILL IN: Relevant log output" not in issue
    assert "Patchset-" not in pr + issue


def test_a_stand_in_s_evidence_gives_the_output_and_the_real_backend_the_commands(
        verified: object, monkeypatch: pytest.MonkeyPatch) -> None:
    """ISSUE.md's reproducer must be one upstream can run: when the evidence is from one of patchset's
    stand-ins (metal-replay for Metal), the commands are the real backend's and the output is labelled.
    Here the CPU stands in for CUDA, which the patch's test also declares."""
    project = verified
    monkeypatch.setattr(facts, "STAND_IN_FOR", {"cpu": "cuda"})
    pkg = export(project, ExportOptions(author=AUTHOR)).packages[0]  # type: ignore[arg-type]
    issue = (pkg.directory / "ISSUE.md").read_text()
    assert "-DGGML_CUDA=ON" in issue and "add(want=5): FAIL" in issue
    assert "the failing output below is from patchset's host-side replay of the CUDA backend" in issue


def test_what_export_writes_is_clean_when_the_evidence_is_not(verified: object) -> None:
    """Evidence as verify records it on a real machine: absolute paths into our state folder,
    multi-line compiler errors, per-hunk records with commits, durations, lists and trailer names.
    What export writes from it is a short valid table and trimmed output, with tree-relative paths."""
    project = verified
    ev = project.evidence_dir / "0001-calc-add-adds" / "cpu.json"  # type: ignore[attr-defined]
    data = json.loads(ev.read_text())
    saved = ev.read_text()
    where = "/tmp/patchset-run-x1/project/.patchset/verify/src"
    before = next(s for s in data["steps"] if s["tree"] == "before")
    before["tests"][0]["command"] = f"{where}/build/bin/test-add"
    before["tests"][0]["failing"] = ["add(want=5): FAIL", f"  at {where}/tests/test-add.cpp:7\n  got 6"]
    data["hunks"] = [
        {"file": "ggml/src/calc.c", "lines": "2", "hunk": 1, "part": "", "section": "int calc_add(int a, int b) {",
         "added": 1, "removed": 1, "outcome": "caught", "reason": "the tests fail (test-add: exit 1, 1 failed)",
         "failing": ["CPU add(want=5): FAIL"], "errors": [], "commit": "8e00ce3d629d8d5153362e75b8f1450448a8030d",
         "build_duration_s": 2.61, "tests": [{"command": "test-add", "failing": ["add(want=5): FAIL"]}]},
        {"file": "ggml/include/calc.h", "lines": "3-4", "hunk": 1, "part": "a", "section": 'extern "C" {',
         "added": 2, "removed": 1, "outcome": "not built", "reason": "does not compile",
         "failing": [], "errors": [f"{where}/ggml/src/calc.c:2: conflicting types | for 'calc_add'\n"
                                   f"{where}/ggml/include/calc.h:3: note: previous declaration here"],
         "commit": "a03a0f876a0e579d2088e8fb7a66453e1209de4f", "build_duration_s": 1.0, "tests": []},
        {"file": "ggml/src/calc.c", "lines": "9-12", "hunk": 2, "part": "", "section": "",
         "added": 3, "removed": 0, "outcome": "exempt",
         "reason": "needs a model file to run (Patchset-Hunk ggml/src/calc.c:calc_main())", "failing": [],
         "errors": [], "commit": "", "build_duration_s": 0.0, "tests": []},
        {"file": "ggml/src/calc.c", "lines": "14", "hunk": 3, "part": "", "section": "",
         "added": 1, "removed": 1, "outcome": "exempt",
         "reason": "needs a model file to run (Patchset-Hunk ggml/src/calc.c:calc_main())", "failing": [],
         "errors": [], "commit": "", "build_duration_s": 0.0, "tests": []},
    ]
    data["hunks_checked"] = True
    ev.write_text(json.dumps(data))
    out = project.state_dir / "clean-out"  # type: ignore[attr-defined]
    try:
        result = export(project, ExportOptions(author=AUTHOR, out=out, cover=True))  # type: ignore[arg-type]
    finally:
        ev.write_text(saved)
    pkg = result.packages[0]
    assert clean.check_tree(out) == []
    pr = (pkg.directory / "PR.md").read_text()
    rows = [ln.strip() for ln in pr.splitlines() if ln.strip().startswith("|")]
    assert "Each hunk of the fix reverted on its own (4: 1 caught, 1 not built, 2 exempt):" in pr
    assert rows == [
        "| file | lines | function | outcome | why |",
        "| --- | --- | --- | --- | --- |",
        "| `ggml/src/calc.c` | 2 | `calc_add` | caught | reverted alone, the tests fail (test-add: exit 1, 1 failed), "
        "first: `CPU add(want=5)` |",
        "| `ggml/include/calc.h` | 3-4 (a) | `extern \"C\"` | not built | reverted alone, the tree does not "
        "compile: `ggml/src/calc.c:2: conflicting types \\| for 'calc_add'` |",
        "| `ggml/src/calc.c` | 9-12, 14 | `-` | exempt | needs a model file to run |",
    ]
    assert "  at tests/test-add.cpp:7" in pr and "`build/bin/test-add`: failed" in pr
    issue = (pkg.directory / "ISSUE.md").read_text()
    assert "$ build/bin/test-add\nadd(want=5): FAIL\n  at tests/test-add.cpp:7\n  got 6\n" in issue


def test_the_checker_finds_what_must_not_leave_the_machine() -> None:
    """The one checker the export tests use, on text made unclean in each way it knows."""
    bad = ("| commit | errors |\n| a | ['src/x.cpp:1: e'] |\n\n"
           "see /tmp/x/.patchset/verify/src/a.c and Patchset-Hunk\n"
           "| a | b |\n| --- | --- |\n| 1 | 2 | 3 |\n")
    found = [(p.line, p.what.split(":")[0]) for p in clean.problems("PR.md", bad)]
    assert found == [(2, "a Python repr"),
                     (2, "Markdown table without a separator row (| --- |) under its header"),
                     (4, "a path into the state folder .patchset/"), (4, "an absolute local path"),
                     (4, "an internal trailer name"), (7, "Markdown table row with 3 cells, its header has 2")]
    good = "| a | b \\| c |\n| --- | --- |\n| `x.c` | see https://github.com/o/r/pull/1 |\n--- /dev/null\n"
    assert clean.problems("PR.md", good) == []
    # a mail's diff is upstream's code: its brackets are not reprs
    mail = "Subject: x\n\ndiff --git a/x b/x\n--- /dev/null\n+++ b/x\n+int v[] = {};\n+f(x, {}, ('a',));\n"
    assert clean.problems("0001-x.patch", mail) == []


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


def test_every_harness_backend_is_a_stand_in_with_its_own_note() -> None:
    """A backend built from patchset's harness (metal-replay, metal-linux) is one upstream cannot run: export's
    reproducer gives the real backend's commands for it, and says which stand-in the output is from."""
    harness = {name for name, prof in PROFILES.items() if prof.harness}
    assert harness == {"metal-replay", "metal-linux"} and harness <= set(facts.STAND_IN_FOR)
    assert facts.stand_in_note("metal-replay", "metal") == (
        "the failing output below is from patchset's host-side replay of the Metal backend on CPU (metal-replay), "
        "not from Metal hardware")
    assert facts.stand_in_note("metal-linux", "metal") == (
        "the failing output below is from the tree's own Metal host code run on patchset's Metal stand-in on Linux "
        "(metal-linux), not from Metal hardware")

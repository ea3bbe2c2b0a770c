"""Upstream's rules, each broken by one synthetic patch and kept by a clean one; the ggml layout."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest
from conftest import hermetic_env
from helpers import Proj, git, make_project, make_upstream, run_patchset
from test_export import AUTHOR, TEMPLATE_FILES, with_files

from builder.deliver.export import export
from builder.deliver.export_package import ExportOptions
from builder.deliver.rules import RuleFinding
from builder.deliver.templates import placeholder_pattern
from builder.errors import InputError

GGML_H = "#pragma once\n\n#define GGML_API\n\nGGML_API int ggml_foo(int x);\n\nGGML_API int ggml_bar(void);\n"
GGML_C = '#include "ggml.h"\n\nint ggml_foo(int x) {\n    return x;\n}\n'
LLAMA_C = "int llama_x(void) {\n    return 0;\n}\n"
A_C = "int a_value(void) {\n    int x = 1;\n    int y = 2;\n    return x + y;\n}\n"
B_C = "int b_value(void) {\n    return 2;\n}\n"
NOTES = "first\nsecond\n"

FILES = {**TEMPLATE_FILES, "ggml/include/ggml.h": GGML_H, "ggml/src/ggml.c": GGML_C, "src/llama.c": LLAMA_C,
         "src/a.c": A_C, "src/b.c": B_C, "docs/notes.txt": NOTES}

CLEAN = "a : add z\n"
SERIES = [
    ({"src/a.c": A_C.replace("    int y = 2;\n", "    int y = 2;\n    int z = 3;\n")
      .replace("x + y;", "x + y + z;")}, CLEAN),
    ({"src/b.c": B_C.replace("    return 2;\n", "    int unused = 0;   \n\tint t = 1;\n    return 2;\n"),
      "docs/notes.txt": NOTES + "third"}, "b : whitespace\n"),
    ({"ggml/src/ggml.c": GGML_C + "\nint ggml_baz(int x) {\n    return x+1 ;\n}\n"}, "ggml : add baz\n"),
    ({"src/llama.c": LLAMA_C + "\n// caf\u00e9\n"}, "llama : accent\n\nThe arrow \u2192 is not ASCII.\n"),
    ({"README": "tiny upstream, now documented\n"}, "fix the readme\n"),
    ({"tests/test-new.c": "int main(void) {\n    return 0;\n}\n"}, "tests : add a test\n"),
    ({"ggml/include/ggml.h": GGML_H.replace("ggml_foo(int x);", "ggml_foo(int x, int y);")
      + "\nGGML_API int ggml_qux(void);\n"}, "ggml : widen foo\n"),
    ({"ggml/src/ggml.c": GGML_C.replace("    return x;", "    return x + 2;"),
      "src/llama.c": LLAMA_C.replace("return 0;", "return 1;")}, "ggml : two places\n"),
    ({"src/b.c": B_C.replace("int b_value", "// this comment is long and it goes\n// on to the next line\n"
                                           "// one line.\nint b_value")}, "b : comment\n"),
    ({"tests/test-acked.c": "int main(void) {\n    return 0;\n}\n"},
     "tests : acked test\n\nPatchset-Ack: new-test-file the maintainers asked for it in #1\n"),
]


@pytest.fixture(scope="module")
def checked(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[RuleFinding], list[str]]:
    """One export of the whole rule series (clang-format on every patch is the slow part)."""
    base = tmp_path_factory.mktemp("rules")
    with pytest.MonkeyPatch.context() as mp:
        cache = hermetic_env(mp, base / "env")
        up = with_files(make_upstream(base), FILES)
        p = make_project(base, up, cache, patches=SERIES)
        result = export(p.project, ExportOptions(author=AUTHOR))
    findings = [f for pkg in result.packages for f in pkg.findings]
    return p.work, findings, p.series()


def of(checked: tuple[Path, list[RuleFinding], list[str]], n: int) -> list[RuleFinding]:
    return [f for f in checked[1] if f.patch == checked[2][n - 1]]


def line_of(work: Path, slug_ref: str, path: str, text: str) -> int:
    content = git(work, "show", f"{slug_ref}:{path}").split("\n")
    return content.index(text) + 1


def branch(checked: tuple[Path, list[RuleFinding], list[str]], n: int) -> str:
    name = checked[2][n - 1]
    return "refs/heads/pr/" + name.removesuffix(".patch")[5:]


def test_a_clean_patch_has_no_finding(checked: tuple[Path, list[RuleFinding], list[str]]) -> None:
    assert of(checked, 1) == []


def test_editorconfig(checked: tuple[Path, list[RuleFinding], list[str]]) -> None:
    found = {(f.file, f.line, f.message) for f in of(checked, 2) if f.rule == "editorconfig"}
    work, ref = checked[0], branch(checked, 2)
    assert found == {
        ("src/b.c", line_of(work, ref, "src/b.c", "    int unused = 0;   "), "trailing whitespace"),
        ("src/b.c", line_of(work, ref, "src/b.c", "\tint t = 1;"), "tab in indentation (indent_style = space)"),
        ("docs/notes.txt", 3, "no newline at end of file (insert_final_newline = true)"),
    }
    assert all(f.severity == "error" for f in of(checked, 2) if f.rule == "editorconfig")


def test_clang_format_reports_a_diff_of_the_added_lines(checked: tuple[Path, list[RuleFinding], list[str]]) -> None:
    found = [f for f in of(checked, 3) if f.rule == "clang-format"]
    assert len(found) == 1
    f = found[0]
    assert (f.file, f.line) == ("ggml/src/ggml.c", line_of(checked[0], branch(checked, 3), "ggml/src/ggml.c",
                                                           "    return x+1 ;"))
    assert "-    return x+1 ;" in f.detail and "+    return x + 1;" in f.detail
    assert f.severity == "warning"
    # never applied
    assert "x+1 ;" in git(checked[0], "show", f"{branch(checked, 3)}:ggml/src/ggml.c")


def test_ascii_in_added_lines_and_in_the_message(checked: tuple[Path, list[RuleFinding], list[str]]) -> None:
    found = [f for f in of(checked, 4) if f.rule == "ascii"]
    name = checked[2][3]
    mail = (Path(checked[0]).parents[2] / "patches" / name).read_text().splitlines()
    assert {(f.file, f.line) for f in found} == {
        ("src/llama.c", 5),
        (f"patches/{name}", next(i for i, ln in enumerate(mail, 1) if "The arrow" in ln)),
    }
    assert any("U+2192 RIGHTWARDS ARROW" in f.message for f in found)
    assert any("U+00E9" in f.message for f in found)


def test_subject(checked: tuple[Path, list[RuleFinding], list[str]]) -> None:
    found = [f for f in of(checked, 5) if f.rule == "subject"]
    assert [(f.file, f.line, f.severity) for f in found] == [(f"patches/{checked[2][4]}", 4, "error")]
    assert not [f for f in checked[1] if f.rule == "subject" and f.patch != checked[2][4]]


def test_new_file_under_tests_and_its_acknowledgement(checked: tuple[Path, list[RuleFinding], list[str]]) -> None:
    found = [f for f in of(checked, 6) if f.rule == "new-test-file"]
    assert [(f.file, f.line, f.severity, f.acknowledged) for f in found] == [("tests/test-new.c", 1, "warning", "")]
    acked = [f for f in of(checked, 10) if f.rule == "new-test-file"]
    assert [f.acknowledged for f in acked] == ["the maintainers asked for it in #1"]


def test_public_header_lists_the_changed_declarations(checked: tuple[Path, list[RuleFinding],
                                                                          list[str]]) -> None:
    found = [f for f in of(checked, 7) if f.rule == "public-api"]
    assert len(found) == 1
    f = found[0]
    assert (f.file, f.line) == ("ggml/include/ggml.h", 5)
    assert "added ggml_qux" in f.message and "changed ggml_foo" in f.message and "ggml_bar" not in f.message


def test_unrelated_modules(checked: tuple[Path, list[RuleFinding], list[str]]) -> None:
    found = [f for f in of(checked, 8) if f.rule == "one-fix"]
    name = checked[2][7]
    mail = (Path(checked[0]).parents[2] / "patches" / name).read_text().splitlines()
    assert [(f.file, f.line) for f in found] == [
        (f"patches/{name}", mail.index("diff --git a/src/llama.c b/src/llama.c") + 1)]
    assert "ggml (ggml/src/ggml.c)" in found[0].message and "llama (src/llama.c)" in found[0].message
    # a patch on one module plus docs is fine
    assert not [f for f in of(checked, 2) if f.rule == "one-fix"]


def test_hard_wrapped_comment(checked: tuple[Path, list[RuleFinding], list[str]]) -> None:
    found = [f for f in of(checked, 9) if f.rule == "wrapped-comment"]
    assert [(f.file, f.line) for f in found] == [
        ("src/b.c", line_of(checked[0], branch(checked, 9), "src/b.c", "// this comment is long and it goes"))]
    assert not [f for f in checked[1] if f.rule == "wrapped-comment" and f.patch != checked[2][8]]


# -- the ggml layout ------------------------------------------------------------------------------
LLAMA_SHAPED = {
    "ggml/CMakeLists.txt": "project(ggml)\n",
    "ggml/src/ggml.c": GGML_C,
    "ggml/src/notes.txt": "keep\n-- a/ggml/src/ggml.c\nkeep too\n",
    "ggml/include/ggml.h": GGML_H,
    "tests/test-backend-ops.cpp": "int main() {\n    return 0;\n}\n",
    "src/llama.c": LLAMA_C,
}
GGML_SHAPED = {
    "CMakeLists.txt": "project(ggml)\n",
    "src/ggml.c": GGML_C,
    "src/notes.txt": "keep\n-- a/ggml/src/ggml.c\nkeep too\n",
    "include/ggml.h": GGML_H,
    "tests/test-backend-ops.cpp": "int main() {\n    return 0;\n}\n",
}
LAYOUT_SERIES = [
    ({"ggml/src/ggml.c": GGML_C.replace("return x;", "return x * 2;"),
      "ggml/include/ggml.h": GGML_H.replace("(void);", "(int y);"),
      "ggml/src/notes.txt": "keep\nkeep too\n",
      "tests/test-backend-ops.cpp": "int main() {\n    return 1;\n}\n"}, "ggml : double foo\n"),
    ({"ggml/CMakeLists.txt": "project(ggml C)\n", "src/llama.c": LLAMA_C.replace("return 0;", "return 2;")},
     "ggml : build and use\n"),
    ({"src/llama.c": LLAMA_C.replace("return 0;", "return 3;")}, "llama : only llama\n"),
]


@pytest.fixture
def lproj(tmp_path: Path, cache_dir: Path) -> tuple[Proj, Path]:
    up = with_files(make_upstream(tmp_path), LLAMA_SHAPED)
    p = make_project(tmp_path, up, cache_dir, patches=LAYOUT_SERIES)
    ggml = tmp_path / "ggml"
    git(tmp_path, "init", "--quiet", str(ggml))
    for rel, text in GGML_SHAPED.items():
        (ggml / rel).parent.mkdir(parents=True, exist_ok=True)
        (ggml / rel).write_text(text)
    git(ggml, "add", "--all")
    git(ggml, "commit", "--quiet", "-m", "ggml")
    return p, ggml


def _am(repo: Path, mail: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["git", "-C", str(repo), "am", "--quiet", str(mail)], capture_output=True, text=True,
                          check=False)


def test_ggml_layout_rewrites_headers_only_and_the_mail_applies_there(lproj: tuple[Proj, Path]) -> None:
    p, ggml = lproj
    pkg = export(p.project, ExportOptions(patches=("1",), layout="ggml", author=AUTHOR)).packages[0]
    assert pkg.directory.parts[-3] == "ggml" and pkg.branch is None
    mail = next(pkg.directory.glob("*.patch")).read_text()
    assert "diff --git a/src/ggml.c b/src/ggml.c" in mail and "+++ b/include/ggml.h" in mail
    assert "diff --git a/tests/test-backend-ops.cpp b/tests/test-backend-ops.cpp" in mail
    assert "ggml/src/ggml.c b/" not in mail
    # a body line that looks like a header is left alone
    assert "\n--- a/ggml/src/ggml.c\n" in mail
    r = _am(ggml, next(pkg.directory.glob("*.patch")))
    assert r.returncode == 0, r.stderr
    assert (ggml / "src/notes.txt").read_text() == "keep\nkeep too\n"
    assert "return x * 2;" in (ggml / "src/ggml.c").read_text()


def test_ggml_layout_refuses_llama_files_or_drops_them_when_asked(lproj: tuple[Proj, Path]) -> None:
    p, ggml = lproj
    with pytest.raises(InputError, match=r"src/llama\.c \(llama\.cpp only\).*--drop-non-ggml"):
        export(p.project, ExportOptions(patches=("2",), layout="ggml", author=AUTHOR))
    pkg = export(p.project, ExportOptions(patches=("2",), layout="ggml", author=AUTHOR,
                                          drop_non_ggml=True)).packages[0]
    assert pkg.dropped == ("src/llama.c",)
    mail = next(pkg.directory.glob("*.patch"))
    assert "llama.c" not in mail.read_text()
    assert "src/llama.c" in (pkg.directory / "dropped.txt").read_text()
    r = _am(ggml, mail)
    assert r.returncode == 0, r.stderr
    assert (ggml / "CMakeLists.txt").read_text() == "project(ggml C)\n"
    with pytest.raises(InputError, match="nothing is left for ggml"):
        export(p.project, ExportOptions(patches=("3",), layout="ggml", author=AUTHOR, drop_non_ggml=True))


# -- acknowledgements and approvals ---------------------------------------------------------------
APPROVAL_URL = "https://github.com/ggml-org/llama.cpp/issues/1#issuecomment-2"
APPROVAL_SERIES = [
    # a new test file acknowledged by the submitter alone: a maintainer must still agree
    ({"tests/test-one.c": "int main(void) {\n    return 0;\n}\n"},
     "tests : one\n\nPatchset-Ack: new-test-file a separate test is clearer\n"),
    # the same, with the address where a maintainer agreed
    ({"tests/test-two.c": "int main(void) {\n    return 0;\n}\n"},
     f"tests : two\n\nPatchset-Ack: new-test-file a separate test is clearer\nPatchset-Approval: {APPROVAL_URL}\n"),
    # formatting that follows the code around it: the submitter's call, the acknowledgement settles it
    ({"ggml/src/ggml.c": GGML_C + "\nint ggml_baz(int x) {\n    return x+1 ;\n}\n"},
     "ggml : add baz\n\nPatchset-Ack: clang-format the surrounding code is formatted the same way\n"),
    # a public API addition approved for that rule by name
    ({"ggml/include/ggml.h": GGML_H + "\nGGML_API int ggml_qux(void);\n"},
     f"ggml : add qux\n\nPatchset-Approval: public-api {APPROVAL_URL}\n"),
    # a public header's comment: nothing added to the API, the submitter's acknowledgement settles it
    ({"ggml/include/ggml.h": GGML_H.replace("#define GGML_API\n", "#define GGML_API\n\n// the sum of x\n")},
     "ggml : document foo\n\nPatchset-Ack: public-api a comment only, no declaration changes\n"),
]


@pytest.fixture(scope="module")
def approvals(tmp_path_factory: pytest.TempPathFactory) -> tuple[Proj, str, int]:
    """`export --check` of a series whose warnings are acknowledged, approved, or waiting."""
    base = tmp_path_factory.mktemp("approvals")
    with pytest.MonkeyPatch.context() as mp:
        cache = hermetic_env(mp, base / "env")
        p = make_project(base, with_files(make_upstream(base), FILES), cache, patches=APPROVAL_SERIES)
        r = run_patchset("--project", str(p.root), "export", "--author", AUTHOR, "--check",
                         env=dict(os.environ))
    return p, r.stdout + r.stderr, r.returncode


def _finding_lines(out: str, patch: str, rule: str) -> list[str]:
    return [ln for ln in out.splitlines() if ln.startswith(f"{patch}: ") and f" {rule}: " in ln]


def test_an_acknowledgement_does_not_settle_what_needs_a_maintainer(approvals: tuple[Proj, str, int]) -> None:
    p, out, _ = approvals
    names = p.series()
    waiting = _finding_lines(out, names[0], "new-test-file")
    assert len(waiting) == 1 and "[needs approval" in waiting[0], out
    approved = _finding_lines(out, names[1], "new-test-file")
    assert len(approved) == 1 and f"[approved: {APPROVAL_URL}]" in approved[0] and "needs approval" not in approved[0]
    api = _finding_lines(out, names[3], "public-api")
    assert len(api) == 1 and f"[approved: {APPROVAL_URL}]" in api[0], out
    comment = _finding_lines(out, names[4], "public-api")
    assert len(comment) == 1 and "[acknowledged: a comment only" in comment[0] and "approval" not in comment[0], out
    fmt = _finding_lines(out, names[2], "clang-format")
    assert len(fmt) == 1 and "[acknowledged: the surrounding code" in fmt[0] and "approval" not in fmt[0]
    assert re.search(r": 0 error\(s\), 0 warning\(s\), 1 need\(s\) approval, 4 acknowledged or approved, ", out), out


def test_needs_approval_is_a_line_in_the_report_and_pr_md_not_an_error(approvals: tuple[Proj, str, int]) -> None:
    p, out, code = approvals
    # --check fails on the placeholders only: a waiting approval changes no exit status
    assert code == 1 and "placeholder(s) to fill" in out
    filled = p.project.state_dir / "export"
    for pr in filled.glob("*/v1/PR.md"):
        pr.write_text(placeholder_pattern().sub("done", pr.read_text()))
    for f in [*filled.glob("*/v1/ISSUE.md"), *filled.glob("*/v1/submit.txt"), *filled.glob("*/v1/[0-9]*.patch")]:
        f.write_text(placeholder_pattern().sub("done", f.read_text()))
    again = run_patchset("--project", str(p.root), "export", "--author", AUTHOR, "--check", env=dict(os.environ))
    assert again.returncode == 0, again.stdout + again.stderr
    assert "1 need(s) approval" in again.stdout
    prs = {d.name[5:]: (d / "v1" / "PR.md").read_text() for d in filled.iterdir() if d.is_dir()}
    assert "- needs approval: do NOT add a new file in tests/* without maintainers' approval " \
           "(`tests/test-one.c`;" in prs["tests-one"]
    assert f"- approved: {APPROVAL_URL}: do NOT add a new file" in prs["tests-two"]
    assert f"- approved: {APPROVAL_URL}: new CLI or public API additions" in prs["ggml-add-qux"]
    assert "approval" not in prs["ggml-add-baz"] and "approval" not in prs["ggml-document-foo"]


def test_check_refuses_an_approval_without_an_address(tmp_path: Path, cache_dir: Path) -> None:
    series = [({"tests/test-x.c": "int main(void) {\n    return 0;\n}\n"},
               "tests : x\n\nPatchset-Approval: new-test-file the maintainers said yes\n")]
    p = make_project(tmp_path, with_files(make_upstream(tmp_path), FILES), cache_dir, patches=series)
    r = run_patchset("--project", str(p.root), "check", env=dict(os.environ))
    assert r.returncode == 1
    assert re.search(r"^\S*patches/0001-tests-x\.patch:\d+: Patchset-Approval: .*expected '\[<rule>\] <URL>'",
                     r.stdout + r.stderr, re.M), r.stdout + r.stderr

"""verify after one patch in the middle of the series was edited: only the patches whose test
programs were built from a changed file are proven again; the others carry their earlier proof,
and the evidence says why (docs/verify.md, "Earlier proofs that still hold").

The mini-upstream of test_verify.py, with a series whose test programs read different files:

| patch | fixes | its test program also reads | and it changes |
| --- | --- | --- | --- |
| 1 | calc_add | tests/testlib.h | |
| 2 | calc_sub | | ggml/include/extra.h (a comment) |
| 3 | calc_neg | tests/testlib.h | tests/testlib.h (a comment) |
| 4 | calc_mul | tests/testlib.h | |
| 5 | calc_div | ggml/include/extra.h | |
| 6 | (no test: a fork's series is mostly such patches) | | docs/notes.md |
| 7 | adds calc_twice (its before tree fails to compile) | | |
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from builder.cli import build_parser, main
from builder.compile.toolchain import find_ccache
from builder.deliver import evidence_facts as facts
from builder.gitrepo import GitRepo
from builder.project import Project, load_project
from builder.prove.verdicts import PatchVerdict
from builder.prove.verify import verify
from builder.series.apply import apply
from builder.series.load import load_series
from builder.words import NOT_PROVEN, PROVEN
from tests.test_verify import GGML_CMAKE, commit_files, init_upstream, mutation, write_project

CALC_C = """\
#include "calc.h"
int calc_add(int a, int b) { return a - b; }
int calc_sub(int a, int b) { return a + b; }
int calc_neg(int a) { return a; }
int calc_mul(int a, int b) { return a + b; }
int calc_div(int a, int b) { return a * b; }
"""
CALC_H = """\
#pragma once
#ifdef __cplusplus
extern "C" {
#endif
int calc_add(int a, int b);
int calc_sub(int a, int b);
int calc_neg(int a);
int calc_mul(int a, int b);
int calc_div(int a, int b);
#ifdef __cplusplus
}
#endif
"""
EXTRA_H = "#pragma once\n#define CALC_DIV_CASE 8, 2\n"
TESTLIB_H = """\
#pragma once
#include <cstdio>
static int report(const char * name, int got, int want) {
    bool ok = got == want;
    printf("Backend 1/1: CPU\\n");
    printf("  %s(want=%d): %s\\n", name, want, ok ? "OK" : "FAIL");
    printf("  %d/1 tests passed\\n", ok ? 1 : 0);
    return ok ? 0 : 1;
}
"""


def with_testlib(name: str, expr: str, want: int, include: str = '#include "testlib.h"') -> str:
    return f'#include "calc.h"\n{include}\nint main() {{ return report("{name}", {expr}, {want}); }}\n'


def standalone(name: str, expr: str, want: int, include: str = "") -> str:
    return f"""\
#include "calc.h"
{include}
#include <cstdio>
int main() {{
    int got = {expr};
    printf("Backend 1/1: CPU\\n");
    printf("  {name}(want={want}): %s\\n", got == {want} ? "OK" : "FAIL");
    printf("  %d/1 tests passed\\n", got == {want} ? 1 : 0);
    return got == {want} ? 0 : 1;
}}
"""


def trailers(program: str, paths: str, extra: str = "") -> str:
    return (f"\n\nPatchset-Status: pending\nPatchset-Backends: cpu\nPatchset-Test: {program}\n"
            f"Patchset-Test-Paths: {paths}\n{extra}")


def fix(src: Path, old: str, new: str) -> str:
    return (src / "ggml/src/calc.c").read_text().replace(old, new)


@pytest.fixture(scope="module")
def series_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    base = tmp_path_factory.mktemp("affected")
    src = init_upstream(base, {"ggml/CMakeLists.txt": GGML_CMAKE, "ggml/include/calc.h": CALC_H,
                               "ggml/include/extra.h": EXTRA_H, "ggml/src/calc.c": CALC_C,
                               "tests/testlib.h": TESTLIB_H})
    commit_files(src, {"ggml/src/calc.c": fix(src, "return a - b; }", "return a + b; }"),
                       "tests/test-add.cpp": with_testlib("add", "calc_add(2, 3)", 5)},
                 "calc : add adds" + trailers("test-add", "tests/test-add.cpp",
                                              "Patchset-Mutation: mutations/add-subtracts.patch"))
    mutations = {"add-subtracts": mutation(src, "int calc_add(int a, int b) { return a + b; }",
                                           "int calc_add(int a, int b) { return a - b; }")}
    commit_files(src, {"ggml/src/calc.c": fix(src, "return a + b; }\nint calc_neg", "return a - b; }\nint calc_neg"),
                       "ggml/include/extra.h": EXTRA_H + "// the cases of the div test\n",
                       "tests/test-sub.cpp": standalone("sub", "calc_sub(5, 3)", 2)},
                 "calc : sub subtracts" + trailers("test-sub", "tests/test-sub.cpp"))
    commit_files(src, {"ggml/src/calc.c": fix(src, "{ return a; }", "{ return -a; }"),
                       "tests/testlib.h": TESTLIB_H + "// report: one case per program\n",
                       "tests/test-neg.cpp": with_testlib("neg", "calc_neg(2)", -2)},
                 "calc : neg negates" + trailers("test-neg", "tests/test-neg.cpp"))
    commit_files(src, {"ggml/src/calc.c": fix(src, "int calc_mul(int a, int b) { return a + b; }",
                                              "int calc_mul(int a, int b) { return a * b; }"),
                       "tests/test-mul.cpp": with_testlib("mul", "calc_mul(2, 4)", 8)},
                 "calc : mul multiplies" + trailers("test-mul", "tests/test-mul.cpp"))
    commit_files(src, {"ggml/src/calc.c": fix(src, "{ return a * b; }\nint calc_div(int a, int b) { return a * b; }",
                                              "{ return a * b; }\nint calc_div(int a, int b) { return a / b; }"),
                       "tests/test-div.cpp": standalone("div", "calc_div(CALC_DIV_CASE)", 4,
                                                        '#include "extra.h"')},
                 "calc : div divides" + trailers("test-div", "tests/test-div.cpp"))
    commit_files(src, {"docs/notes.md": "calc: notes\n"}, "docs : notes\n\nPatchset-Status: fork-only\n")
    twice = "int calc_twice(int a) { return 2 * a; }\n"
    commit_files(src, {"ggml/include/calc.h": CALC_H.replace("int calc_div(int a, int b);",
                                                             "int calc_div(int a, int b);\nint calc_twice(int a);"),
                       "ggml/src/calc.c": (src / "ggml/src/calc.c").read_text() + twice,
                       "tests/test-twice.cpp": standalone("twice", "calc_twice(4)", 8)},
                 "calc : add calc_twice" + trailers("test-twice", "tests/test-twice.cpp",
                                                    "Patchset-Before: build-fails\n"))
    project = write_project(base, src)
    for name, text in mutations.items():
        (project / "patches" / "mutations" / f"{name}.patch").write_text(text)
    return project


@pytest.fixture(scope="module")
def verified(series_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Project, Path]:
    """The series applied and verified once (every patch proven), and a copy of that project
    kept as it is then: the first verify is the same for every test, so it is made once."""
    root = tmp_path_factory.mktemp("verified") / "project"
    shutil.copytree(series_dir, root)
    project = load_project(root=root, cache_dir=tmp_path_factory.mktemp("cache"))
    apply(project)
    first = verify(project, backends=["cpu"])
    assert [v.outcome for v in first.verdicts] == [PROVEN] * 5 + [NOT_PROVEN, PROVEN], \
        [v.reason for v in first.verdicts]
    assert first.verdicts[5].reason == "the patch declares no backend for its proof"
    saved = root.with_name("saved")
    shutil.copytree(root, saved, symlinks=True)
    return project, saved


@pytest.fixture
def project(verified: tuple[Project, Path]) -> Project:
    """The verified project, as the first verify left it: put back at its own path (its work
    repository's worktrees and its build folders name their absolute paths) before each test."""
    project, saved = verified
    shutil.rmtree(project.root)
    shutil.copytree(saved, project.root, symlinks=True)
    return project


def number(report_patch: str) -> int:
    return int(report_patch.split("-", 1)[0])


def edit(project: Project, n: int, old: str, new: str) -> None:
    """Edit patch `n` as a person would: one added line says something else (the hunk's line
    counts stay, so it and every later patch still apply)."""
    patch = load_series(project.patches_dir).patches[n - 1].path
    text = patch.read_text()
    assert text.count(old) == 1
    patch.write_text(text.replace(old, new))


def reverify(project: Project, reuse: bool = True) -> tuple[dict[int, PatchVerdict], set[int]]:
    """verify again: the verdicts by patch number, and which patches it built and ran (their test
    logs, written anew)."""
    logs = project.state_dir / "verify" / "logs"
    shutil.rmtree(logs)
    report = verify(project, backends=["cpu"], reuse=reuse)
    assert [v.outcome for v in report.verdicts] == [PROVEN] * 5 + [NOT_PROVEN, PROVEN], \
        [v.reason for v in report.verdicts]
    ran = {number(d.name) for d in logs.iterdir()} if logs.exists() else set()
    return {number(v.patch): v for v in report.verdicts}, ran


def carried(verdicts: dict[int, PatchVerdict]) -> set[int]:
    return {n for n, v in verdicts.items() if v.carried}


def check_built_from(project: Project) -> None:
    """What the first verify recorded that each program was built from."""
    data = json.loads((project.evidence_dir / load_series(project.patches_dir).patches[4].name
                       .removesuffix(".patch") / "cpu.json").read_text())
    files = data["depends"]["files"]
    # its source, the header it includes, the library's sources and headers and the CMake files
    assert {"tests/test-div.cpp", "ggml/include/extra.h", "ggml/include/calc.h", "ggml/src/calc.c",
            "ggml/CMakeLists.txt"} <= set(files)
    assert "tests/testlib.h" not in files and "tests/test-mul.cpp" not in files
    # one blob id where both trees agree, one per tree where the patch changes the file
    assert isinstance(files["ggml/include/extra.h"], str)
    assert set(files["ggml/src/calc.c"]) == {"before", "after"}
    work = GitRepo(project.work_repo)
    assert files["ggml/src/calc.c"]["after"] == work.blob("refs/patchset/verify/0005/after", "ggml/src/calc.c")
    assert data["depends"]["programs"] == ["test-div"] and data["depends"]["trees"] == ["before", "after"]
    one = json.loads((project.evidence_dir / load_series(project.patches_dir).patches[0].name
                      .removesuffix(".patch") / "cpu.json").read_text())
    assert "tests/testlib.h" in one["depends"]["files"] and one["depends"]["trees"] == ["before", "after", "mutation"]


def test_edit_in_the_middle_reproves_only_the_readers_of_the_changed_file(project: Project) -> None:
    check_built_from(project)
    edit(project, 3, "+// report: one case per program", "+// report: prints one case")
    verdicts, ran = reverify(project)
    # 3 itself changed; 4 reads tests/testlib.h, which 3 changes; 5 does not read it; 1 and 2
    # come before the edit (their trees are the same: the evidence is reused as before)
    assert ran == {3, 4}
    # 7's before tree does not compile: it is checked on the files its after tree was built from
    assert carried(verdicts) == {5, 7}
    assert {n for n, v in verdicts.items() if v.reused and not v.carried} == {1, 2}
    # 6 has no test: nothing to build, whatever changed
    assert verdicts[6].outcome == NOT_PROVEN and not verdicts[6].reused
    assert "tests/testlib.h changed" in verdicts[4].reason
    five = verdicts[5]
    assert five.reason.startswith("earlier proof holds: the ")
    assert "test-div was built from are identical" in five.reason
    # the evidence says so, keeps the steps of the run that proved it, and names the trees of now
    assert five.evidence_json and five.evidence_md
    data = json.loads(five.evidence_json.read_text())
    work = GitRepo(project.work_repo)
    after_now = work.tree_of("refs/patchset/verify/0005/after")
    assert data["holds"]["trees"]["after"] == after_now
    assert [s["tree"] for s in data["steps"]] == ["before", "after"]
    assert data["steps"][1]["tree_id"] != after_now
    assert "identical" in data["holds"]["why"]
    assert "earlier proof holds" in five.evidence_md.read_text()
    # export does not call it stale: it is the proof of this version of the patch
    patch5 = load_series(project.patches_dir).patches[4]
    assert facts.load(project.evidence_dir, patch5, "cpu", after_now).data is not None
    # and a second run reuses everything, the carried proof included
    again, ran = reverify(project)
    assert ran == set() and all(v.reused for v in again.values())
    assert carried(again) == {5, 7} and "earlier proof holds" in again[5].reason


def test_a_header_one_program_includes_reproves_exactly_that_patch(project: Project) -> None:
    edit(project, 2, "+// the cases of the div test", "+// the cases of test-div")
    verdicts, ran = reverify(project)
    assert ran == {2, 5}
    assert carried(verdicts) == {3, 4, 7}
    assert "ggml/include/extra.h changed" in verdicts[5].reason
    assert "re-proven" in verdicts[2].reason


def test_force_reproves_every_patch(project: Project) -> None:
    edit(project, 3, "+// report: one case per program", "+// report: prints one case")
    verdicts, ran = reverify(project, reuse=False)
    assert ran == {1, 2, 3, 4, 5, 7}
    assert not any(v.carried or v.reused for v in verdicts.values())


def test_a_changed_mutation_is_proven_again(project: Project) -> None:
    mut = project.patches_dir / "mutations" / "add-subtracts.patch"
    mut.write_text(mut.read_text().replace("+int calc_add(int a, int b) { return a - b; }",
                                           "+int calc_add(int a, int b) { return a - b + 0; }"))
    verdicts, ran = reverify(project)
    assert ran == {1}
    assert "re-proven: the mutation mutations/add-subtracts.patch changed" in verdicts[1].reason


def test_verify_force_is_refused_naming_no_reuse(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # --force overwrites what a command would refuse to lose; verify's "prove again" is --no-reuse
    assert build_parser().parse_args(["verify", "--no-reuse"]).no_reuse is True
    assert build_parser().parse_args(["verify"]).no_reuse is False
    # an empty folder as the project: a verify that ran anyway would stop at once, naming no option
    assert main(["--project", str(tmp_path), "verify", "--force"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--no-reuse" in err and "Traceback" not in err


def test_a_test_file_that_fails_to_compile_is_named_by_its_tree_path_in_the_evidence(
        project: Project, monkeypatch: pytest.MonkeyPatch) -> None:
    # under ccache the build sets base_dir to the build folder (a user's own CCACHE_BASEDIR gives way), so
    # the compiler names files relative to it, through the folder's tree link; patch 7's before tree fails
    # in its test file only, and the evidence names that file as a path of the tree
    if find_ccache() is None:
        pytest.skip("no ccache here (the project's [ccache] extra)")
    monkeypatch.setenv("CCACHE_BASEDIR", str(project.root))
    report = verify(project, ["7"], backends=["cpu"], reuse=False)
    (v,) = report.verdicts
    assert v.outcome == PROVEN, v.reason
    data = json.loads(v.evidence_json.read_text())
    before = next(s for s in data["steps"] if s["tree"] == "before")
    assert before["verdict"] == "build-fails"
    assert before["build_errors"] and all(e.startswith("tests/test-twice.cpp:") for e in before["build_errors"]), \
        before["build_errors"]

"""verify on a synthetic mini-upstream: a tiny C library laid out like llama.cpp (ggml/, tests/)
with a few bugs, and one patch per outcome verify can reach."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from helpers import pin_toml

from builder.gitrepo import GitRepo
from builder.project import load_project
from builder.prove import evidence
from builder.prove.verify import verify
from builder.series.apply import apply
from builder.series.refresh import format_mails, write_series
from builder.words import BUILD_FAILED, NOT_PROVEN, PROVEN, REGRESSED

CALC_C = """\
#include "calc.h"
int calc_add(int a, int b) { return a - b; }
int calc_mul(int a, int b) { return a * b; }
int calc_sub(int a, int b) { return a + b; }
int calc_neg(int a) { return a; }
"""
CALC_H = """\
#pragma once
#ifdef __cplusplus
extern "C" {
#endif
int calc_add(int a, int b);
int calc_mul(int a, int b);
int calc_sub(int a, int b);
int calc_neg(int a);
#ifdef __cplusplus
}
#endif
"""
# an object library: no ar and ranlib per build (test_cli_pipeline.UPSTREAM)
GGML_CMAKE = """\
add_library(ggml OBJECT src/calc.c)
target_include_directories(ggml PUBLIC include)
"""


def program_source(name: str, expr: str, want: int) -> str:
    # prints in the ggml test programs' format, which testrun parses
    return f"""\
#include "calc.h"
#include <cstdio>
int main() {{
    int got = {expr};
    bool ok = got == {want};
    printf("Backend 1/1: CPU\\n");
    printf("  {name}(want={want}): %s\\n", ok ? "OK" : "FAIL");
    printf("  %d/1 tests passed\\n", ok ? 1 : 0);
    return ok ? 0 : 1;
}}
"""


def git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(cwd), *args], check=True, capture_output=True, text=True).stdout.strip()


def commit_files(repo: Path, files: dict[str, str], message: str) -> None:
    for rel, text in files.items():
        p = repo / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", message)


def mutation(src: Path, old: str, new: str) -> str:
    """A known-bad variant of the fix just committed, as `git diff` writes it."""
    calc = src / "ggml/src/calc.c"
    good = calc.read_text()
    assert old in good
    calc.write_text(good.replace(old, new, 1))
    diff = git(src, "diff") + "\n"
    calc.write_text(good)
    return diff


def trailers(backends: str, program: str, extra: str = "") -> str:
    return (f"\n\nPatchset-Status: pending\nPatchset-Backends: {backends}\nPatchset-Test: {program}\n"
            f"Patchset-Test-Paths: tests/{program}.cpp\n{extra}")


def init_upstream(base: Path, files: dict[str, str]) -> Path:
    """A git repository `base/src` whose first commit (the pin) holds `files`, and its bare clone
    `base/remote.git` (the remote the pin names)."""
    src = base / "src"
    src.mkdir()
    git(src, "init", "-q", "-b", "main")
    git(src, "config", "user.name", "Up Stream")
    git(src, "config", "user.email", "up@example.invalid")
    git(src, "config", "commit.gpgsign", "false")
    commit_files(src, files, "calc: initial")
    subprocess.run(["git", "clone", "-q", "--bare", str(src), str(base / "remote.git")], check=True)
    return src


def write_project(base: Path, src: Path) -> Path:
    """`base/project`: the pin (the first commit of `src`) and the series of `src`'s later commits."""
    pin_commit = git(src, "rev-list", "--max-parents=0", "HEAD")
    pin_tree = git(src, "rev-parse", f"{pin_commit}^{{tree}}")
    bare = base / "remote.git"
    project = base / "project"
    (project / "upstream").mkdir(parents=True)
    (project / "patches" / "mutations").mkdir(parents=True)
    (project / "upstream" / "llama.cpp.toml").write_text(
        pin_toml(pin_commit, pin_tree, [{"kind": "git", "url": f"file://{bare}"}], repository=str(bare), tag=None,
                 date="2026-10-01"))
    write_series(project / "patches", format_mails(GitRepo(src), f"{pin_commit}..HEAD"))
    return project


@pytest.fixture(scope="module")
def project_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Upstream with bugs, and a series with one patch per verify outcome."""
    base = tmp_path_factory.mktemp("verify")
    src = init_upstream(base, {"ggml/CMakeLists.txt": GGML_CMAKE, "ggml/include/calc.h": CALC_H,
                               "ggml/src/calc.c": CALC_C, "README": "calc\n"})
    fixed = CALC_C.replace("return a - b;", "return a + b;")
    # 1: proven, with a mutation that the test catches
    commit_files(src, {"ggml/src/calc.c": fixed, "tests/test-add.cpp": program_source("add", "calc_add(2, 3)", 5)},
                 "calc : add adds" + trailers("cpu", "test-add", "Patchset-Mutation: mutations/add-multiplies.patch"))
    mutations = {"add-multiplies": mutation(src, "return a + b; }", "return a * b; }")}
    # 2: not proven: its test passes without the "fix"
    commit_files(src, {"ggml/src/calc.c": fixed.replace("int calc_mul", "/* product */\nint calc_mul"),
                       "tests/test-mul.cpp": program_source("mul", "calc_mul(2, 3)", 6)},
                 "calc : document mul" + trailers("cpu", "test-mul"))
    # 3: regressed: the fix does not fix
    cur = (src / "ggml/src/calc.c").read_text()
    wrong = cur.replace("return a + b; }\nint calc_neg", "return a + b + 0; }\nint calc_neg")
    commit_files(src, {"ggml/src/calc.c": wrong,
                       "tests/test-sub.cpp": program_source("sub", "calc_sub(5, 3)", 2)},
                 "calc : sub subtracts (wrongly)" + trailers("cpu", "test-sub"))
    # 4: a mutation the test does not catch
    cur = (src / "ggml/src/calc.c").read_text()
    commit_files(src, {"ggml/src/calc.c": cur.replace("int calc_neg(int a) { return a; }",
                                                      "int calc_neg(int a) { return -a; }"),
                       "tests/test-neg.cpp": program_source("neg", "calc_neg(2)", -2)},
                 "calc : neg negates" + trailers("cpu", "test-neg", "Patchset-Mutation: mutations/neg-abs.patch"))
    mutations["neg-abs"] = mutation(src, "return -a;", "return a < 0 ? a : -a;")
    # 5: its proof needs a backend this machine does not have
    commit_files(src, {"tests/test-gpu.cpp": program_source("gpu", "calc_add(1, 1)", 2)},
                 "calc : gpu test" + trailers("cuda", "test-gpu"))
    project = write_project(base, src)
    for name, text in mutations.items():
        (project / "patches" / "mutations" / f"{name}.patch").write_text(text)
    return project


def user_work(project) -> dict[str, object]:  # type: ignore[no-untyped-def]
    """Everything of the user's that verify must leave alone: patches/, the pin, the work
    repository's branches, HEAD, index and work tree (an edit in progress included)."""
    work = project.work_repo
    return {
        "patches": {p.relative_to(project.patches_dir).as_posix(): p.read_bytes()
                    for p in sorted(project.patches_dir.rglob("*")) if p.is_file()},
        "pin": project.pin_file.read_bytes(),
        "branches": git(work, "for-each-ref", "--format=%(refname) %(objectname)", "refs/heads/"),
        "head": git(work, "symbolic-ref", "HEAD"),
        "status": git(work, "status", "--porcelain=v1", "--untracked-files=all"),
        "diff": git(work, "diff", "HEAD"),
        "files": {p.relative_to(work).as_posix(): p.read_bytes()
                  for p in sorted(work.rglob("*")) if p.is_file() and ".git" not in p.relative_to(work).parts},
    }


@pytest.fixture(scope="module")
def verified(project_dir: Path, tmp_path_factory: pytest.TempPathFactory):
    cache = tmp_path_factory.mktemp("cache")
    project = load_project(root=project_dir, cache_dir=cache)
    apply(project)
    # a fix in progress: an uncommitted edit and an untracked file in the work tree
    (project.work_repo / "README").write_text("calc, being edited\n")
    (project.work_repo / "notes.txt").write_text("todo\n")
    before = user_work(project)
    report = verify(project, backends=["cpu"])
    return project, report, before


def outcomes(report) -> dict[str, str]:
    return {v.patch.split("-", 1)[1].removesuffix(".patch"): v.outcome for v in report.verdicts}


def test_a_lane_folders_half_written_record_is_removed_when_nothing_is_built(verified) -> None:
    """A kill while a lane wrote its build folder's record leaves atomic_write's temporary file; the next verify
    removes it, also when every proof still holds and no lane builds there again."""
    project, _, _ = verified
    left = project.build_root / "verify-cpu-minimal" / "..patchset-built.json.k1ll3d00.tmp"
    left.write_text('{"source": ')
    again = verify(project, backends=["cpu"])
    assert all(v.reused for v in again.verdicts if v.outcome == PROVEN), [v.reason for v in again.verdicts]
    assert not left.exists()


def test_every_outcome(verified) -> None:
    _, report, _ = verified
    got = outcomes(report)
    assert got == {
        "calc-add-adds": PROVEN,
        "calc-document-mul": NOT_PROVEN,
        "calc-sub-subtracts-wrongly": REGRESSED,
        "calc-neg-negates": NOT_PROVEN,
        "calc-gpu-test": "needs cuda",
    }
    assert not report.ok
    assert report.regressed
    reasons = {v.patch: v.reason for v in report.verdicts}
    assert any("mutation" in r and "not caught" in r for r in reasons.values())
    assert any("passes without the fix" in r for r in reasons.values())
    assert BUILD_FAILED not in got.values()


def test_evidence_files(verified) -> None:
    _, report, _ = verified
    proven = next(v for v in report.verdicts if v.outcome == PROVEN)
    data = json.loads(proven.evidence_json.read_text())
    assert [s["tree"] for s in data["steps"]] == ["before", "after", "mutation"]
    before, after, mutation = data["steps"]
    assert before["verdict"] == "fails" and after["verdict"] == "passes" and mutation["verdict"] == "fails"
    assert before["tests"][0]["returncode"] == 1
    assert any("add(want=5)" in line for line in before["tests"][0]["failing"])
    assert after["tests"][0]["passed"] == 1
    # the trees are real commits of the work repository, and differ
    assert len({before["commit"], after["commit"], mutation["commit"]}) == 3
    assert data["pin"]["commit"] and data["host"]["compiler"]
    md = proven.evidence_md.read_text()
    assert "before tree: fails" in md and "after tree: passes" in md
    needs = next(v for v in report.verdicts if v.outcome == "needs cuda")
    assert "Nothing was built or run" in needs.evidence_md.read_text()


def test_rerun_reuses_evidence_and_says_so(verified) -> None:
    project, _, _ = verified
    again = verify(project, backends=["cpu"])
    proven = next(v for v in again.verdicts if v.outcome == PROVEN)
    assert proven.reused and "reused" in proven.reason
    fresh = verify(project, ["1"], backends=["cpu"], reuse=False)
    assert fresh.verdicts[0].outcome == PROVEN and not fresh.verdicts[0].reused


def test_user_work_untouched(verified) -> None:
    project, _, before = verified
    after = user_work(project)
    assert after["branches"] and "refs/heads/patched" in after["branches"]
    assert "M README" in after["status"] and "?? notes.txt" in after["status"]
    # verify never moves the user's branches, HEAD or work tree, nor touches patches/ or the pin
    assert after == before


def test_another_compiler_is_another_key_and_the_proof_is_made_again(verified, tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """The evidence's key holds the compiler as the record of what a proof depends on does: a proof
    made with one compiler is neither reused nor carried over under another."""
    project, _, _ = verified
    name = evidence.configured_cxx()  # the suite's $PATCHSET_CMAKE_ARGS may name clang++
    real = shutil.which(name)
    assert real
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / name).write_text(f'#!/bin/sh\n[ "$1" = --version ] && {{ echo "c++ (Other) 99.1"; exit 0; }}\n'
                             f'exec {real} "$@"\n')
    (fake / name).chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake}{os.pathsep}{os.environ['PATH']}")
    again = verify(project, ["1"], backends=["cpu"])
    assert again.verdicts[0].outcome == PROVEN and not again.verdicts[0].reused, again.verdicts[0].reason
    assert json.loads(again.verdicts[0].evidence_json.read_text())["host"]["compiler"] == "c++ (Other) 99.1"
    monkeypatch.undo()
    assert not verify(project, ["1"], backends=["cpu"]).verdicts[0].reused  # and back


def test_a_patch_without_test_paths_has_its_test_part_in_tests(tmp_path: Path) -> None:
    """No `Patchset-Test-Paths`: the test part is `tests`, the same in every module. Here its test uses
    the API the fix adds (`Patchset-Before: build-fails`): the before tree (the pin plus tests/)
    fails to compile in tests/ only, which proves the patch; not "fails outside the test files"."""
    src = init_upstream(tmp_path, {"ggml/CMakeLists.txt": GGML_CMAKE, "ggml/include/calc.h": CALC_H,
                                   "ggml/src/calc.c": CALC_C})
    commit_files(src, {"ggml/include/calc.h": CALC_H.replace("int calc_neg(int a);",
                                                             "int calc_neg(int a);\nint calc_twice(int a);"),
                       "ggml/src/calc.c": CALC_C + "int calc_twice(int a) { return 2 * a; }\n",
                       "tests/test-twice.cpp": program_source("twice", "calc_twice(4)", 8)},
                 "calc : add twice\n\nPatchset-Status: pending\nPatchset-Backends: cpu\nPatchset-Test: test-twice\n"
                 "Patchset-Before: build-fails\n")
    project = load_project(root=write_project(tmp_path, src), cache_dir=tmp_path / "cache")
    apply(project)
    v = verify(project, backends=["cpu"]).verdicts[0]
    assert v.outcome == PROVEN, v.reason
    assert "fails to compile in its test files only" in v.reason


LLAMA_SIDE = {
    "include/llama.h": "#pragma once\nint llama_add(int a, int b);\n",
    "src/CMakeLists.txt": ("llama_add_compile_flags()\nadd_library(llama STATIC llama.cpp)\n"
                           "target_include_directories(llama PUBLIC ../include)\n"
                           "target_link_libraries(llama PUBLIC ggml)\n"),
    "src/llama.cpp": '#include "llama.h"\n#include "calc.h"\nint llama_add(int a, int b) { return calc_add(a, b); }\n',
    "vendor/CMakeLists.txt": "",
    "common/CMakeLists.txt": ("llama_add_compile_flags()\nadd_library(llama-common STATIC common.cpp)\n"
                              "target_include_directories(llama-common PUBLIC .)\n"
                              "target_link_libraries(llama-common PUBLIC llama)\n"),
    "common/common.h": "#pragma once\nint common_add(int a, int b);\n",
    "common/common.cpp": ('#include "common.h"\n#include "llama.h"\n'
                          "int common_add(int a, int b) { return llama_add(a, b); }\n"),
}


def test_a_llama_program_is_built_ahead_only_for_a_tree_with_the_same_llama_side(tmp_path: Path) -> None:
    """Verify builds a test program an earlier patch needs with a later patch's tree when its source is
    the same there; for a program that links libllama only when ggml's headers and llama's folders are
    the same too: a tree with another calc.h compiles all of libllama again, and what was built ahead
    for it is never used."""
    src = init_upstream(tmp_path, {"ggml/CMakeLists.txt": GGML_CMAKE, "ggml/include/calc.h": CALC_H,
                                   "ggml/src/calc.c": CALC_C, **LLAMA_SIDE})
    commit_files(src, {"ggml/src/calc.c": CALC_C.replace("return a - b;", "return a + b;"),
                       "tests/test-llama-add.cpp": program_source("add", "llama_add(2, 3)", 5).replace(
                           '#include "calc.h"', '#include "llama.h"')},
                 "calc : add adds" + trailers("cpu", "test-llama-add"))
    both = CALC_C.replace("add(int a, int b) { return a - b;", "add(int a, int b) { return a + b;").replace(
        "sub(int a, int b) { return a + b;", "sub(int a, int b) { return a - b;")
    commit_files(src, {"ggml/src/calc.c": both,
                       # a declaration more (a comment would not do: every tree compiles the head's comments)
                       "ggml/include/calc.h": CALC_H.replace("int calc_sub(", "int calc_zero(void);\nint calc_sub("),
                       "tests/test-sub.cpp": program_source("sub", "calc_sub(5, 3)", 2)},
                 "calc : sub subtracts" + trailers("cpu", "test-sub"))
    project = load_project(root=write_project(tmp_path, src), cache_dir=tmp_path / "cache")
    # building ahead is for one lane, whose one build folder builds the later trees too
    report = verify(project, backends=["cpu"], lanes=1)
    assert [v.outcome for v in report.verdicts] == [PROVEN, PROVEN], [v.reason for v in report.verdicts]
    second = json.loads(report.verdicts[1].evidence_json.read_text())
    # the preload library that shows the programs their cores comes with every build on Linux
    built = {s["tree"]: [t for t in s["build_command"].split(" --target ")[1].split() if t != "patchset-cores"]
             for s in second["steps"]}
    # the tree with patch 2's calc.h: its own program only; the tree without its fix has patch 1's calc.h,
    # and test-llama-add is built there for patch 1's trees
    assert built["after"] == ["test-sub", "patchset-order"], built
    assert built["before"] == ["test-sub", "test-llama-add", "patchset-order"], built


def test_a_before_tree_whose_program_the_loader_cannot_start_did_not_build(tmp_path: Path) -> None:
    """A shared ggml whose pin leaves a symbol undefined (its test program links with the loader left to find it):
    without the fix the program never starts (exit 127). That is the tree's link failing, not a failing test."""
    lib_cmake = ("add_library(ggml SHARED src/calc.c)\ntarget_include_directories(ggml PUBLIC include)\n"
                 "# the loader, not the linker, finds what the library lacks\n"
                 "target_link_options(ggml INTERFACE -Wl,--allow-shlib-undefined)\n")
    # a variable: its address is bound when the library loads (a function's only at its first call)
    header = CALC_H.replace("int calc_neg(int a);", "int calc_neg(int a);\nextern int calc_twice;")
    broken = CALC_C + "int calc_double(int a) { return calc_twice * a; }\n"
    src = init_upstream(tmp_path, {"ggml/CMakeLists.txt": lib_cmake, "ggml/include/calc.h": header,
                                   "ggml/src/calc.c": broken, "README": "calc\n"})
    commit_files(src, {"ggml/src/calc.c": broken.replace("return a - b;", "return a + b;")
                       + "int calc_twice = 2;\n",
                       "tests/test-add.cpp": program_source("add", "calc_add(2, 3)", 5)},
                 "calc : define calc_twice, add adds" + trailers("cpu", "test-add"))
    project = load_project(root=write_project(tmp_path, src), cache_dir=tmp_path / "cache")
    apply(project)
    (v,) = verify(project, backends=["cpu"]).verdicts
    assert v.outcome == BUILD_FAILED, v.reason
    steps = {s["tree"]: s for s in json.loads(v.evidence_json.read_text())["steps"]}
    before = steps["before"]
    assert (before["build_ok"], before["verdict"], before["tests"]) == (False, "build-failed", [])
    assert before["build_errors"][0].startswith("test-add: did not load (exit 127"), before["build_errors"]
    assert "calc_twice" in before["build_errors"][0]
    assert steps["after"]["verdict"] == "passes"

"""`check --strict` on the pinned tree: declared dependencies, build-fails caused by new API, upstream CI reach.

A synthetic upstream with a public header, a CTest file in llama.cpp's shape (its own
`llama_test` / `llama_build_and_test` wrappers) and a test program; each rule is tried with a
patch that breaks it and one that does not.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers import Proj, make_project, make_upstream

from builder.cli import main
from builder.deliver import ctest
from builder.deliver.readiness import strict_findings
from builder.series.load import lint

CALC_H = """\
#pragma once

int calc_add(int a, int b);
"""

CALC_C = """\
#include "calc.h"

int calc_add(int a, int b) {
    return a + b;
}
"""

TEST_CALC = """\
#include "calc.h"

int main() {
    return calc_add(1, 2) == 3 ? 0 : 1;
}
"""

CTEST = """\
function(llama_test target)
    include(CMakeParseArguments)
    set(oneValueArgs NAME LABEL WORKING_DIRECTORY)
    set(multiValueArgs ARGS)
    cmake_parse_arguments(LLAMA_TEST "${options}" "${oneValueArgs}" "${multiValueArgs}" ${ARGN})
    add_test(NAME ${TEST_NAME} COMMAND $<TARGET_FILE:${target}> ${LLAMA_TEST_ARGS})
endfunction()

function(llama_build_and_test source)
    add_test(NAME ${TEST_TARGET} COMMAND $<TARGET_FILE:${TEST_TARGET}> ${LLAMA_TEST_ARGS})
endfunction()

llama_build_and_test(test-calc.cpp)
llama_build(test-tool.cpp)
# llama_test(test-tool NAME test-tool-commented ARGS --mode fast)
llama_test(
    test-tool
    NAME test-tool-gen
    LABEL main
    ARGS -o "${MODEL_DIR}"
)
"""

FILES = {"include/calc.h": CALC_H, "src/calc.c": CALC_C, "tests/test-calc.cpp": TEST_CALC,
         "tests/test-tool.cpp": "int main() { return 0; }\n", "tests/CMakeLists.txt": CTEST}

TRAILERS = "Patchset-Upstream: not-sent\nPatchset-Backends: cpu\n"


def msg(subject: str, trailers: str) -> str:
    return f"{subject}\n\nWhy it is needed.\n\n{TRAILERS}{trailers}"


CLAMP = CALC_C.replace("    return a + b;", "    int s = a + b;\n    return s > 100 ? 100 : s;")
CLAMP_LOW = CLAMP.replace("return s > 100 ? 100 : s;", "return s > 100 ? 100 : s < -100 ? -100 : s;")
P1 = ({"src/calc.c": CLAMP, "tests/test-calc.cpp": TEST_CALC.replace("== 3", "== 3 && calc_add(99, 99) == 100")},
      msg("calc : clamp the sum", "Patchset-Test: test-calc\n"))


def p2(trailers: str = "") -> tuple[dict[str, str | bytes | None], str]:
    """Rewrites the line patch 1 adds: applies only after patch 1."""
    return ({"src/calc.c": CLAMP_LOW}, msg("calc : clamp below too", "Patchset-Test: test-calc\n" + trailers))


@pytest.fixture
def up(tmp_path: Path):  # type: ignore[no-untyped-def]
    u = make_upstream(tmp_path)
    u.commit = u.advance(dict(FILES), "upstream: calc\n")
    u.tree = u.tree_of("HEAD")
    return u


def project(tmp_path: Path, up, cache_dir: Path, patches: list) -> Proj:  # type: ignore[no-untyped-def]
    return make_project(tmp_path, up, cache_dir, patches=patches)


def strict(p: Proj) -> list[str]:
    series, found = lint(p.patches)
    assert found == []
    return [str(f) for f in strict_findings(p.project, series)]


# -- depends --------------------------------------------------------------------------------------
def test_a_patch_that_needs_an_earlier_one_must_declare_it(tmp_path: Path, up, cache_dir: Path) -> None:  # type: ignore[no-untyped-def]
    p = project(tmp_path, up, cache_dir, [P1, p2()])
    found = strict(p)
    name1 = p.series()[0]
    assert len(found) == 1 and "0002-" in found[0], found
    assert "does not apply alone on the pin" in found[0] and f"Patchset-Depends: {name1}" in found[0]
    assert main(["--project", str(p.root), "check", "--strict"]) == 1
    assert main(["--project", str(p.root), "check"]) == 0  # a rule of --strict only


def test_a_declared_dependency_passes(tmp_path: Path, up, cache_dir: Path) -> None:  # type: ignore[no-untyped-def]
    first = make_project(tmp_path / "a", up, cache_dir, [P1]).series()[0]
    p = project(tmp_path, up, cache_dir, [P1, p2(f"Patchset-Depends: {first}\n")])
    assert strict(p) == []


def test_a_dependency_that_is_unknown_or_not_earlier_is_an_error_with_its_line(tmp_path: Path, up,  # type: ignore[no-untyped-def]
                                                                              cache_dir: Path) -> None:
    later = "0002-calc-clamp-below-too.patch"
    p1 = (P1[0], P1[1] + f"Patchset-Depends: {later}\n")
    p = project(tmp_path, up, cache_dir, [p1, p2("Patchset-Depends: 0009-nothing.patch\n")])
    _, found = lint(p.patches)
    text = [str(f) for f in found]
    assert any("0001-" in t and "is not earlier in the series" in t for t in text), text
    assert any("0002-" in t and "'0009-nothing.patch' is not a patch of the series" in t for t in text), text
    for f in found:
        assert "Patchset-Depends:" in f.file.read_text().splitlines()[f.line - 1]
    assert main(["--project", str(p.root), "check"]) == 1


# -- api-before -----------------------------------------------------------------------------------
PURE_API = ({"include/calc.h": CALC_H + "int calc_ready(void);\n",
             "src/calc.c": CALC_C + "\nint calc_ready(void) {\n    return 1;\n}\n",
             "tests/test-calc.cpp": TEST_CALC.replace("calc_add(1, 2) == 3", "calc_ready() && calc_add(1, 2) == 3")},
            msg("calc : add a readiness query", "Patchset-Test: test-calc\nPatchset-Test-Paths: tests/test-calc.cpp\n"
                                                "Patchset-Before: build-fails\n"))
# the same query beside a change of behaviour (the clamp): the clamp's cases never ran without the fix
NEW_API = ({"include/calc.h": CALC_H + "int calc_ready(void);\n",
            "src/calc.c": CLAMP + "\nint calc_ready(void) {\n    return 1;\n}\n",
            "tests/test-calc.cpp": TEST_CALC.replace("calc_add(1, 2) == 3", "calc_ready() && calc_add(1, 2) == 3")},
           msg("calc : add a readiness query", "Patchset-Test: test-calc\nPatchset-Test-Paths: tests/test-calc.cpp\n"
                                               "Patchset-Before: build-fails\n"))
CHANGED_API = ({"include/calc.h": CALC_H.replace("int calc_add(int a, int b);", "long calc_add(int a, int b);"),
                "src/calc.c": CALC_C.replace("int calc_add", "long calc_add"),
                "tests/test-calc.cpp": TEST_CALC.replace("calc_add(1, 2) == 3",
                                                         "sizeof(calc_add(1, 2)) == sizeof(long)")},
               msg("calc : return long from calc_add", "Patchset-Test: test-calc\n"
                                                       "Patchset-Test-Paths: tests/test-calc.cpp\n"
                                                       "Patchset-Before: build-fails\n"))


def test_build_fails_on_an_api_the_patch_adds_is_reported(tmp_path: Path, up, cache_dir: Path) -> None:  # type: ignore[no-untyped-def]
    p = project(tmp_path, up, cache_dir, [NEW_API])
    # committed evidence whose before step failed to compile on the new name is quoted
    stem = p.series()[0].removesuffix(".patch")
    ev = p.root / "docs" / "evidence" / "cpu"
    ev.mkdir(parents=True)
    (ev / "verify.json").write_text(json.dumps({"patches": {stem: {"steps": [
        {"verdict": "build-fails", "build_errors": ["tests/test-calc.cpp:4: 'calc_ready' was not declared"]}]}}}))
    found = strict(p)
    assert len(found) == 1, found
    assert "build-fails" in found[0] and "calc_ready (include/calc.h)" in found[0]
    assert "beside a change of behaviour (src/calc.c:" in found[0]
    assert "'calc_ready' was not declared" in found[0]
    line = int(found[0].split(":")[1])
    assert (p.patches / p.series()[0]).read_text().splitlines()[line - 1].startswith("Patchset-Before:")


def test_build_fails_where_the_change_is_the_api_passes(tmp_path: Path, up, cache_dir: Path) -> None:  # type: ignore[no-untyped-def]
    p = project(tmp_path, up, cache_dir, [CHANGED_API])
    assert strict(p) == []


def test_build_fails_where_the_fix_only_adds_the_api_passes(tmp_path: Path, up, cache_dir: Path) -> None:  # type: ignore[no-untyped-def]
    p = project(tmp_path, up, cache_dir, [PURE_API])
    assert strict(p) == []


def test_a_new_api_with_behaviour_seen_failing_before_passes(tmp_path: Path, up, cache_dir: Path) -> None:  # type: ignore[no-untyped-def]
    files, message = NEW_API
    p = project(tmp_path, up, cache_dir, [(files, message.replace("build-fails", "test-fails"))])
    assert strict(p) == []


# -- ci-reach -------------------------------------------------------------------------------------
def tool_patch(trailers: str, ctest_file: str | None = None) -> tuple[dict[str, str | bytes | None], str]:
    files: dict[str, str | bytes | None] = {"tests/test-tool.cpp": "int main(int argc, char **) { return argc > 5; }\n"}
    if ctest_file is not None:
        files["tests/CMakeLists.txt"] = ctest_file
    return files, msg("tests : a new mode of test-tool", trailers)


def test_an_unregistered_test_mode_fails_ci_reach(tmp_path: Path, up, cache_dir: Path) -> None:  # type: ignore[no-untyped-def]
    p = project(tmp_path, up, cache_dir, [tool_patch("Patchset-Test: [cpu] test-tool --mode fast\n"
                                                     "Patchset-Test: test-calc\n")])
    found = strict(p)
    assert len(found) == 1, found
    assert "upstream CI reach: `test-tool --mode fast`" in found[0]
    assert "-o ${MODEL_DIR} at line" in found[0]  # the entries the program has, so the difference shows
    assert main(["--project", str(p.root), "check", "--strict"]) == 1


def test_a_registered_mode_or_a_stated_reason_passes(tmp_path: Path, up, cache_dir: Path) -> None:  # type: ignore[no-untyped-def]
    registered = CTEST + "llama_test(test-tool NAME test-tool-fast ARGS --mode fast)\n"
    p = project(tmp_path, up, cache_dir, [tool_patch("Patchset-Test: test-tool --mode fast\n", registered)])
    assert strict(p) == []
    p2_ = make_project(tmp_path / "b", up, cache_dir, [tool_patch(
        "Patchset-Test: test-tool --mode fast\n"
        "Patchset-Not-In-CI: test-tool --mode fast: upstream CI runs it from ci/run.sh, not CTest\n")])
    assert strict(p2_) == []


def test_a_reason_for_a_registered_or_unknown_command_is_reported(tmp_path: Path, up, cache_dir: Path) -> None:  # type: ignore[no-untyped-def]
    p = project(tmp_path, up, cache_dir, [tool_patch(
        "Patchset-Test: test-calc\nPatchset-Not-In-CI: test-calc: no reason\n"
        "Patchset-Not-In-CI: test-tool --other: stale\n")])
    found = strict(p)
    assert len(found) == 2, found
    assert "`test-calc` is registered" in found[0] and "remove the trailer" in found[0]
    assert "`test-tool --other` is not a Patchset-Test command" in found[1]


def test_a_malformed_not_in_ci_is_a_lint_error(tmp_path: Path, up, cache_dir: Path) -> None:  # type: ignore[no-untyped-def]
    p = project(tmp_path, up, cache_dir, [tool_patch("Patchset-Test: test-calc\nPatchset-Not-In-CI: test-calc\n")])
    _, found = lint(p.patches)
    assert len(found) == 1 and "Patchset-Not-In-CI: expected 'PROGRAM ARGS: REASON'" in str(found[0])


def test_ctest_entries_are_read_as_cmake_reads_them() -> None:
    text = CTEST + """\
llama_test(test-jinja NAME test-jinja-py ARGS -py LABEL python)
add_test(NAME test-x COMMAND $<TARGET_FILE:test-x> "a b" c CONFIGURATIONS Release)
add_test(old-style test-y --flag)
#[[ llama_build_and_test(test-bracket-comment.cpp) ]]
llama_build_and_test(test-two.cpp extra.cpp NAME test-renamed ARGS -v) # a trailing comment
"""
    got = [(e.name, e.program, e.args, e.line) for e in ctest.entries(text)]
    assert got == [
        ("test-calc", "test-calc", (), 13),
        ("test-tool-gen", "test-tool", ("-o", "${MODEL_DIR}"), 16),
        ("test-jinja-py", "test-jinja", ("-py",), 22),
        ("test-x", "test-x", ("a b", "c"), 23),
        ("old-style", "test-y", ("--flag",), 24),
        ("test-renamed", "test-renamed", ("-v",), 26),
    ]

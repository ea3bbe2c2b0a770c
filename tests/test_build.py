"""build on a synthetic tree laid out like llama.cpp (ggml/ and tests/): configure, no-op rebuild,
reconfigure on change, the first compiler error, and the Metal compile check."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from builder.build.cmakebuild import BuildSpec, build, first_error, metal_compile_check

GGML_CMAKE = "add_library(ggml STATIC src/calc.c)\ntarget_include_directories(ggml PUBLIC include)\n"
CALC_H = '#pragma once\n#ifdef __cplusplus\nextern "C" {\n#endif\nint calc(int);\n#ifdef __cplusplus\n}\n#endif\n'
TEST = ('#include "calc.h"\n#include <cstdio>\n'
        'int main() { printf("  calc(x=1): %s\\n", calc(1) == 2 ? "OK" : "FAIL"); }\n')


def make_tree(root: Path, calc_c: str = "#include \"calc.h\"\nint calc(int x) { return x + 1; }\n") -> Path:
    files = {"ggml/CMakeLists.txt": GGML_CMAKE, "ggml/include/calc.h": CALC_H, "ggml/src/calc.c": calc_c,
             "tests/test-calc.cpp": TEST}
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return root


def spec(tree: Path, build_dir: Path) -> BuildSpec:
    return BuildSpec(tree, build_dir, "cpu", "minimal", ("test-calc",), jobs=2, use_ccache=False)


def test_build_noop_and_reconfigure(tmp_path: Path) -> None:
    tree = make_tree(tmp_path / "tree")
    s = spec(tree, tmp_path / "build")
    first = build(s)
    assert first.ok and first.configured and not first.noop
    assert (first.bin_dir / "test-calc").is_file()
    again = build(s)
    assert again.ok and again.noop and not again.configured
    # a different build type is a different configuration: cmake runs again
    changed = build(dataclasses.replace(s, build_type="Debug"))
    assert changed.ok and changed.configured


def test_failed_build_names_the_first_error(tmp_path: Path) -> None:
    tree = make_tree(tmp_path / "tree", calc_c='#include "calc.h"\nint calc(int x) {\n    return x +;\n}\n')
    r = build(spec(tree, tmp_path / "build"))
    assert not r.ok
    assert r.first_error is not None
    assert r.first_error.file.endswith("ggml/src/calc.c")
    assert r.first_error.line == 3
    assert "expected expression" in r.first_error.message
    assert r.log.is_file() and "calc.c" in r.log.read_text()


def test_missing_test_program_fails_at_configure(tmp_path: Path) -> None:
    tree = make_tree(tmp_path / "tree")
    r = build(BuildSpec(tree, tmp_path / "build", "cpu", "minimal", ("test-nope",), use_ccache=False))
    assert not r.ok
    assert "test-nope" in r.log.read_text()


def test_first_error_reads_cmake_errors() -> None:
    log = "-- Configuring\nCMake Error at CMakeLists.txt:38 (message):\n  patchset: test program x missing\n"
    err = first_error(log)
    assert err is not None and err.file == "CMakeLists.txt" and err.line == 38


@pytest.mark.parametrize("broken", [False, True])
def test_metal_compile_check(tmp_path: Path, broken: bool) -> None:
    tree = tmp_path / "tree"
    metal = tree / "ggml" / "src" / "ggml-metal"
    metal.mkdir(parents=True)
    (tree / "ggml" / "include").mkdir(parents=True)
    body = "int ggml_metal_op_x(int a) { return a; }\n" if not broken else "int ggml_metal_op_x(int a) { return b; }\n"
    (metal / "ggml-metal-ops.cpp").write_text(body)
    (metal / "ggml-metal-common.cpp").write_text("#include <vector>\nstatic std::vector<int> v;\n")
    r = metal_compile_check(tree, tmp_path / "check" / "check.log")
    assert r.kind == "compile-check"
    assert r.steps == 2  # the two files present; the other two are not in this tree
    assert any("not compiled here" in n for n in r.notes) and any("nothing was run" in n for n in r.notes)
    if broken:
        assert not r.ok
        assert r.first_error is not None and r.first_error.file.endswith("ggml-metal-ops.cpp")
    else:
        assert r.ok

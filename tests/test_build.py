"""build on a synthetic tree laid out like llama.cpp (ggml/ and tests/): configure, no-op rebuild,
reconfigure on change, the first compiler error, and the Linux Metal check (C++ and Objective-C)."""

from __future__ import annotations

import dataclasses
import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from helpers import compiled_sources, objc_toolchain_found

from builder.compile import cmakebuild, metalcheck, sdiag
from builder.compile.cmakebuild import BuildSpec, build, first_error
from builder.compile.toolchain import find_ccache, find_tool
from builder.errors import BuildError, InputError
from builder.prove import evidence

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


def test_a_record_whose_write_a_kill_cut_short_is_removed_by_the_next_build(tmp_path: Path) -> None:
    """A kill while the build's record was written leaves atomic_write's temporary file; the next build of the
    folder removes it (nothing below the folder's top is searched: a build folder holds thousands of files)."""
    tree = make_tree(tmp_path / "tree")
    s = spec(tree, tmp_path / "build")
    assert build(s).ok
    left = s.build_dir / "..patchset-built.json.k1ll3d00.tmp"
    left.write_text('{"source": ')
    deeper = s.build_dir / "bin" / ".other.x.tmp"
    deeper.write_text("")
    assert build(s).ok
    assert not left.exists() and deeper.exists()
    assert json.loads((s.build_dir / ".patchset-built.json").read_text())["source"] == str(tree)


def _platform_entries(build_dir: Path) -> dict[str, str]:
    """The cache's compiler and binutils entries (CMake's FILEPATH entries)."""
    text = (build_dir / "CMakeCache.txt").read_text()
    return dict(re.findall(r"^(CMAKE_[A-Za-z_]+):FILEPATH=(.*)$", text, re.M))


def test_a_new_folder_takes_the_compiler_detection_of_the_first_and_another_compiler_does_not(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PATCHSET_PLATFORM_CACHE", raising=False)
    store = tmp_path / "platform"
    tree = make_tree(tmp_path / "tree")
    first = build(dataclasses.replace(spec(tree, tmp_path / "b1"), platform_cache=store))
    assert first.ok and first.configured and not first.seeded
    assert [p.name for p in store.iterdir()] != []
    second = build(dataclasses.replace(spec(tree, tmp_path / "b2"), platform_cache=store))
    assert second.ok and second.seeded
    # what the cache holds is what a configure that detected for itself found
    assert _platform_entries(tmp_path / "b2") == _platform_entries(tmp_path / "b1")
    assert "CMAKE_AR" in _platform_entries(tmp_path / "b2")
    out = subprocess.run([str(second.bin_dir / "test-calc")], capture_output=True, text=True, check=True).stdout
    assert "calc(x=1): OK" in out
    # another compiler (the same one by another path): another key, detected again
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "mycc").symlink_to(shutil.which("cc"))
    monkeypatch.setenv("CC", str(bindir / "mycc"))
    other = build(dataclasses.replace(spec(tree, tmp_path / "b3"), platform_cache=store))
    assert other.ok and not other.seeded
    assert len(list(store.iterdir())) == 2


def test_a_damaged_compiler_detection_is_detected_again_not_a_failed_build(tmp_path: Path) -> None:
    store = tmp_path / "platform"
    tree = make_tree(tmp_path / "tree")
    assert build(dataclasses.replace(spec(tree, tmp_path / "b1"), platform_cache=store)).ok
    (seed,) = store.iterdir()
    (seed / "initial-cache.cmake").write_text('message(FATAL_ERROR "damaged")\n')
    again = build(dataclasses.replace(spec(tree, tmp_path / "b2"), platform_cache=store))
    assert again.ok and not again.seeded
    assert "damaged" in again.log.read_text()


def test_failed_build_names_the_first_error(tmp_path: Path) -> None:
    tree = make_tree(tmp_path / "tree", calc_c='#include "calc.h"\nint calc(int x) {\n    return x +;\n}\n')
    r = build(spec(tree, tmp_path / "build"))
    assert not r.ok
    assert r.first_error is not None
    assert r.first_error.file.endswith("ggml/src/calc.c")
    assert r.first_error.line == 3
    assert "expected expression" in r.first_error.message
    assert r.log.is_file() and "calc.c" in r.log.read_text()


def test_a_build_past_its_time_limit_is_killed_and_fails_saying_so(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """Configure and build run under `$PATCHSET_BUILD_TIMEOUT`: past it the step is killed and the build
    is a failed one whose message names the limit (and it is not tried again with all of llama-common)."""
    tree = make_tree(tmp_path / "tree")
    s = spec(tree, tmp_path / "build")
    monkeypatch.setenv("PATCHSET_BUILD_TIMEOUT", "0.01")
    r = build(s)
    assert not r.ok and r.timed_out_s == 0.01
    assert r.failure == "killed after 0.01s, the build time limit (PATCHSET_BUILD_TIMEOUT, default 7200s)"
    assert "# killed after 0.01s (time limit)" in r.log.read_text()
    monkeypatch.delenv("PATCHSET_BUILD_TIMEOUT")
    again = build(s)
    assert again.ok and again.timed_out_s is None and again.failure == ""


@pytest.mark.skipif(find_ccache() is None, reason="no ccache here (the project's [ccache] extra)")
def test_another_checkout_in_another_folder_compiles_from_the_cache(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    # the first build fills the cache, a copy of the tree at another path built in another folder finds every
    # compile there, as the verify worktree does after `patchset build`; a cache of its own, whose counts no
    # other worker of the suite moves
    monkeypatch.setenv("CCACHE_DIR", str(tmp_path / "ccache"))
    first = build(dataclasses.replace(spec(make_tree(tmp_path / "work"), tmp_path / "build-a"), use_ccache=True))
    assert first.ok and first.ccache_misses
    other = build(dataclasses.replace(spec(make_tree(tmp_path / "verify" / "src"), tmp_path / "build-b"),
                                      use_ccache=True))
    assert other.ok and other.ccache_misses == 0 and other.ccache_hits == first.ccache_misses
    out = subprocess.run([other.bin_dir / "test-calc"], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "calc(x=1): OK"


@pytest.mark.skipif(find_ccache() is None, reason="no ccache here (the project's [ccache] extra)")
def test_a_compile_error_under_ccache_names_the_file_itself(tmp_path: Path) -> None:
    tree = make_tree(tmp_path / "checkout", calc_c='#include "calc.h"\nint calc(int x) {\n    return x +;\n}\n')
    r = build(dataclasses.replace(spec(tree, tmp_path / "build"), use_ccache=True))
    assert not r.ok and r.first_error is not None
    # the compiler named it relative to the build folder, through its link to the tree
    assert re.search(r"^tree/ggml/src/calc\.c:3:", r.log.read_text(), re.M), r.log.read_text()
    assert r.first_error.file == str((tree / "ggml" / "src" / "calc.c").resolve())


def test_another_tree_in_the_same_folder_builds_from_nothing_of_the_last(tmp_path: Path) -> None:
    # the objects of both trees have the same names behind the folder's link: a switch must not keep any
    old = make_tree(tmp_path / "old")
    new = make_tree(tmp_path / "new", calc_c='#include "calc.h"\nint calc(int x) { return x + 2; }\n')
    shutil.copystat(old / "ggml" / "src" / "calc.c", new / "ggml" / "src" / "calc.c")  # no newer mtime to go by
    assert build(spec(old, tmp_path / "build")).ok
    r = build(spec(new, tmp_path / "build"))
    assert r.ok and r.configured
    out = subprocess.run([r.bin_dir / "test-calc"], capture_output=True, text=True, check=True).stdout
    assert "FAIL" in out, out


def _optimization_flags(build_dir: Path) -> dict[str, list[str]]:
    return {Path(e["file"]).name: re.findall(r"(?<!\S)-O\w*", e["command"])
            for e in json.loads(subprocess.run([find_tool("ninja").path, "-C", build_dir, "-t", "compdb"],
                                               capture_output=True, text=True, check=True).stdout)}


def test_test_programs_are_compiled_at_O1_and_ggml_at_its_own_flags(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(cmakebuild.CMAKE_ARGS_ENV)  # the suite's own -O0 (conftest.py): patchset's defaults here
    r = build(spec(make_tree(tmp_path / "tree"), tmp_path / "build"))
    assert r.ok
    flags = _optimization_flags(r.build_dir)
    assert flags["test-calc.cpp"][-1] == "-O1", flags  # the last one wins
    assert flags["calc.c"] == ["-O3"], flags


def test_the_users_cmake_args_reach_every_build_and_the_evidence_names_them(tmp_path: Path,
                                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(cmakebuild.CMAKE_ARGS_ENV, "'-DCMAKE_C_FLAGS_RELEASE=-O0 -DNDEBUG'")
    r = build(spec(make_tree(tmp_path / "tree"), tmp_path / "build"))
    assert r.ok
    assert _optimization_flags(r.build_dir)["calc.c"] == ["-O0"]
    assert evidence.host_info()["cmake_args"] == "'-DCMAKE_C_FLAGS_RELEASE=-O0 -DNDEBUG'"
    # a compiler chosen there is the compiler the evidence names, not $CXX or c++ on the PATH
    fake = tmp_path / "other-c++"
    fake.write_text(f'#!/bin/sh\n[ "$1" = --version ] && {{ echo "c++ (Chosen) 7.7"; exit 0; }}\n'
                    f'exec {shutil.which("c++")} "$@"\n')
    fake.chmod(0o755)
    monkeypatch.setenv(cmakebuild.CMAKE_ARGS_ENV, f"-DCMAKE_CXX_COMPILER=c++ -DCMAKE_CXX_COMPILER:FILEPATH={fake}")
    assert evidence.host_info()["compiler"] == "c++ (Chosen) 7.7"
    monkeypatch.delenv(cmakebuild.CMAKE_ARGS_ENV)
    assert "cmake_args" not in evidence.host_info()
    # options as they came from a shell; one that is not a -D cache setting, or bad quoting, is refused
    for bad, says in (("-DA=1 --fresh", "'--fresh' is not a -D option"), ("'-DA=1", "No closing quotation")):
        monkeypatch.setenv(cmakebuild.CMAKE_ARGS_ENV, bad)
        with pytest.raises(InputError, match=f"PATCHSET_CMAKE_ARGS: .*{re.escape(says)}"):
            build(spec(make_tree(tmp_path / "tree2"), tmp_path / "build2"))


def test_missing_test_program_fails_at_configure(tmp_path: Path) -> None:
    tree = make_tree(tmp_path / "tree")
    r = build(BuildSpec(tree, tmp_path / "build", "cpu", "minimal", ("test-nope",), use_ccache=False))
    assert not r.ok
    assert "test-nope" in r.log.read_text()


LLAMA_FILES = {
    "include/llama.h": "#pragma once\nint llama_calc(int);\n",
    "src/CMakeLists.txt": ("llama_add_compile_flags()\nadd_library(llama STATIC llama.cpp)\n"
                           "target_include_directories(llama PUBLIC ../include)\n"
                           "target_link_libraries(llama PUBLIC ggml)\n"),
    "vendor/CMakeLists.txt": "",
    "common/CMakeLists.txt": ("llama_add_compile_flags()\nadd_library(llama-common STATIC common.cpp)\n"
                              "target_include_directories(llama-common PUBLIC .)\n"
                              "target_link_libraries(llama-common PUBLIC llama)\n"),
    "common/common.h": "#pragma once\nint common_calc(int);\n",
    "common/common.cpp": '#include "common.h"\n#include "llama.h"\nint common_calc(int x) { return llama_calc(x); }\n',
    "tests/test-llama-calc.cpp": ('#include "common.h"\n#include "llama.h"\n#include <cstdio>\nint main() {'
                                  ' printf("  calc(x=1): %s\\n", common_calc(1) == 2 ? "OK" : "FAIL"); }\n'),
}
LLAMA_CPP = '#include "llama.h"\n#include "calc.h"\nint llama_calc(int x) { return calc(x); }\n'


def make_llama_tree(root: Path, llama_cpp: str = LLAMA_CPP) -> Path:
    make_tree(root)
    for rel, text in {**LLAMA_FILES, "src/llama.cpp": llama_cpp}.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return root


def test_libllama_is_built_only_for_a_test_that_includes_its_headers(tmp_path: Path) -> None:
    tree = make_llama_tree(tmp_path / "tree")
    ggml_only = build(spec(tree, tmp_path / "build"))
    assert ggml_only.ok and (ggml_only.bin_dir / "test-calc").is_file()
    assert not list((tmp_path / "build").rglob("libllama*"))
    both = build(dataclasses.replace(spec(tree, tmp_path / "build"), programs=("test-calc", "test-llama-calc")))
    assert both.ok, both.log.read_text()[-2000:]
    assert [p.name for p in (tmp_path / "build").rglob("libllama.a")] == ["libllama.a"]
    out = subprocess.run([str(both.bin_dir / "test-llama-calc")], capture_output=True, text=True, check=True)
    assert out.stdout == "  calc(x=1): OK\n"


@pytest.mark.skipif(find_ccache() is None, reason="no ccache here (the project's [ccache] extra)")
def test_llamas_unity_batches_compile_from_the_cache_in_another_folder(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    # as the tree's src/CMakeLists.txt does for its model sources: verify's folder takes them from the cache
    monkeypatch.setenv("CCACHE_DIR", str(tmp_path / "ccache"))
    unity = LLAMA_FILES["src/CMakeLists.txt"].replace("llama.cpp)", "llama.cpp model.cpp)") + (
        "set_target_properties(llama PROPERTIES UNITY_BUILD ON UNITY_BUILD_BATCH_SIZE 16)\n")
    for root in (tmp_path / "work", tmp_path / "verify" / "src"):
        make_llama_tree(root)
        (root / "src" / "CMakeLists.txt").write_text(unity)
        (root / "src" / "model.cpp").write_text('#include "llama.h"\nint llama_model_calc(int x) { return x; }\n')
    programs = ("test-calc", "test-llama-calc")
    first = build(dataclasses.replace(spec(tmp_path / "work", tmp_path / "build-a"), programs=programs,
                                      use_ccache=True))
    assert first.ok and first.ccache_misses, first.log.read_text()[-2000:]
    assert list((tmp_path / "build-a").rglob("unity_*_cxx.cxx"))
    other = build(dataclasses.replace(spec(tmp_path / "verify" / "src", tmp_path / "build-b"), programs=programs,
                                      use_ccache=True))
    assert other.ok and other.ccache_misses == 0 and other.ccache_hits == first.ccache_misses
    # found by their own name and content, not after running the preprocessor (a unity source that includes
    # each file by its absolute path differs in every folder: only its preprocessed output matched)
    stats = dict(line.split("\t") for line in subprocess.run([str(find_ccache()), "--print-stats"],
                 capture_output=True, text=True, check=True).stdout.splitlines() if "\t" in line)
    assert stats["preprocessed_cache_hit"] == "0" and stats["direct_cache_hit"] == str(other.ccache_hits), stats


def test_a_llama_function_that_falls_off_its_end_does_not_build(tmp_path: Path) -> None:
    # a reverted hunk that drops a `return` must not build (and run on whatever the register held)
    tree = make_llama_tree(tmp_path / "tree", LLAMA_CPP.replace("{ return calc(x); }", "{ calc(x); }"))
    r = build(dataclasses.replace(spec(tree, tmp_path / "build"), programs=("test-llama-calc",)))
    assert not r.ok
    assert r.first_error is not None and r.first_error.file.endswith("src/llama.cpp")
    assert "return-type" in r.first_error.message


# llama-common with a source no test program reaches (it does not even compile) and one reached only through
# another header, and a definition (common_twice) in a source whose name is no header's
COMMON_FILES = {
    "common/CMakeLists.txt": ("llama_add_compile_flags()\n"
                              "add_library(llama-common STATIC common.cpp log.cpp chat.cpp twice.cpp)\n"
                              "target_include_directories(llama-common PUBLIC .)\n"
                              "target_link_libraries(llama-common PUBLIC llama)\n"
                              "target_link_libraries(llama-common PRIVATE cpp-httplib)\n"),
    # as in the tree: a vendored HTTP library that only common's download code uses
    "vendor/CMakeLists.txt": "add_subdirectory(cpp-httplib)\n",
    "vendor/cpp-httplib/CMakeLists.txt": ("add_library(cpp-httplib STATIC httplib.cpp)\n"
                                          "target_include_directories(cpp-httplib PUBLIC .)\n"),
    "vendor/cpp-httplib/httplib.h": "#pragma once\nint http_get(int);\n",
    "vendor/cpp-httplib/httplib.cpp": '#include "httplib.h"\nint http_get(int x) { return x; }\n',
    "common/common.h": '#pragma once\n#include "log.h"\nint common_calc(int);\nint common_twice(int);\n',
    "common/log.h": "#pragma once\nint common_log(int);\n",
    "common/log.cpp": '#include "log.h"\nint common_log(int x) { return x; }\n',
    "common/common.cpp": ('#include "common.h"\n#include "llama.h"\n'
                          "int common_calc(int x) { return common_log(llama_calc(x)); }\n"),
    "common/chat.h": "#pragma once\nint common_chat(int);\n",
    "common/chat.cpp": '#include "chat.h"\n#error "not reached by the test program"\n',
    "common/twice.cpp": '#include "common.h"\nint common_twice(int x) { return 2 * x; }\n',
}


def _compiled(build_dir: Path) -> set[str]:
    out = subprocess.run([find_tool("ninja").path, "-C", str(build_dir), "-t", "compdb"],
                         capture_output=True, text=True, check=True).stdout
    return compiled_sources([Path(e["directory"]) / e["file"] for e in json.loads(out)])


def test_llama_common_compiles_only_the_sources_the_test_programs_reach(tmp_path: Path) -> None:
    tree = make_llama_tree(tmp_path / "tree")
    for rel, text in COMMON_FILES.items():
        (tree / rel).parent.mkdir(parents=True, exist_ok=True)
        (tree / rel).write_text(text)
    r = build(dataclasses.replace(spec(tree, tmp_path / "build"), programs=("test-llama-calc",)))
    assert r.ok, r.log.read_text()[-2000:]
    assert {"common.cpp", "log.cpp"} <= _compiled(r.build_dir)
    assert not {"chat.cpp", "twice.cpp"} & _compiled(r.build_dir)
    # and not the HTTP library only the sources left out use
    assert "httplib.cpp" not in compiled_sources(list(r.build_dir.rglob("*.o")))
    out = subprocess.run([str(r.bin_dir / "test-llama-calc")], capture_output=True, text=True, check=True)
    assert out.stdout == "  calc(x=1): OK\n"


def test_a_definition_in_a_source_no_header_names_builds_all_of_llama_common(tmp_path: Path) -> None:
    tree = make_llama_tree(tmp_path / "tree")
    for rel, text in COMMON_FILES.items():
        (tree / rel).parent.mkdir(parents=True, exist_ok=True)
        (tree / rel).write_text(text)
    (tree / "common/chat.cpp").write_text('#include "chat.h"\n#include "httplib.h"\n'
                                          'int common_chat(int x) { return http_get(x); }\n')
    (tree / "tests/test-llama-calc.cpp").write_text(
        '#include "common.h"\n#include <cstdio>\n'
        'int main() { printf("  twice(x=1): %s\\n", common_twice(1) == 2 ? "OK" : "FAIL"); }\n')
    r = build(dataclasses.replace(spec(tree, tmp_path / "build"), programs=("test-llama-calc",)))
    # the build with common.cpp and log.cpp cannot link common_twice: built again with all four
    assert r.ok, r.log.read_text()[-2000:]
    assert {"common.cpp", "log.cpp", "chat.cpp", "twice.cpp"} <= _compiled(r.build_dir)
    assert "httplib.cpp" in compiled_sources(list(r.build_dir.rglob("*.o")))
    out = subprocess.run([str(r.bin_dir / "test-llama-calc")], capture_output=True, text=True, check=True)
    assert out.stdout == "  twice(x=1): OK\n"


def test_first_error_reads_cmake_errors() -> None:
    log = "-- Configuring\nCMake Error at CMakeLists.txt:38 (message):\n  patchset: test program x missing\n"
    err = first_error(log)
    assert err is not None and err.file == "CMakeLists.txt" and err.line == 38


needs_objc = pytest.mark.skipif(not objc_toolchain_found(),
                                reason="needs clang, libgnustep-base-dev, libblocksruntime-dev")

# an Objective-C host source written like the tree's: Foundation, the Metal stand-in, dispatch, blocks,
# object subscripting (needs a non-fragile runtime), a TARGET_CPU branch
CONTEXT_M = """#import "ggml-metal-x.h"

#import <Foundation/Foundation.h>
#import <Metal/Metal.h>

int ggml_metal_x_run(int n) {
    id<MTLDevice> device = MTLCreateSystemDefaultDevice();
    id<MTLCommandQueue> queue = [device newCommandQueue];
    NSMutableArray * bufs = [NSMutableArray array];
    dispatch_queue_t d_queue = dispatch_queue_create("x", DISPATCH_QUEUE_CONCURRENT);
    __block int done = 0;
    dispatch_apply(n, d_queue, ^(size_t i) {
        id<MTLCommandBuffer> cb = [queue commandBufferWithUnretainedReferences];
        [cb addCompletedHandler:^(id<MTLCommandBuffer> b) {
            if (b.status == MTLCommandBufferStatusError) { done = -1; }
        }];
        [cb commit];
        (void) i;
    });
    id first = bufs.count ? bufs[0] : nil;
#if TARGET_CPU_X86_64
    MTLSize s = MTLSizeMake(1, 1, 1);
#else
    MTLSize s = MTLSizeMake(2, 1, 1);
#endif
    return done + (first != nil) + (int) s.width;
}
"""
HEADER = "#pragma once\nint ggml_metal_x_run(int n);\n"


def metal_tree(root: Path, context_m: str = CONTEXT_M) -> Path:
    metal = root / "ggml" / "src" / "ggml-metal"
    metal.mkdir(parents=True)
    (root / "ggml" / "include").mkdir(parents=True)
    (metal / "ggml-metal-x.h").write_text(HEADER)
    (metal / "ggml-metal-x.m").write_text(context_m)
    (metal / "ggml-metal-ops.cpp").write_text('#include "ggml-metal-x.h"\nint ggml_metal_op_x(int a) { return a; }\n')
    (root / "tests").mkdir()
    (root / "tests" / "test-x.cpp").write_text("#include <vector>\nint main() { std::vector<int> v; return 0; }\n")
    return root


@needs_objc
def test_metal_check_compiles_objective_c_and_the_test_programs(tmp_path: Path) -> None:
    tree = metal_tree(tmp_path / "tree")
    r = metalcheck.compile_check(tree, tmp_path / "check" / "check.log", ["test-x", "test-absent"])
    assert r.ok, r.first_error
    assert r.kind == "compile-check"
    # the .m file once per CPU, the C++ file, the test program that exists
    assert r.steps == 4
    log = r.log.read_text()
    assert "ggml-metal-x.m (arm64)" in log and "ggml-metal-x.m (x86_64)" in log and "tests/test-x.cpp" in log


@needs_objc
@pytest.mark.parametrize(("bad", "line"), [
    # a type error the Metal stand-in's declarations make visible: a command queue is no MTLSize
    ("    MTLSize s = MTLSizeMake(2, 1, 1);", "    MTLSize s = queue;"),
    # only the x86_64 pass compiles this branch
    ("    MTLSize s = MTLSizeMake(1, 1, 1);", "    MTLSize s = device;"),
])
def test_metal_check_fails_on_an_objective_c_error_with_its_file_and_line(tmp_path: Path, bad: str,
                                                                         line: str) -> None:
    text = CONTEXT_M.replace(bad, line)
    assert text != CONTEXT_M
    tree = metal_tree(tmp_path / "tree", text)
    r = metalcheck.compile_check(tree, tmp_path / "check" / "check.log")
    assert not r.ok
    assert r.first_error is not None
    assert r.first_error.file == "ggml/src/ggml-metal/ggml-metal-x.m"
    assert r.first_error.line == text.splitlines().index(line) + 1
    assert "MTLSize" in r.first_error.message


@needs_objc
def test_a_selector_the_stand_in_lacks_is_an_error_not_a_guess(tmp_path: Path) -> None:
    # clang only warns on an unknown selector (and guesses an `id` result): the check makes it an error
    line = "        [cb commitAndFrobnicate];"
    text = CONTEXT_M.replace("        [cb commit];", line)
    r = metalcheck.compile_check(metal_tree(tmp_path / "tree", text), tmp_path / "check" / "check.log")
    assert not r.ok and r.first_error is not None
    assert (r.first_error.file, r.first_error.line) == ("ggml/src/ggml-metal/ggml-metal-x.m",
                                                        text.splitlines().index(line) + 1)
    assert "commitAndFrobnicate" in r.first_error.message


@needs_objc
def test_metal_check_lists_the_api_the_stand_in_lacks_before_compiling(tmp_path: Path) -> None:
    text = CONTEXT_M.replace("    [cb commit];", "    [cb commit];\n    MTLTensorDescriptor * t = nil;\n"
                             "    dispatch_frobnicate(d_queue);\n    (void) t;")
    tree = metal_tree(tmp_path / "tree", text)
    r = metalcheck.compile_check(tree, tmp_path / "check" / "check.log")
    assert not r.ok and r.steps == 0
    assert r.first_error is not None and r.first_error.file == "ggml/src/ggml-metal/ggml-metal-x.m"
    assert r.first_error.line == text.splitlines().index("    MTLTensorDescriptor * t = nil;") + 1
    assert "MTLTensorDescriptor, dispatch_frobnicate" in r.notes[0]
    # names in comments and strings, and names the tree declares itself, are not API it uses
    quiet = CONTEXT_M.replace("    [cb commit];", '    [cb commit]; // MTLTensorDescriptor\n'
                              '    const char * s = "dispatch_frobnicate"; (void) s;\n'
                              "    static const NSInteger MTLGPUFamilyMetal9_X = 5009; (void) MTLGPUFamilyMetal9_X;")
    assert metalcheck.compile_check(metal_tree(tmp_path / "quiet", quiet), tmp_path / "q" / "check.log").ok


@needs_objc
@pytest.mark.parametrize(("line", "says"), [
    # a method of GNUstep's own NSString category: no such method on macOS
    ('    NSString * trimmed = [@" x " stringByTrimmingSpaces]; (void) trimmed;', "stringByTrimmingSpaces"),
    # a C function clang 14 only warns about (an implicit declaration): an error on Apple's clang
    ("    int z = ggml_metal_x_undeclared(n); (void) z;", "ggml_metal_x_undeclared"),
    # an int used as a pointer: an error on Apple's clang (-Wint-conversion)
    ("    id<MTLBuffer> b = 5; (void) b;", "int"),
])
def test_what_fails_on_apples_toolchain_fails_the_check(tmp_path: Path, line: str, says: str) -> None:
    text = CONTEXT_M.replace("    [cb commit];", "    [cb commit];\n" + line, 1)
    assert text != CONTEXT_M
    r = metalcheck.compile_check(metal_tree(tmp_path / "tree", text), tmp_path / "check" / "check.log")
    assert not r.ok and r.first_error is not None
    assert (r.first_error.file, r.first_error.line) == ("ggml/src/ggml-metal/ggml-metal-x.m",
                                                        text.splitlines().index(line) + 1)
    assert says in r.first_error.message


@needs_objc
def test_dispatch_objects_are_objective_c_objects_as_on_macos(tmp_path: Path) -> None:
    # on macOS (OS_OBJECT_USE_OBJC) a queue takes retain and release and goes into an NSArray
    ok = "    [d_queue retain]; [bufs addObject:d_queue]; [d_queue release]; id any = d_queue; (void) any;"
    text = CONTEXT_M.replace("    [cb commit];", "    [cb commit];", 1).replace(
        "    __block int done = 0;", ok + "\n    __block int done = 0;", 1)
    assert text != CONTEXT_M
    r = metalcheck.compile_check(metal_tree(tmp_path / "tree", text), tmp_path / "check" / "check.log")
    assert r.ok, r.first_error
    # and, as on macOS, a message an NSObject does not answer is an error
    line = "    [d_queue count];"
    text = CONTEXT_M.replace("    __block int done = 0;", line + "\n    __block int done = 0;", 1)
    r = metalcheck.compile_check(metal_tree(tmp_path / "bad", text), tmp_path / "bad-check" / "check.log")
    assert not r.ok and r.first_error is not None and r.first_error.line == text.splitlines().index(line) + 1
    assert "count" in r.first_error.message


@needs_objc
def test_macos_15_api_outside_an_availability_check_fails_at_the_trees_deployment_target(tmp_path: Path) -> None:
    use = ("id<MTLResidencySet> rs = [device newResidencySetWithDescriptor:[MTLResidencySetDescriptor new] "
           "error:nil]; [queue addResidencySet:rs];")
    line = "    " + use
    text = CONTEXT_M.replace("    __block int done = 0;", line + "\n    __block int done = 0;", 1)
    r = metalcheck.compile_check(metal_tree(tmp_path / "bad", text), tmp_path / "bad-check" / "check.log")
    assert not r.ok and r.first_error is not None and r.first_error.line == text.splitlines().index(line) + 1
    assert "macOS 15.0" in r.first_error.message
    # the tree's way: behind @available, it compiles
    guarded = CONTEXT_M.replace("    __block int done = 0;", "    if (@available(macOS 15.0, *)) { " + use
                                + " }\n    __block int done = 0;", 1)
    r = metalcheck.compile_check(metal_tree(tmp_path / "ok", guarded), tmp_path / "ok-check" / "check.log")
    assert r.ok, r.first_error


@needs_objc
def test_a_gnustep_only_name_is_not_declared(tmp_path: Path) -> None:
    # GNUstep's NSDebugLog (NSDebug.h, an extension): the tree cannot use it on macOS
    line = '    NSDebugLog(@"x");'
    text = CONTEXT_M.replace("    [cb commit];", "    [cb commit];\n" + line, 1)
    r = metalcheck.compile_check(metal_tree(tmp_path / "tree", text), tmp_path / "check" / "check.log")
    assert not r.ok and r.steps == 0 and r.first_error is not None
    assert r.first_error.line == text.splitlines().index(line) + 1 and "NSDebugLog" in r.first_error.message


def test_serialized_diagnostics_are_read_with_file_line_and_column(tmp_path: Path) -> None:
    clang = shutil.which("clang")
    if clang is None:
        pytest.skip("needs clang")
    src = tmp_path / "e.c"
    src.write_text("#include <stdio.h>\nint f(void) { return undeclared_x; }\n"
                   "void g(void) { int *p = 1.5; (void) p; }\nint h(void) { int unused; return 0; }\n")
    dia = tmp_path / "e.dia"
    r = subprocess.run([clang, "-fsyntax-only", "-Wall", "-fno-color-diagnostics", "--serialize-diagnostics",
                        str(dia), str(src)], capture_output=True, text=True, check=False)
    got = [(d.severity, d.file, d.line, d.column, d.message) for d in sdiag.read(dia)]
    # the same diagnostics as clang's own text on stderr (the independent source here)
    printed = [(m[4], m[1], int(m[2]), int(m[3]), m[5]) for m in
               re.finditer(r"^(.*?):(\d+):(\d+): (error|warning): (.*?)(?: \[-W[\w-]+\])?$", r.stderr, re.M)]
    assert got == printed
    assert [(g[0], g[2]) for g in got] == [("error", 2), ("error", 3), ("warning", 4)]
    errors = [d for d in sdiag.read(dia) if d.is_error]
    assert "undeclared_x" in errors[0].message
    (tmp_path / "bad.dia").write_bytes(b"not a diagnostics file")
    with pytest.raises(BuildError, match="not a clang serialized-diagnostics file"):
        sdiag.read(tmp_path / "bad.dia")

"""docs/guide.md runs: every ```sh block of the guide, in order and in one shell, on a synthetic
upstream laid out like llama.cpp with release tags (b1, b2, b3). A new user starts a project with
`patchset init` on the tag b1, imports their fork's five commits, adds a sixth patch (a fix with its
test and a mutation), proves it, edits it, drops a patch with a reason and takes it back, moves the
series to b2 by tag, maps b2..b3 with canary, resolves the conflict b3 brings, exports the patch and
marks it sent, then builds the release wheel from a small sdist shaped like llama-cpp-python's (no
network) and installs it. The blocks that cannot run here are marked `<!-- guide-test: skip (why) -->`
just above their fence, and they are few. Each patchset call whose output the guide does not read
runs with `--json` as well (tests/guide_shim.py), and each document is checked against the one schema."""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import subprocess
import sys
import zipfile
from pathlib import Path

from helpers import (
    REPO_ROOT,
    Upstream,
    commit,
    git,
    json_document,
    make_sdist,
    make_upstream,
    patchset_argv,
    pin_toml,
    write_patches,
)

from builder.cli import build_parser
from builder.series.load import load_series
from builder.upstream.pin import SdistSource, load_pin
from tests.test_cli_pipeline import CALC_C, CALC_H, program

GUIDE = REPO_ROOT / "docs" / "guide.md"
SHIM = Path(__file__).with_name("guide_shim.py")
SKIP = re.compile(r"<!-- guide-test: skip \((?P<why>[^)]+)\) -->\s*$")
MAX_SKIPPED = 2

CALC_MUL_H = CALC_H.replace("int calc_sub(int a, int b);\n",
                            "int calc_sub(int a, int b);\nint calc_mul(int a, int b);\n")
CALC_MUL_C = CALC_C + "int calc_mul(int a, int b) { return a + b; }\n"
LLAMA_H = '#pragma once\n\n/* the library of this small upstream is ggml\'s calc.h */\n#include "calc.h"\n'

# the bindings: an sdist shaped like llama-cpp-python's (its package `llama_cpp`, the version in its
# __init__.py, ctypes declarations in llama_cpp.py, llama.cpp under vendor/llama.cpp), built by
# scikit-build-core as the real one is; its CMakeLists builds the vendored ggml into the library the
# package loads, so the wheel carries the compiled patched tree
BINDINGS_PYPROJECT = """\
[build-system]
requires = ["scikit-build-core>=0.10"]
build-backend = "scikit_build_core.build"

[project]
name = "llama_cpp_python"
dynamic = ["version"]
readme = "README.md"
requires-python = ">=3.8"

[tool.scikit-build]
wheel.packages = ["llama_cpp"]
wheel.py-api = "py3"
cmake.version = ">=3.21"

[tool.scikit-build.metadata.version]
provider = "scikit_build_core.metadata.regex"
input = "llama_cpp/__init__.py"
"""
BINDINGS_CMAKE = """\
cmake_minimum_required(VERSION 3.21)
project(llama_cpp_python C)
set(CMAKE_POSITION_INDEPENDENT_CODE ON)
add_subdirectory(vendor/llama.cpp/ggml)
add_library(llama SHARED $<TARGET_OBJECTS:ggml>)
install(TARGETS llama LIBRARY DESTINATION llama_cpp/lib)
"""
BINDINGS_PY = """\
import ctypes
import os

_lib = ctypes.CDLL(os.path.join(os.path.dirname(os.path.abspath(__file__)), "lib", "libllama.so"))


def ctypes_function(name, argtypes, restype):
    def wrap(f):
        fn = getattr(_lib, name)
        fn.argtypes, fn.restype = argtypes, restype
        return fn
    return wrap


@ctypes_function("calc_mul", [ctypes.c_int, ctypes.c_int], ctypes.c_int)
def calc_mul(a, b, /): ...
"""
BINDINGS_TOP = {
    "pyproject.toml": BINDINGS_PYPROJECT,
    "CMakeLists.txt": BINDINGS_CMAKE,
    "README.md": "# llama-cpp-python\n\nPython bindings for llama.cpp\n",
    "llama_cpp/__init__.py": 'from .llama_cpp import *\n\n__version__ = "0.3.36"\n',
    "llama_cpp/llama_cpp.py": BINDINGS_PY,
}


def blocks(text: str) -> list[tuple[str, str]]:
    """Each ```sh block of `text` as (code, why skipped or '')."""
    found = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        if lines[i].strip() == "```sh":
            j = next(k for k in range(i + 1, len(lines)) if lines[k].strip() == "```")
            m = SKIP.match(lines[i - 1]) if i else None
            found.append(("\n".join(lines[i + 1:j]) + "\n", m["why"] if m else ""))
            i = j
        i += 1
    return found


def json_verbs() -> list[str]:
    """Each command of the CLI that takes `--json` ("wheel", "evidence check"), from its parser: the
    flag (`--json`) and the optional file (`--json [FILE]`) alike."""
    found = []

    def walk(parser: argparse.ArgumentParser, name: str) -> None:
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for sub, p in action.choices.items():
                    walk(p, f"{name} {sub}".strip())
            elif "--json" in action.option_strings:
                found.append(name)

    walk(build_parser(), "")
    return found


def fork_clone(base: Path, up: Upstream) -> Path:
    """A clone of `up` (a fork's), its branch `fixes` five commits (notes of the fork's own) on the pin."""
    scratch = base / "fork-clone"
    base.mkdir(exist_ok=True)
    git(base, "clone", "--quiet", str(up.bare), str(scratch))
    git(scratch, "checkout", "--quiet", "-b", "fixes", up.commit)
    for n in range(1, 6):
        commit(scratch, {f"docs/fork-{n}.md": f"fork note {n}\n"},
               f"docs : fork note {n}\n\nPatchset-Upstream: not-sent fork-only\n"
               f"Patchset-Origin: https://github.com/example/llama.cpp-fork/pull/{n}\n",
               author=("Team Member", "team@example.org", f"2024-0{n}-01T00:00:00+00:00"))
    return scratch


def team_series(base: Path, up: Upstream) -> Path:
    """A team's project repository: pinned to `up`, five patches (the fork's, as `fork_clone` makes them)."""
    root = base / "team-series"
    (root / "upstream").mkdir(parents=True)
    (root / "upstream" / "llama.cpp.toml").write_text(pin_toml(up.commit, up.tree, [{"kind": "git", "url": up.url}]))
    scratch = fork_clone(base / "team-scratch", up)
    commits = git(scratch, "rev-list", "--reverse", f"{up.commit}..fixes").split()
    (root / "patches").mkdir()
    write_patches(root / "patches", scratch, commits)
    (root / ".gitignore").write_text(".patchset/\n")
    git(base, "init", "--quiet", str(root))
    git(root, "add", "--all")
    git(root, "commit", "--quiet", "-m", "the team's series")
    return root


def tag(up: Upstream, name: str, rev: str) -> None:
    git(up.src, "tag", "-a", "-m", f"release {name}", name, rev)
    git(up.src, "push", "--quiet", str(up.bare), f"refs/tags/{name}")


def test_the_guide_runs(tmp_path: Path) -> None:
    all_blocks = blocks(GUIDE.read_text())
    skipped = [why for _, why in all_blocks if why]
    assert 0 < len(skipped) <= MAX_SKIPPED, skipped
    up = make_upstream(tmp_path)
    c0 = up.advance({"src/a.c": None, "src/b.c": None, "tests/test-x.c": None, "README": "mini llama\n",
                     "ggml/CMakeLists.txt": "add_library(ggml OBJECT src/calc.c)\n"
                                            "target_include_directories(ggml PUBLIC include)\n",
                     "ggml/include/calc.h": CALC_MUL_H, "ggml/src/calc.c": CALC_MUL_C, "include/llama.h": LLAMA_H,
                     "tests/test-opt.cpp": program("OPT", "calc_add(1, 1)", 2),
                     "tests/test-backend-ops.cpp": program("ACC", "calc_add(2, 2)", 4)}, "mini llama\n")
    up = Upstream(up.src, up.bare, c0, up.tree_of(c0))
    tag(up, "b1", c0)
    # the bindings' release vendors the tree of b1
    b1_files = {p.relative_to(up.src).as_posix(): p.read_text() for p in up.src.rglob("*")
                if p.is_file() and ".git" not in p.relative_to(up.src).parts}
    bindings = make_sdist(tmp_path / "sdists" / "llama_cpp_python-0.3.36.tar.gz", b1_files,
                          top="llama_cpp_python-0.3.36", subdir="vendor/llama.cpp", package_files=BINDINGS_TOP)
    series = team_series(tmp_path, up)
    fork = fork_clone(tmp_path, up)
    new = up.advance({"README": "mini llama, moved on\n"}, "README: moved on\n")
    tag(up, "b2", new)
    # three commits on: the middle one documents calc_mul where the guide's patch adds its comment
    up.advance({"docs/one.md": "one\n"}, "docs: one\n")
    breaks = up.advance({"ggml/src/calc.c": CALC_MUL_C.replace(
        "int calc_mul", "/* calc_mul: the product of two ints */\nint calc_mul")}, "calc: document calc_mul\n")
    later = up.advance({"docs/two.md": "two\n"}, "docs: two\n")
    tag(up, "b3", later)
    day = tmp_path / "day"
    day.mkdir()
    bindir = tmp_path / "bin"
    bindir.mkdir()
    # patchset, with --json added where the guide does not read the output (tests/guide_shim.py)
    (bindir / "patchset").write_text(f"#!/bin/sh\nexec '{sys.executable}' '{SHIM}' \"$@\"\n")
    (bindir / "patchset").chmod(0o755)
    # the guide's `python` is this interpreter; what it installs goes to a folder of its own (no network)
    (bindir / "python").write_text(f"#!/bin/sh\nexec '{sys.executable}' \"$@\"\n")
    (bindir / "python").chmod(0o755)
    site = tmp_path / "site"
    log, docs = tmp_path / "guide.log", tmp_path / "json"
    script = ["set -euo pipefail"]
    for n, (code, why) in enumerate(all_blocks, 1):
        script.append(f"echo '### guide block {n}'" + (" '(skipped)'" if why else ""))
        if not why:
            script.append(code)
    env = {**os.environ, "PATH": f"{bindir}{os.pathsep}{os.environ['PATH']}", "UPSTREAM": up.url, "REF": "b1",
           "SERIES": str(series), "FORK": str(fork), "BINDINGS": str(bindings), "NEW": "b2", "LATER": "b3",
           "PATCHSET_SOURCE": "git+https://example.org/owner/patchset@" + "0" * 40,
           "EDITOR": "false", "VISUAL": "false",
           "GUIDE_PATCHSET_ARGV": json.dumps(patchset_argv()), "GUIDE_JSON_VERBS": json.dumps(json_verbs()),
           "GUIDE_LOG": str(log), "GUIDE_JSON_DIR": str(docs),
           "PIP_TARGET": str(site), "PIP_NO_INDEX": "1", "PIP_DISABLE_PIP_VERSION_CHECK": "1",
           "PYTHONPATH": os.pathsep.join(filter(None, [str(site), os.environ.get("PYTHONPATH")]))}
    env.pop("PATCHSET_STATE", None)
    with log.open("w") as fh:  # stdout and stderr in one file, as a terminal shows them
        r = subprocess.run(["bash", "-c", "\n".join(script)], cwd=day, env=env, stdout=fh, stderr=subprocess.STDOUT,
                           check=False, timeout=600)
    out = log.read_text()
    assert r.returncode == 0, f"the guide stopped (exit {r.returncode}) at:\n{out[-4000:]}"
    # what the guide promises: a sixth patch, proven, on the new upstream, marked sent, committed
    # the project `patchset init` made, the fork's five commits imported
    fork = day / "myfork"
    patches = load_series(fork / "patches").patches
    assert [p.meta.upstream for p in patches[:5]] == ["not-sent"] * 5
    assert len(patches) == 6 and patches[5].subject == "calc : mul multiplies"
    assert patches[5].meta.upstream == "sent"
    # on b3 after the conflict: upstream's comment kept, the fix on it, the pin naming the tag
    assert "return a * b;" in patches[5].path.read_text()
    pin = load_pin(fork / "upstream" / "llama.cpp.toml")
    assert (pin.commit, pin.tag) == (later, "b3")
    assert "/* calc_mul: the product of two ints */" in git(fork / ".patchset" / "work" / "llama.cpp", "show",
                                                            "patched:ggml/src/calc.c")
    assert list((fork / "patches" / "resolutions").iterdir())
    # the drop with its reason was logged, and undone with its record
    assert "by-hand" in out and not (fork / "patches" / "dropped").exists()
    assert list((day / "outbox").iterdir())
    assert breaks[:12] in (fork / ".patchset" / "canary.md").read_text()
    assert re.search(r"calc : mul multiplies.*proven", out) or "proven" in out, out[-3000:]
    assert git(fork, "status", "--porcelain") == "?? dist/"  # all committed but the wheel
    assert (day / "team" / ".patchset" / "work" / "llama.cpp").is_dir()
    assert len(list((day / "myfork" / ".github" / "workflows").glob("patchset*.yml"))) == 3
    # the wheel: built from the bindings init recorded, on the committed patched tree of b3, its provenance
    # inside and beside it naming the pin and each patch; installed, it runs the fix
    [wheel] = (fork / "dist").glob("llama_cpp_python-0.3.36+*-py3-none-*.whl")
    beside = json.loads(wheel.with_name(wheel.name.removesuffix(".whl") + ".provenance.json").read_text())
    with zipfile.ZipFile(wheel) as zf:
        assert json.loads(zf.read("llama_cpp/patchset.json")) == beside
        assert "llama_cpp/lib/libllama.so" in zf.namelist()
    assert (beside["upstream"]["commit"], beside["upstream"]["tree"], beside["upstream"]["tag"]) == (
        later, pin.tree, "b3")
    assert [(p["file"], p["sha256"], p["subject"]) for p in beside["series"]["patches"]] == [
        (p.path.name, hashlib.sha256(p.path.read_bytes()).hexdigest(), p.subject) for p in patches]
    assert beside["series"]["count"] == 6 and beside["binding_drift"] == []
    assert beside["vendored"]["tree"] == git(fork / ".patchset" / "work" / "llama.cpp", "rev-parse", "patched^{tree}")
    [sdist] = [s for s in pin.sources if isinstance(s, SdistSource)]
    assert beside["bindings"]["sdist_sha256"] == sdist.sha256 == hashlib.sha256(bindings.read_bytes()).hexdigest()
    assert f"upstream: llama.cpp b3 commit {later}" in out and "calc : mul multiplies  sha256" in out
    product = subprocess.run([sys.executable, "-c", "import llama_cpp; print(llama_cpp.calc_mul(3, 4))"],
                             env=env, capture_output=True, text=True, check=False)
    assert product.stdout == "12\n", product.stderr
    # every call that takes --json printed one document, of the one schema, with the call's exit status
    calls = sorted(docs.glob("*.call"))
    formats = set()
    for call in calls:
        got = json.loads(call.read_text())
        doc = json_document(call.with_suffix(".json").read_text())
        assert doc["exit"] == got["exit"], (call.name, got, doc["problems"])
        formats.add(doc["format"].split("/")[0].removeprefix("patchset-"))
    assert {"init", "import", "apply", "verify", "rebase", "canary", "mark", "drop", "export", "wheel", "status",
            "check", "refresh", "new", "edit", "move", "undo"} <= formats, formats
    [init_doc] = [json.loads(c.with_suffix(".json").read_text()) for c in calls if c.name.endswith("-init.call")]
    assert init_doc["warnings"] == []  # the bindings vendor b1, the pin init wrote
    # the move by tag: its document names the tag's commit
    onto = [json.loads(c.with_suffix(".json").read_text()) for c in calls
            if json.loads(c.read_text())["args"] == ["rebase", "--onto", "b2"]]
    assert len(onto) == 1 and onto[0]["ok"] and onto[0]["new"] == new, onto
    # where a command's output is read (a pipe), it is patchset's own, without --json
    piped = subprocess.run([str(bindir / "patchset"), "status"], cwd=fork, env=env, capture_output=True, text=True,
                           check=False)
    assert piped.returncode == 0 and piped.stdout.startswith("pin: llama.cpp b3 "), piped.stdout + piped.stderr
    assert len(list(docs.glob("*.call"))) == len(calls)

"""`--hunks` exempts a hunk as "changes only comments or whitespace" only when the file before and after
it lex to the same tokens once comments are left out (issue 47 point 6): a line pattern took
`*status = ...;` for a comment line, and missed a `/*` and `*/` that comment out the code between them.

Each case is a real git diff of a small file in a real repository, cut into units by `--hunks`' own parser.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import git

from builder.prove import hunks as hk
from builder.prove.lexers import c_tokens

BEFORE_C = """\
#include "ggml.h"
#define TWICE(x) ((x) + (x))
/*
 * the status of a graph
 */
static void run(int * status, int x, int y, int z) {
    x = 1;
    y = 2;
    z = 3;
    *status = GGML_STATUS_SUCCESS;
    const char * s = "/* not a comment */";
}
"""


def units(tmp_path: Path, name: str, before: str, after: str) -> tuple[list[hk.Unit], list[str]]:
    repo = tmp_path / "repo"
    repo.mkdir(parents=True)
    git(repo, "init", "--quiet")
    path = repo / name
    path.parent.mkdir(parents=True, exist_ok=True)
    ids = []
    for text in (before, after):
        path.write_text(text)
        git(repo, "add", name)
        git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "--quiet", "-m", "x")
        ids.append(git(repo, "rev-parse", "HEAD"))
    diff = git(repo, "diff", "--unified=3", ids[0], ids[1]) + "\n"
    found = [hk.Unit(f, n, "", s, tuple(c), st) for f, st, hs in hk._parse_diff(diff) for n, (s, c) in enumerate(hs, 1)]
    return found, after.splitlines()


def exempt(tmp_path: Path, before: str, after: str, name: str = "src/run.c") -> list[bool]:
    found, lines = units(tmp_path, name, before, after)
    return [hk.exemption(u, (), lines) is not None for u in found]


@pytest.mark.parametrize(("label", "after"), [
    ("a pointer store is code, not a comment line",
     BEFORE_C.replace("    *status = GGML_STATUS_SUCCESS;", "    *status = GGML_STATUS_FAILED;")),
    ("two changes that comment out the line between them",
     BEFORE_C.replace("    x = 1;", "    x = 1; /*").replace("    z = 3;", "    */ z = 3;")),
    ("a comment closed early turns its rest into code",
     BEFORE_C.replace(" * the status of a graph", " * the status */ int g; /* of a graph")),
    ("a string that looks like a comment is a string",
     BEFORE_C.replace('"/* not a comment */"', '"/* not a remark */"')),
    ("a line comment that a backslash continues swallows the next line",
     BEFORE_C.replace("    x = 1;", "    x = 1; // one \\")),
    ("whitespace that splits a token",
     BEFORE_C.replace("    x = 1;", "    x = 1 0;")),
    ("a space that makes a function-like macro object-like",
     BEFORE_C.replace("#define TWICE(x)", "#define TWICE (x)")),
])
def test_a_hunk_that_changes_code_is_not_exempt(tmp_path: Path, label: str, after: str) -> None:
    assert exempt(tmp_path, BEFORE_C, after) == [False], label


@pytest.mark.parametrize(("label", "after"), [
    ("a block comment's words", BEFORE_C.replace(" * the status of a graph", " * the status of one graph")),
    ("a line comment added after code", BEFORE_C.replace("    y = 2;", "    y = 2; // two")),
    ("a comment between tokens", BEFORE_C.replace("    y = 2;", "    y /* why */ = 2;")),
    ("indentation", BEFORE_C.replace("    y = 2;", "        y   =   2;")),
])
def test_a_hunk_that_changes_only_comments_or_whitespace_is_exempt(tmp_path: Path, label: str, after: str) -> None:
    assert exempt(tmp_path, BEFORE_C, after) == [True], label


def test_other_languages(tmp_path: Path) -> None:
    # CMake: a `#` inside a quoted argument is no comment; Python: indentation is syntax
    cmake = 'set(A "x#y") # the flags\nadd_library(a a.c)\n'
    assert exempt(tmp_path / "1", cmake, cmake.replace("# the flags", "# all the flags"), "CMakeLists.txt") == [True]
    assert exempt(tmp_path / "2", cmake, cmake.replace('"x#y"', '"x#z"'), "CMakeLists.txt") == [False]
    py = "def f():\n    x = 1  # one\n    return x\n"
    assert exempt(tmp_path / "3", py, py.replace("# one", "# the one"), "t.py") == [True]
    assert exempt(tmp_path / "4", py, py.replace("    return x\n", "return_x = 1\n"), "t.py") == [False]
    # a language without a lexer here: never exempt
    assert exempt(tmp_path / "5", "a # b\n", "a # c\n", "run.sh") == [False]


def test_the_c_lexer() -> None:
    assert c_tokens('a+ +b; a++b; x = R"d(/* )" */)d"; c = \'"\'; n = 1\'000;') == [
        "a", "+", "+", "b", ";", "a", "++", "b", ";", "x", "=", 'R"d(/* )" */)d"', ";", "c", "=", "'\"'", ";",
        "n", "=", "1'000", ";"]
    # a directive ends at its line's end (a backslash-newline continues it); a comment inside it is a space
    assert c_tokens("#define A 1 /* two\n lines */ + 2\nint b;") == [
        "#", "define", "A", "1", "+", "2", "<end of directive>", "int", "b", ";"]
    assert c_tokens("#define A 1 \\\n + 2\nint b;") == c_tokens("#define A 1 + 2\nint b;")
    assert c_tokens("#define A 1\n+ 2\nint b;") != c_tokens("#define A 1 + 2\nint b;")
    # `#define F(x)` takes an argument, `#define F (x)` expands to `(x)`
    assert c_tokens("#define F(x) x\n") != c_tokens("#define F (x) x\n")
    assert c_tokens("#define F(x) x\n") == c_tokens("#define F(x)   x // F\n")
    assert c_tokens("#include <a//b.h>\n") == ["#", "include", "<a//b.h>", "<end of directive>"]
    # a backslash-newline joins lines everywhere but inside a raw string, which keeps it as written
    assert c_tokens('x = R"d(a\\\nb)d"; i\\\nnt y;') == ["x", "=", 'R"d(a\\\nb)d"', ";", "int", "y", ";"]
    assert c_tokens('x = R"d(a\\\nb)d";') != c_tokens('x = R"d(ab)d";')

"""The tests a tree registers with CTest, read from its `tests/CMakeLists.txt`.

Upstream's CI runs `ctest` (`.github/workflows/build-*.yml`), so a test command reaches it only
through an `add_test` entry: written directly or through llama.cpp's own wrappers `llama_test`,
`llama_test_cmd` and `llama_build_and_test` (defined in that file, over `cmake_parse_arguments`).
The file is read as CMake's own grammar reads it (command invocations, quoted, bracket and
unquoted arguments, comments); no variable is expanded, so an argument such as
`${MODEL_DIR}` stays as written and matches only itself. Conditions (`if()`) are not evaluated:
an entry inside one counts as registered.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import PurePosixPath


@dataclass(frozen=True)
class Command:
    name: str
    """Lower case, as CMake compares command names."""
    args: tuple[str, ...]
    line: int


@dataclass(frozen=True)
class TestEntry:
    """One test CTest runs: the program (a target of the tree) and its arguments."""

    __test__ = False  # not a pytest test class, whatever its name says

    name: str
    program: str
    args: tuple[str, ...]
    line: int
    label: str = ""


_BRACKET_OPEN = re.compile(r"\[(=*)\[")
_INVOCATION = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\s*\(")
_UNQUOTED = re.compile(r'(?:\\.|\$\{[^}]*\}|\$<[^>]*>|[^\s()#"\\])+')


def commands(text: str) -> list[Command]:
    """Every command invocation of a CMake file, in order, with the line it starts on."""
    out: list[Command] = []
    i, n, line = 0, len(text), 1
    while i < n:
        c = text[i]
        if c == "\n":
            line += 1
            i += 1
        elif c == "#":
            i, line = _skip_comment(text, i, line)
        elif c.isalpha() or c == "_":
            m = _INVOCATION.match(text, i)
            if not m:
                i += 1
                continue
            start_line = line
            name = text[i:m.end()].split("(", 1)[0].strip().lower()
            line += text[i:m.end()].count("\n")
            args, i, line = _arguments(text, m.end(), line)
            out.append(Command(name, tuple(args), start_line))
        else:
            i += 1
    return out


def _skip_comment(text: str, i: int, line: int) -> tuple[int, int]:
    m = _BRACKET_OPEN.match(text, i + 1)
    if m:
        close = "]" + m.group(1) + "]"
        end = text.find(close, m.end())
        end = len(text) if end < 0 else end + len(close)
        return end, line + text.count("\n", i, end)
    end = text.find("\n", i)
    return (len(text) if end < 0 else end), line


def _arguments(text: str, i: int, line: int) -> tuple[list[str], int, int]:
    """The arguments from just after `(` to the matching `)`."""
    args: list[str] = []
    depth = 0
    n = len(text)
    while i < n:
        c = text[i]
        if c == "\n":
            line += 1
            i += 1
        elif c.isspace():
            i += 1
        elif c == "#":
            i, line = _skip_comment(text, i, line)
        elif c == ")":
            if depth == 0:
                return args, i + 1, line
            depth -= 1
            i += 1
        elif c == "(":
            depth += 1
            i += 1
        elif c == '"':
            j, buf = i + 1, []
            while j < n and text[j] != '"':
                if text[j] == "\\" and j + 1 < n:
                    buf.append(text[j + 1] if text[j + 1] != "\n" else "")
                    j += 2
                    continue
                buf.append(text[j])
                j += 1
            value = "".join(buf)
            line += text.count("\n", i, j)
            args.append(value)
            i = j + 1
        elif (m := _BRACKET_OPEN.match(text, i)) is not None:
            close = "]" + m.group(1) + "]"
            end = text.find(close, m.end())
            end = n if end < 0 else end
            args.append(text[m.end():end].removeprefix("\n"))
            line += text.count("\n", i, end)
            i = end + len(close)
        else:
            m2 = _UNQUOTED.match(text, i)
            if not m2:
                i += 1
                continue
            args.append(m2.group(0))
            i = m2.end()
    return args, i, line


def _parse_arguments(words: tuple[str, ...], one: set[str], multi: set[str],
                     options: set[str] | None = None) -> tuple[list[str], dict[str, list[str]]]:
    """cmake_parse_arguments: (unparsed words, keyword -> its values)."""
    options = options or set()
    unparsed: list[str] = []
    values: dict[str, list[str]] = {}
    current: str | None = None
    for w in words:
        if w in one or w in multi or w in options:
            current = w
            values[w] = []
            if w in options:
                current = None
            continue
        if current is None:
            unparsed.append(w)
        else:
            values[current].append(w)
            if current in one:
                current = None
    return unparsed, values


_LLAMA_ONE = {"NAME", "LABEL", "WORKING_DIRECTORY"}
_LLAMA_MULTI = {"ARGS"}
_ADD_TEST_ONE = {"NAME", "WORKING_DIRECTORY"}
_ADD_TEST_MULTI = {"COMMAND", "CONFIGURATIONS"}
_TARGET_FILE = re.compile(r"^\$<TARGET_FILE:([^>]+)>$")


def _program(word: str) -> str:
    m = _TARGET_FILE.match(word)
    return m.group(1) if m else PurePosixPath(word).name


def entries(text: str) -> list[TestEntry]:
    """The tests a `tests/CMakeLists.txt` registers."""
    found: list[TestEntry] = []
    defining = 0  # inside function() or macro(): a definition, whose add_test is a template
    for cmd in commands(text):
        if cmd.name in ("function", "macro"):
            defining += 1
        elif cmd.name in ("endfunction", "endmacro"):
            defining = max(0, defining - 1)
        elif defining:
            continue
        elif cmd.name in ("llama_test", "llama_test_cmd", "llama_build_and_test") and cmd.args:
            _, kw = _parse_arguments(cmd.args[1:], _LLAMA_ONE, _LLAMA_MULTI)
            first = cmd.args[0]
            name = (kw.get("NAME") or [""])[0]
            # llama_build_and_test names the target after its source (or NAME); the others take a target
            program = (name or PurePosixPath(first).stem) if cmd.name == "llama_build_and_test" else first
            found.append(TestEntry(name or program, program, tuple(kw.get("ARGS", [])), cmd.line,
                                   (kw.get("LABEL") or ["main"])[0]))
        elif cmd.name == "add_test" and cmd.args:
            if cmd.args[0] == "NAME":
                _, kw = _parse_arguments(cmd.args, _ADD_TEST_ONE, _ADD_TEST_MULTI, {"COMMAND_EXPAND_LISTS"})
                command = kw.get("COMMAND", [])
                if command:
                    found.append(TestEntry((kw.get("NAME") or [""])[0], _program(command[0]), tuple(command[1:]),
                                           cmd.line))
            elif len(cmd.args) >= 2:  # the old signature: add_test(<name> <command> [<arg>...])
                found.append(TestEntry(cmd.args[0], _program(cmd.args[1]), tuple(cmd.args[2:]), cmd.line))
    return found

"""Token streams without comments, by a lexer of the file's language.

What `--hunks` compares to decide that a hunk changes only comments or whitespace (issue 47 point 6:
a line pattern took `    *status = GGML_STATUS_FAILED;` for a comment line, and missed a
`/* ... */` that comments out code).

`tokens(text, name)` returns the tokens of a whole file, or None when the language has no lexer here
(then no hunk of it is exempt). C, C++, Objective-C, Metal and CUDA: translation phases 2 and 3 as the
standard has them (a backslash-newline joins lines, a comment is a space), string and character
literals with their prefixes and escapes, raw strings `R"d( ... )d"`, pp-numbers with digit
separators, punctuators by maximal munch (`a+ +b` is not `a++b`), preprocessor directives closed
by their line's end (a directive that gains the next line is another program), and a macro's
definition function-like only with its `(` right after the name (`#define F (x)` is not
`#define F(x)`). Python: the standard library's tokenizer. CMake: quoted and bracket arguments, line
and bracket comments.
"""

from __future__ import annotations

import functools
import io
import re
import tokenize

C_LIKE = (".c", ".cc", ".cpp", ".cxx", ".h", ".hh", ".hpp", ".m", ".mm", ".metal", ".cu", ".cuh")

_PUNCT = sorted(["%:%:", ">>=", "<<=", "<=>", "...", "->*", "::", "->", "++", "--", "<<", ">>", "<=", ">=", "==",
                 "!=", "&&", "||", "+=", "-=", "*=", "/=", "%=", "&=", "|=", "^=", "##", ".*", "<:", ":>", "<%",
                 "%>", "%:"], key=len, reverse=True)
# one alternation, longest first as _PUNCT is: the first that matches is the longest
_PUNCT_RE = re.compile("|".join(re.escape(p) for p in _PUNCT))
_IDENT = re.compile(r"[A-Za-z_$\x80-\U0010ffff][\w$\x80-\U0010ffff]*")
_PPNUM = re.compile(r"\.?\d(?:[eEpP][+-]|'[\w]|[\w.])*")
_ENCODING = re.compile(r"(?:u8|u|U|L)?")
_RAW = re.compile(r'(?:u8|u|U|L)?R"([^()\\\s]{0,16})\(')
_DIRECTIVE_END = "<end of directive>"
_FUNCTION_LIKE = "<function-like macro>"
_BLANKS = re.compile(r"[^\S\n]+")


@functools.lru_cache(maxsize=8)
def tokens(text: str, name: str) -> tuple[str, ...] | None:
    """The tokens of file `name` (its path: the suffix picks the language) without comments; None: no lexer.

    Kept for the last few files: every hunk of a file compares against the same file after the patch."""
    base = name.rsplit("/", 1)[-1]
    suffix = "." + base.rsplit(".", 1)[-1] if "." in base else ""
    found: list[str] | None = None
    if suffix in C_LIKE:
        found = c_tokens(text)
    elif suffix == ".py":
        found = python_tokens(text)
    elif base == "CMakeLists.txt" or suffix == ".cmake":
        found = cmake_tokens(text)
    return None if found is None else tuple(found)


def c_tokens(text: str) -> list[str]:
    """C, C++ and Objective-C tokens, comments left out (see the module docstring)."""
    raw_text = text.replace("\r\n", "\n")
    # phase 2 (a backslash-newline joins lines), with where each joined character stood: a raw string
    # takes its characters as written, splices included (the standard reverts phase 2 inside one)
    pieces = raw_text.split("\\\n")
    text = "".join(pieces)
    starts, at = [], 0
    for piece in pieces:
        starts.append((at, len(piece)))
        at += len(piece) + 2
    out: list[str] = []
    i, n = 0, len(text)
    line_start, directive, include = True, False, False
    while i < n:
        ch = text[i]
        if ch == "\n":
            if directive:
                out.append(_DIRECTIVE_END)
            line_start, directive, include = True, False, False
            i += 1
            continue
        if ch.isspace():
            m = _BLANKS.match(text, i)
            i = m.end() if m else i + 1
            continue
        if text.startswith("//", i):
            j = text.find("\n", i)
            i = n if j < 0 else j
            continue
        if text.startswith("/*", i):
            j = text.find("*/", i + 2)
            if j < 0:
                out.append("<unterminated comment>")
                break
            i = j + 2
            continue
        if line_start and (ch == "#" or text.startswith("%:", i)) and not text.startswith("%:%:", i):
            directive, line_start = True, False
            i += 1 if ch == "#" else 2
            out.append("#")
            m = re.compile(r"[ \t]*(include|include_next|import)\b").match(text, i)
            if m:
                out.append(m.group(1))
                i, include = m.end(), True
            continue
        line_start = False
        if include and ch == "<":
            j = text.find(">", i)
            end = text.find("\n", i)
            if j >= 0 and (end < 0 or j < end):
                out.append(text[i:j + 1])
                i = j + 1
                continue
        # only u, U, L and R start a raw string or an encoding prefix
        m = _RAW.match(text, i) if ch in "uULR" else None
        if m:
            close = f"){m.group(1)}\""
            begin = _written(starts, m.end())
            j = raw_text.find(close, begin)
            j = len(raw_text) if j < 0 else j + len(close)
            out.append(text[i:m.end()] + raw_text[begin:j])
            i = _joined(starts, j)
            continue
        m = _ENCODING.match(text, i) if ch in "uUL" else None
        q = m.end() if m else i
        if q < n and text[q] in "\"'":
            j = _literal_end(text, q)
            out.append(text[i:j])
            i = j
            continue
        m = _PPNUM.match(text, i) if ch.isdigit() or ch == "." else None
        if m:
            out.append(m.group(0))
            i = m.end()
            continue
        m = _IDENT.match(text, i)
        if m:
            # `#define F(x)` is a function-like macro, `#define F (x)` an object-like one
            defines = directive and out[-2:] == ["#", "define"]
            out.append(m.group(0))
            i = m.end()
            if defines and text.startswith("(", i):
                out.append(_FUNCTION_LIKE)
            continue
        m = _PUNCT_RE.match(text, i)
        punct = m.group(0) if m else ch
        out.append(punct)
        i += len(punct)
    if directive:
        out.append(_DIRECTIVE_END)
    return out


def _written(starts: list[tuple[int, int]], k: int) -> int:
    """Where character `k` of the joined text stands in the text as written (`starts`: each joined
    piece's start there, and its length)."""
    for start, length in starts:
        if k <= length:
            return start + k
        k -= length
    return starts[-1][0] + starts[-1][1]


def _joined(starts: list[tuple[int, int]], w: int) -> int:
    """The position in the joined text of the character at `w` in the text as written (or of the one after
    a splice that `w` falls in)."""
    k = 0
    for start, length in starts:
        if w <= start + length:
            return k + max(0, w - start)
        k += length
    return k


def _literal_end(text: str, q: int) -> int:
    """The index after the string or character literal whose quote is at `q` (at the line's end when unterminated)."""
    quote, j = text[q], q + 1
    while j < len(text) and text[j] != "\n":
        if text[j] == "\\":
            j += 2
            continue
        if text[j] == quote:
            return j + 1
        j += 1
    return j


def python_tokens(text: str) -> list[str] | None:
    """Python tokens (indentation included: it is syntax), comments and blank-line breaks left out."""
    try:
        return [f"{tokenize.tok_name[t.type]}:{t.string}" for t in tokenize.generate_tokens(io.StringIO(text).readline)
                if t.type not in (tokenize.COMMENT, tokenize.NL)]
    except (tokenize.TokenError, SyntaxError):
        return None


# a bracket comment, a line comment, a bracket argument, a quoted argument, a parenthesis, an unquoted argument
# (CMake's grammar: `#` outside a quoted or bracket argument always starts a comment)
_CMAKE = re.compile(r'#\[(=*)\[.*?\]\1\]|#[^\n]*|\[(=*)\[.*?\]\2\]|"(?:\\.|[^"\\])*"|[()]|(?:[^\s()#"\\]|\\.)+',
                    re.S)


def cmake_tokens(text: str) -> list[str]:
    """CMake arguments and parentheses, line and bracket comments left out."""
    return [m.group(0) for m in _CMAKE.finditer(text) if not m.group(0).startswith("#")]

"""Binding drift: C declarations the series changes against the ctypes declarations of the bindings.

llama-cpp-python declares every function of `include/llama.h` by hand with ctypes
(`@ctypes_function("name", [argtypes], restype)` in `llama_cpp/llama_cpp.py`). When a patch changes
a declaration (patch 2 makes `llama_opt_epoch` return a status), the bindings still call it the
old way: a dropped return value at best, a wrong argument list at worst. Each changed function is
compared by the shape ctypes cares about: per value, pointer / integer of a width / float / bool /
struct by value. Names of parameters and of pointer types do not matter to ctypes and are ignored.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from pathlib import Path

_COMMENTS = re.compile(r"//[^\n]*|/\*.*?\*/", re.S)
_DECL = re.compile(r"\bLLAMA_API\s+(?P<ret>[^;{}()]*?)\b(?P<name>llama_\w+)\s*\(")
_TYPEDEF_PTR = re.compile(r"typedef\s+[^;{}]*\*\s*(\w+)\s*;")
_TYPEDEF_FN = re.compile(r"typedef\s+[^;{}]*\(\s*\*\s*(\w+)\s*\)\s*\(")
_TYPEDEF_PLAIN = re.compile(r"typedef\s+((?:unsigned\s+|signed\s+|const\s+)*\w+)\s+(\w+)\s*;")
_TYPEDEF_ENUM = re.compile(r"typedef\s+enum\s+\w*\s*\{[^}]*\}\s*(\w+)\s*;")

# C scalar names -> the kind ctypes needs; widths as on the LP64 and LLP64 targets we build for
_C_SCALARS = {
    "void": "void", "bool": "bool", "_Bool": "bool",
    "char": "i8", "int8_t": "i8", "uint8_t": "i8",
    "short": "i16", "int16_t": "i16", "uint16_t": "i16",
    "int": "i32", "unsigned": "i32", "int32_t": "i32", "uint32_t": "i32",
    "int64_t": "i64", "uint64_t": "i64", "size_t": "i64", "long": "i64",
    "float": "f32", "double": "f64",
}
_CTYPES = {
    "c_void_p": "ptr", "c_char_p": "ptr", "c_wchar_p": "ptr",
    "c_bool": "bool", "c_char": "i8", "c_byte": "i8", "c_ubyte": "i8", "c_int8": "i8", "c_uint8": "i8",
    "c_short": "i16", "c_ushort": "i16", "c_int16": "i16", "c_uint16": "i16",
    "c_int": "i32", "c_uint": "i32", "c_int32": "i32", "c_uint32": "i32",
    "c_int64": "i64", "c_uint64": "i64", "c_size_t": "i64", "c_ssize_t": "i64", "c_long": "i64",
    "c_ulong": "i64", "c_longlong": "i64", "c_ulonglong": "i64",
    "c_float": "f32", "c_double": "f64",
}
_QUALIFIERS = {"const", "volatile", "struct", "enum", "signed", "unsigned", "LLAMA_API", "GGML_API"}


@dataclass(frozen=True)
class CDecl:
    """One function of the header: its declaration text and the kinds ctypes cares about."""

    name: str
    text: str
    ret: str
    params: tuple[str, ...]
    ret_text: str = ""


@dataclass(frozen=True)
class PyDecl:
    """One `@ctypes_function` of the bindings: its line, the kinds, and the restype as written."""

    name: str
    line: int
    ret: str
    params: tuple[str, ...]
    ret_text: str = ""


@dataclass(frozen=True)
class Drift:
    """One function whose C declaration (as the series leaves it) and ctypes declaration disagree."""

    function: str
    problem: str
    header: str
    """The declaration in the patched header, one line."""
    bindings: str
    """Where and how the bindings declare it."""

    def as_dict(self) -> dict[str, str]:
        return {"function": self.function, "problem": self.problem, "header": self.header, "bindings": self.bindings}


def _typedefs(headers: list[str]) -> dict[str, str]:
    """Typedef name -> kind, from the headers llama.h includes (ggml's) and llama.h itself."""
    kinds: dict[str, str] = {}
    for raw in headers:
        text = _COMMENTS.sub(" ", raw)
        for m in _TYPEDEF_PTR.finditer(text):
            kinds[m.group(1)] = "ptr"
        for m in _TYPEDEF_FN.finditer(text):
            kinds[m.group(1)] = "ptr"
        for m in _TYPEDEF_ENUM.finditer(text):
            kinds[m.group(1)] = "i32"
        for m in _TYPEDEF_PLAIN.finditer(text):
            base = m.group(1).split()[-1]
            if base in _C_SCALARS:
                kinds[m.group(2)] = _C_SCALARS[base]
            elif base in kinds:
                kinds[m.group(2)] = kinds[base]
    return kinds


def c_kind(decl: str, typedefs: dict[str, str], *, named: bool) -> str:
    """The kind of one C type (a parameter with its name when `named`, or a return type)."""
    decl = " ".join(decl.split())
    if "(" in decl or "*" in decl or "[" in decl:
        return "ptr"
    words = re.findall(r"\w+", decl)
    if named and len(words) > 1 and words[-1] not in _C_SCALARS and words[-2] not in ("struct", "enum"):
        words = words[:-1]  # the parameter's name
    if "enum" in words:
        return "i32"
    if "struct" in words:
        return "struct " + words[words.index("struct") + 1]
    core = [w for w in words if w not in _QUALIFIERS]
    if not core:  # 'unsigned' alone
        return "i32"
    name = core[-1]
    if name in _C_SCALARS:
        return _C_SCALARS[name]
    if name in typedefs:
        return typedefs[name]
    return "struct " + name  # a typedef'd struct by value, e.g. llama_batch


def _split_params(text: str) -> list[str]:
    out: list[str] = []
    cur: list[str] = []
    depth = 0
    for ch in text:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        if ch == "," and depth == 0:
            out.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    if "".join(cur).strip():
        out.append("".join(cur))
    return [p.strip() for p in out]


def parse_header(text: str, typedef_sources: list[str] | None = None) -> dict[str, CDecl]:
    """Every `LLAMA_API` function of a header, by name."""
    typedefs = _typedefs([*(typedef_sources or []), text])
    clean = _COMMENTS.sub(" ", text)
    decls: dict[str, CDecl] = {}
    for m in _DECL.finditer(clean):
        depth, i = 1, m.end()
        while i < len(clean) and depth:
            depth += {"(": 1, ")": -1}.get(clean[i], 0)
            i += 1
        params_text = clean[m.end(): i - 1]
        ret = m.group("ret").replace("DEPRECATED(", "").strip()
        params = [p for p in _split_params(params_text) if p]
        if params == ["void"]:
            params = []
        text_one = " ".join(f"{ret} {m.group('name')}({', '.join(' '.join(p.split()) for p in params)})".split())
        decls[m.group("name")] = CDecl(
            m.group("name"), text_one, c_kind(ret, typedefs, named=False),
            tuple(c_kind(p, typedefs, named=True) for p in params), ret_text=" ".join(ret.split()),
        )
    return decls


def _dotted(node: ast.expr) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return f"{_dotted(node.value)}.{node.attr}"
    return ""


class _PyKinds:
    """Resolves the ctypes expressions of the bindings module to kinds, through its own aliases."""

    def __init__(self, tree: ast.Module) -> None:
        self.assign: dict[str, ast.expr] = {}
        self.structs: set[str] = set()
        for node in tree.body:
            if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
                self.assign[node.targets[0].id] = node.value
            elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value is not None:
                self.assign[node.target.id] = node.value
            elif isinstance(node, ast.ClassDef):
                bases = {_dotted(b).split(".")[-1] for b in node.bases}
                if bases & {"Structure", "Union"}:
                    self.structs.add(node.name)

    def kind(self, node: ast.expr, depth: int = 0) -> str:
        if depth > 20:
            return "?"
        if isinstance(node, ast.Constant) and node.value is None:
            return "void"
        if isinstance(node, ast.Call):
            fn = _dotted(node.func).split(".")[-1]
            if fn in ("POINTER", "CFUNCTYPE", "PYFUNCTYPE"):
                return "ptr"
            return "?"
        name = _dotted(node)
        last = name.split(".")[-1]
        if name.startswith("ctypes.") and last in _CTYPES:
            return _CTYPES[last]
        if name in self.structs:
            return f"struct {name}"
        if name in self.assign:
            return self.kind(self.assign[name], depth + 1)
        if last in _CTYPES:
            return _CTYPES[last]
        return "?"


def parse_bindings(text: str) -> dict[str, PyDecl]:
    """Every `@ctypes_function("name", [argtypes], restype)` of the bindings module, by name."""
    tree = ast.parse(text)
    kinds = _PyKinds(tree)
    out: dict[str, PyDecl] = {}
    for node in tree.body:
        if not isinstance(node, ast.FunctionDef):
            continue
        for dec in node.decorator_list:
            if not (isinstance(dec, ast.Call) and _dotted(dec.func).endswith("ctypes_function") and len(dec.args) >= 3):
                continue
            name_node, args_node, ret_node = dec.args[:3]
            if not (isinstance(name_node, ast.Constant) and isinstance(name_node.value, str)):
                continue
            params = tuple(kinds.kind(a) for a in args_node.elts) if isinstance(args_node, ast.List) else ("?",)
            out[name_node.value] = PyDecl(name_node.value, dec.lineno, kinds.kind(ret_node), params,
                                          ret_text=ast.unparse(ret_node))
    return out


def _same(c: str, py: str) -> bool:
    if "?" in (c, py):
        return True  # a type we cannot resolve is not reported as drift
    if c.startswith("struct ") and py.startswith("struct "):
        return True  # by-value structs: ctypes matches them by layout, not by name
    return c == py


def compare(c: CDecl, py: PyDecl) -> list[str]:
    """What differs, in words; empty when ctypes calls the C function correctly."""
    problems: list[str] = []
    if not _same(c.ret, py.ret):
        problems.append(f"returns {c.ret_text} ({c.ret}) in the header, the bindings declare restype "
                        f"{py.ret_text} ({py.ret})")
    if len(c.params) != len(py.params):
        problems.append(f"takes {len(c.params)} argument(s) in the header, the bindings declare {len(py.params)}")
    else:
        for i, (a, b) in enumerate(zip(c.params, py.params, strict=True), 1):
            if not _same(a, b):
                problems.append(f"argument {i} is {a} in the header, {b} in the bindings")
    return problems


def changed_functions(before: dict[str, CDecl], after: dict[str, CDecl]) -> list[str]:
    """Functions the series adds, removes, or whose declaration text it changes, sorted."""
    return sorted(n for n in before.keys() | after.keys()
                  if n not in before or n not in after or before[n].text != after[n].text)


def check(header_before: str, header_after: str, bindings_text: str, *, bindings_name: str = "llama_cpp.py",
          typedef_sources: list[str] | None = None, functions: list[str] | None = None) -> list[Drift]:
    """Drift of every function the series changes (or of `functions`, when given)."""
    before = parse_header(header_before, typedef_sources)
    after = parse_header(header_after, typedef_sources)
    py = parse_bindings(bindings_text)
    names = functions if functions is not None else changed_functions(before, after)
    found: list[Drift] = []
    for name in names:
        c, b = after.get(name), py.get(name)
        if c is None:
            if b is not None:
                found.append(Drift(name, "removed from the header, the bindings still bind it (import fails)",
                                   "", f"{bindings_name}:{b.line}"))
            continue
        if b is None:
            if name not in before:
                continue  # new API the bindings do not use yet: nothing breaks
            found.append(Drift(name, "not declared in the bindings", c.text, ""))
            continue
        problems = compare(c, b)
        if problems:
            where = f"{bindings_name}:{b.line}: ({', '.join(b.params)}) -> {b.ret}"
            found.append(Drift(name, "; ".join(problems), c.text, where))
    return found


def typedef_headers(tree: Path) -> list[str]:
    """The ggml headers llama.h includes, read from a source tree (they define its typedefs)."""
    inc = tree / "ggml" / "include"
    return [p.read_text(encoding="utf-8", errors="replace") for p in sorted(inc.glob("*.h"))] if inc.is_dir() else []

"""The environment variables patchset reads are listed in one place (builder/environment.py): every read of
`os.environ` / `os.getenv` in builder/ names a variable listed there (VARIABLES, or NOT_LISTED with why), every
variable listed is read somewhere, and `patchset --help` and docs/guide.md's table say what VARIABLES says."""

from __future__ import annotations

import ast
import fnmatch
import importlib
from pathlib import Path

import pytest

from builder import environment, proc
from builder.cli import _GIT_REDIRECTS, main
from builder.compile import platformseed
from builder.prove import proofkeys

ROOT = Path(__file__).resolve().parent.parent
BUILDER = ROOT / "builder"

DYNAMIC: dict[tuple[str, str], tuple[str, ...]] = {
    # a read whose name is not written at the read: (file, the expression read) -> the names it can be
    ("builder/proc.py", "name"): tuple(proc.TIMEOUTS),
    ("builder/proc.py", "items"): ("GIT_*",),  # clean_env: the GIT_* variables children do not get
    ("builder/cli.py", "var"): _GIT_REDIRECTS,
    ("builder/compile/platformseed.py", "v"): platformseed._ENV,
    ("builder/deliver/wheel.py", "env_var"): ("CFLAGS", "CXXFLAGS"),
    ("builder/prove/proofkeys.py", "items"): tuple(f"{p}*" for p in proofkeys.ENV_PREFIXES),
}
"""Reads of a variable whose name the code computes; a new one fails the test until it is added here."""


def _is_environ(node: ast.AST) -> bool:
    return (isinstance(node, ast.Attribute) and node.attr == "environ") or (
        isinstance(node, ast.Name) and node.id == "environ")


def _constant(rel: str, name: str) -> str | None:
    """The string the module `rel` binds to `name` (its own constant or one it imports), else None."""
    if rel.startswith("builder/prove/data/"):  # run in a child, not importable as a module of patchset
        return None
    value = getattr(importlib.import_module(rel.removesuffix(".py").replace("/", ".")), name, None)
    return value if isinstance(value, str) else None


def reads() -> dict[str, set[str]]:
    """Every variable builder/ reads -> where (file:line), the computed names resolved by DYNAMIC."""
    found: dict[str, set[str]] = {}
    unresolved = []
    for f in sorted(BUILDER.rglob("*.py")):
        rel = f.relative_to(ROOT).as_posix()
        tree = ast.parse(f.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            key: ast.AST | str | None = None
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
                owner, attr = node.func.value, node.func.attr
                if (_is_environ(owner) and attr in ("get", "pop")) or (
                        attr == "getenv" and isinstance(owner, ast.Name) and owner.id == "os"):
                    key = node.args[0]
                elif _is_environ(owner) and attr in ("items", "keys", "copy"):
                    key = "items"
            elif isinstance(node, ast.Subscript) and _is_environ(node.value):
                key = node.slice
            elif isinstance(node, ast.Compare) and any(_is_environ(c) for c in node.comparators):
                key = node.left
            if key is None:
                continue
            where = f"{rel}:{getattr(node, 'lineno', 0)}"
            if isinstance(key, ast.Constant) and isinstance(key.value, str):
                names: tuple[str, ...] = (key.value,)
            elif isinstance(key, ast.Name) and (value := _constant(rel, key.id)) is not None:
                names = (value,)
            else:
                expr = key if isinstance(key, str) else ast.unparse(key)
                if (rel, expr) not in DYNAMIC:
                    unresolved.append(f"{where}: reads os.environ by `{expr}`")
                    continue
                names = DYNAMIC[rel, expr]
            for name in names:
                found.setdefault(name, set()).add(where)
    assert not unresolved, "add these reads to DYNAMIC with the names they can be:\n" + "\n".join(unresolved)
    return found


def test_every_variable_read_is_listed_and_every_one_listed_is_read() -> None:
    found = reads()
    assert "PATCHSET_CMAKE_ARGS" in found and "PATCHSET_BUILD_TIMEOUT" in found  # read through a constant
    missing = {n: sorted(w) for n, w in found.items() if not environment.listed(n)}
    assert not missing, f"read but not in builder/environment.py (VARIABLES or NOT_LISTED): {missing}"
    listed = [n for entry, _ in environment.VARIABLES for n in environment.names(entry)] + list(environment.NOT_LISTED)
    unused = [n for n in listed if not any(fnmatch.fnmatchcase(r, n) for r in found)]
    assert not unused, f"listed in builder/environment.py but read nowhere in builder/: {unused}"
    assert len(listed) == len(set(listed)), "a variable listed twice"


def test_the_docs_table_and_the_help_are_the_list(capsys: pytest.CaptureFixture[str]) -> None:
    text = (ROOT / "docs" / "guide.md").read_text(encoding="utf-8")
    start, end = (text.index(m) for m in environment.MARKERS)
    assert text[start + len(environment.MARKERS[0]):end].strip() == environment.markdown().strip(), \
        "docs/guide.md's table of environment variables is stale: run `patchset help --environment`"
    assert main(["help", "--environment"]) == 0
    assert capsys.readouterr().out == environment.markdown()
    with pytest.raises(SystemExit):
        main(["--help"])
    out = capsys.readouterr().out
    for entry, _ in environment.VARIABLES:
        assert f"\n  {entry}\n" in out
    for name in environment.NOT_LISTED:
        assert name not in out

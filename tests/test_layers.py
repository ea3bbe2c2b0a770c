"""The package's layers, read from its import graph: each module imports only its own layer and those below.

upstream -> series -> compile -> prove -> deliver -> orchestrate -> commands: the pin and its cache;
the patch series and the work repository; building the patched tree and running its tests; the
proofs; what leaves the machine (PR packages, wheels); the verbs that chain several of those
(`bump`); the CLI. An orchestrator in a lower layer (as `bump` was, in series/) would let that
layer's modules reach the ones above them; the library below the CLI never prints (console).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import builder

PACKAGE = Path(builder.__file__).parent

LAYERS = ("base", "upstream", "series", "compile", "prove", "deliver", "orchestrate", "commands")

MODULE_LAYER = {
    # what every layer uses: errors, the subprocess runner, files, git, locks, progress, the project's paths
    "builder": "base", "builder.errors": "base", "builder.proc": "base", "builder.fsutil": "base",
    "builder.gitrepo": "base", "builder.locking": "base", "builder.progress": "base", "builder.project": "base",
    "builder.words": "base",
    # output is the CLI's alone
    "builder.console": "commands", "builder.cli": "commands",
    # the environment variables patchset reads, listed for the help and the docs
    "builder.environment": "commands",
}


def layer_of(module: str) -> str:
    if module in MODULE_LAYER:
        return MODULE_LAYER[module]
    parts = module.split(".")
    assert len(parts) >= 2 and parts[1] in LAYERS, f"{module}: in no layer; add it to MODULE_LAYER"
    return parts[1]


def module_name(path: Path, package: Path = PACKAGE) -> str:
    rel = path.relative_to(package.parent).with_suffix("")
    parts = rel.parts[:-1] if rel.name == "__init__" else rel.parts
    return ".".join(parts)


def imported(path: Path, package: Path = PACKAGE) -> set[str]:
    """The builder modules `path` imports, at its top or inside a function (`from builder.x import y`
    counts as builder.x.y when y is a module)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.split(".")[0] == "builder"}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module \
                and node.module.split(".")[0] == "builder":
            for a in node.names:
                sub = f"{node.module}.{a.name}"
                base = package.parent / Path(*sub.split("."))
                found.add(sub if base.with_suffix(".py").exists() or (base / "__init__.py").exists() else node.module)
        elif isinstance(node, ast.ImportFrom) and node.level:
            raise AssertionError(f"{path}: a relative import; the layers are read from absolute ones")
    return found


def upward_imports(package: Path) -> list[str]:
    """'importer -> imported (layer -> layer)' for every import that runs up the layers."""
    wrong = []
    for path in sorted(package.rglob("*.py")):
        me = module_name(path, package)
        mine = LAYERS.index(layer_of(me))
        for other in sorted(imported(path, package)):
            theirs = layer_of(other)
            if LAYERS.index(theirs) > mine:
                wrong.append(f"{me} -> {other} ({layer_of(me)} -> {theirs})")
    return wrong


def test_no_module_imports_a_layer_above_its_own() -> None:
    assert upward_imports(PACKAGE) == []


def test_every_module_has_a_layer_and_the_check_sees_imports() -> None:
    # the check reads real imports: bump (an orchestrator) reaches prove, the CLI reaches everything
    graph = {module_name(p): imported(p) for p in PACKAGE.rglob("*.py")}
    assert {layer_of(m) for m in graph} == set(LAYERS)
    assert "builder.prove.verify" in graph["builder.orchestrate.bump"]
    assert "builder.series.model" in graph["builder.prove.verify"]
    assert "builder.proc" in graph["builder.gitrepo"]  # `from builder import proc`


def test_an_import_up_the_layers_is_named(tmp_path: Path) -> None:
    fake = tmp_path / "builder"
    (fake / "series").mkdir(parents=True)
    (fake / "prove").mkdir()
    for f in ("__init__.py", "series/__init__.py", "prove/__init__.py", "prove/verify.py"):
        (fake / f).write_text("")
    (fake / "series" / "bump.py").write_text("def f():\n    from builder.prove import verify\n")
    assert upward_imports(fake) == ["builder.series.bump -> builder.prove.verify (series -> prove)"]


def test_the_architecture_page_names_modules_and_floors_that_exist() -> None:
    """docs/design.md's architecture (issue 45): every module it names is one of the package, and its
    drawing of the floors is LAYERS, top to bottom."""
    text = (PACKAGE.parent / "docs" / "design.md").read_text(encoding="utf-8")
    arch = text.split("## Architecture", 1)[1].split("\n## ", 1)[0]
    named = set(re.findall(r"\b((?:[a-z_]+/)*[a-z_]+\.py)\b", arch))
    missing = sorted(n for n in named if not (PACKAGE / n.removeprefix("builder/")).exists()
                     and not (PACKAGE.parent / n).exists())
    assert named and missing == []
    drawn = re.findall(r"^ ([a-z]+)/? ", arch.split("```text", 1)[1].split("```", 1)[0], flags=re.M)
    assert tuple(reversed(drawn)) == LAYERS


def summary_problems(package: Path = PACKAGE) -> list[str]:
    """'module: why' for each module whose docstring does not open with a line of its own, one sentence,
    saying what the module owns (issue 45): the line a reader of the package's tree sees first."""
    wrong = []
    for path in sorted(package.rglob("*.py")):
        doc = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"), str(path)), clean=False)
        lines = (doc or "").split("\n")
        first = lines[0].strip()
        if not first:
            why = "no docstring" if doc is None else "an empty first line"
        elif not first.endswith("."):
            why = "its first line is not one whole sentence"
        elif len(lines) > 1 and lines[1].strip():
            why = "its first sentence runs on to the next line"
        elif re.search(r"[.!?]\s+[A-Z`]", first[:-1]):
            why = "more than one sentence on its first line"
        else:
            continue
        wrong.append(f"{module_name(path, package)}: {why}")
    return wrong


def test_every_module_says_in_its_first_line_what_it_owns() -> None:
    assert summary_problems() == []


def test_a_module_without_a_one_line_summary_is_named(tmp_path: Path) -> None:
    fake = tmp_path / "builder"
    fake.mkdir()
    files = {
        "__init__.py": '"""The package: what it holds."""\n',
        "fine.py": '"""Owns this.\n\nThen the detail, on as many lines as it takes.\n"""\n',
        "none.py": "X = 1\n",
        "blank.py": '"""\nOwns this."""\n',
        "open.py": '"""Owns this and\nthat."""\n',
        "wrapped.py": '"""Owns this.\nAnd that."""\n',
        "two.py": '"""Is it ours? It owns this."""\n',
    }
    for name, text in files.items():
        (fake / name).write_text(text)
    assert summary_problems(fake) == [
        "builder.blank: an empty first line", "builder.none: no docstring",
        "builder.open: its first line is not one whole sentence",
        "builder.two: more than one sentence on its first line",
        "builder.wrapped: its first sentence runs on to the next line",
    ]

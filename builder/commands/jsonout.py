"""`--json` on every command that reports: one JSON document on stdout, nothing else there.

Every document starts with `format`: `patchset-<name>/<version>`, the version raised whenever a
field changes meaning or goes away (a field added keeps it). While `--json` prints, the console
(tables, progress, notes) writes to stderr, so stdout holds the document alone. Where a command
writes its JSON to a file (`test --json FILE`, `all --json FILE`), the file holds the same
document; `--json` without a file, or `--json -`, prints it. docs/json.md is generated from
FORMATS (`patchset help --json-formats`) and checked by tests/test_docs_facts.py."""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import enum
import json
import sys
from collections.abc import Iterator
from pathlib import Path, PurePath
from typing import Any

from builder.console import console
from builder.fsutil import atomic_write_text

FORMATS: dict[str, tuple[int, str, str]] = {
    # name: (version, the command that prints it, what the document holds)
    "status": (2, "status --json", "the pin, its source, the work repository and each patch's state"),
    "check": (2, "check [--strict] --json", "each patch of the series, each problem, and each deprecation as a line"),
    "apply": (1, "apply [--dry-run|--continue|--abort] --json",
              "each patch's outcome on the pin, tried in a scratch index (--dry-run) or applied: the commit it made, "
              "or where it stopped at a conflict; the head of 'patched' and the backups saved"),
    "rebase": (1, "rebase --onto X [--dry-run] [--fixed-upstream] --json",
               "the old and new commit and each patch's outcome (with --fixed-upstream: its verdict there)"),
    "build": (1, "build --json", "the build's backend, targets, steps, ccache counters, first error and log"),
    "test": (1, "test --json [FILE]", "each test program's counts, verdict and failing cases"),
    "sweep": (1, "test --against REF --json [FILE]", "the regression sweep: counts and each changed case"),
    "verify": (2, "verify --json", "each patch and backend's verdict, why, its evidence and hunks"),
    "plan": (1, "verify --plan --json (and all --plan --json)",
             "every tree the run would build and test: nodes with why, what each waits for and estimated cost; "
             "chains, the critical path, and the CI matrix by backend and patch"),
    "verify-recorded": (1, "verify --report --json", "the recorded verdict of each patch on each backend"),
    "all": (1, "all --json [FILE]", "each phase with its seconds, reuse and ccache counters, and the tests"),
    "bump": (2, "bump --onto X --json", "the stage reached, why it stopped, the rebase, sweep and verify reports"),
    "canary": (1, "canary --json", "where each patch stops applying over the commits after the pin"),
    "export": (1, "export [--check] --json", "each package written and every finding of upstream's rules; "
                                             "`left_out`: one line per fork-only patch not packaged"),
    "evidence": (2, "evidence check|update --json", "the committed evidence's problems, or the files written"),
    "refresh": (1, "refresh [--check] --json", "each patch file written or, with --check, each that differs"),
    "fetch": (1, "fetch --json", "the verified upstream: commit, tree, the source it came from, cached or not"),
    "gc": (1, "gc [--dry-run] --json", "what was (or would be) removed and what was left alone"),
    "wheel": (1, "wheel --json", "the wheel and its provenance file, the version, the upstream and series it was "
                                 "built from, the backend, seconds, compiles, ccache counters and each binding drift"),
    "pin": (1, "pin --json", "the pin written (without --out: its text, in the document instead of on stdout): "
                             "name, tag, commit, tree, date and sources"),
    "init": (1, "init --json", "the new project: its folder, the pin's commit and tag, each file written, "
                               "each warning"),
    "slice": (1, "slice --json", "the tarball written: its path, the commit, its files and size"),
    "new": (1, "new NAME --json", "the series after the new patch, the patch being edited, the recovery ref"),
    "edit": (1, "edit N --json", "the patch checked out for editing, the series, the recovery ref"),
    "mark": (1, "mark N STATE VALUE --json", "the trailer set on patch N, the series, the recovery ref"),
    "drop": (1, "drop N --json", "the patch dropped, the series without it, the recovery ref"),
    "move": (1, "move N --before M --json", "the patch moved, the series in its new order, the recovery ref"),
    "import": (1, "import A..B|FILE --json", "the patches imported, the trailers each still needs, the series, the "
                                            "recovery ref"),
    "undo": (1, "undo --json", "the recovery ref gone back to, the series as it was, the recovery refs still kept"),
    "error": (1, "COMMAND --json", "what any command prints when an error stopped it before its own document: "
                                   "the envelope (`ok` false, the exit status, the error as a problem) and `command`"),
}
"""Every JSON document a command prints: its name, version, command and contents."""


MARKERS = ("<!-- json formats: generated by `patchset help --json-formats`; do not edit -->",
           "<!-- end of json formats -->")
"""The lines around docs/json.md's table (tests/test_docs_facts.py keeps it equal to FORMATS)."""


SCHEMA = Path(__file__).parent / "data" / "patchset.schema.json"
"""The JSON Schema (draft 2020-12) of every document: the envelope and each format's fields
(`patchset help --json-schema`; tests/test_json_schema.py keeps it equal to FORMATS)."""


def schema_text() -> str:
    """The JSON Schema of every document, as the package holds it."""
    return SCHEMA.read_text(encoding="utf-8")


def to_stdout(args: argparse.Namespace) -> bool:
    """Whether this command line asks for the JSON document on stdout."""
    value = getattr(args, "json", None)
    return value is True or (isinstance(value, PurePath | str) and str(value) == "-")


def add_option(p: argparse.ArgumentParser, what: str, *, file: bool = False) -> None:
    """The `--json` option: print `what` as JSON (with `file`: or write it to FILE)."""
    if file:
        p.add_argument("--json", nargs="?", const="-", type=Path, metavar="FILE",
                       help=f"{what} as JSON on stdout (the rest of the output goes to stderr), or to FILE")
    else:
        p.add_argument("--json", action="store_true",
                       help=f"{what} as JSON on stdout (the rest of the output goes to stderr)")


@contextlib.contextmanager
def console_aside(args: argparse.Namespace) -> Iterator[None]:
    """While a command runs with --json on stdout, the console writes to stderr."""
    if not to_stdout(args):
        yield
        return
    console.stderr = True
    try:
        yield
    finally:
        console.stderr = False


def plain(obj: Any) -> Any:
    """`obj` as JSON values: dataclasses as objects of their fields, paths as text."""
    if hasattr(obj, "as_json") and callable(obj.as_json):
        return plain(obj.as_json())
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: plain(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, dict):
        return {str(k): plain(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple | set | frozenset):
        return [plain(v) for v in obj]
    if isinstance(obj, enum.Enum):
        return plain(obj.value)
    if obj is None or isinstance(obj, bool | int | float | str):
        return obj
    return str(obj)


ENVELOPE = ("format", "ok", "exit", "problems")
"""The fields every document starts with (docs/json.md; builder/commands/data/patchset.schema.json)."""

PROBLEM_FIELDS = ("file", "line", "patch", "rule", "message")
"""The fields of each entry of `problems`; null where the problem does not have one."""


def problem(message: str, *, file: object = None, line: int | None = None, patch: str | None = None,
            rule: str | None = None) -> dict:
    """One entry of a document's `problems`."""
    return {"file": None if file is None else str(file), "line": line or None, "patch": patch or None,
            "rule": rule or None, "message": message}


def problem_of(obj: Any) -> dict:
    """A problem entry from what the library reports: a lint finding (file, line, message), an evidence
    problem (file, patch, what), an error, or a line of text."""
    if isinstance(obj, dict) and "message" in obj:
        return problem(obj["message"], file=obj.get("file"), line=obj.get("line"), patch=obj.get("patch"),
                       rule=obj.get("rule"))
    if isinstance(obj, BaseException):
        return problem(str(obj), patch=getattr(obj, "patch", None))
    if isinstance(obj, str) or not dataclasses.is_dataclass(obj):
        return problem(str(obj))
    fields = {f.name: getattr(obj, f.name) for f in dataclasses.fields(obj)}
    message = str(fields.get("message", fields.get("what", obj)))
    file = fields.get("file") or None
    patch = fields.get("patch") or (PurePath(str(file)).name if file and str(file).endswith(".patch") else None)
    return problem(message, file=file, line=fields.get("line"), patch=patch, rule=fields.get("rule"))


def _indexed(patches: Any) -> Any:
    """`patches` with `index` first in each entry: the one it has, else its place in the list (from 1)."""
    if not isinstance(patches, list) or not all(isinstance(p, dict) for p in patches):
        return patches
    return [{"index": p.get("index", i), **{k: v for k, v in p.items() if k != "index"}}
            for i, p in enumerate(patches, 1)]


def document(name: str, body: dict, *, code: int = 0, problems: list | tuple = ()) -> dict:
    """The document `name` (a key of FORMATS): the envelope (`format`, `ok`, `exit`, `problems`), then
    `body`. `exit` is `code`, `ok` whether it is 0; the body's own `problems` (findings, lines of text) become problem
    entries, followed by `problems` (the error that stopped the command)."""
    version = FORMATS[name][0]
    found = [problem_of(p) for p in (*(body.get("problems") or ()), *problems)]
    rest = {k: plain(v) for k, v in body.items() if k not in ENVELOPE}
    if "patches" in rest:
        rest["patches"] = _indexed(rest["patches"])
    return {"format": f"patchset-{name}/{version}", "ok": code == 0, "exit": code, "problems": found, **rest}


def text(name: str, body: dict, *, code: int = 0, problems: list | tuple = ()) -> str:
    return json.dumps(document(name, body, code=code, problems=problems), indent=1) + "\n"


PENDING = "json_document"
"""Where `emit` leaves a command's document on its arguments, for `finish` to print with the exit status."""


def emit(args: argparse.Namespace, name: str, body: dict) -> None:
    """Hold the document `name` for the command's end: `finish` prints it on stdout (`--json`,
    `--json -`) or writes it to the file `--json FILE` names, with the exit status; nothing without
    --json. A later document of the same command replaces it."""
    if getattr(args, "json", None):
        setattr(args, PENDING, (name, body))


def finish(args: argparse.Namespace, code: int, error: BaseException | None = None) -> None:
    """The end of a command run with --json: its document (or, when an error stopped it before it
    had one, the document `error`) with the exit status `code`, and `error` as a problem."""
    value = getattr(args, "json", None)
    if not value:
        return
    name, body = getattr(args, PENDING, None) or ("error", {"command": getattr(args, "command", None)})
    out = text(name, body, code=code, problems=(error,) if error is not None else ())
    if to_stdout(args):
        sys.stdout.write(out)
        sys.stdout.flush()
    else:
        atomic_write_text(Path(value), out)


def markdown() -> str:
    """The table of JSON formats for docs/json.md."""
    rows = ["| format | printed by | what it holds |", "| --- | --- | --- |"]
    for name, (version, cmd, what) in FORMATS.items():
        rows.append(f"| `patchset-{name}/{version}` | `patchset {cmd.replace('|', '&#124;')}` | {what} |")
    return "\n".join(rows) + "\n"

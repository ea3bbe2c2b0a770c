"""Every hunk of a fix proven on its own: `verify --hunks`.

For each hunk of a patch's fix (the paths not named in `Patchset-Test-Paths`), the after tree with
that one hunk reverted is built and the patch's tests are run. A hunk is caught (the tests fail),
not built (the tree does not compile: the compiler guards it, never counted as caught), unguarded
(it builds and the tests pass) or exempt (a `Patchset-Hunk: ... exempt: REASON` trailer, or a hunk
that changes only comments or whitespace). A `Patchset-Hunk` line range that covers part of a hunk
splits it: the lines inside the range are one unit and the rest of the hunk another.

The reverted trees are commits of the work repository made with plumbing (a blob per reverted
file, a temporary index), built one after another in verify's worktree and build folder: each
differs from the after tree in one place, so ninja recompiles the translation units of one file.
"""

from __future__ import annotations

import json
import re
import shlex
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

from builder import proc
from builder.compile import cmakebuild as buildmod
from builder.errors import ProcessError, SeriesError
from builder.gitrepo import COMMITTER, ISOLATED, GitRepo
from builder.prove import lexers
from builder.series.model import HunkRule, Patch

CAUGHT = "caught"
NOT_BUILT = "not built"
UNGUARDED = "unguarded"
EXEMPT = "exempt"

_SOURCES = (".c", ".cc", ".cpp", ".cxx")
_HEADERS = (".h", ".hh", ".hpp")

_DATE = {"GIT_AUTHOR_DATE": "2000-01-01T00:00:00Z", "GIT_COMMITTER_DATE": "2000-01-01T00:00:00Z",
         "GIT_AUTHOR_NAME": "patchset verify", "GIT_AUTHOR_EMAIL": "verify@patchset.invalid"}


@dataclass(frozen=True)
class Change:
    """One added or removed line of a hunk."""

    kind: str  # "+" or "-"
    text: str
    """The line with its line ending ("" at the end of a file without one)."""
    pos: int
    """Line number in the file after the patch: the line itself ("+"), or the line it stood before ("-")."""


@dataclass(frozen=True)
class Unit:
    """What one reverted tree takes out of the fix: a hunk, or a part of one that a rule splits off."""

    file: str
    hunk: int
    """1-based number of the hunk in the file, as git shows them."""
    part: str
    """"" for a whole hunk, else "a", "b", ... for the parts a `Patchset-Hunk` range splits it into."""
    section: str
    """The function context git prints after the hunk header."""
    changes: tuple[Change, ...]
    file_status: str = "M"
    """A (file added by the patch), D (deleted) or M."""
    rule: HunkRule | None = None
    """The `Patchset-Hunk` rule whose range this part is."""

    @property
    def start(self) -> int:
        return min(c.pos for c in self.changes)

    @property
    def end(self) -> int:
        plus = [c.pos for c in self.changes if c.kind == "+"]
        return max(plus) if plus else self.start

    @property
    def label(self) -> str:
        lines = f"{self.start}" if self.start == self.end else f"{self.start}-{self.end}"
        return f"{self.file}:{lines}"

    @property
    def added(self) -> int:
        return sum(c.kind == "+" for c in self.changes)

    @property
    def removed(self) -> int:
        return sum(c.kind == "-" for c in self.changes)


@dataclass(frozen=True)
class HunkResult:
    """The verdict on one unit, as it goes into the evidence (`hunks` list of the JSON)."""

    file: str
    lines: str
    """START-END in the file after the patch."""
    hunk: int
    part: str
    section: str
    added: int
    removed: int
    outcome: str
    reason: str
    failing: tuple[str, ...] = ()
    """The failing cases (caught)."""
    errors: tuple[str, ...] = ()
    """Where the reverted tree stops compiling (not built): file:line: message."""
    commit: str = ""
    build_duration_s: float = 0.0
    tests: tuple[dict, ...] = ()


def result(unit: Unit, outcome: str, reason: str, *, failing: tuple[str, ...] = (), errors: tuple[str, ...] = (),
           commit: str = "", build_duration_s: float = 0.0, tests: tuple[dict, ...] = ()) -> HunkResult:
    return HunkResult(unit.file, unit.label.rsplit(":", 1)[1], unit.hunk, unit.part, unit.section.strip(), unit.added,
                      unit.removed, outcome, reason, failing, errors, commit, build_duration_s, tests)


@dataclass(frozen=True)
class HunkSummary:
    counts: dict[str, int] = field(default_factory=dict)

    @property
    def total(self) -> int:
        return sum(self.counts.values())

    def __str__(self) -> str:
        text = f"hunks {self.counts.get(CAUGHT, 0)}/{self.total} caught"
        for o in (NOT_BUILT, EXEMPT, UNGUARDED):
            if self.counts.get(o):
                text += f", {self.counts[o]} {o}"
        return text


def summarize(results: tuple[dict, ...] | list[dict]) -> HunkSummary:
    counts: dict[str, int] = {}
    for r in results:
        counts[r["outcome"]] = counts.get(r["outcome"], 0) + 1
    return HunkSummary(counts)


# -- the hunks of a fix -----------------------------------------------------------------------------
_HUNK = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@ ?(.*)$")


def in_paths(path: str, paths: tuple[str, ...]) -> bool:
    """Is the tree path `path` one of `paths` or inside one of those folders?"""
    return any(path == p.rstrip("/") or path.startswith(p.rstrip("/") + "/") for p in paths)


def fix_units(git: GitRepo, parent: str, after: str, patch: Patch,
              after_lines: Callable[[str], list[str]] | None = None) -> list[Unit]:
    """The hunks of the patch's fix (every path but its test paths), split where a rule says so.

    With `after_lines` (a file's lines after the patch) each unit's section is the definition it
    changes, not the one before its first context line that git prints."""
    # fixed options so a user's diff configuration (context, prefixes, algorithm) cannot change the hunks
    text = git.out("diff", "--no-color", "--no-ext-diff", "--no-renames", "--unified=3", "--diff-algorithm=myers",
                   "--src-prefix=a/", "--dst-prefix=b/", parent, after, env=ISOLATED)
    units: list[Unit] = []
    for file, status, hunks in _parse_diff(text):
        if in_paths(file, patch.meta.test_part):
            continue
        rules = [r for r in patch.meta.hunks if r.file == file and not r.function]
        for n, (section, changes) in enumerate(hunks, 1):
            units += _split(file, n, section, changes, status, rules)
    if after_lines is not None:
        units = [replace(u, section=_function_at(after_lines(u.file), u.start) or u.section) for u in units]
    return units


def _parse_diff(text: str) -> list[tuple[str, str, list[tuple[str, list[Change]]]]]:
    files: list[tuple[str, str, list[tuple[str, list[Change]]]]] = []
    lines = text.split("\n")
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("diff --git "):
            status, path = "M", ""
            i += 1
            while i < len(lines) and not lines[i].startswith(("@@", "diff --git ")):
                h = lines[i]
                if h.startswith("new file mode"):
                    status = "A"
                elif h.startswith("deleted file mode"):
                    status = "D"
                elif h.startswith(("+++ ", "--- ")) and h[4:] != "/dev/null" and (h[0] == "+" or not path):
                    path = h[6:]
                i += 1
            hunks: list[tuple[str, list[Change]]] = []
            files.append((path, status, hunks))
            continue
        m = _HUNK.match(line)
        if m:
            new = int(m.group(3))
            changes: list[Change] = []
            i += 1
            while i < len(lines) and lines[i][:1] in (" ", "+", "-", "\\"):
                body = lines[i]
                if body.startswith("\\"):
                    # "\ No newline at end of file": the line before has no line ending
                    if changes and changes[-1].text.endswith("\n") and lines[i - 1][:1] in "+-":
                        last = changes.pop()
                        changes.append(Change(last.kind, last.text[:-1], last.pos))
                elif body[0] == " ":
                    new += 1
                elif body[0] == "+":
                    changes.append(Change("+", body[1:] + "\n", new))
                    new += 1
                else:
                    changes.append(Change("-", body[1:] + "\n", new))
                i += 1
            files[-1][2].append((m.group(5), changes))
            continue
        i += 1
    return files


def _split(file: str, n: int, section: str, changes: list[Change], status: str,
           rules: list[HunkRule]) -> list[Unit]:
    """One unit per rule range that covers part of the hunk, and one for the rest."""
    groups: list[tuple[HunkRule | None, list[Change]]] = []
    for c in changes:
        rule = next((r for r in rules if r.start <= c.pos <= r.end), None)
        for g in groups:
            if g[0] is rule:
                g[1].append(c)
                break
        else:
            groups.append((rule, [c]))
    if len(groups) == 1:
        return [Unit(file, n, "", section, tuple(changes), status, groups[0][0])]
    return [Unit(file, n, chr(ord("a") + i), section, tuple(cs), status, rule) for i, (rule, cs) in enumerate(groups)]


# -- exemptions -------------------------------------------------------------------------------------
def comment_only(unit: Unit, after_lines: list[str]) -> bool:
    """True when the unit changes only comments or whitespace: the file after the patch and the same
    file with the unit undone lex to the same tokens once comments are left out (`lexers`: C, C++,
    Objective-C, Metal, CUDA, Python, CMake). A line pattern cannot tell: `*status = X;` is code, and
    a `/*` added on one line and `*/` on another comment out the code between them (issue 47)."""
    if unit.file_status != "M":
        return False
    after = "".join(f"{line}\n" for line in after_lines)
    mine = lexers.tokens(after, unit.file)
    return mine is not None and mine == lexers.tokens(revert_text(after, unit), unit.file)


def _function_at(lines: list[str], line: int) -> str:
    """The nearest line at or above `line` (1-based) that starts a definition, as git's default funcname."""
    for i in range(min(line, len(lines)) - 1, -1, -1):
        if re.match(r"^[A-Za-z_$]", lines[i]):
            return lines[i]
    return ""


def exemption(unit: Unit, rules: tuple[HunkRule, ...], after_lines: list[str]) -> str | None:
    """Why the unit needs no test, or None."""
    if unit.rule is not None and unit.rule.exempt:
        return f"{unit.rule.reason} (Patchset-Hunk {unit.rule.location})"
    for r in rules:
        if r.file != unit.file or not r.exempt:
            continue
        if r.function:
            pattern = re.compile(rf"(^|[^\w]){re.escape(r.function)}\s*\(")
            candidates = [_function_at(after_lines, unit.start), unit.section,
                          *[c.text for c in unit.changes if re.match(r"^[A-Za-z_$]", c.text)]]
            if any(pattern.search(c) for c in candidates if c):
                return f"{r.reason} (Patchset-Hunk {r.location})"
        elif r.start <= unit.start and unit.end <= r.end:
            return f"{r.reason} (Patchset-Hunk {r.location})"
    if comment_only(unit, after_lines):
        return "changes only comments or whitespace"
    return None


def unused_rules(units: list[Unit], rules: tuple[HunkRule, ...],
                 after_text: Callable[[str], list[str]]) -> list[HunkRule]:
    """Rules that name no change of the fix: stale after an edit, and worth an error."""
    unused = []
    for r in rules:
        mine = [u for u in units if u.file == r.file]
        if r.function:
            hit = any(exemption(u, (r,), after_text(u.file)) not in (None, "changes only comments or whitespace")
                      for u in mine)
        else:
            hit = any(r.start <= c.pos <= r.end for u in mine for c in u.changes)
        if not hit:
            unused.append(r)
    return unused


# -- the reverted trees -------------------------------------------------------------------------------
def revert_text(after: str, unit: Unit) -> str:
    """The file after the patch with the unit's changes undone."""
    lines = after.splitlines(keepends=True)
    plus = {c.pos for c in unit.changes if c.kind == "+"}
    minus: dict[int, list[str]] = {}
    for c in unit.changes:
        if c.kind == "-":
            minus.setdefault(c.pos, []).append(c.text)
    out: list[str] = []
    for n in range(1, len(lines) + 2):
        for text in minus.get(n, ()):
            if out and not out[-1].endswith("\n"):
                out[-1] += "\n"
            out.append(text)
        if n <= len(lines) and n not in plus:
            out.append(lines[n - 1])
    return "".join(out)


class RevertMaker:
    """Commits of the work repository: the after tree with one unit undone."""

    def __init__(self, git: GitRepo, after: str) -> None:
        self.git = git
        self.after = after
        self._cache: dict[str, str] = {}

    def text(self, path: str) -> str:
        if path not in self._cache:
            blob = self.git.blob(self.after, path)
            self._cache[path] = self.git.run("cat-file", "blob", blob, env=ISOLATED).stdout if blob else ""
        return self._cache[path]

    def lines(self, path: str) -> list[str]:
        return self.text(path).splitlines()

    def commit(self, unit: Unit, message: str) -> str:
        with tempfile.TemporaryDirectory(prefix="patchset-hunk-") as tmp:
            env = {**ISOLATED, **COMMITTER, **_DATE, "GIT_INDEX_FILE": str(Path(tmp) / "index")}
            self.git.run("read-tree", self.after, env=env)
            text = revert_text(self.text(unit.file), unit)
            if unit.file_status == "A" and not text:
                self.git.run("update-index", "--force-remove", unit.file, env=env)
            else:
                mode = self._mode(unit.file)
                blob = self.git.run("hash-object", "-w", "--stdin", input_text=text, env=ISOLATED).stdout.strip()
                self.git.run("update-index", "--add", "--cacheinfo", f"{mode},{blob},{unit.file}", env=env)
            tree = self.git.out("write-tree", env=env)
            return self.git.out("commit-tree", tree, "-p", self.after, "-m", message, env=env)

    def _mode(self, path: str) -> str:
        line = self.git.out("ls-tree", self.after, "--", path, env=ISOLATED)
        return line.split()[0] if line else "100644"


def order(units: list[Unit]) -> list[Unit]:
    """Neighbours share the most: one file's hunks in a row (each switch recompiles that file's
    translation units only), source files before headers (a header recompiles all its users)."""
    def key(u: Unit) -> tuple[int, str, int, str]:
        suffix = Path(u.file).suffix
        return (1 if suffix in _HEADERS else 0, u.file, u.hunk, u.part)
    return sorted(units, key=key)


def is_header(path: str) -> bool:
    return Path(path).suffix in _HEADERS


# -- what the minimal build does not compile -----------------------------------------------------------
def outside_build(path: str, test_paths: tuple[str, ...]) -> bool:
    """Files the test build does not compile: llama.cpp's own sources, headers and examples."""
    return not path.startswith("ggml/") and not in_paths(path, test_paths)


def syntax_units(unit: Unit, fix_files: list[str], test_paths: tuple[str, ...]) -> list[str]:
    """The translation units to compile on their own for a unit the test build does not compile:
    the file itself when it is a source, else (a header) the fix's sources outside the build."""
    if not outside_build(unit.file, test_paths):
        return []
    suffix = Path(unit.file).suffix
    if suffix in _SOURCES:
        return [unit.file]
    if suffix in _HEADERS:
        return [f for f in fix_files if Path(f).suffix in _SOURCES and outside_build(f, test_paths)]
    return []


# the include folders of llama.cpp's layout: its own headers, ggml's, common's and vendored ones
INCLUDE_DIRS = ("include", "ggml/include", "src", "common", "vendor")


class CompileDb:
    """How the build compiles each of its C and C++ sources (ninja's compilation database), so that
    a file of another checkout of the same tree can be compiled with exactly those flags."""

    _DROP_WITH_VALUE = ("-o", "-MT", "-MF", "-MQ")
    _DROP = ("-c", "-MD", "-MMD")

    def __init__(self, commands: dict[str, tuple[str, tuple[str, ...]]], src: Path) -> None:
        self._commands = commands
        self._src = src

    @classmethod
    def read(cls, ninja: str, build_dir: Path, src: Path) -> CompileDb | None:
        """The database of `build_dir`, whose sources are the tree at `src`; None when ninja cannot give it."""
        try:
            entries = json.loads(proc.run([ninja, "-C", str(build_dir), "-t", "compdb"], timeout=120).stdout)
        except (ProcessError, ValueError):
            return None
        prefix = str(src) + "/"
        commands: dict[str, tuple[str, tuple[str, ...]]] = {}
        for e in entries:
            file = str(e.get("file", ""))
            if not file.startswith(prefix) or Path(file).suffix not in _SOURCES:
                continue
            argv = tuple(shlex.split(str(e.get("command", ""))))
            if "-c" not in argv:
                continue
            commands[file[len(prefix):]] = (str(e.get("directory", build_dir)), argv)
        return cls(commands, src)

    def __contains__(self, path: str) -> bool:
        return path in self._commands

    @property
    def files(self) -> list[str]:
        return sorted(self._commands)

    def syntax_command(self, path: str, tree: Path) -> tuple[str, list[str]]:
        """(folder, argv): `path` of the checkout at `tree` compiled as the build compiles it, without
        code generation, writing nothing (no object, no dependency file) and with no compiler cache."""
        directory, argv = self._commands[path]
        out: list[str] = []
        skip = False
        for i, a in enumerate(argv):
            if skip:
                skip = False
                continue
            if i == 0 and Path(a).name == "ccache":
                continue
            if a in self._DROP_WITH_VALUE:
                skip = True
                continue
            if a in self._DROP:
                continue
            out.append(a.replace(str(self._src) + "/", str(tree) + "/"))
        return directory, [*out, "-fsyntax-only"]


def precheck_files(unit: Unit, fix_files: list[str], test_paths: tuple[str, ...], db: CompileDb) -> list[str]:
    """The sources the build compiles that a unit of the build can break, to compile on their own
    before the build does: the file itself (a source), else (a header) the fix's and the tests'
    sources. A failure is a build failure (same flags, less work); a success decides nothing."""
    suffix = Path(unit.file).suffix
    if suffix in _SOURCES:
        return [unit.file] if unit.file in db else []
    if suffix not in _HEADERS:
        return []
    fix = [f for f in fix_files if Path(f).suffix in _SOURCES and f in db]
    tests = [f for f in db.files if in_paths(f, test_paths) and f not in fix]
    return fix + tests


def syntax_check(src: Path, files: list[str], cxx: str = "c++", db: CompileDb | None = None) -> list[str]:
    """Compile the files of the tree at `src` without code generation, one after another; the
    compiler errors of the first that fails (one is enough to say where the tree stops building).
    A file the build compiles gets the build's own flags (`db`); any other (llama's own sources,
    which the test build does not compile) the include folders of llama.cpp's layout."""
    errors: list[str] = []
    for f in files:
        if errors:
            break
        if db is not None and f in db:
            cwd, args = db.syntax_command(f, src)
        else:
            std = "-std=c11" if f.endswith(".c") else "-std=c++17"
            cwd, args = str(src), [cxx if not f.endswith(".c") else "cc", std, "-fsyntax-only",
                                   *[f"-I{d}" for d in INCLUDE_DIRS], f]
        try:
            proc.run(args, cwd=Path(cwd), timeout=600)
        except ProcessError as e:
            found = [f"{m.group('file')}:{m.group('line')}: {m.group('msg').strip()}"
                     for m in map(buildmod._ERROR.match, e.stderr.splitlines()) if m]
            errors += found or [f"{f}: {(e.stderr.strip().splitlines() or ['does not compile'])[-1]}"]
    return errors


def relative(errors: tuple[str, ...] | list[str], src: Path) -> tuple[str, ...]:
    """Compiler errors with the paths relative to the tree they came from."""
    prefix = str(src.resolve()) + "/"
    return tuple(e.replace(prefix, "").replace(str(src) + "/", "") for e in errors)


def check_rules(patch: Patch, units: list[Unit], maker: RevertMaker) -> None:
    stale = unused_rules(units, patch.meta.hunks, maker.lines)
    if stale:
        raise SeriesError(f"{patch.name}: Patchset-Hunk: {stale[0]}: names no change of the fix "
                          "(the line numbers are those of the file after the patch)")

"""The rules of `check --strict` that read the pinned tree: whether each patch can go upstream as it is.

- depends: a patch that does not apply alone on the pin (`git apply --check` of its diff on the
  pin's tree, in a scratch index, as `apply --dry-run` does) declares the earlier patches it
  needs in `Patchset-Depends`, and applies with them.
- api-before: `Patchset-Before: build-fails` proves nothing about behaviour when the test fails
  to compile only because it calls a declaration the fix adds: the behavioural cases never ran
  without the fix. Read from the diff and the tree: a name declared in an added header line of
  the fix, used by an added line of the test part, that no file of the tree before the patch
  holds (`git grep -w`), while the fix also changes behaviour (a hunk of its sources that removes
  code, or adds code that defines none of the new names). A changed declaration (patch 2's return
  type) names what the tree knows, and a fix that only adds the API defines it and nothing else:
  there the change is the API, and it passes. The compile errors of the committed evidence that name
  the new API are quoted, never the only signal.
- ci-reach: every `Patchset-Test` command is one upstream's CI runs: a CTest entry of the tree
  after the patch (`tests/CMakeLists.txt`, read by `ctest.entries`) with the same program and
  arguments, or a `Patchset-Not-In-CI` trailer that says why not.
"""

from __future__ import annotations

import json
import re
import tempfile
from pathlib import Path, PurePosixPath

from builder.deliver import ctest, diffparse
from builder.deliver.export_commits import Chain, find_deps
from builder.errors import InputError
from builder.gitrepo import GitRepo
from builder.project import Project
from builder.prove.hunks import in_paths
from builder.series.load import depends_closure
from builder.series.model import Finding, Patch, Series, TestSpec
from builder.series.scratch import scratch_repo
from builder.upstream.fetch import fetch
from builder.upstream.pin import load_pin

CTEST_FILE = "tests/CMakeLists.txt"
HEADER_SUFFIXES = (".h", ".hh", ".hpp", ".hxx", ".cuh", ".inc")
# words that read like `name(` in a declaration line but declare nothing
_NOT_NAMES = {"if", "for", "while", "switch", "return", "sizeof", "alignof", "decltype", "defined", "static_assert",
              "GGML_API", "LLAMA_API", "GGML_BACKEND_API", "GGML_DEPRECATED", "extern", "void", "const"}
_CALL = re.compile(r"\b([A-Za-z_]\w*)\s*\(")
_DEFINE = re.compile(r"^\s*#\s*define\s+([A-Za-z_]\w*)")
# a type defined here (`struct NAME {`), not one a declaration merely uses (`enum ggml_status f(`)
_TYPE = re.compile(r"\b(?:struct|enum|union|class)\s+([A-Za-z_]\w*)\s*(?:\{|$)")
_TYPEDEF = re.compile(r"^\s*typedef\b.*?\b([A-Za-z_]\w*)\s*;")
_COMMENT = re.compile(r"^\s*(//|/\*|\*)")


def strict_findings(project: Project, series: Series) -> list[Finding]:
    """The findings of the three rules for every patch of `series` (fetching the pin if needed)."""
    pin = load_pin(project.pin_file)
    fetched = fetch(project.cache_dir, pin)
    found: list[Finding] = []
    evidence = _committed_build_errors(project.root / "docs" / "evidence")
    with scratch_repo([fetched.repo / "objects"]) as sc, tempfile.TemporaryDirectory(prefix="patchset-check-") as tmp:
        chain = Chain(sc.git, fetched.commit, Path(tmp))
        mails: tuple[Path, ...] = ()
        for patch in series.patches:
            before = chain.tree(mails)
            mails += (patch.path,)
            after = chain.tree(mails)
            text = patch.path.read_text(encoding="utf-8", errors="replace")
            found += _depends(chain, series, patch, text)
            if before is None or after is None:
                found.append(Finding(patch.path, 0, "does not apply after the patches before it on the pin: the "
                                                    "rules that read its tree are not checked (run `patchset apply "
                                                    "--dry-run`)"))
                continue
            found += _api_before(sc.git, patch, text, before, evidence.get(patch.name.removesuffix(".patch"), []))
            found += _ci_reach(sc.git, patch, text, after)
    return found


def _line(text: str, *needles: str) -> int:
    for n, line in enumerate(text.splitlines(), 1):
        if all(x in line for x in needles):
            return n
    return 0


# -- depends --------------------------------------------------------------------------------------
def _depends(chain: Chain, series: Series, patch: Patch, text: str) -> list[Finding]:
    if chain.tree((patch.path,)) is not None:
        return []
    declared = depends_closure(series, patch)
    if declared and chain.tree(tuple(p.path for p in [*declared, patch])) is not None:
        return []
    earlier = [p for p in series.patches if p.index < patch.index]
    try:
        needs = [p.name for p in find_deps(chain, patch, earlier, declared) if p not in declared]
    except InputError:
        needs = []
    line = _line(text, "Patchset-Depends:") or _line(text, "Subject:")
    what = (f"it applies after {', '.join(needs)}: declare {'them' if len(needs) > 1 else 'it'} with "
            f"`Patchset-Depends: {' '.join(needs)}`" if needs else "it does not apply even after every earlier patch")
    head = ("does not apply on the pin with the patches its Patchset-Depends names" if declared else
            "does not apply alone on the pin (git apply --check) and declares no Patchset-Depends")
    return [Finding(patch.path, line, f"{head}: {what} (--strict)")]


# -- api-before -----------------------------------------------------------------------------------
def declared_names(line: str) -> set[str]:
    """Names an added header line declares (functions, macros, types); none for a comment line."""
    if _COMMENT.match(line):
        return set()
    code = line.split("//", 1)[0]
    names = {m.group(1) for rx in (_DEFINE, _TYPE, _TYPEDEF) for m in rx.finditer(code)}
    names |= {m.group(1) for m in _CALL.finditer(code)}
    return {n for n in names if n not in _NOT_NAMES}


def header_declarations(mail: diffparse.Mail, test_paths: tuple[str, ...]) -> dict[str, str]:
    """name -> header: the names declared in added lines of the fix part's headers."""
    found: dict[str, str] = {}
    for f in mail.files:
        if in_paths(f.path, test_paths) or PurePosixPath(f.path).suffix not in HEADER_SUFFIXES or f.is_deleted:
            continue
        for ln in f.added():
            for name in declared_names(ln.text):
                found.setdefault(name, f.path)
    return found


def unknown_before(git: GitRepo, before: str, names: set[str]) -> set[str]:
    """The names that no file of the tree `before` holds as a word (git grep on the tree object)."""
    return {n for n in names
            if git.run("grep", "-q", "-w", "-F", "-e", n, before, check=False).returncode == 1}


def _api_before(git: GitRepo, patch: Patch, text: str, before: str, errors: list[str]) -> list[Finding]:
    if patch.meta.before != "build-fails":
        return []
    test_paths = patch.meta.test_part
    mail = diffparse.parse(text)
    added = header_declarations(mail, test_paths)
    used = {name for f in mail.files if in_paths(f.path, test_paths) for ln in f.added()
            for name in added if re.search(rf"\b{re.escape(name)}\b", ln.text)}
    # a name the tree before the patch knows (a changed signature: the change is the API) is not new
    used = unknown_before(git, before, used) if used else set()
    if not used:
        return []
    behaviour = behaviour_hunks(mail, test_paths, set(added))
    if not behaviour:
        return []  # the fix adds the API and nothing else: the change is the API
    where = ", ".join(f"{n} ({added[n]})" for n in sorted(used))
    quoted = [e for e in errors if any(re.search(rf"\b{re.escape(n)}\b", e) for n in used)]
    seen = f"; the committed evidence's compile error: {quoted[0]}" if quoted else ""
    return [Finding(patch.path, _line(text, "Patchset-Before:"),
                    f"Patchset-Before: build-fails, and the test calls what this patch adds: {where}, beside a "
                    f"change of behaviour ({behaviour[0]}); the before tree fails to compile, so no behavioural "
                    "case runs without the fix. Build the behavioural "
                    "cases without the new API (split or guarded) and see them fail before the fix"
                    f"{seen} (--strict)")]


def behaviour_hunks(mail: diffparse.Mail, test_paths: tuple[str, ...], new: set[str]) -> list[str]:
    """FILE:LINE of each hunk of the fix's sources that changes behaviour: one that removes code, or
    adds code without defining one of the `new` names (a definition starts in column 0, as git's hunk
    headers find it; a call is indented). Headers and comment or blank lines change none."""
    found: list[str] = []
    for f in mail.files:
        if in_paths(f.path, test_paths) or PurePosixPath(f.path).suffix in HEADER_SUFFIXES:
            continue
        for h in f.hunks:
            def code(lines: tuple[diffparse.Line, ...]) -> list[str]:
                return [ln.text for ln in lines if ln.text.strip() and not _COMMENT.match(ln.text)]
            removed, added = code(h.removed), code(h.added)
            defines = any(re.match(rf"^[A-Za-z_].*\b{re.escape(n)}\s*\(", t) for t in added for n in new)
            if removed or (added and not defines):
                found.append(f"{f.path}:{h.new_start}")
    return found


def _committed_build_errors(evidence_root: Path) -> dict[str, list[str]]:
    """patch stem -> the compile errors of its before steps, from the committed verify evidence."""
    out: dict[str, list[str]] = {}
    for path in sorted(evidence_root.glob("*/verify.json")):
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue  # `evidence check` reports a damaged file; this rule only quotes from it
        for stem, record in (data.get("patches") or {}).items() if isinstance(data, dict) else ():
            for step in (record.get("steps") or []) if isinstance(record, dict) else []:
                if isinstance(step, dict):
                    out.setdefault(stem, []).extend(str(e) for e in step.get("build_errors") or [])
    return out


# -- ci-reach -------------------------------------------------------------------------------------
def _ci_reach(git: GitRepo, patch: Patch, text: str, after: str) -> list[Finding]:
    r = git.run("show", f"{after}:{CTEST_FILE}", check=False)
    entries = ctest.entries(r.stdout) if r.returncode == 0 else []
    found: list[Finding] = []
    commands: list[TestSpec] = []
    for t in patch.meta.tests:
        if not any((c.program, c.args) == (t.program, t.args) for c in commands):
            commands.append(t)
    for t in commands:
        shown = " ".join([t.program, *t.args])
        registered = [e for e in entries if (e.program, e.args) == (t.program, t.args)]
        excused = any(n.matches(t) for n in patch.meta.not_in_ci)
        if registered and excused:
            found.append(Finding(patch.path, _line(text, "Patchset-Not-In-CI:", t.program),
                                 f"Patchset-Not-In-CI: `{shown}` is registered ({CTEST_FILE}:{registered[0].line}, "
                                 f"test {registered[0].name}): remove the trailer (--strict)"))
        elif not registered and not excused:
            others = [f"{' '.join(e.args) or '(no arguments)'} at line {e.line}" for e in entries
                      if e.program == t.program]
            have = f" (its entries there: {'; '.join(others)})" if others else ""
            found.append(Finding(patch.path, _line(text, "Patchset-Test:", shown),
                                 f"upstream CI reach: `{shown}` is run by no CTest entry of {CTEST_FILE} in the "
                                 f"tree after this patch{have}: register it (add_test, llama_test or "
                                 f"llama_build_and_test with these arguments) or say why not in "
                                 f"`Patchset-Not-In-CI: {shown}: REASON` (--strict)"))
    for n in patch.meta.not_in_ci:
        if not any(n.matches(t) for t in commands):
            found.append(Finding(patch.path, _line(text, "Patchset-Not-In-CI:", n.program),
                                 f"Patchset-Not-In-CI: `{' '.join([n.program, *n.args])}` is not a Patchset-Test "
                                 "command of this patch (--strict)"))
    return found

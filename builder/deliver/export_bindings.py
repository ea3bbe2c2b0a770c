"""`patchset --series bindings export`: each bindings patch as a pull request for llama-cpp-python.

The package has the same shape as the llama.cpp export (`OUT/<NNNN-slug>/v<N>/`: the mail with our
trailers removed and the submitter as author, NOTES.md, PR.md, submit.txt; branch `pr/<slug>` of the
bindings' work repository), on llama-cpp-python's own rules, read from the pinned tree:

- its pull-request template when the tree has one; the 0.3.36 sdist has none (`.github/` holds only
  issue templates), so PR.md is then a minimal template of ours, marked as such, with the sections
  its CONTRIBUTING.md asks a description for (what changed, why, how it was tested);
- its CONTRIBUTING.md rules that a diff can show: the title is `<tag>: <title>`, a user-visible fix
  adds a `CHANGELOG.md` entry under `## [Unreleased]`, tests are pytest files `tests/test_*.py`, and
  `vendor/llama.cpp` changes do not ride along.

A bindings patch that follows a C change of the main series needs that change in the llama.cpp that
llama-cpp-python vendors: which main patches it depends on is read from the declarations, not from
prose: the functions whose `@ctypes_function` declaration the bindings patch changes, against the
functions each main patch changes in `include/llama.h`. PR.md and submit.txt name each such patch,
where it stands upstream, and the llama.cpp release that must carry it first.
"""

from __future__ import annotations

import re
import shlex
import tempfile
from pathlib import Path

from builder.deliver import drift, templates
from builder.deliver import evidence_facts as facts
from builder.deliver.export import ExportResult, PackageResult, fork_only_left_out
from builder.deliver.export_commits import (
    NOTES,
    Chain,
    _commit,
    commit_message,
    find_deps,
    notes_for_author,
    resolve_author,
    slug_of,
    strip_trailers,
)
from builder.deliver.export_package import ExportOptions, _find_package_dir, _placeholders_if, _versions, _write_version
from builder.deliver.rules import ERROR, WARNING, RuleFinding
from builder.errors import InputError
from builder.gitrepo import GitRepo
from builder.locking import project_lock
from builder.project import Project
from builder.series.load import depends_closure, load_series
from builder.series.model import Patch, Series
from builder.series.refresh import format_mails
from builder.series.workrepo import WorkRepo
from builder.upstream.fetch import fetch
from builder.upstream.pin import Pin, load_pin

SERIES = "bindings"
"""The second series whose upstream rules this module knows: llama-cpp-python's."""
BINDINGS_FILE = "llama_cpp/llama_cpp.py"
HEADER = "include/llama.h"
BASE_BRANCH = "main"
"""The branch llama-cpp-python takes pull requests on."""
PR_TEMPLATES = (".github/pull_request_template.md", ".github/PULL_REQUEST_TEMPLATE.md", "pull_request_template.md",
                "PULL_REQUEST_TEMPLATE.md", "docs/pull_request_template.md", "docs/PULL_REQUEST_TEMPLATE.md")
"""Where GitHub looks for a repository's pull-request template."""
RULES = "CONTRIBUTING.md"
TITLE_TAGS = ("feat", "fix", "chore", "ci", "docs", "refactor")
"""The tags CONTRIBUTING.md names for `<tag>: <title>` (with an optional `(scope)`)."""
_TITLE = re.compile(rf"^(?:{'|'.join(TITLE_TAGS)})(?:\([^)\s]+\))?: \S")


def _show(git: GitRepo, rev: str, path: str) -> str | None:
    r = git.run("show", f"{rev}:{path}", check=False)
    return r.stdout if r.returncode == 0 else None


def _changed_declarations(git: GitRepo, parent: str, head: str) -> list[str]:
    """The functions whose ctypes declaration the commit adds, removes or changes."""
    before = drift.parse_bindings(_show(git, parent, BINDINGS_FILE) or "")
    after = drift.parse_bindings(_show(git, head, BINDINGS_FILE) or "")
    return sorted(n for n in before.keys() | after.keys()
                  if n not in before or n not in after
                  or (before[n].ret_text, before[n].params) != (after[n].ret_text, after[n].params))


class MainSeries:
    """The main series' patches, with the functions each changes in llama.h (on the main pin)."""

    def __init__(self, project: Project, tmp: Path) -> None:
        main = project.series("")
        self.pin = load_pin(main.pin_file)
        self.series = load_series(main.patches_dir)
        fetched = fetch(main.cache_dir, self.pin)
        work = WorkRepo(main.work_repo)
        work.attach_upstream(fetched, self.pin)
        self.git = work.git
        tmp.mkdir(parents=True, exist_ok=True)
        chain = Chain(work.git, fetched.commit, tmp)
        self.changes: dict[str, list[str]] = {}
        mails: tuple[Path, ...] = ()
        header = drift.parse_header(_show(work.git, fetched.commit, HEADER) or "")
        for p in self.series.patches:
            mails += (p.path,)
            tree = chain.tree(mails)
            if tree is None:
                raise InputError(f"{p.name}: does not apply on the pin after the patches before it; run "
                                 "`patchset apply` to see the conflict")
            now = drift.parse_header(_show(work.git, tree, HEADER) or "")
            self.changes[p.name] = drift.changed_functions(header, now)
            header = now

    def needed_by(self, functions: list[str]) -> list[tuple[Patch, list[str]]]:
        """The main patches that change any of `functions`, with the ones they change."""
        out = []
        for p in self.series.patches:
            common = sorted(set(functions) & set(self.changes[p.name]))
            if common:
                out.append((p, common))
        return out

    def release(self, patch: Patch) -> str:
        """Which llama.cpp release must carry `patch` first, as far as this machine can tell."""
        meta = patch.meta
        after = f"after the pinned {self.pin.tag or self.pin.commit[:12]}"
        if meta.upstream == "merged" and re.fullmatch(r"[0-9a-f]{7,40}", meta.upstream_ref.split(" ")[0]):
            commit = meta.upstream_ref.split(" ")[0]
            tags = self.git.run("tag", "--contains", commit, "--list", "b*", check=False).stdout.split()
            builds = sorted((int(t[1:]), t) for t in tags if re.fullmatch(r"b\d+", t))
            if builds:
                return f"llama.cpp {builds[0][1]}, the first release tag that contains its commit {commit[:12]}"
            return (f"the first llama.cpp release (a bNNNN tag {after}) that contains its commit {commit[:12]}; "
                    "cannot tell which: no such tag in the local repository")
        state = f"{meta.upstream} {meta.upstream_ref}".strip()
        return (f"the first llama.cpp release (a bNNNN tag {after}) that carries it; it is not merged upstream "
                f"yet ({state}), so no release does so far")


def _rules(patch: Patch, git: GitRepo, parent: str, head: str, has_rules: bool) -> list[RuleFinding]:
    """The CONTRIBUTING.md rules a diff can show."""
    source = f"{RULES}, as of the pinned tree" if has_rules else "llama-cpp-python's CONTRIBUTING.md (not in this tree)"
    subject = strip_trailers(patch.message).splitlines()[0]
    files = git.out("diff", "--name-only", "--no-renames", parent, head).split()
    found = []
    if not _TITLE.match(subject):
        found.append(RuleFinding(patch.name, patch.name, 0, "pr-title", ERROR,
                                 f"the title '{subject}' is not `<tag>: <title>` with a tag of "
                                 f"{', '.join(TITLE_TAGS)}", source))
    if "CHANGELOG.md" not in files:
        found.append(RuleFinding(patch.name, "CHANGELOG.md", 0, "changelog", WARNING,
                                 "a user-visible fix adds a CHANGELOG.md entry under `## [Unreleased]`", source))
    else:
        added = [ln[1:] for ln in git.out("diff", "--unified=0", parent, head, "--", "CHANGELOG.md").splitlines()
                 if ln.startswith("+") and not ln.startswith("+++")]
        if not any(re.search(r"\bby @\S+ in #\d+", ln) for ln in added):
            found.append(RuleFinding(patch.name, "CHANGELOG.md", 0, "changelog-credit", WARNING,
                                     "the entry ends `by @contributor in #1234`: add it once the pull request "
                                     "has its number", source))
    if not any(re.fullmatch(r"tests/(?:.*/)?test_[^/]*\.py", f) for f in files):
        found.append(RuleFinding(patch.name, "tests/", 0, "tests", WARNING,
                                 "a fix adds or updates a pytest file `tests/test_*.py`", source))
    vendored = [f for f in files if f.startswith("vendor/")]
    if vendored:
        found.append(RuleFinding(patch.name, vendored[0], 0, "vendor", WARNING,
                                 "vendor/llama.cpp changes go in a pull request of their own (a vendor update)",
                                 source))
    return found


def _pr_md(template: str | None, template_path: str, has_rules: bool, facts_text: str) -> str:
    if template is not None:
        return f"<!-- {template_path} of the pinned tree, filled by the export tool where it can -->\n\n" \
               f"{template.rstrip()}\n\n{facts_text}"
    where = RULES if has_rules else "README.md"
    return "\n".join([
        "<!-- patchset's own minimal pull-request template: llama-cpp-python has none (its tree has no",
        f"     {' or '.join(PR_TEMPLATES[:2])}).",
        f"     The sections are what its {where} asks a description to say: what changed, why it changed,",
        "     and how it was tested. -->",
        "",
        "## What changed",
        "",
        templates.placeholder("what the change does, in your own words"),
        "",
        "## Why",
        "",
        templates.placeholder("what was wrong, in your own words"),
        "",
        "## How it was tested",
        "",
        templates.placeholder("how you tested it; the facts below say what patchset ran"),
        "",
        facts_text,
    ])


def _facts(project: Project, pin: Pin, patch: Patch, needs: list[tuple[Patch, list[str]]], main: MainSeries,
           after_tree: str, deps: list[Patch], files: list[str]) -> str:
    out = ["<!-- facts below: filled in by the export tool from the patch and its test runs; check them -->", "",
           f"- Base: {pin.name} {pin.tag} (`{pin.commit}`)"]
    if needs:
        out.append(f"- Needs the llama.cpp change(s) below in `vendor/llama.cpp`: merge with or after the update to "
                   f"the llama.cpp release that carries them (against {main.pin.name} {main.pin.tag}, the one "
                   "vendored now, the declarations below are wrong):")
        for p, functions in needs:
            subject = strip_trailers(p.message).splitlines()[0]
            out.append(f"  - ggml-org/llama.cpp `{subject}` (the fork's patch {p.index}, changes "
                       f"{', '.join(f'`{f}`' for f in functions)}); it must be in {main.release(p)}")
    if deps:
        out.append("- Depends on the earlier bindings change(s): " + "; ".join(
            f"`{strip_trailers(d.message).splitlines()[0]}`" for d in deps))
    out += ["", "Files touched:", "", *[f"- `{f}`" for f in files], "", "Tests:", ""]
    for backend in facts.backends_of(patch):
        tests = facts.tests_on(patch, backend)
        out += ["  ```sh", *[f"  {c}" for c in facts.commands(tests, backend)], "  ```", ""]
        evb = facts.load(project.evidence_dir, patch, backend, after_tree)
        if evb.data is None:
            out += [f"- {facts.display(backend)}: {evb.why_none} (`patchset --series {SERIES} verify`)", ""]
            continue
        out.append(f"- {facts.display(backend)}, run {evb.data.get('created', '')}: {evb.data.get('outcome', '')}")
        after = evb.step("after") or {}
        out.append(f"  - library: {after.get('build_command', '?')}")
        out.append(f"  - before (without the fix): {facts.step_summary(evb.step('before'))}")
        failing = facts.failing_output(evb.step("before"))
        if failing:
            out += ["", "    ```", *[f"    {x}" for x in failing.splitlines()], "    ```", ""]
        out.append(f"  - after (with the fix): {facts.step_summary(evb.step('after'))}")
        out.append("")
    return "\n".join(out).rstrip("\n") + "\n"


NOTES_POLICY = (
    "Below is the message this patch carries in the fork's series. Write the commit message (the placeholder",
    "in {mail}) and PR.md's description yourself, from it.",
)
"""llama-cpp-python's part of NOTES.md (export_commits.notes_for_author)."""


def _submit(repo: str, patch: Patch, mail_name: str, pin: Pin, needs: list[tuple[Patch, list[str]]],
            main: MainSeries) -> str:
    subject = strip_trailers(patch.message).splitlines()[0]
    slug = slug_of(patch)
    lines = [
        "# The submit plan: run it yourself, step by step, from the folder that holds this file, once every",
        "# placeholder is filled in (`patchset --series bindings export --check` lists what is left).",
        "# Export never pushes and never runs gh.",
        "# GH_USER: your GitHub user; FORK: the git remote of your fork; CLONE: your clone of upstream.",
    ]
    for p, _ in needs:
        lines.append(f"# Wait for: llama.cpp '{strip_trailers(p.message).splitlines()[0]}' in {main.release(p)},")
        lines.append("#   and for vendor/llama.cpp at that release here (or send this with the vendor update).")
    lines += [
        "PKG=$(pwd)",
        "cd \"$CLONE\"",
        f"git checkout -b pr/{slug} {pin.commit}",
        f"git am \"$PKG/{mail_name}\"",
        f"git push \"$FORK\" pr/{slug}",
        "cd \"$PKG\"",
        f"gh pr create --draft --repo {repo} --base {BASE_BRANCH} --head \"$GH_USER:pr/{slug}\" "
        f"--title {shlex.quote(subject)} --body-file PR.md",
    ]
    return "\n".join(lines) + "\n"


def export_bindings(project: Project, opts: ExportOptions) -> ExportResult:
    """Export the bindings series' patches (default: all) as llama-cpp-python pull requests."""
    if project.series_name != SERIES:
        raise InputError(f"patchset export knows the rules of llama.cpp (the main series) and of llama-cpp-python "
                         f"(--series {SERIES}), not of series '{project.series_name}'")
    if opts.layout != "llama.cpp" or opts.cover or opts.drop_non_ggml:
        raise InputError("--layout, --cover and --drop-non-ggml are llama.cpp's; a bindings package takes none")
    author = resolve_author(opts.author, project.root)
    series: Series = load_series(project.patches_dir)
    chosen = [series.by_name(n) for n in opts.patches] if opts.patches else list(series.patches)
    left_out = fork_only_left_out(chosen)
    chosen = [p for p in chosen if not p.meta.fork_only]
    pin = load_pin(project.pin_file)
    out = (opts.out or project.state_dir / f"export-{SERIES}").resolve()
    m = re.search(r"github\.com[/:]([^/]+/[^/]+?)(?:\.git)?/?$", pin.repository)
    repo = m.group(1) if m else pin.repository
    with project_lock(project.lock_file), tempfile.TemporaryDirectory(prefix="patchset-export-") as tmp:
        main = MainSeries(project, Path(tmp) / "main")
        fetched = fetch(project.cache_dir, pin)
        work = WorkRepo(project.work_repo)
        work.attach_upstream(fetched, pin)
        git = work.git
        chain = Chain(git, fetched.commit, Path(tmp))
        template_path = next((p for p in PR_TEMPLATES if _show(git, fetched.commit, p) is not None), "")
        template = _show(git, fetched.commit, template_path) if template_path else None
        has_rules = _show(git, fetched.commit, RULES) is not None
        results = []
        for patch in chosen:
            earlier = [p for p in series.patches if p.index < patch.index]
            deps = find_deps(chain, patch, earlier, depends_closure(series, patch))
            parent = fetched.commit
            applied: list[Patch] = []
            for p in [*deps, patch]:
                applied.append(p)
                tree = chain.tree(tuple(q.path for q in applied))
                if tree is None:
                    raise InputError(f"{p.name}: no longer applies on the pin")
                parent = _commit(git, tree, parent, commit_message(p), author, p.date)
            head = parent
            before = git.out("rev-parse", f"{head}^")
            after_tree = chain.tree(tuple(p.path for p in series.patches if p.index <= patch.index)) or ""
            needs = main.needed_by(_changed_declarations(git, before, head))
            files_touched = git.out("diff", "--name-only", "--no-renames", before, head).split()
            slug = slug_of(patch)
            mail_name = f"{patch.index:04d}-{slug}.patch"
            mail = format_mails(git, "-1", head)[0][1].decode("utf-8", errors="replace")
            facts_text = _facts(project, pin, patch, needs, main, after_tree, deps, files_touched)
            files = {mail_name: mail, NOTES: notes_for_author(patch, mail_name, NOTES_POLICY),
                     "PR.md": _pr_md(template, template_path, has_rules, facts_text),
                     "submit.txt": _submit(repo, patch, mail_name, pin, needs, main)}
            findings = _rules(patch, git, before, head, has_rules)
            pkg = _find_package_dir(out, patch.index, slug)
            versions = _versions(pkg)
            latest = versions[-1] if versions else 0
            ldir = pkg / f"v{latest}"
            if latest and all((ldir / k).is_file() and (ldir / k).read_text(encoding="utf-8") == v
                              for k, v in files.items()):
                results.append(PackageResult(patch.name, slug, ldir, latest, "unchanged", tuple(d.name for d in deps),
                                             None, tuple(findings), placeholders=_placeholders_if(opts, ldir)))
                continue
            final = _write_version(pkg, latest + 1, files)
            git.update_ref(f"refs/heads/pr/{slug}", head, f"patchset export v{latest + 1}")
            results.append(PackageResult(patch.name, slug, final, latest + 1, "new", tuple(d.name for d in deps),
                                         f"pr/{slug}", tuple(findings), placeholders=_placeholders_if(opts, final),
                                         notes=tuple(f"needs llama.cpp {p.name}: {main.release(p)}"
                                                     for p, _ in needs)))
    return ExportResult(tuple(results), out, None, opts.check, left_out)


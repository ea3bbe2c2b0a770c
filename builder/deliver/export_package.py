"""`patchset export`'s files per patch: PR.md, ISSUE.md, submit.txt, the versions and what export wrote."""

from __future__ import annotations

import difflib
import hashlib
import json
import re
import shlex
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from builder.deliver import evidence_facts as facts
from builder.deliver import templates
from builder.deliver.export_commits import NOTES, Chain, _patch_id, slug_of, strip_trailers
from builder.deliver.rules import RuleFinding, TreeRules, rule_table
from builder.errors import PatchsetError
from builder.fsutil import atomic_write_text
from builder.gitrepo import ISOLATED, GitRepo
from builder.project import Project
from builder.series.load import depends_closure
from builder.series.model import DEFAULT_TEST_PATHS, Patch, Series
from builder.upstream.pin import Pin

MAIL_FILES = ("PR.md", "ISSUE.md", "submit.txt")
"""The files of a package, besides the patch's own mail, that may hold placeholders."""
GENERATED = ".generated.json"
_MAIL_NAME = re.compile(r"\d{4}-[^/]*\.patch")


@dataclass(frozen=True)
class ExportOptions:
    patches: tuple[str, ...] = ()
    """Names or numbers; empty: the whole series."""
    layout: str = "llama.cpp"
    out: Path | None = None
    """Default `<state dir>/export`."""
    author: str | None = None
    """`Name <mail>`; default: the user's git identity."""
    check: bool = False
    """Also fail on placeholders left unfilled in the packages."""
    cover: bool = False
    drop_non_ggml: bool = False


@dataclass(frozen=True)
class Placeholder:
    file: Path
    line: int
    text: str

    def __str__(self) -> str:
        return f"{self.file}:{self.line}: unfilled {self.text}"


# -- the package ---------------------------------------------------------------------------------
@dataclass
class _Ctx:
    project: Project
    pin: Pin
    series: Series
    git: GitRepo
    base: str
    chain: Chain
    rules: TreeRules
    author: tuple[str, str]
    opts: ExportOptions
    out: Path
    repo_slug: str
    rules_fingerprint: str
    forms: list[templates.IssueForm] | None = None
    after_trees: dict[int, str] = field(default_factory=dict)


def _find_package_dir(out: Path, number: int, slug: str) -> Path:
    """The patch's folder: an existing one for the same slug (its number may have moved), else new."""
    if out.is_dir():
        for d in sorted(out.iterdir()):
            if d.is_dir() and re.fullmatch(rf"\d{{4}}-{re.escape(slug)}", d.name):
                return d
    return out / f"{number:04d}-{slug}"


def _versions(pkg: Path) -> list[int]:
    if not pkg.is_dir():
        return []
    return sorted(int(d.name[1:]) for d in pkg.iterdir() if d.is_dir() and re.fullmatch(r"v\d+", d.name))


def _read_deps(vdir: Path) -> list[str]:
    d = vdir / "deps"
    return sorted(p.name for p in d.glob("*.patch")) if d.is_dir() else []


def find_placeholders(vdir: Path) -> list[Placeholder]:
    """The unfilled placeholders of a version folder: in PR.md, ISSUE.md, submit.txt and the mail."""
    pat = templates.placeholder_pattern()
    found: list[Placeholder] = []
    mails = sorted(p.name for p in vdir.glob("[0-9][0-9][0-9][0-9]-*.patch")) if vdir.is_dir() else []
    for name in [*MAIL_FILES, *mails]:
        f = vdir / name
        if not f.exists():
            continue
        for n, line in enumerate(f.read_text(encoding="utf-8", errors="replace").splitlines(), 1):
            found += [Placeholder(f, n, m.group(0)) for m in pat.finditer(line)]
    return found


def _numstat(git: GitRepo, parent: str, head: str) -> list[tuple[str, str, str]]:
    text = git.out("diff", "--numstat", "--no-renames", parent, head, env=ISOLATED)
    return [tuple(line.split("\t", 2)) for line in text.splitlines() if line]  # type: ignore[misc]


def _pr_facts(ctx: _Ctx, patch: Patch, deps: list[Patch], mail_name: str, parent: str, head: str,
              findings: list[RuleFinding]) -> str:
    out = ["<!-- facts below: filled in by the export tool from the patch and its test runs; "
           "check them -->", "",
           f"- Issue: #{templates.placeholder('the number of the issue opened from ISSUE.md')}",
           f"- Base: {ctx.pin.name} {ctx.pin.tag} (`{ctx.pin.commit}`)"]
    if deps:
        declared = {d.name for d in depends_closure(ctx.series, patch)}
        out.append("- Depends on: this branch also carries the earlier commit(s) it needs:")
        for d in deps:
            why = "declared by the series" if d.name in declared else "it does not apply without it"
            out.append(f"  - `{strip_trailers(d.message).splitlines()[0]}` "
                       f"(#{templates.placeholder('the PR number of ' + slug_of(d))}; {why})")
    else:
        out.append("- Depends on: nothing; applies alone on the base")
    test_deps = [d for d in ctx.series.patches if d.name in patch.meta.test_depends and d not in deps]
    if test_deps:
        out.append("- Test depends on: the test of this change needs the earlier change(s) below, which this "
                   "branch does not carry (the change itself applies and builds without them):")
        for d in test_deps:
            out.append(f"  - `{strip_trailers(d.message).splitlines()[0]}` "
                       f"(#{templates.placeholder('the PR number of ' + slug_of(d))})")
    out += ["", "Files touched:", ""]
    for added, removed, path in _numstat(ctx.git, parent, head):
        out.append(f"- `{path}` (+{added} -{removed})")
    api = [f for f in findings if f.rule == "public-api"]
    out += ["", "Public API changes:", ""]
    out += [f"- `{f.file}`: {f.message.removeprefix('public header changed: ')}" for f in api] or ["- none"]
    waiting = [f for f in findings if f.needs_maintainer and not f.blocking]
    if waiting:
        out += ["", "Needs the maintainers' approval (upstream's rules ask for it):", ""]
        for f in waiting:
            state = f"approved: {f.approved}" if f.approved else "needs approval"
            out.append(f"- {state}: {_rule_summary(f)} (`{f.file}`; {f.source})")
    out += ["", "Tests (before = the base with only the test part of this patch: "
            f"`git apply {_includes(patch)} {mail_name}`):", ""]
    for backend in facts.backends_of(patch):
        tests = facts.tests_on(patch, backend)
        evb = facts.load(ctx.project.evidence_dir, patch, backend, ctx.after_trees[patch.index])
        out.append(f"- {facts.display(backend)}:")
        out += ["", "  ```sh", *[f"  {c}" for c in facts.commands(tests, backend)], "  ```", ""]
        if evb.data is None:
            out += [f"  {evb.why_none}", ""]
            continue
        host = evb.data.get("host", {})
        out.append(f"  Run {evb.data.get('created', '')} on {host.get('platform', '?')} "
                   f"({host.get('compiler', '?')}): {evb.data.get('outcome', '')}.")
        before = evb.step("before")
        out.append(f"  - before (without the fix): {facts.step_summary(before)}")
        failing = facts.failing_output(before)
        if failing:
            out += ["", "    ```", *[f"    {x}" for x in failing.splitlines()], "    ```", ""]
        out.append(f"  - after (with the fix): {facts.step_summary(evb.step('after'))}")
        out += facts.case_lines(evb.data, patch)
        mutation = evb.step("mutation")
        if mutation:
            caught = "caught, the test fails" if mutation.get("verdict") == "fails" else "NOT caught"
            out.append(f"  - mutation (a known-bad variant of the fix): {caught} "
                       f"({facts.step_summary(mutation)})")
        out += facts.hunks_table(evb.data)
        out.append("")
    if "metal" in facts.backends_of(patch):
        apple = facts.load(ctx.project.evidence_dir, patch, "metal", ctx.after_trees[patch.index]).data is not None
        out.append("- Apple hardware (the before and after a Metal pull request shows): " +
                   ("the Metal run above." if apple else
                    "none; the fork's macOS workflow (`.github/workflows/metal.yml`, `patchset verify --backend "
                    "metal`) makes it on a fork that has a macOS runner."))
    return "\n".join(out).rstrip("\n") + "\n"


def _rule_summary(f: RuleFinding) -> str:
    """What the rule asks, in upstream's words (data/rules.toml)."""
    return str(rule_table()["rules"].get(f.rule, {}).get("summary", f.rule))


def _includes(patch: Patch) -> str:
    """`git apply` options that take only the patch's test paths (its before tree, as verify makes it)."""
    out = []
    for p in patch.meta.test_part or DEFAULT_TEST_PATHS:
        folder = p.endswith("/") or not PurePosixPath(p).suffix  # `tests`, `tests/`: what is inside too
        inside = f" --include={shlex.quote(p.rstrip('/') + '/*')}" if folder else ""
        out.append(f"--include={shlex.quote(p)}{inside}")
    return " ".join(out)


def _forms(ctx: _Ctx) -> list[templates.IssueForm]:
    """The tree's issue forms, read once per export."""
    if ctx.forms is None:
        forms_dir = templates.package_conf()["issue"]["forms"]
        listing = ctx.git.run("ls-tree", "--name-only", ctx.base, f"{forms_dir}/", check=False).stdout.split()
        ctx.forms = []
        for path in listing:
            if path.endswith((".yml", ".yaml")) and PurePosixPath(path).stem != "config":
                ctx.forms.append(templates.load_form(path, ctx.git.run("show", f"{ctx.base}:{path}").stdout))
    return ctx.forms


def _issue(ctx: _Ctx, patch: Patch, mail_name: str) -> tuple[str, str] | None:
    """ISSUE.md on the tree's generic bug form, and the form's title prefix."""
    form = templates.pick_bug_form(_forms(ctx))
    if form is None:
        return None
    # the reproducer: the patch's test on the before tree (base + only the test paths)
    backend = next((b for b in facts.backends_of(patch)
                    if facts.load(ctx.project.evidence_dir, patch, b, ctx.after_trees[patch.index]).data), None)
    backend = backend or (facts.backends_of(patch) or ("cpu",))[0]
    # a stand-in's evidence gives the output; the commands are for the backend it stands in for
    real = facts.STAND_IN_FOR.get(backend)
    run_on = real if real in facts.backends_of(patch) else backend
    tests = facts.tests_on(patch, run_on)
    includes = _includes(patch)
    repro = [f"git checkout {ctx.pin.commit}  # {ctx.pin.name} {ctx.pin.tag}",
             f"git apply {includes} {mail_name}  # the regression test alone, without the fix",
             *facts.commands(tests, run_on)]
    if run_on != backend:
        repro.append(f"# {facts.stand_in_note(backend, run_on)}")
    evb = facts.load(ctx.project.evidence_dir, patch, backend, ctx.after_trees[patch.index])
    output = facts.failing_output(evb.step("before")) if evb.data else ""
    missing = (evb.why_none or "the evidence holds no failing output") + \
        "; run the commands above there and paste the failing output"
    version = f"{ctx.pin.name} {ctx.pin.tag} (commit {ctx.pin.commit})"
    if evb.data and evb.data.get("host", {}).get("compiler"):
        version += f"\nbuilt with {evb.data['host']['compiler']} on {evb.data['host'].get('platform', '?')}"
    body = templates.render_issue(form, templates.IssueFacts(
        version, "\n".join(repro), output, missing, (facts.display(run_on),)))
    return body, form.title


def _submit(ctx: _Ctx, patch: Patch, has_issue: bool, issue_title: str, mail_name: str,
            dep_mails: list[str], deps: list[Patch]) -> str:
    """The submit plan for the human, in order, with no path of this machine in it: it runs from
    the package's folder and names the fork and the clone through variables.

    The order is upstream's (CONTRIBUTING.md, "Before you start"): a bug-fix pull request must come
    with a reproducible issue, so the issue is opened first and PR.md names it; a new contributor
    keeps one pull request open at a time, so this one waits for the ones it depends on.
    """
    subject = strip_trailers(patch.message).splitlines()[0]
    base_branch = templates.package_conf()["pr"]["base_branch"]
    slug = slug_of(patch)
    lines = [
        "# The submit plan: run it yourself, step by step, from the folder that holds this file, once every",
        "# placeholder is filled in (`patchset export --check` lists what is left): ISSUE.md, PR.md, and the",
        f"# mail, whose commit message you write in your own words ({NOTES} has notes for it). The mail:",
        f"# {mail_name}",
        "# Export never pushes and never runs gh.",
        "# GH_USER: your GitHub user; FORK: the git remote of your fork; CLONE: your clone of upstream.",
        "#",
        "# Order (upstream's CONTRIBUTING.md): a bug fix comes with a reproducible issue, opened first; as a",
        "# new contributor keep one pull request open at a time: send this one when no other is open.",
    ]
    if deps:
        lines.append("# It needs the changes of: " + "; ".join(strip_trailers(d.message).splitlines()[0] for d in deps)
                     + ". Send it after their pull requests are merged (this branch carries them until then).")
    step = 1
    if has_issue:
        lines += [f"# {step}. The issue (its number goes into PR.md):",
                  f"gh issue create --repo {ctx.repo_slug} --title {shlex.quote(issue_title)} --body-file ISSUE.md"]
        step += 1
    mails = " ".join(f"\"$PKG/{m}\"" for m in [*dep_mails, mail_name])
    lines.append(f"# {step}. The branch: the mail with your commit message, on upstream's commit {ctx.pin.commit}.")
    if ctx.base != ctx.pin.commit:
        # the pin came from a source archive: the work repository's base is a stand-in commit with
        # no history, and its branch could only be pushed as an unrelated root
        lines.append("#    (The pin came from a source archive here: only your clone has upstream's history.)")
    lines += [
        "PKG=$(pwd)",
        "cd \"$CLONE\"",
        f"git checkout -b pr/{slug} {ctx.pin.commit}",
        f"git am {mails}",
        f"git push \"$FORK\" pr/{slug}",
        "cd \"$PKG\"",
    ]
    step += 1
    lines += [
        f"# {step}. The pull request, as a draft:",
        f"gh pr create --draft --repo {ctx.repo_slug} --base {base_branch} --head \"$GH_USER:pr/{slug}\" "
        f"--title {shlex.quote(subject)} --body-file PR.md",
        # the trailer's own name stays out: no package file carries our trailers
        "# Once sent, record it in the fork: set the upstream status of the patch's commit in the work",
        "# repository to `sent <the pull request's URL>` (later `merged <upstream commit>` or",
        "# `rejected <URL>`; docs/series-format.md), then run `patchset refresh`.",
    ]
    return "\n".join(lines) + "\n"


def _issue_title(form_title: str) -> str:
    """The form's own title prefix ("Misc. bug: "), then the submitter's words."""
    return form_title + templates.placeholder("issue title in your own words")


def _write_version(pkg: Path, version: int, files: dict[str, str]) -> Path:
    """Write a whole version folder beside the others, all at once (temp folder + rename)."""
    pkg.mkdir(parents=True, exist_ok=True)
    final = pkg / f"v{version}"
    if final.exists():
        raise PatchsetError(f"{final} exists already; refusing to overwrite an exported version")
    tmp = Path(tempfile.mkdtemp(prefix=f".v{version}.", dir=pkg))
    try:
        for rel, text in files.items():
            p = tmp / rel
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_text(text, encoding="utf-8")
        tmp.rename(final)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return final


def _range_diff(ctx: _Ctx, slug: str, old_version: int, new_head: str, old_mail: str, new_mail: str,
                use_refs: bool) -> str:
    old_ref = ctx.git.rev(f"refs/patchset/export/{slug}/v{old_version}") if use_refs else None
    if old_ref:
        r = ctx.git.run("range-diff", "--no-color", f"{ctx.base}..{old_ref}", f"{ctx.base}..{new_head}",
                        env=ISOLATED, check=False)
        if r.returncode == 0:
            return r.stdout
    # the work repository was made anew since: the mails themselves are what is left to compare
    diff = difflib.unified_diff(old_mail.splitlines(keepends=True), new_mail.splitlines(keepends=True),
                                f"v{old_version}", "new")
    return "".join(diff)


def _same_change(old: str, new: str) -> bool:
    """The same diff and subject: the message body is the author's to write, their edit is no new version."""
    def subject(mail: str) -> str:
        return next((ln for ln in mail.splitlines() if ln.startswith("Subject: ")), "")
    return bool(old) and subject(old) == subject(new) and _patch_id(old) == _patch_id(new)


def _editable(names: list[str]) -> list[str]:
    """The files of a package a person edits: the mail files, NOTES.md and the patch's mail."""
    return [n for n in names if n in MAIL_FILES or n == NOTES or _MAIL_NAME.fullmatch(n)]


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _generated_record(files: dict[str, str]) -> str:
    """What export wrote into the files a person edits, to tell their edits from ours later."""
    return json.dumps({name: _sha(files[name]) for name in _editable(list(files))}, indent=1) + "\n"


def _refresh_generated(vdir: Path, files: dict[str, str]) -> tuple[str, ...]:
    """An unchanged patch whose facts changed (verify ran since, say): a file nobody edited is
    brought up to date; a file with the submitter's edits is left alone and the new one written
    beside it as NAME.new."""
    record_path = vdir / GENERATED
    try:
        record = json.loads(record_path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        record = {}
    notes: list[str] = []
    for name in _editable(list(files)):
        path = vdir / name
        if not path.exists() or _sha(files[name]) == record.get(name):
            continue
        if _sha(path.read_text(encoding="utf-8", errors="replace")) == record.get(name):
            atomic_write_text(path, files[name])
            record[name] = _sha(files[name])
            notes.append(f"{name}: facts updated")
        else:
            atomic_write_text(vdir / f"{name}.new", files[name])
            notes.append(f"{name} has your edits and its facts changed: the new facts are in {name}.new")
    if notes:
        atomic_write_text(record_path, json.dumps(record, indent=1) + "\n")
    return tuple(notes)


def _placeholders_if(opts: ExportOptions, vdir: Path) -> tuple[Placeholder, ...]:
    return tuple(find_placeholders(vdir)) if opts.check else ()

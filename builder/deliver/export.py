"""`patchset export`: each patch as a pull request upstream would accept, checked against its rules.

Per patch, `OUT/<NNNN-slug>/v<N>/` holds the mail (our `Patchset-*` trailers removed, the
submitter as author), PR.md and ISSUE.md on the pinned tree's own templates, and submit.txt with
the `gh` commands for the human to run. Branch `pr/<slug>` of the work repository is the pin plus
the patch, plus the earlier patches it does not apply without. Nothing is pushed, `gh` is never
run. A changed patch gets a new version beside the old one, with `git range-diff` between them.
"""

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

from builder import proc
from builder.deliver import clean, diffparse, layout, templates
from builder.deliver import evidence_facts as facts
from builder.deliver.rules import RuleFinding, TreeRules, check_patch, load_findings, rule_table, save_findings
from builder.deliver.rules import fingerprint as rules_fingerprint
from builder.errors import InputError, PatchsetError, WorkTreeError
from builder.fsutil import atomic_write_text
from builder.gitrepo import ISOLATED, GitRepo
from builder.locking import project_lock
from builder.project import Project
from builder.series.load import depends_closure, load_series
from builder.series.model import DEFAULT_TEST_PATHS, Patch, Series
from builder.series.refresh import format_mails
from builder.series.trailers import TRAILER_PREFIX, parse_approval, parse_trailers
from builder.series.workrepo import WorkRepo
from builder.upstream.fetch import fetch
from builder.upstream.pin import Pin, load_pin

ACK_TRAILER = "Patchset-Ack"
APPROVAL_TRAILER = "Patchset-Approval"
MAIL_FILES = ("PR.md", "ISSUE.md", "submit.txt")
"""The files of a package, besides the patch's own mail, that may hold placeholders."""
NOTES = "NOTES.md"
"""The series' message of the patch, offered to the author as notes (never sent)."""
GENERATED = ".generated.json"
_MAIL_NAME = re.compile(r"\d{4}-[^/]*\.patch")
# identities patchset itself writes with; an upstream mail must never carry one
_OWN_EMAILS = {"patchset@invalid", "patchset@localhost", "verify@patchset.invalid"}
_NO_MAIL_DOMAINS = {"invalid", "localhost", "localdomain", "test"}
_IDENT = re.compile(r"^\s*([^<>]*?)\s*<([^<>\s]+@[^<>\s]+)>")


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


@dataclass(frozen=True)
class PackageResult:
    patch: str
    slug: str
    directory: Path
    """The version folder written (or found unchanged)."""
    version: int
    state: str
    """new | unchanged"""
    deps: tuple[str, ...]
    branch: str | None
    findings: tuple[RuleFinding, ...]
    dropped: tuple[str, ...] = ()
    range_diff: Path | None = None
    placeholders: tuple[Placeholder, ...] = ()
    notes: tuple[str, ...] = ()
    """What a re-export of an unchanged patch did to its files (facts brought up to date)."""


@dataclass(frozen=True)
class ExportResult:
    packages: tuple[PackageResult, ...]
    out: Path
    cover: Path | None
    checked: bool
    left_out: tuple[str, ...] = ()
    """The selected patches export does not package, one line each: the fork-only ones
    (`Patchset-Upstream: fork-only WHY`). Not a failure."""

    @property
    def errors(self) -> list[RuleFinding]:
        return [f for p in self.packages for f in p.findings if f.blocking]

    @property
    def placeholders(self) -> list[Placeholder]:
        return [ph for p in self.packages for ph in p.placeholders]

    @property
    def ok(self) -> bool:
        return not self.errors and not (self.checked and self.placeholders)


# -- identity and message ------------------------------------------------------------------------
def resolve_author(given: str | None, cwd: Path) -> tuple[str, str]:
    """(name, email) from `--author`, else from git's user identity; never a made-up address."""
    if given is not None:
        m = _IDENT.match(given)
        if not m or not m.group(1) or given[m.end():].strip():
            raise InputError(f"--author '{given}': expected 'Name <mail@host>'")
        name, email = m.group(1), m.group(2)
    else:
        # useConfigOnly: git must not guess user@hostname when nothing is configured
        r = proc.run(["git", "-c", "user.useConfigOnly=true", "var", "GIT_AUTHOR_IDENT"], cwd=cwd, check=False)
        m = _IDENT.match(r.stdout) if r.returncode == 0 else None
        if not m or not m.group(1):
            raise InputError("no author for the exported mails: pass --author 'Name <mail>' or set git's "
                             "user.name and user.email (export never makes an address up)")
        name, email = m.group(1), m.group(2)
    if email.lower() in _OWN_EMAILS:
        raise InputError(f"author <{email}> is patchset's own placeholder identity, not a person: pass "
                         "--author 'Name <mail>' or set git's user.name and user.email")
    domain = email.rsplit("@", 1)[1].lower().rstrip(".")
    if domain.split(".")[-1] in _NO_MAIL_DOMAINS:
        # RFC 6761 reserves these names: no mail is ever delivered there, so no person reads it
        raise InputError(f"author <{email}> is a placeholder address ('{domain}' receives no mail), not a "
                         "person's: pass --author 'Name <mail>' or set git's user.name and user.email")
    return name, email


def strip_trailers(message: str) -> str:
    """The commit message without our `Patchset-*` trailers (continuation lines included)."""
    lines = message.rstrip("\n").split("\n")
    # the trailer block is the last paragraph
    start = len(lines)
    while start > 0 and lines[start - 1].strip():
        start -= 1
    block = lines[start:]
    kept: list[str] = []
    dropping = False
    for ln in block:
        if ln[:1] in (" ", "\t") and dropping:
            continue
        dropping = ln.lower().startswith(TRAILER_PREFIX.lower())
        if not dropping:
            kept.append(ln)
    head = lines[:start]
    if kept:
        out = head + kept
    else:
        out = head
        while out and not out[-1].strip():
            out.pop()
    return "\n".join(out) + "\n"


def commit_message(patch: Patch) -> str:
    """The message of the exported commit: the subject, then a placeholder where the body goes,
    then the trailers that are not ours (Signed-off-by and friends).

    llama.cpp's AGENTS.md closes a pull request whose commit messages were written by AI; the
    body of the series' message is offered as notes (NOTES.md), never sent as the author's words.
    """
    stripped = strip_trailers(patch.message)
    subject = stripped.splitlines()[0]
    others = [f"{k}: {v}" for k, v in parse_trailers(stripped) if not k.lower().startswith(TRAILER_PREFIX.lower())]
    body = templates.placeholder(f"the commit message in your own words: what was wrong, what the change does and "
                                 f"how you tested it; {NOTES} holds the series' message as notes")
    return "\n\n".join([subject, body, *(["\n".join(others)] if others else [])]) + "\n"


LLAMA_CPP_NOTES_POLICY = (
    "llama.cpp closes a pull request whose description or commit messages were written by AI",
    "(AGENTS.md, \"Prohibited AI Usage\"). Below is the message this patch carries in the series. Read",
    "it as notes: write the commit message (the placeholder in {mail}) and PR.md's",
    "description yourself, in your own words. Do not paste from here.",
)
"""What NOTES.md says of the upstream's rules before the series' message ({mail}: the mail's file name)."""


def notes_for_author(patch: Patch, mail_name: str, policy: tuple[str, ...] = LLAMA_CPP_NOTES_POLICY) -> str:
    """NOTES.md: the series' message of the patch, marked as notes for the author, after the upstream's `policy`."""
    return "\n".join([
        "# Notes for the author: not for upstream",
        "",
        *(line.format(mail=mail_name) for line in policy),
        "",
        "## The series' message",
        "",
        "~~~text",
        strip_trailers(patch.message).rstrip("\n"),
        "~~~",
        "",
    ])


def acknowledgements(patch: Patch) -> dict[str, str]:
    """rule -> reason, from the patch's `Patchset-Ack: <rule> <reason>` trailers."""
    acks: dict[str, str] = {}
    for key, value in parse_trailers(patch.message):
        if key.lower() == ACK_TRAILER.lower():
            rule, _, reason = value.partition(" ")
            acks[rule] = reason.strip()
    return acks


def approvals(patch: Patch) -> dict[str, str]:
    """rule -> URL ("" as the rule: every rule that needs a maintainer), from the patch's
    `Patchset-Approval: [<rule>] <URL>` trailers (their syntax is checked by `patchset check`)."""
    found: dict[str, str] = {}
    for key, value in parse_trailers(patch.message):
        if key.lower() == APPROVAL_TRAILER.lower():
            try:
                rule, url = parse_approval(value)
            except ValueError as e:
                raise InputError(f"{patch.name}: {APPROVAL_TRAILER}: {e}") from e
            found[rule] = url
    return found


def fork_only_left_out(chosen: list[Patch]) -> tuple[str, ...]:
    """One line per fork-only patch of `chosen`: export never packages one (`ExportResult.left_out`)."""
    return tuple(f"{p.name}: fork-only, not exported ({p.meta.upstream_ref})" for p in chosen if p.meta.fork_only)


def slug_of(patch: Patch) -> str:
    return re.sub(r"^\d{4}-", "", patch.name.removesuffix(".patch"))


# -- trees and commits ---------------------------------------------------------------------------
class Chain:
    """Patches applied one after another on the pin with plumbing in a temporary index (the work
    tree is never touched); results are memoized by the sequence of mails."""

    def __init__(self, git: GitRepo, base: str, tmp: Path) -> None:
        self.git = git
        self.base = base
        self.index = tmp / "index"
        self._memo: dict[tuple[str, ...], str | None] = {(): git.tree_of(base)}

    def tree(self, mails: tuple[Path, ...]) -> str | None:
        """The tree after applying `mails` in order on the pin; None when one does not apply."""
        key = tuple(str(m) for m in mails)
        if key in self._memo:
            return self._memo[key]
        parent = self.tree(mails[:-1])
        result = None
        if parent is not None:
            env = {**ISOLATED, "GIT_INDEX_FILE": str(self.index)}
            self.git.run("read-tree", parent, env=env)
            r = self.git.run("apply", "--cached", "--whitespace=nowarn", str(mails[-1]), env=env, check=False)
            if r.returncode == 0:
                result = self.git.out("write-tree", env=env)
        self._memo[key] = result
        return result


def find_deps(chain: Chain, patch: Patch, earlier: list[Patch], declared: list[Patch] | None = None) -> list[Patch]:
    """The earlier patches `patch` needs on the pin: those it declares (`Patchset-Depends`, with
    theirs), and, where it still does not apply, the ones it does not apply without: add them (the
    nearest that touches a file in play first) until it applies, then leave out any it does not
    need after all (never a declared one)."""
    def applies(deps: list[Patch]) -> bool:
        order = sorted(deps, key=lambda p: p.index)
        return chain.tree(tuple(p.path for p in [*order, patch])) is not None

    required = list(declared or [])
    if applies(required):
        return sorted(required, key=lambda p: p.index)
    chosen: list[Patch] = list(required)
    files = set(patch.files).union(*(set(p.files) for p in required))
    # a fork-only patch is never sent: no pull request may carry it
    pool = [p for p in reversed(earlier) if p not in required and not p.meta.fork_only]
    while pool:
        cand = next((p for p in pool if files & set(p.files)), pool[0])
        pool.remove(cand)
        chosen.append(cand)
        files |= set(cand.files)
        if applies(chosen):
            break
    else:
        raise InputError(f"{patch.name}: does not apply on the pin even with every earlier patch that is not "
                         "fork-only; run `patchset apply` and `patchset refresh` first")
    for p in sorted(chosen, key=lambda p: p.index):
        trial = [q for q in chosen if q is not p]
        if p not in required and applies(trial):
            chosen = trial
    return sorted(chosen, key=lambda p: p.index)


def _commit(git: GitRepo, tree: str, parent: str, message: str, author: tuple[str, str], date: str) -> str:
    # committer = author, at the author date: re-exporting the same patch gives the same commit
    env = {**ISOLATED, "GIT_AUTHOR_NAME": author[0], "GIT_AUTHOR_EMAIL": author[1], "GIT_AUTHOR_DATE": date,
           "GIT_COMMITTER_NAME": author[0], "GIT_COMMITTER_EMAIL": author[1], "GIT_COMMITTER_DATE": date}
    return git.run("commit-tree", tree, "-p", parent, "-F", "-", env=env, input_text=message).stdout.strip()


def _patch_id(text: str) -> str:
    r = proc.run(["git", "patch-id", "--stable"], input_text=text, env=ISOLATED)
    return r.stdout.split(" ", 1)[0]


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


def _repo_slug(pin: Pin) -> str:
    m = re.search(r"github\.com[/:]([^/]+/[^/]+?)(?:\.git)?/?$", pin.repository)
    return m.group(1) if m else pin.repository


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


def _export_one(ctx: _Ctx, patch: Patch) -> PackageResult:
    opts = ctx.opts
    slug = slug_of(patch)
    earlier = [p for p in ctx.series.patches if p.index < patch.index]
    deps = find_deps(ctx.chain, patch, earlier, depends_closure(ctx.series, patch))
    parent = ctx.base
    dep_mails: dict[str, str] = {}
    applied: list[Patch] = []
    for p in [*deps, patch]:
        applied.append(p)
        tree = ctx.chain.tree(tuple(q.path for q in applied))
        if tree is None:  # find_deps has applied this very sequence
            raise PatchsetError(f"{p.name}: no longer applies on the pin")
        parent = _commit(ctx.git, tree, parent, commit_message(p), ctx.author, p.date)
        if p is not patch:
            dep_mails[f"deps/{p.index:04d}-{slug_of(p)}.patch"] = format_mails(ctx.git, "-1", parent)[0][1].decode()
    head = parent
    parent_of_head = ctx.git.out("rev-parse", f"{head}^")
    mail = format_mails(ctx.git, "-1", head)[0][1].decode("utf-8", errors="replace")
    original = patch.path.read_text(encoding="utf-8", errors="replace")
    if _patch_id(mail) != _patch_id(original):
        raise PatchsetError(f"{patch.name}: the exported diff differs from the patch's (patch-id); not exported")
    # the series' message goes out as the author's notes (NOTES.md): nothing of ours may be in it
    leak = next((n for n, ln in enumerate(strip_trailers(patch.message).splitlines(), 1) if TRAILER_PREFIX in ln), 0)
    if leak:
        raise InputError(f"{patch.name}: its message mentions '{TRAILER_PREFIX}' outside the trailer block "
                         f"(line {leak} of the message); reword it: nothing of ours may go upstream")
    findings = _findings(ctx, patch, original, mail, parent_of_head, head)
    mail_name = f"{patch.index:04d}-{slug}.patch"
    dropped: tuple[str, ...] = ()
    files: dict[str, str] = {}
    issue_title = ""
    if opts.layout == "ggml":
        res = layout.to_ggml(mail, patch.name, opts.drop_non_ggml)
        mail, dropped = res.mail, res.dropped
        files[mail_name] = mail
        for rel, text in dep_mails.items():
            files[rel] = layout.to_ggml(text, Path(rel).name, opts.drop_non_ggml).mail
        if dropped:
            files["dropped.txt"] = "Left out for ggml (llama.cpp files):\n" + "".join(f"{d}\n" for d in dropped)
    else:
        files[mail_name] = mail
        files[NOTES] = notes_for_author(patch, mail_name)
        files.update(dep_mails)
        pr_template = ctx.git.run("show", f"{ctx.base}:{templates.package_conf()['pr']['template']}", check=False)
        pr_facts = _pr_facts(ctx, patch, deps, mail_name, parent_of_head, head, findings)
        files["PR.md"] = templates.render_pr(pr_template.stdout if pr_template.returncode == 0 else "", pr_facts)
        issue = _issue(ctx, patch, mail_name)
        if issue is not None:
            files["ISSUE.md"], issue_title = issue[0], _issue_title(issue[1])
    pkg = _find_package_dir(ctx.out, patch.index, slug)
    versions = _versions(pkg)
    latest = versions[-1] if versions else 0
    branch = f"pr/{slug}" if opts.layout == "llama.cpp" else None
    dep_names = tuple(d.name for d in deps)
    old_mail = ""
    if latest:
        ldir = pkg / f"v{latest}"
        old_mail_path = next(iter(sorted(ldir.glob("[0-9][0-9][0-9][0-9]-*.patch"))), None)
        old_mail = old_mail_path.read_text(encoding="utf-8", errors="replace") if old_mail_path else ""
        if _same_change(old_mail, mail) and \
                _read_deps(ldir) == sorted(Path(k).name for k in files if k.startswith("deps/")):
            if branch:
                _set_branch(ctx, slug, branch, head, latest)
                files["submit.txt"] = _submit(ctx, patch, "ISSUE.md" in files, issue_title, mail_name,
                                              sorted(dep_mails), deps)
            notes = _refresh_generated(ldir, files)
            return PackageResult(patch.name, slug, ldir, latest, "unchanged", dep_names, branch, tuple(findings),
                                 dropped, None, _placeholders_if(opts, ldir), notes)
    version = latest + 1
    if branch:
        files["submit.txt"] = _submit(ctx, patch, "ISSUE.md" in files, issue_title, mail_name,
                                      sorted(dep_mails), deps)
    range_diff = None
    if latest:
        files[f"range-diff-v{latest}-v{version}.txt"] = _range_diff(ctx, slug, latest, head, old_mail, mail,
                                                                    use_refs=branch is not None)
    files[GENERATED] = _generated_record(files)
    if branch:
        _set_branch(ctx, slug, branch, head, version)
    final = _write_version(pkg, version, files)
    if latest:
        range_diff = final / f"range-diff-v{latest}-v{version}.txt"
    return PackageResult(patch.name, slug, final, version, "new", dep_names, branch, tuple(findings), dropped,
                         range_diff, _placeholders_if(opts, final))


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


def _findings(ctx: _Ctx, patch: Patch, original: str, mail: str, parent: str, head: str) -> list[RuleFinding]:
    """The rule findings of one patch; kept in the state folder by everything they depend on (the
    exported commit names the base, dependencies, diff and message), so a warm export does not run
    clang-format again."""
    key = hashlib.sha256("\0".join([head, original, ctx.rules_fingerprint]).encode()).hexdigest()
    cached = ctx.project.state_dir / "export-cache" / f"{key}.json"
    found = load_findings(cached)
    if found is not None:
        return found
    findings = check_patch(patch.name, f"patches/{patch.name}", diffparse.parse(original), diffparse.parse(mail),
                           strip_trailers(patch.message), ctx.rules, parent, head, acknowledgements(patch),
                           approvals(patch))
    save_findings(cached, findings)
    return findings


def _placeholders_if(opts: ExportOptions, vdir: Path) -> tuple[Placeholder, ...]:
    return tuple(find_placeholders(vdir)) if opts.check else ()


def _set_branch(ctx: _Ctx, slug: str, branch: str, head: str, version: int) -> None:
    """Point `pr/<slug>` at the new head, unless someone committed on it since the last export."""
    current = ctx.git.rev(f"refs/heads/{branch}")
    last = ctx.git.rev(f"refs/patchset/export/{slug}/head")
    if current and current not in (head, last):
        raise WorkTreeError(f"branch '{branch}' in {ctx.project.work_repo} holds commits export did not make; "
                            f"rename or delete it first (export never moves a branch with someone's work on it)")
    ctx.git.update_ref(f"refs/heads/{branch}", head, f"patchset export v{version}")
    ctx.git.update_ref(f"refs/patchset/export/{slug}/head", head, f"patchset export v{version}")
    ctx.git.update_ref(f"refs/patchset/export/{slug}/v{version}", head, f"patchset export v{version}")


def _cover(ctx: _Ctx, results: list[PackageResult]) -> Path:
    lines = [f"# {ctx.pin.name} {ctx.pin.tag}: {len(ctx.series.patches)} patch(es)", "",
             f"Base: `{ctx.pin.commit}`", ""]
    rows: list[list[str]] = []
    by_name = {r.patch: r for r in results}
    for p in ctx.series.patches:
        r = by_name.get(p.name)
        ev_cells = []
        for b in facts.backends_of(p):
            e = facts.load(ctx.project.evidence_dir, p, b, ctx.after_trees[p.index])
            ev_cells.append(f"{facts.display(b)}: {e.data.get('outcome') if e.data else 'not run'}")
        status = f"{p.meta.status} {p.meta.status_ref}".strip()
        deps = ", ".join(r.deps) if r and r.deps else "-"
        pkg = f"{r.directory.relative_to(ctx.out)}" if r else "not exported"
        subject = strip_trailers(p.message).splitlines()[0]
        rows.append([str(p.index), subject, deps, status, pkg, "; ".join(ev_cells) or "-"])
    lines += clean.table(["#", "patch", "depends on", "status", "package", "evidence"], rows)
    lines += ["", "## Submission order", "",
              "Upstream's CONTRIBUTING.md: a bug fix comes with a reproducible issue, opened first; a new "
              "contributor keeps one pull request open at a time. So, one after the other:", ""]
    n = 0
    for p in ctx.series.patches:
        r = by_name.get(p.name)
        if r is None:
            continue
        n += 1
        issue = "the issue (ISSUE.md), then " if (r.directory / "ISSUE.md").exists() else ""
        after = f", once the pull requests of {', '.join(r.deps)} are merged" if r.deps else ""
        lines.append(f"{n}. {strip_trailers(p.message).splitlines()[0]}: {issue}the pull request{after} "
                     f"({r.directory.relative_to(ctx.out)}/submit.txt)")
    path = ctx.out / "COVER.md"
    atomic_write_text(path, "\n".join(lines) + "\n")
    return path


def export(project: Project, opts: ExportOptions) -> ExportResult:
    """Export the selected patches (default: all) and check them; see the module docstring."""
    if opts.layout not in layout.LAYOUTS:
        raise InputError(f"--layout {opts.layout}: expected one of {', '.join(layout.LAYOUTS)}")
    if opts.drop_non_ggml and opts.layout != "ggml":
        raise InputError("--drop-non-ggml needs --layout ggml")
    author = resolve_author(opts.author, project.root)
    series = load_series(project.patches_dir)
    chosen = [series.by_name(n) for n in opts.patches] if opts.patches else list(series.patches)
    left_out = fork_only_left_out(chosen)
    chosen = [p for p in chosen if not p.meta.fork_only]
    pin = load_pin(project.pin_file)
    out = (opts.out or project.state_dir / "export").resolve()
    if opts.layout == "ggml":
        out = out / "ggml"
    with project_lock(project.lock_file):
        fetched = fetch(project.cache_dir, pin)
        work = WorkRepo(project.work_repo)
        work.attach_upstream(fetched, pin)
        with tempfile.TemporaryDirectory(prefix="patchset-export-") as tmp:
            chain = Chain(work.git, fetched.commit, Path(tmp))
            ctx = _Ctx(project, pin, series, work.git, fetched.commit, chain,
                       TreeRules(work.git, fetched.commit, Path(tmp)), author, opts, out, _repo_slug(pin),
                       rules_fingerprint())
            mails: tuple[Path, ...] = ()
            for p in series.patches:
                mails += (p.path,)
                tree = chain.tree(mails)
                if tree is None:
                    raise InputError(f"{p.name}: does not apply on the pin after the patches before it; "
                                     "run `patchset apply` to see the conflict")
                ctx.after_trees[p.index] = tree
            results = [_export_one(ctx, p) for p in chosen]
            cover = _cover(ctx, results) if opts.cover else None
    return ExportResult(tuple(results), out, cover, opts.check, left_out)

"""`patchset export`: each patch as a pull request upstream would accept, checked against its rules.

Per patch, `OUT/<NNNN-slug>/v<N>/` holds the mail (our `Patchset-*` trailers removed, the
submitter as author), PR.md and ISSUE.md on the pinned tree's own templates, and submit.txt with
the `gh` commands for the human to run. Branch `pr/<slug>` of the work repository is the pin plus
the patch, plus the earlier patches it does not apply without. Nothing is pushed, `gh` is never
run. A changed patch gets a new version beside the old one, with `git range-diff` between them.
"""

from __future__ import annotations

import hashlib
import re
import tempfile
from dataclasses import dataclass
from pathlib import Path

from builder.deliver import clean, diffparse, layout, templates
from builder.deliver import evidence_facts as facts
from builder.deliver.export_commits import (
    NOTES,
    Chain,
    _commit,
    _patch_id,
    acknowledgements,
    approvals,
    commit_message,
    find_deps,
    notes_for_author,
    resolve_author,
    slug_of,
    strip_trailers,
)
from builder.deliver.export_package import (
    GENERATED,
    ExportOptions,
    Placeholder,
    _Ctx,
    _find_package_dir,
    _generated_record,
    _issue,
    _issue_title,
    _placeholders_if,
    _pr_facts,
    _range_diff,
    _read_deps,
    _refresh_generated,
    _same_change,
    _submit,
    _versions,
    _write_version,
)
from builder.deliver.rules import RuleFinding, TreeRules, check_patch, load_findings, save_findings
from builder.deliver.rules import fingerprint as rules_fingerprint
from builder.errors import InputError, PatchsetError, WorkTreeError
from builder.fsutil import atomic_write_text
from builder.locking import project_lock
from builder.project import Project
from builder.series.load import depends_closure, load_series
from builder.series.model import Patch
from builder.series.refresh import format_mails
from builder.series.trailers import TRAILER_PREFIX
from builder.series.workrepo import WorkRepo
from builder.upstream.fetch import fetch
from builder.upstream.pin import Pin, load_pin


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


def fork_only_left_out(chosen: list[Patch]) -> tuple[str, ...]:
    """One line per fork-only patch of `chosen`: export never packages one (`ExportResult.left_out`)."""
    return tuple(f"{p.name}: fork-only, not exported ({p.meta.upstream_ref})" for p in chosen if p.meta.fork_only)


def _repo_slug(pin: Pin) -> str:
    m = re.search(r"github\.com[/:]([^/]+/[^/]+?)(?:\.git)?/?$", pin.repository)
    return m.group(1) if m else pin.repository


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

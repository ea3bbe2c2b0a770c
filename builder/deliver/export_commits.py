"""`patchset export`'s commits: the author, the message, the pin plus a patch and the earlier ones it needs."""

from __future__ import annotations

import re
from pathlib import Path

from builder import proc
from builder.deliver import templates
from builder.errors import InputError
from builder.gitrepo import ISOLATED, GitRepo
from builder.series.model import Patch
from builder.series.trailers import TRAILER_PREFIX, parse_approval, parse_trailers

NOTES = "NOTES.md"
"""The series' message of the patch, offered to the author as notes (never sent)."""
ACK_TRAILER = "Patchset-Ack"
APPROVAL_TRAILER = "Patchset-Approval"
# identities patchset itself writes with; an upstream mail must never carry one
_OWN_EMAILS = {"patchset@invalid", "patchset@localhost", "verify@patchset.invalid"}
_NO_MAIL_DOMAINS = {"invalid", "localhost", "localdomain", "test"}


_IDENT = re.compile(r"^\s*([^<>]*?)\s*<([^<>\s]+@[^<>\s]+)>")


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

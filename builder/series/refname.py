"""An upstream tag or branch name resolved to a commit, where a commit is asked for.

In `rebase --onto`, `bump --onto`, `canary --range`: resolved on the pin's git sources with
`git ls-remote`, which reads names only (no objects), so the move itself still fetches by commit id
and checks that id."""

from __future__ import annotations

import re
from dataclasses import dataclass

from builder import proc
from builder.errors import InputError, ProcessError
from builder.upstream.fetch import fetch_timeout
from builder.upstream.pin import GitSource, Pin

COMMIT_ID = re.compile(r"[0-9a-f]{40}")
# what git itself refuses in a ref name (git check-ref-format), and an option's leading dash
_BAD_NAME = re.compile(r"^-|\.\.|[\s~^:?*\[\\]|@\{|\.lock$|/$|^/|\.$")


@dataclass(frozen=True)
class Resolved:
    """A name of the upstream's, resolved."""

    commit: str
    tag: str
    """The tag name when the name is a tag (recorded in the new pin), else empty (a branch)."""
    url: str
    """The git source that answered."""


def is_name(ref: str) -> bool:
    """True when `ref` is to be resolved as a tag or branch name (not a full commit id)."""
    return not COMMIT_ID.fullmatch(ref)


def resolve(pin: Pin, name: str, option: str) -> Resolved:
    """The commit the tag or branch `name` names on the first of the pin's git sources that answers;
    a tag wins over a branch of the same name (as git's own lookup order). `option` names the
    command-line option in the one-line error."""
    short = name.removeprefix("refs/tags/").removeprefix("refs/heads/")
    if not short or _BAD_NAME.search(short):
        raise InputError(f"{option} '{name}': not a commit id, tag or branch name")
    urls = [s.url for s in pin.sources if isinstance(s, GitSource)]
    if not urls:
        raise InputError(f"{option} {name}: the pin has no git source to look the name up in; give a commit id "
                         "or a pin file")
    tried = []
    for url in urls:
        try:
            r = proc.run(["git", "ls-remote", url, f"refs/tags/{short}", f"refs/tags/{short}^{{}}",
                          f"refs/heads/{short}"], env={"GIT_TERMINAL_PROMPT": "0"}, timeout=fetch_timeout())
        except ProcessError as e:
            tried.append(f"{url}: {(e.stderr.strip().splitlines() or [str(e)])[0]}")
            continue
        refs = {ref: oid for oid, _, ref in (line.partition("\t") for line in r.stdout.splitlines())}
        tag = refs.get(f"refs/tags/{short}^{{}}") or refs.get(f"refs/tags/{short}")
        if tag and not name.startswith("refs/heads/"):
            return Resolved(tag, short, url)
        if f"refs/heads/{short}" in refs and not name.startswith("refs/tags/"):
            return Resolved(refs[f"refs/heads/{short}"], "", url)
        tried.append(f"{url}: no tag or branch '{short}'")
    hint = " (a commit id is given in full, 40 hex)" if re.fullmatch(r"[0-9a-f]{4,39}", short) else ""
    raise InputError(f"{option} {name}: " + "; ".join(tried) + hint)

"""`patchset pin`: write a pin for another upstream commit from its source, never by hand.

The sha256 and the tree id are computed from the bytes fetched, by the very code `fetch` uses to
verify them (`mirror.download_new` + `fetch.import_tree` for an sdist, `fetch.fetch_git_ref` for
git), so a written pin is accepted by `fetch` as long as the source serves the same bytes.

An sdist carries no history, so its upstream commit comes from `--commit`, or from a marker
the archive carries (in this order):

1. the git dir of the vendored submodule (`.git/modules/<subdir>/HEAD`, found through the
   subdir's `.git` link file). llama-cpp-python's sdists ship it, with the commit object itself:
   its sha1 is checked and the tree it names compared with the imported tree.
2. a build-info marker in the tree: `cmake/build-info.cmake` or a generated
   `common/build-info.cpp` where a packager filled in `BUILD_COMMIT` / `LLAMA_COMMIT` and the
   build number (upstream's own files say "unknown" and 0: CMake asks git at configure time).
   Those record a short id, which is not enough for a pin: the error says so.
"""

from __future__ import annotations

import re
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from builder.errors import InputError
from builder.gitrepo import GitRepo, init_repo
from builder.locking import cache_lock
from builder.progress import NullProgress, ProgressSink
from builder.upstream import mirror
from builder.upstream.fetch import fetch_git_ref, import_tree
from builder.upstream.pin import GitSource, Pin, SdistSource, Source
from builder.upstream.vendored import commit_marker

_SHA1 = re.compile(r"[0-9a-f]{40}")

DEFAULT_NAME = "llama.cpp"
DEFAULT_REPOSITORY = "https://github.com/ggml-org/llama.cpp"


@dataclass(frozen=True)
class PinRequest:
    """What `patchset pin` was asked for: exactly one of `sdist` or `git_url` + `git_ref`."""

    sdist: str = ""
    """A requirement (`name==version`, fetched with pip), a URL, or a local archive."""
    subdir: str = "vendor/llama.cpp"
    git_url: str = ""
    git_ref: str = ""
    """A branch, tag or commit id of `git_url`."""
    commit: str = ""
    """The upstream commit of an sdist (else read from a marker the archive carries)."""
    tag: str = ""
    date: str = ""
    name: str = DEFAULT_NAME
    repository: str = DEFAULT_REPOSITORY
    git_sources: tuple[str, ...] = ()
    """Git remotes listed before an sdist source: a commit id fetched from them verifies itself."""


@dataclass(frozen=True)
class PinResult:
    pin: Pin
    files: int = 0
    """Files imported from an sdist (0 for git)."""
    from_cache: bool = False
    """The archive came from the download cache (re-hashed), not from the network."""


def make_pin(cache_dir: Path, req: PinRequest, progress: ProgressSink | None = None) -> PinResult:
    """Fetch the source into a scratch repository, compute sha256 and tree id, and return the pin."""
    progress = progress or NullProgress()
    if bool(req.sdist) == bool(req.git_url):
        raise InputError("pin: give exactly one of --sdist SOURCE or --git URL REF")
    if req.commit and not _SHA1.fullmatch(req.commit):
        raise InputError(f"--commit '{req.commit}': give the full 40-hex commit id")
    if req.date and not re.fullmatch(r"\d{4}-\d{2}-\d{2}", req.date):
        raise InputError(f"--date '{req.date}': give the commit date as YYYY-MM-DD")
    if req.subdir.startswith("/") or ".." in PurePosixPath(req.subdir).parts:
        raise InputError(f"--subdir '{req.subdir}': a relative path inside the archive")
    with cache_lock(cache_dir, purpose="pin"):
        tmp_root = cache_dir / "tmp"
        tmp_root.mkdir(parents=True, exist_ok=True)
        scratch = Path(tempfile.mkdtemp(prefix="pin-", dir=tmp_root))
        try:
            q = init_repo(scratch / "q.git", bare=True)
            if req.git_url:
                return _pin_git(q, req)
            return _pin_sdist(q, req, cache_dir, scratch, progress)
        finally:
            shutil.rmtree(scratch, ignore_errors=True)


def _pin_git(q: GitRepo, req: PinRequest) -> PinResult:
    if req.commit:
        raise InputError("--commit is for an sdist; with --git the commit is what REF names")
    commit = fetch_git_ref(q, req.git_url, req.git_ref)
    tree = q.tree_of(commit)
    date = req.date or q.out("show", "-s", "--format=%cI", commit)[:10]
    tag = req.tag or _tag_of_ref(req.git_ref)
    note = (f"Computed by `patchset pin --git`: the tree of commit {commit}, fetched as '{req.git_ref}' "
            f"from {req.git_url}. A commit id is content-addressed, so the fetch verifies itself.")
    pin = Pin(req.name, req.repository, commit, tree, tag, date, _wrap(note), (GitSource(req.git_url),))
    return PinResult(pin)


def _tag_of_ref(ref: str) -> str:
    """A tag name when REF is one (`refs/tags/X`, or llama.cpp's `b<build>`), else empty."""
    if ref.startswith("refs/tags/"):
        return ref.removeprefix("refs/tags/")
    return ref if re.fullmatch(r"b\d+", ref) else ""


def _sdist_spec(sdist: str) -> tuple[str, str]:
    """(requirement, url) for a requirement, a URL or a local file."""
    if "://" in sdist:
        return "", sdist
    path = Path(sdist)
    if path.is_file():
        return "", path.resolve().as_uri()
    if sdist.endswith((".tar.gz", ".tgz", ".tar.bz2", ".tar.xz", ".tar")):
        raise InputError(f"--sdist {sdist}: archive file not found")
    if not re.match(r"^\s*[A-Za-z0-9][A-Za-z0-9._-]*\s*(\[.*\])?\s*([=<>!~]=?|$)", sdist) or "/" in sdist:
        raise InputError(f"--sdist '{sdist}': not a requirement (name==version), a URL or an existing file")
    return sdist.strip(), ""


def _pin_sdist(q: GitRepo, req: PinRequest, cache_dir: Path, scratch: Path, progress: ProgressSink) -> PinResult:
    requirement, url = _sdist_spec(req.sdist)
    progress.begin(f"downloading {requirement or url}", None)
    try:
        dl = mirror.download_new(requirement, url, cache_dir / "downloads", cache_dir / "tmp", progress)
    finally:
        progress.end()
    tree, count = import_tree(q, dl.path, req.subdir, scratch, progress)
    files = scratch / "files"
    marker, looked = commit_marker(dl.path, req.subdir, files, req.commit)
    if req.commit:
        commit, how = req.commit, "given with --commit"
        if marker and req.commit.startswith(marker.commit):
            how += f", and recorded in the archive ({marker.where})"
        elif marker:
            how += f"; the archive records {marker.commit} instead ({marker.where})"
            marker = None
    elif marker and _SHA1.fullmatch(marker.commit):
        commit, how = marker.commit, f"read from the archive: {marker.where}"
    elif marker:
        raise InputError(f"{dl.path.name}: {marker.where} records commit '{marker.commit}', not a full id; "
                         "pass --commit with the full 40-hex id")
    else:
        raise InputError(f"{dl.path.name}: the upstream commit cannot be read from the archive "
                         f"(looked at {', '.join(looked)}); pass --commit")
    pin_tree, source_tree = tree, ""
    if marker and marker.tree:
        if marker.tree == tree:
            how += "; the archive carries that commit object (sha1 checked) and it names this very tree"
        else:
            # the commit object is content-addressed: its tree is upstream's; the mirror's differs
            pin_tree, source_tree = marker.tree, tree
            how += (f"; the archive carries that commit object (sha1 checked), which names tree "
                    f"{marker.tree}: the archive's files differ from upstream's, so the sdist source "
                    f"records its own tree")
    else:
        how += "; the commit object is not in the archive, so the commit-to-tree link is unchecked"
    tag = req.tag or (f"b{marker.build_number}" if marker and marker.build_number else "")
    date = req.date or (marker.date if marker else "")
    origin = requirement or url
    note = (
        f"Computed by `patchset pin --sdist` from {origin} (sha256 {dl.sha256}"
        f"{', served from the download cache and re-hashed' if dl.from_cache else ''}): the {req.subdir} "
        f"folder, its .git link left out, every other file added with force, as `patchset fetch` imports it: "
        f"{count} files, tree {tree}.\nCommit {commit} {how}.\n"
    )
    sources: list[Source] = [GitSource(u) for u in req.git_sources]
    sources.append(SdistSource(sha256=dl.sha256, subdir=req.subdir, requirement=requirement, url=url,
                               tree=source_tree))
    pin = Pin(req.name, req.repository, commit, pin_tree, tag, date, _wrap(note), tuple(sources))
    return PinResult(pin, count, dl.from_cache)


def _wrap(text: str, width: int = 96) -> str:
    out: list[str] = []
    for para in text.rstrip("\n").split("\n"):
        line = ""
        for word in para.split(" "):
            if line and len(line) + 1 + len(word) > width:
                out.append(line)
                line = word
            else:
                line = f"{line} {word}" if line else word
        out.append(line)
    return "\n".join(out) + "\n"

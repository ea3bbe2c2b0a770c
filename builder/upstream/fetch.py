"""Verified upstream source in a shared cache: fetch the pin from the first source that works.

The cache holds one bare repository per upstream. A pin is fetched once; afterwards
`refs/patchset/pins/<commit>` points at a commit whose tree is the pinned tree. Everything a
source brings lands first in a quarantine repository that borrows the cache's objects, and only
moves into the cache once its tree id matched: a bad download or a mismatching mirror leaves
the cache exactly as it was.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import re
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from builder import proc
from builder.errors import ProcessError, ProcessTimeout, SourceError
from builder.fsutil import atomic_write_text
from builder.gitrepo import COMMITTER, ISOLATED, GitRepo, init_repo
from builder.locking import CACHE_LOCK_TIMEOUT_S, cache_lock
from builder.progress import NullProgress, ProgressSink
from builder.upstream.pin import BundleSource, GitSource, Pin, SdistSource, Source

log = logging.getLogger("patchset")

_SHA1 = re.compile(r"[0-9a-f]{40}")


@dataclass(frozen=True)
class Fetched:
    """The pinned upstream, present and verified in the cache."""

    repo: Path
    """The cache's bare repository."""
    commit: str
    """The commit in that repository whose tree is the pinned tree: the pin's own commit (from git, or
    from an sdist that ships its object, shallow either way); else a deterministic stand-in commit made
    from an sdist's files (an archive without the object, or whose files differ from upstream's)."""
    tree: str
    source: str
    """Which source it came from, in words."""
    cached: bool
    """True when nothing had to be fetched."""


def describe(src: Source) -> str:
    if isinstance(src, GitSource):
        return f"git {src.url}"
    if isinstance(src, BundleSource):
        return f"bundle {Path(src.path).name}"
    return f"sdist {src.requirement or src.url}"


def pin_ref(pin: Pin) -> str:
    return f"refs/patchset/pins/{pin.commit}"


def cache_repo_path(cache_dir: Path, pin: Pin) -> Path:
    return cache_dir / "upstream" / f"{pin.name}.git"


def _record_path(repo: Path, pin: Pin) -> Path:
    return repo / "patchset-pins" / f"{pin.commit}.json"


def lookup(cache_dir: Path, pin: Pin) -> Fetched | None:
    """The cached, verified pin, or None. Cheap: two git queries, no lock."""
    path = cache_repo_path(cache_dir, pin)
    if not (path / "HEAD").exists():
        return None
    repo = GitRepo(path)
    commit = repo.rev(pin_ref(pin))
    if commit is None:
        return None
    record = _record_path(path, pin)
    try:
        info = json.loads(record.read_text())
    except (OSError, ValueError):
        return None
    if repo.run("rev-parse", f"{commit}^{{tree}}", check=False).stdout.strip() != info.get("tree"):
        return None
    if pin.tree and info.get("tree") != _expected_tree(pin, info.get("source_index")):
        return None
    return Fetched(path, commit, info["tree"], info.get("source", "?"), cached=True)


def fetched_tree(cache_dir: Path, pin: Pin) -> str:
    """The tree `apply` builds `patched` on: the cached pin's (an sdist source may record its own,
    `SdistSource.tree`), else the pin's."""
    found = lookup(cache_dir, pin)
    return found.tree if found else pin.tree


def _expected_tree(pin: Pin, index: int | None) -> str:
    if index is not None and 0 <= index < len(pin.sources):
        src = pin.sources[index]
        if isinstance(src, SdistSource) and src.tree:
            return src.tree
    return pin.tree


def fetch(cache_dir: Path, pin: Pin, progress: ProgressSink | None = None, lock_timeout: float = CACHE_LOCK_TIMEOUT_S,
          bundle: Path | None = None) -> Fetched:
    """Make the pinned tree present and verified in the cache; a no-op when it already is.

    `bundle`: a git bundle (`export_bundle`) tried before the pin's own sources, for a machine
    without network.
    """
    found = lookup(cache_dir, pin)
    if found and not _upgradable(cache_dir, pin, found):
        return found
    if bundle is not None:
        pin = dataclasses.replace(pin, sources=(BundleSource(str(bundle.resolve())), *pin.sources))
    progress = progress or NullProgress()
    with cache_lock(cache_dir, lock_timeout, purpose="fetch"):
        # another process may have fetched it while we waited for the lock
        found = lookup(cache_dir, pin)
        if found and _upgradable(cache_dir, pin, found):
            return _upgrade(cache_dir, pin, found)
        if found:
            return found
        return _fetch_locked(cache_dir, pin, progress)


def _upgradable(cache_dir: Path, pin: Pin, found: Fetched) -> bool:
    """The cache holds the pin as a stand-in (made by an earlier patchset from an sdist) and an sdist
    of the pin is in the download cache, not yet read for the real commit object. Cheap: no archive read."""
    if found.commit == pin.commit:
        return False
    try:
        info = json.loads(_record_path(found.repo, pin).read_text())
    except (OSError, ValueError):
        return False
    return not info.get("archive_read") and any(
        isinstance(s, SdistSource) and (cache_dir / "downloads" / s.sha256).is_dir() for s in pin.sources)


def _upgrade(cache_dir: Path, pin: Pin, found: Fetched) -> Fetched:
    """Replace a cached stand-in with upstream's real commit, read from an sdist of the pin already in
    the download cache (no network), as a fetch now writes it (issue 43). The stand-in stays under
    `refs/patchset/imports/` (work repositories' backups may still name commits made on it); the
    record says the archive was read, so an archive without the object is read once only."""
    repo = GitRepo(found.repo)
    tmp_root = cache_dir / "tmp"
    tmp_root.mkdir(parents=True, exist_ok=True)
    commit = ""
    for src in pin.sources:
        if commit or not isinstance(src, SdistSource) or not (cache_dir / "downloads" / src.sha256).is_dir():
            continue
        quarantine = Path(tempfile.mkdtemp(prefix="quarantine-", dir=tmp_root))
        try:
            from builder.upstream import mirror  # noqa: PLC0415 (see _import_sdist)

            archive = mirror.download(src, cache_dir / "downloads", tmp_root)
            q = init_repo(quarantine / "q.git", bare=True)
            (quarantine / "q.git" / "objects" / "info" / "alternates").write_text(
                str((found.repo / "objects").resolve()) + "\n")
            commit = write_vendored_commit(q, archive, src.subdir, quarantine / "files", pin.commit, found.tree)
            if commit:
                _migrate_objects(quarantine / "q.git" / "objects", found.repo / "objects")
                merge_shallow(quarantine / "q.git", found.repo)
        except SourceError as e:
            log.warning("the cached pin %s is a stand-in; reading the archive for the real commit failed: %s",
                        pin.short, e)
        finally:
            shutil.rmtree(quarantine, ignore_errors=True)
    record = _record_path(found.repo, pin)
    info = json.loads(record.read_text())
    if not commit:
        atomic_write_text(record, json.dumps({**info, "archive_read": True}, indent=1))
        return found
    repo.update_ref(f"refs/patchset/imports/{found.commit}", found.commit, "patchset: the stand-in, replaced")
    repo.update_ref(pin_ref(pin), commit, "patchset fetch: upstream's own commit, read from the archive")
    atomic_write_text(record, json.dumps({**info, "local": commit}, indent=1))
    log.info("the cached pin %s was a stand-in commit (%s); it is now upstream's own commit, read from the archive",
             pin.short, found.commit[:12])
    return dataclasses.replace(found, commit=commit)


def _fetch_locked(cache_dir: Path, pin: Pin, progress: ProgressSink) -> Fetched:
    path = cache_repo_path(cache_dir, pin)
    if not (path / "HEAD").exists():
        init_repo(path, bare=True)
    repo = GitRepo(path)
    tmp_root = cache_dir / "tmp"
    tmp_root.mkdir(parents=True, exist_ok=True)
    failures: list[str] = []
    # a bundle given on the command line comes first; the record indexes the pin file's own sources
    shift = sum(isinstance(s, BundleSource) for s in pin.sources)
    for index, src in enumerate(pin.sources):
        known_index: int | None = index - shift
        log.info("fetching %s %s from %s", pin.name, pin.short, describe(src))
        quarantine = Path(tempfile.mkdtemp(prefix="quarantine-", dir=tmp_root))
        try:
            q = init_repo(quarantine / "q.git", bare=True)
            (quarantine / "q.git" / "objects" / "info" / "alternates").write_text(
                str((path / "objects").resolve()) + "\n"
            )
            _copy_shallow(path, quarantine / "q.git")
            if isinstance(src, GitSource):
                commit = _fetch_git(q, src, pin)
            elif isinstance(src, BundleSource):
                commit, known_index = _fetch_bundle(q, src, pin)
            else:
                commit = _import_sdist(q, src, pin, cache_dir, quarantine, progress=progress)
            _migrate_objects(quarantine / "q.git" / "objects", path / "objects")
            merge_shallow(quarantine / "q.git", path)
        except SourceError as e:
            failures.append(f"{describe(src)}: {e}")
            log.warning("source failed: %s: %s", describe(src), e)
            continue
        finally:
            shutil.rmtree(quarantine, ignore_errors=True)
        repo.update_ref(pin_ref(pin), commit, f"patchset fetch from {describe(src)}")
        record = _record_path(path, pin)
        record.parent.mkdir(exist_ok=True)
        record.write_text(json.dumps(
            {"commit": pin.commit, "local": commit, "tree": repo.tree_of(commit),
             "source": describe(src), "source_index": known_index,
             # a stand-in from this very archive: it lacks upstream's commit, no use reading it again
             **({"archive_read": True} if isinstance(src, SdistSource) and commit != pin.commit else {})},
            indent=1))
        return Fetched(path, commit, repo.tree_of(commit), describe(src), cached=False)
    raise SourceError(f"no source gave verified {pin.name} {pin.commit}:\n  " + "\n  ".join(failures))


def fetch_timeout() -> float:
    """The limit of one git fetch from a source: `$PATCHSET_FETCH_TIMEOUT` seconds, else an hour.

    A remote that stops answering is then a failed source, and the next source is tried.
    """
    return proc.timeout("PATCHSET_FETCH_TIMEOUT")


def fetch_git_ref(q: GitRepo, url: str, ref: str) -> str:
    """Fetch one ref or commit id of `url` (history depth 1) into `q`; the commit it names.

    Shared by `fetch` (a pin's commit) and `patchset pin --git` (a branch or tag), so that a
    written pin's tree id comes from the very fetch that will verify it.
    """
    try:
        q.run("-c", "http.lowSpeedLimit=1000", "-c", "http.lowSpeedTime=60", "fetch", "--quiet", "--depth=1",
              "--no-tags", url, ref, env={"GIT_TERMINAL_PROMPT": "0"}, timeout=fetch_timeout())
    except ProcessTimeout as e:
        raise SourceError(f"git fetch timed out after {e.timeout_s:g}s") from e
    except ProcessError as e:
        # git's first line names the cause; the last is often "and the repository exists."
        first = e.stderr.strip().splitlines()[:1] or [str(e)]
        raise SourceError(f"git fetch failed: {first[0]}") from e
    return q.out("rev-parse", "FETCH_HEAD^{commit}")


def _fetch_bundle(q: GitRepo, src: BundleSource, pin: Pin) -> tuple[str, int | None]:
    """The bundle's pin commit, and which of the pin's sources its tree is known from (None: the
    pin's own tree). Its commit may be an sdist import, not upstream's: the tree id is what counts."""
    try:
        # a bundle of a shallow pin (git's, or an sdist's real commit) carries no parents: marked
        # shallow first, else the fetch walks to them and fails ("did not send all necessary objects")
        heads = q.run("bundle", "list-heads", src.path, pin_ref(pin), timeout=3600).stdout.split()
        add_shallow(q.path, [h for h in heads[:1] if _SHA1.fullmatch(h)])
        q.run("fetch", "--quiet", "--no-tags", src.path, pin_ref(pin), timeout=3600)
    except ProcessError as e:
        raise SourceError(f"{src.path}: cannot read {pin_ref(pin)} from the bundle: "
                          f"{(e.stderr.strip().splitlines() or [''])[-1]}") from e
    commit = q.out("rev-parse", "FETCH_HEAD")
    # the object's own parent lines: a shallow commit reads as a root to every other git query
    if not re.search(r"^parent ", q.out("cat-file", "commit", commit).split("\n\n", 1)[0], re.M):
        _drop_shallow(q.path, commit)  # a root commit (a stand-in) has no parents to miss
    tree = q.tree_of(commit)
    if tree == pin.tree:
        return commit, None
    for i, other in enumerate(pin.sources):
        if isinstance(other, SdistSource) and other.tree == tree:
            return commit, i
    raise SourceError(f"{src.path}: the bundle's tree {tree} is not the pinned tree {pin.tree}")


def export_bundle(cache_dir: Path, pin: Pin, out: Path) -> Path:
    """Write the cached, verified pin as a git bundle (one commit and its whole tree, no history):
    what `fetch(..., bundle=)` reads on a machine that cannot reach any source."""
    found = lookup(cache_dir, pin)
    if found is None:
        raise SourceError(f"{pin.name} {pin.short} is not in the cache {cache_dir}: run `patchset fetch` first")
    out = out.resolve()
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.tmp")
    GitRepo(found.repo).run("bundle", "create", "--quiet", str(tmp), pin_ref(pin), timeout=3600)
    tmp.replace(out)
    return out


def _fetch_git(q: GitRepo, src: GitSource, pin: Pin) -> str:
    # a commit id is content-addressed, so fetching by id verifies the history; the tree is
    # still compared because the pin's tree id may have been recorded from a mirror
    commit = fetch_git_ref(q, src.url, pin.commit)
    if commit != pin.commit:
        raise SourceError(f"asked for commit {pin.commit}, the remote sent {commit}")
    tree = q.tree_of(commit)
    if pin.tree and tree != pin.tree:
        raise SourceError(
            f"commit {pin.short} has tree {tree}, the pin records {pin.tree}; "
            "the pin's tree id is wrong or was taken from a different tree"
        )
    return commit


def _import_sdist(
    q: GitRepo, src: SdistSource, pin: Pin, cache_dir: Path, quarantine: Path, *, progress: ProgressSink
) -> str:
    download_dir = cache_dir / "downloads" / src.sha256
    had_download = download_dir.is_dir()
    progress.begin(f"downloading {src.requirement or src.url} (checked by sha256)", None)
    try:
        from builder.upstream import mirror  # noqa: PLC0415 (urllib and ssl: only a download needs them)

        archive = mirror.download(src, cache_dir / "downloads", cache_dir / "tmp", progress)
    finally:
        progress.end()
    try:
        tree, count = import_tree(q, archive, src.subdir, quarantine, progress, exclude=src.exclude)
        expected = src.tree or pin.tree
        if tree != expected:
            raise SourceError(
                f"{archive.name}: imported tree {tree} does not match the pinned tree {expected} "
                f"({count} files under {src.subdir}); the import was discarded"
            )
    except BaseException:
        # an archive that gave no verified tree must not stay behind: the cache is left as it was
        if not had_download:
            shutil.rmtree(download_dir, ignore_errors=True)
        raise
    return (write_vendored_commit(q, archive, src.subdir, quarantine / "files", pin.commit, tree)
            or stand_in(q, pin, src, tree))


def stand_in(q: GitRepo, pin: Pin, src: SdistSource, tree: str) -> str:
    """A commit of `tree` made here for `pin`, when the archive lacks upstream's own commit object (or
    its files are not upstream's tree): deterministic, no parents, so no history connects to it."""
    date = f"{pin.date}T00:00:00Z" if pin.date and "T" not in pin.date else (pin.date or "1970-01-01T00:00:00Z")
    ident = {
        **ISOLATED, **COMMITTER,
        "GIT_AUTHOR_NAME": f"{pin.name} upstream", "GIT_AUTHOR_EMAIL": "upstream@patchset.invalid",
        "GIT_AUTHOR_DATE": date, "GIT_COMMITTER_DATE": date,
    }
    message = (
        f"{pin.name} {pin.tag or pin.short} ({pin.commit}) imported from {src.requirement or src.url}\n\n"
        f"Tree {tree} verified against the pin. The archive carries no history, so this commit\n"
        f"stands in for upstream {pin.commit}.\n"
    )
    # deterministic author, committer and date: the same archive always gives the same commit id
    return q.out("commit-tree", tree, "-m", message, env=ident)


def write_vendored_commit(q: GitRepo, archive: Path, subdir: str, files: Path, commit: str, tree: str) -> str:
    """Upstream's own `commit` written into `q` from the archive's vendored git dir, when the archive
    carries that object (its sha1 checked) and it names `tree`; marked shallow when its parents are
    absent (they always are: an sdist ships one commit). '' when it cannot be: the caller makes a
    stand-in commit instead.

    The real commit, not a stand-in, is what lets later upstream history connect to the pin: a git
    fetch of newer commits, patch-ids over the commits between two pins, `canary` (issue 43).
    """
    from builder.upstream.vendored import commit_marker  # noqa: PLC0415 (reads the archive: see download)

    marker, _looked = commit_marker(archive, subdir, files, commit)
    if marker is None or marker.commit != commit or not marker.raw or marker.tree != tree:
        return ""
    obj = q.path / "objects" / commit[:2] / commit[2:]
    obj.parent.mkdir(exist_ok=True)
    if not obj.exists():
        # the loose object as the archive stores it: its sha1 was checked, so these are upstream's bytes
        obj.write_bytes(marker.raw)
    if q.out("rev-parse", f"{commit}^{{tree}}") != tree:
        return ""
    if marker.parents:
        add_shallow(q.path, [commit])
    return commit


def import_tree(q: GitRepo, archive: Path, subdir: str, scratch: Path, progress: ProgressSink, *,
                exclude: tuple[str, ...] = ()) -> tuple[str, int]:
    """Extract `subdir` of a (checksummed) archive under `scratch` and add it to `q`: its tree id
    and file count. The one import both `fetch` and `patchset pin --sdist` use."""
    files = scratch / "files"
    from builder.upstream import mirror  # noqa: PLC0415 (see download above)

    count = mirror.extract_subdir(archive, subdir, files, progress, exclude=exclude)
    progress.begin(f"importing {count} files", None)
    env = {**ISOLATED, "GIT_INDEX_FILE": str(scratch / "index")}
    # --force: upstream tracks files that its own .gitignore matches; a plain add drops them
    q.run("--work-tree", str(files), "add", "--all", "--force", ".", env=env)
    tree = q.out("write-tree", env=env)
    progress.end()
    return tree, count


def _copy_shallow(cache_repo: Path, q: Path) -> None:
    """Tell the quarantine which borrowed commits were fetched without their parents (depth 1).

    Without it git takes a cached pin for a whole history when it negotiates the next fetch, tries
    to walk its parents, and fails ("Could not read <parent>"): a second pin whose commit descends
    from a pin fetched from git could never be fetched.
    """
    shallow = cache_repo / "shallow"
    if shallow.exists():
        shutil.copyfile(shallow, q / "shallow")


def add_shallow(git_dir: Path, commits: list[str]) -> None:
    """List `commits` in git dir `git_dir`'s `shallow` file: commits present without their parents."""
    path = git_dir / "shallow"
    lines = path.read_text().split() if path.exists() else []
    merged = list(dict.fromkeys(lines + commits))
    if merged != lines:
        atomic_write_text(path, "".join(f"{c}\n" for c in merged))


def _drop_shallow(git_dir: Path, commit: str) -> None:
    path = git_dir / "shallow"
    lines = path.read_text().split() if path.exists() else []
    if commit in lines:
        atomic_write_text(path, "".join(f"{c}\n" for c in lines if c != commit))


def merge_shallow(src: Path, dst: Path) -> None:
    """Add the shallow commits of git dir `src` to those of git dir `dst`: the cache's after a fetch
    (see `_copy_shallow`), a repository's that borrows the cache's objects (else git takes the
    missing parents of a pin fetched at depth 1 for a broken history: fsck, log)."""
    new = src / "shallow"
    if new.exists():
        add_shallow(dst, new.read_text().split())


def _migrate_objects(src: Path, dst: Path) -> None:
    """Move a quarantine's objects into the cache: packs before their indexes, as git does."""
    for sub in sorted(p for p in src.iterdir() if p.is_dir() and len(p.name) == 2):
        target = dst / sub.name
        target.mkdir(exist_ok=True)
        for obj in sub.iterdir():
            dest = target / obj.name
            if not dest.exists():
                obj.replace(dest)
    pack_src = src / "pack"
    if pack_src.is_dir():
        (dst / "pack").mkdir(exist_ok=True)
        files = sorted(pack_src.iterdir(), key=lambda p: (p.suffix == ".idx", p.name))
        for f in files:
            dest = dst / "pack" / f.name
            if not dest.exists():
                f.replace(dest)

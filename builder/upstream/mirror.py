"""Source distributions as an untrusted mirror: download, checksum, safe extraction."""

from __future__ import annotations

import re
import shutil
import sys
import tarfile
import tempfile
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from builder import proc
from builder.errors import ProcessError, SourceError
from builder.fsutil import sha256_file
from builder.progress import NullProgress, ProgressSink
from builder.upstream.pin import SdistSource


def _requirement_name(requirement: str) -> str:
    m = re.match(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)", requirement)
    if not m:
        raise SourceError(f"cannot read a package name from requirement '{requirement}'")
    return m.group(1)


def download(src: SdistSource, downloads_dir: Path, tmp_root: Path, progress: ProgressSink | None = None) -> Path:
    """The verified archive in the download cache, downloading it when it is not there yet.

    A cached file is re-hashed before use: the cache is a folder anyone can write to. A download
    notes its size and rate on `progress`.
    """
    final_dir = downloads_dir / src.sha256
    if final_dir.is_dir():
        for f in sorted(final_dir.iterdir()):
            if f.is_file() and sha256_file(f) == src.sha256:
                return f
        shutil.rmtree(final_dir)
    tmp_root.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix="dl-", dir=tmp_root))
    try:
        got_file = _download_to(tmp, src.requirement, src.url, progress or NullProgress())
        got = sha256_file(got_file)
        if got != src.sha256:
            raise SourceError(
                f"{got_file.name}: sha256 mismatch: expected {src.sha256}, found {got}; "
                "the download was discarded"
            )
        final_dir.mkdir(parents=True, exist_ok=True)
        dest = final_dir / got_file.name
        got_file.replace(dest)
        return dest
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _download_to(tmp: Path, requirement: str, url: str, progress: ProgressSink) -> Path:
    """Download one archive into the empty folder `tmp` (pip for a requirement, else the URL), and note
    its size and rate on `progress`."""
    start = time.monotonic()
    if requirement:
        name = _requirement_name(requirement)
        # --no-binary only for the package itself: ':all:' would also force its build
        # requirements (cmake, ninja) to compile from source just to read metadata.
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", name,
               "--progress-bar", "off", "--disable-pip-version-check", "-d", str(tmp), requirement]
        try:
            proc.run(cmd, timeout=1800)
        except ProcessError as e:
            raise SourceError(f"pip download {requirement} failed: {e.stderr.strip()[-300:]}") from e
    else:
        target = tmp / (PurePosixPath(url.split("?", maxsplit=1)[0]).name or "archive.tar.gz")
        try:
            with urllib.request.urlopen(url, timeout=60) as r, target.open("wb") as fh:
                shutil.copyfileobj(r, fh)
        except (OSError, ValueError) as e:
            raise SourceError(f"download {url} failed: {e}") from e
    files = [f for f in tmp.iterdir() if f.is_file()]
    if len(files) != 1:
        raise SourceError(f"expected one archive from {requirement or url}, got {len(files)}")
    progress.note(rate_text(files[0].stat().st_size, time.monotonic() - start))
    return files[0]


def rate_text(size: int, seconds: float) -> str:
    """A download's size and rate, as progress notes it ("76.4 MiB in 14 s, 5.5 MiB/s")."""
    mib = size / 2**20
    return f"{mib:.1f} MiB in {seconds:.0f} s, {mib / max(seconds, 1e-3):.1f} MiB/s"


@dataclass(frozen=True)
class Download:
    """An archive whose checksum is not known in advance (`patchset pin`), hashed on arrival."""

    path: Path
    """The archive, in the download cache under its own sha256."""
    sha256: str
    from_cache: bool
    """True when the download cache served it (re-hashed, never trusted by name alone)."""


def _sdist_file_name(requirement: str) -> str | None:
    """`name-version.tar.gz` as PyPI names the sdist of an exact `name==version`, else None."""
    m = re.fullmatch(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*===?\s*([A-Za-z0-9.+!_-]+)\s*", requirement)
    if not m:
        return None
    # PEP 625: the distribution name normalized with underscores
    return f"{re.sub(r'[-_.]+', '_', m.group(1)).lower()}-{m.group(2)}.tar.gz"


def download_new(requirement: str, url: str, downloads_dir: Path, tmp_root: Path,
                 progress: ProgressSink | None = None) -> Download:
    """Fetch an archive whose sha256 is not known yet; store it in the download cache under it.

    An exact requirement (`name==version`) is served from the download cache when an archive of
    that file name is there and its bytes still hash to the folder it sits in: the 77 MB sdist is
    not downloaded twice. Either way the returned sha256 is computed from the bytes.
    """
    if requirement and (want := _sdist_file_name(requirement)) and downloads_dir.is_dir():
        for f in sorted(downloads_dir.glob("*/*")):
            if f.is_file() and f.name.lower() == want.lower() and sha256_file(f) == f.parent.name:
                return Download(f, f.parent.name, from_cache=True)
    tmp_root.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix="dl-", dir=tmp_root))
    try:
        got_file = _download_to(tmp, requirement, url, progress or NullProgress())
        sha = sha256_file(got_file)
        final_dir = downloads_dir / sha
        final_dir.mkdir(parents=True, exist_ok=True)
        dest = final_dir / got_file.name
        got_file.replace(dest)
        return Download(dest, sha, from_cache=False)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _top_folder(names: list[str]) -> str:
    tops = {PurePosixPath(n).parts[0] for n in names if PurePosixPath(n).parts}
    return tops.pop() if len(tops) == 1 else ""


def _check_member(m: tarfile.TarInfo, archive: Path) -> None:
    p = PurePosixPath(m.name)
    if m.name.startswith("/") or p.is_absolute() or ".." in p.parts or "\\" in m.name:
        raise SourceError(f"{archive.name}: refused: member '{m.name}' points outside the archive")
    if m.issym() or m.islnk():
        target = PurePosixPath(m.linkname)
        base = p.parent if m.issym() else PurePosixPath()
        if target.is_absolute() or _escapes(base / target):
            raise SourceError(f"{archive.name}: refused: link '{m.name}' -> '{m.linkname}' leaves the tree")
    elif not (m.isfile() or m.isdir()):
        raise SourceError(f"{archive.name}: refused: member '{m.name}' is not a file, folder or link")


def _escapes(path: PurePosixPath) -> bool:
    depth = 0
    for part in path.parts:
        if part == "..":
            depth -= 1
            if depth < 0:
                return True
        elif part not in ("", "."):
            depth += 1
    return False


def extract_subdir(
    archive: Path, subdir: str, dest: Path, progress: ProgressSink | None = None, *, exclude: tuple[str, ...] = ()
) -> int:
    """Extract `subdir` of the archive's top folder into `dest`; returns the number of files.

    Every member of the whole archive is checked first, so a hostile archive is refused outright
    rather than partly extracted. `.git` entries (the sdist carries a submodule link file) are
    left out: they are not part of the upstream tree. So is everything under the `exclude` paths
    (relative to `subdir`; `subdir` "." is the whole top folder).
    """
    excluded = tuple(PurePosixPath(e) for e in exclude)
    progress = progress or NullProgress()
    try:
        tf = tarfile.open(archive, "r:*")  # noqa: SIM115 - closed by the with below
    except (tarfile.TarError, OSError) as e:
        raise SourceError(f"{archive.name}: not a readable tar archive: {e}") from e
    with tf:
        members = tf.getmembers()
        for m in members:
            _check_member(m, archive)
        top = _top_folder([m.name for m in members])
        prefix = PurePosixPath(top, subdir) if top else PurePosixPath(subdir)
        chosen: list[tarfile.TarInfo] = []
        for member in members:
            try:
                rel = PurePosixPath(member.name).relative_to(prefix)
            except ValueError:
                continue
            if rel == PurePosixPath(".") or ".git" in rel.parts:
                continue
            if any(rel == e or e in rel.parents for e in excluded):
                continue
            m = member.replace(name=str(rel), deep=False)
            if m.issym() and (PurePosixPath(m.linkname).is_absolute() or _escapes(rel.parent / m.linkname)):
                # inside the archive but outside the subdir: it would point out of `dest`
                raise SourceError(f"{archive.name}: refused: link '{member.name}' -> '{m.linkname}' leaves '{prefix}'")
            if m.islnk():
                try:
                    link_rel = PurePosixPath(m.linkname).relative_to(prefix)
                except ValueError:
                    raise SourceError(
                        f"{archive.name}: refused: hard link '{m.name}' -> '{m.linkname}' leaves '{prefix}'"
                    ) from None
                m = m.replace(linkname=str(link_rel), deep=False)
            chosen.append(m)
        if not any(m.isfile() for m in chosen):
            raise SourceError(f"{archive.name}: no files under '{prefix}'")
        dest.mkdir(parents=True, exist_ok=True)
        progress.begin(f"extracting {prefix}", len(chosen))
        for i, m in enumerate(chosen, 1):
            # the 'data' filter is a second line of defence: it re-checks paths and links and
            # drops device files and setuid bits (PEP 706: Python 3.11.4+, as pyproject requires)
            try:
                tf.extract(m, dest, filter="data")
            except tarfile.TarError as e:
                raise SourceError(f"{archive.name}: refused: {e}") from e
            if i % 200 == 0:
                progress.update(i)
        progress.update(len(chosen))
        progress.end()
    return sum(1 for m in chosen if m.isfile() or m.issym())


def read_small_files(archive: Path, names: tuple[str, ...], prefixes: tuple[str, ...] = (),
                     limit: int = 1 << 20) -> dict[str, bytes]:
    """The bytes of the regular-file members whose path (below the archive's top folder) is one
    of `names` or starts with one of `prefixes`, read in memory in one pass without extracting
    anything; members larger than `limit` (packs) are left out."""
    try:
        tf = tarfile.open(archive, "r:*")  # noqa: SIM115 - closed by the with below
    except (tarfile.TarError, OSError) as e:
        raise SourceError(f"{archive.name}: not a readable tar archive: {e}") from e
    found: dict[str, bytes] = {}
    with tf:
        top = ""
        for m in tf:
            parts = PurePosixPath(m.name).parts
            if not parts:
                continue
            top = top or parts[0]
            rel = "/".join(parts[1:]) if parts[0] == top else ""
            if not (rel in names or rel.startswith(prefixes)) or not m.isfile() or m.size > limit:
                continue
            fh = tf.extractfile(m)
            if fh is not None:
                found[rel] = fh.read()
    return found

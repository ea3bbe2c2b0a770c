"""The pin: which upstream commit the series sits on, its tree id, and where to get its source."""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from builder.errors import PinError
from builder.fsutil import atomic_write

_SHA1 = re.compile(r"^[0-9a-f]{40}$")
_SHA256 = re.compile(r"^[0-9a-f]{64}$")


@dataclass(frozen=True)
class GitSource:
    """A git remote that serves the pinned commit by id."""

    url: str


@dataclass(frozen=True)
class SdistSource:
    """A source distribution that carries the upstream tree in a sub-folder.

    Fetched with `pip download` when `requirement` is set (the PyPI mirror), or from `url`
    (file:// or https://) when that is set instead. Never trusted: its sha256 is checked before
    extraction and the imported tree id against the pin.
    """

    sha256: str
    subdir: str
    requirement: str = ""
    url: str = ""
    tree: str = ""
    """The tree this archive is known to give, when it differs from the pin's (files the
    mirror leaves out, documented in the pin's tree_note). Empty: the pin's tree."""
    exclude: tuple[str, ...] = ()
    """Folders of `subdir` that are not part of this upstream's tree (llama-cpp-python's sdist
    carries llama.cpp in `vendor/llama.cpp`, a git submodule of its own)."""


@dataclass(frozen=True)
class BundleSource:
    """A git bundle written by `patchset fetch --export-bundle` on a machine that has the pin, carried
    to one without network. Never trusted: the tree it gives is checked against the pin. Given on
    the command line (`patchset fetch --bundle FILE`), not in the pin file."""

    path: str


Source = GitSource | SdistSource | BundleSource


@dataclass(frozen=True)
class Pin:
    """One upstream at one commit."""

    name: str
    repository: str
    commit: str
    tree: str
    tag: str = ""
    date: str = ""
    tree_note: str = ""
    """How the tree id was obtained, and what is known about it."""
    sources: tuple[Source, ...] = field(default_factory=tuple)

    @property
    def short(self) -> str:
        return self.commit[:7]


def _need(table: dict, key: str, where: str) -> str:
    value = table.get(key)
    if not isinstance(value, str) or not value:
        raise PinError(f"{where}: missing or empty string field '{key}'")
    return value


def load_pin(path: Path) -> Pin:
    """Read and validate a pin file; every problem names the file and the field."""
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError as e:
        raise PinError(f"{path}: pin file not found") from e
    except tomllib.TOMLDecodeError as e:
        raise PinError(f"{path}: not valid TOML: {e}") from e
    where = str(path)
    commit = _need(data, "commit", where)
    if not _SHA1.match(commit):
        raise PinError(f"{where}: commit must be a full 40-hex commit id, got '{commit}'")
    tree = _need(data, "tree", where)
    if not _SHA1.match(tree):
        raise PinError(f"{where}: tree must be a full 40-hex tree id, got '{tree}'")
    sources: list[Source] = []
    raw_sources = data.get("source", [])
    if not isinstance(raw_sources, list) or not raw_sources:
        raise PinError(f"{where}: needs at least one [[source]]")
    for i, s in enumerate(raw_sources, 1):
        sw = f"{where}: source #{i}"
        kind = s.get("kind")
        if kind == "git":
            sources.append(GitSource(url=_need(s, "url", sw)))
        elif kind == "sdist":
            sha = _need(s, "sha256", sw).lower()
            if not _SHA256.match(sha):
                raise PinError(f"{sw}: sha256 must be 64 hex digits")
            req, url = s.get("requirement", ""), s.get("url", "")
            if bool(req) == bool(url):
                raise PinError(f"{sw}: an sdist source needs exactly one of 'requirement' or 'url'")
            subdir = _need(s, "subdir", sw)
            if subdir.startswith("/") or ".." in Path(subdir).parts:
                raise PinError(f"{sw}: subdir must be a relative path inside the archive")
            tree_override = s.get("tree", "")
            if tree_override and not _SHA1.match(tree_override):
                raise PinError(f"{sw}: tree must be a full 40-hex tree id")
            exclude = s.get("exclude", [])
            if not isinstance(exclude, list) or not all(
                    isinstance(e, str) and e and not e.startswith("/") and ".." not in Path(e).parts for e in exclude):
                raise PinError(f"{sw}: exclude must be a list of relative paths inside subdir")
            sources.append(SdistSource(sha256=sha, subdir=subdir, requirement=req, url=url, tree=tree_override,
                                       exclude=tuple(exclude)))
        else:
            raise PinError(f"{sw}: unknown kind '{kind}' (expected 'git' or 'sdist')")
    return Pin(
        name=_need(data, "name", where),
        repository=_need(data, "repository", where),
        commit=commit,
        tree=tree,
        tag=data.get("tag", ""),
        date=str(data.get("date", "")),
        tree_note=data.get("tree_note", ""),
        sources=tuple(sources),
    )


def dump_pin(pin: Pin) -> str:
    """The pin as TOML, fields in a fixed order so rewrites diff cleanly."""
    doc: dict = {"name": pin.name, "repository": pin.repository, "commit": pin.commit}
    if pin.tag:
        doc["tag"] = pin.tag
    if pin.date:
        doc["date"] = pin.date
    doc["tree"] = pin.tree
    if pin.tree_note:
        doc["tree_note"] = pin.tree_note
    srcs: list[dict[str, str | list[str]]] = []
    for s in pin.sources:
        if isinstance(s, GitSource):
            srcs.append({"kind": "git", "url": s.url})
        elif isinstance(s, BundleSource):
            continue  # given on the command line for one fetch, never part of the pin file
        else:
            entry: dict[str, str | list[str]] = {"kind": "sdist"}
            entry.update({"requirement": s.requirement} if s.requirement else {"url": s.url})
            entry.update({"sha256": s.sha256, "subdir": s.subdir})
            if s.exclude:
                entry["exclude"] = list(s.exclude)
            if s.tree:
                entry["tree"] = s.tree
            srcs.append(entry)
    doc["source"] = srcs
    import tomli_w  # noqa: PLC0415 (only a pin being written needs it)

    return tomli_w.dumps(doc, multiline_strings=True)


def write_pin(pin: Pin, path: Path) -> None:
    """Write atomically: a temporary file in the same folder, then rename."""
    atomic_write(path, dump_pin(pin).encode())

"""What a wheel holds, in data: the pin, the series, the bindings sdist, and the version label.

The same functions compute the label and the provenance for a build and for anyone who wants to
know what a build of a given pin and series would say, so a test can compare two series without
compiling twice.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass

from packaging.version import InvalidVersion, Version

from builder.errors import InputError
from builder.series.model import Series
from builder.upstream.pin import Pin

SCHEMA = 1
_TAG_BUILD = re.compile(r"^b(\d+)$")


@dataclass(frozen=True)
class PatchRecord:
    """One patch as the wheel records it."""

    file: str
    subject: str
    status: str
    """The patch's `Patchset-Upstream`: not-sent, sent, merged, rejected or not-needed."""
    status_ref: str
    """What follows it: the pull-request URL, upstream commit, reason or note, else empty."""
    sha256: str
    """Of the patch file's bytes, as committed in `patches/`."""


def patch_records(series: Series) -> tuple[PatchRecord, ...]:
    return tuple(
        PatchRecord(p.name, p.subject, p.meta.status, p.meta.status_ref,
                    hashlib.sha256(p.path.read_bytes()).hexdigest())
        for p in series.patches
    )


def series_hash(records: tuple[PatchRecord, ...]) -> str:
    """sha256 of the series' `sha256sum` listing, in series order.

    Anyone can recompute it from a checkout with shell tools:
    `cd patches && sha256sum $(grep -v '^#' series | awk '{print $1}') | sha256sum`.
    """
    listing = "".join(f"{r.sha256}  {r.file}\n" for r in records)
    return hashlib.sha256(listing.encode()).hexdigest()


def upstream_build(pin: Pin) -> int:
    """The pin's upstream build number: N of a `bN` tag (llama.cpp tags every master commit so),
    else the pin's date as YYYYMMDD, which also grows as the pin moves forward."""
    m = _TAG_BUILD.match(pin.tag or "")
    if m:
        return int(m.group(1))
    digits = re.sub(r"\D", "", pin.date or "")[:8]
    if len(digits) == 8:
        return int(digits)
    raise InputError(f"pin {pin.commit}: needs a `bN` tag or a date to label a wheel")


def local_label(pin: Pin, records: tuple[PatchRecord, ...]) -> str:
    """`<upstream build>.<number of patches>.g<first 8 hex of the series hash>`.

    Both numbers are all-digit segments: PEP 440 compares those as integers (b9999 < b11312 and
    9 < 10 patches), where a segment with a letter compares as text ('p10' < 'p9'). The hash gets
    a letter (as in git describe) so that it never reads as a number, whose leading zeros a
    normalizing tool would strip.
    """
    return f"{upstream_build(pin)}.{len(records)}.g{series_hash(records)[:8]}"


def wheel_version(bindings_version: str, pin: Pin, records: tuple[PatchRecord, ...]) -> str:
    """The bindings' public version with our local label, normalized as pip will print it."""
    try:
        base = Version(bindings_version)
    except InvalidVersion as e:
        raise InputError(f"bindings version '{bindings_version}' is not a PEP 440 version") from e
    if base.local:
        raise InputError(f"bindings version '{bindings_version}' already has a local label; cannot add ours")
    full = f"{base.public}+{local_label(pin, records)}"
    normalized = str(Version(full))
    if normalized != full:  # pragma: no cover - the label is built to be normal
        raise InputError(f"version '{full}' is not in normal form ({normalized})")
    return full


@dataclass(frozen=True)
class Bindings:
    """The bindings sdist the wheel is built from."""

    name: str
    version: str
    sdist: str
    """The archive's file name."""
    sha256: str
    source: str
    """Where it came from: the pin's sdist source, or --sdist."""


def _patch_dicts(records: tuple[PatchRecord, ...]) -> list[dict[str, str]]:
    return [{"file": r.file, "subject": r.subject, "status": r.status, "status_ref": r.status_ref, "sha256": r.sha256}
            for r in records]


def series_record(name: str, pin: Pin, series: Series, *, patched_commit: str, patched_tree: str,
                  upstream_commit: str) -> dict:
    """A second series (the bindings') as the wheel records it: its upstream, what was staged, its patches."""
    records = patch_records(series)
    return {
        "name": name,
        "upstream": {"name": pin.name, "repository": pin.repository, "commit": pin.commit, "tree": pin.tree,
                     "tag": pin.tag, "date": pin.date},
        "applied": {"commit": patched_commit, "tree": patched_tree, "base": upstream_commit},
        "count": len(records),
        "hash": series_hash(records),
        "patches": _patch_dicts(records),
    }


def provenance(
    pin: Pin, series: Series, *, upstream_commit: str, patched_commit: str, patched_tree: str, bindings: Bindings,
    backend: str, cmake_args: tuple[str, ...], drift: list[dict[str, str]], bindings_series: dict | None = None,
    left_out: list[str] | None = None,
) -> dict:
    """The content of `llama_cpp/patchset.json`: plain JSON types, keys in a fixed order.

    `bindings_series`: the second series applied to the bindings (`series_record`), when the project
    has one; the version's patch count and hash then cover both series."""
    records = patch_records(series)
    if bindings_series is not None:
        records += tuple(PatchRecord(f"../patches-{bindings_series['name']}/{p['file']}", p["subject"], p["status"],
                                     p["status_ref"], p["sha256"]) for p in bindings_series["patches"])
    data = {
        "schema": SCHEMA,
        "version": wheel_version(bindings.version, pin, records),
        "upstream": {
            "name": pin.name,
            "repository": pin.repository,
            "commit": pin.commit,
            "tree": pin.tree,
            "tag": pin.tag,
            "date": pin.date,
        },
        "vendored": {
            "commit": patched_commit,
            "tree": patched_tree,
            "base": upstream_commit,
            "note": "git commit and tree of the work repository's branch 'patched' that was archived into "
                    "vendor/llama.cpp; base is the commit the series was applied on",
        },
        "bindings": {
            "name": bindings.name,
            "version": bindings.version,
            "sdist": bindings.sdist,
            "sdist_sha256": bindings.sha256,
            "source": bindings.source,
        },
        "backend": backend,
        "cmake_args": list(cmake_args),
        "left_out": list(left_out or []),
        "series": {
            "count": len(series.patches),
            "hash": series_hash(patch_records(series)),
            "patches": _patch_dicts(patch_records(series)),
        },
        "binding_drift": drift,
    }
    if bindings_series is not None:
        data["bindings_series"] = bindings_series
    return data


def description_section(data: dict) -> str:
    """A short Markdown section for the top of the wheel's description (its METADATA body)."""
    up, series = data["upstream"], data["series"]
    lines = [
        "## This build: llama.cpp with a patch series (patchset)",
        "",
        f"Version `{data['version']}`: llama-cpp-python {data['bindings']['version']} (sdist sha256 "
        f"`{data['bindings']['sdist_sha256']}`) with its vendored llama.cpp replaced by upstream "
        f"{up['name']} {up['tag'] or ''} (commit `{up['commit']}`, tree `{up['tree']}`) plus "
        f"{series['count']} patch(es) (series hash `{series['hash']}`); vendored tree "
        f"`{data['vendored']['tree']}`; backend {data['backend']}"
        + (f"; left out: {', '.join(data['left_out'])}." if data.get("left_out") else "."),
        "",
        "| # | patch | upstream status | sha256 |",
        "| --- | --- | --- | --- |",
    ]
    for i, p in enumerate(series["patches"], 1):
        status = f"{p['status']} {p['status_ref']}".strip()
        lines.append(f"| {i} | `{p['file']}`: {p['subject']} | {status} | `{p['sha256']}` |")
    second = data.get("bindings_series")
    if second:
        lines += ["", f"The bindings with a series of their own (`{second['name']}`) on {second['upstream']['name']} "
                      f"{second['upstream']['tag'] or ''} (commit `{second['upstream']['commit']}`): {second['count']} "
                      f"patch(es) (series hash `{second['hash']}`).", "",
                  "| # | patch | upstream status | sha256 |", "| --- | --- | --- | --- |"]
        for i, p in enumerate(second["patches"], 1):
            status = f"{p['status']} {p['status_ref']}".strip()
            lines.append(f"| B{i} | `{p['file']}`: {p['subject']} | {status} | `{p['sha256']}` |")
    if data["binding_drift"]:
        lines += ["", "Binding drift (declarations the series changed that the Python bindings declare differently):"]
        lines += [f"- `{d['function']}`: {d['problem']}" for d in data["binding_drift"]]
    lines += ["", "An installed copy says the same: `python -m llama_cpp.patchset` (or `--json`).", "", ""]
    return "\n".join(lines)

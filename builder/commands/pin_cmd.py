"""`patchset pin`: a pin file for another upstream commit written from its source, as fetch checks it."""

from __future__ import annotations

import argparse
from pathlib import Path

from builder.commands import jsonout, options
from builder.console import CliProgress, console, err_console
from builder.errors import EXIT_FAILED, EXIT_LOCKED, EXIT_OK, InputError, Outcome, PinError
from builder.fsutil import atomic_write_text
from builder.progress import NullProgress
from builder.project import Project
from builder.upstream.hold import held, load_holds
from builder.upstream.pin import GitSource, Pin, dump_pin, load_pin
from builder.upstream.pinwrite import DEFAULT_NAME, DEFAULT_REPOSITORY, PinRequest, make_pin

NAME = "pin"
HELP = "write a pin file for another upstream commit from its source: sha256 and tree id computed as fetch checks them"

EXAMPLE = """example:
  patchset pin --git https://github.com/ggml-org/llama.cpp b7100 --out next.toml
  patchset rebase --onto next.toml"""
EXITS = (EXIT_OK, EXIT_FAILED, EXIT_LOCKED)
"""The exit codes it returns besides errors.ANY_COMMAND (its --help lists them)."""


def add_arguments(p: argparse.ArgumentParser) -> None:
    g = p.add_mutually_exclusive_group(required=True)
    g.add_argument("--sdist", metavar="SOURCE",
                   help="a requirement (name==version, fetched with pip), a URL or an archive file")
    g.add_argument("--git", nargs=2, metavar=("URL", "REF"), help="a git remote and a branch, tag or commit id of it")
    p.add_argument("--subdir", default="vendor/llama.cpp", help="the folder of the sdist that holds the upstream tree")
    p.add_argument("--commit", help="the upstream commit of an sdist (default: a marker the archive carries)")
    p.add_argument("--tag", help="the upstream tag (default: none, or the ref when it names a tag)")
    p.add_argument("--date", help="the commit date, YYYY-MM-DD (default: the commit's committer date, when known)")
    p.add_argument("--git-source", action="append", default=None, metavar="URL",
                   help="a git remote to list before an sdist source (default: the current pin's git sources)")
    p.add_argument("--out", type=Path, help="write the pin here (default: print it)")
    options.add_force(p, "pin", "an existing --out file")
    jsonout.add_option(p, "the pin (without --out: its text in the document, not on stdout alone)")


def _json(pin: Pin | None, out: Path | None, text: str | None, files: int | None = None,
          from_cache: bool | None = None) -> dict:
    """The document of `pin --json`: the pin's fields (null until it is made), where it went, its text."""
    fields: dict[str, object] = {"name": None, "repository": None, "commit": None, "tree": None, "tag": None,
                                 "date": None, "sources": None}
    if pin is not None:
        fields = {"name": pin.name, "repository": pin.repository, "commit": pin.commit, "tree": pin.tree,
                  "tag": pin.tag or None, "date": pin.date or None,
                  "sources": [{"kind": type(s).__name__.removesuffix("Source").lower(), **jsonout.plain(s)}
                              for s in pin.sources]}
    return {**fields, "out": None if out is None else str(out), "text": text, "files": files,
            "from_cache": from_cache}


def run(args: argparse.Namespace, project: Project) -> Outcome:
    out: Path | None = args.out
    jsonout.emit(args, "pin", _json(None, out, None))
    if out is not None:
        if out.resolve() == project.pin_file:
            raise InputError(f"--out {out}: that is the pin in use; move the series with "
                             f"`patchset rebase --onto {out}` from a pin written elsewhere")
        if out.exists() and not args.force:
            raise InputError(f"--out {out}: the file exists (--force overwrites it)")
    try:
        current = load_pin(project.pin_file)
        name, repository = current.name, current.repository
        gits = tuple(s.url for s in current.sources if isinstance(s, GitSource))
    except PinError:
        name, repository, gits = DEFAULT_NAME, DEFAULT_REPOSITORY, ()
    req = PinRequest(
        sdist=args.sdist or "", subdir=args.subdir, git_url=args.git[0] if args.git else "",
        git_ref=args.git[1] if args.git else "", commit=args.commit or "", tag=args.tag or "",
        date=args.date or "", name=name, repository=repository,
        git_sources=tuple(args.git_source) if args.git_source is not None else gits,
    )
    # printed to stdout, the pin must be the only thing there
    result = make_pin(project.cache_dir, req, CliProgress() if out else NullProgress())
    pin = result.pin
    hold_file = project.pin_file.parent / "hold"
    hold = held(load_holds(hold_file), pin)
    if hold is not None:
        raise InputError(f"{hold_file}:{hold.line}: {pin.tag or pin.commit} is held ({hold.ref}: {hold.reason}); "
                         "no pin written")
    text = dump_pin(pin)
    if out is not None:
        atomic_write_text(out, text)
    elif not args.json:
        print(text, end="")
    jsonout.emit(args, "pin", _json(pin, out, text, result.files, result.from_cache))
    where = f"wrote {out}" if out else ("pin in the document" if args.json else "pin printed above")
    report = console if out else err_console
    report.print(f"{where}: {pin.name} {pin.tag or ''} commit {pin.commit} tree {pin.tree}"
                 + (f" ({result.files} files{', archive from the download cache' if result.from_cache else ''})"
                    if result.files else ""), highlight=False)
    return Outcome.OK

from __future__ import annotations

import argparse
from pathlib import Path

from builder.console import CliProgress, console
from builder.errors import Outcome
from builder.project import default_cache_dir
from builder.series.init import init
from builder.upstream.pinwrite import DEFAULT_NAME, DEFAULT_REPOSITORY, PinRequest

NAME = "init"
HELP = ("start a project for another fork or pin in DIR: upstream/llama.cpp.toml written from the upstream's own "
        "bytes (as `patchset pin` writes it), an empty patches/series, the CI workflow "
        ".github/workflows/patchset.yml and .patchset/ in .gitignore; refuses a folder that holds a project")
EXAMPLE = """example:
  patchset init myfork --git https://github.com/ggml-org/llama.cpp b7000
  cd myfork && patchset apply"""
NEEDS_PROJECT = False


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("dir", metavar="DIR", type=Path, nargs="?", default=Path("."),
                   help="the project folder, made if missing (default: the current folder)")
    g = p.add_mutually_exclusive_group(required=True)
    g.add_argument("--git", nargs=2, metavar=("URL", "REF"),
                   help="the fork's or upstream's git remote and a branch, tag or commit id of it")
    g.add_argument("--sdist", metavar="SOURCE",
                   help="a requirement (name==version, fetched with pip), a URL or an archive file")
    p.add_argument("--subdir", default="vendor/llama.cpp",
                   help="with --sdist: the folder of the sdist that holds the upstream tree (default: %(default)s)")
    p.add_argument("--commit", help="with --sdist: the upstream commit (default: a marker the archive carries)")
    p.add_argument("--tag", help="the upstream tag (default: none, or the ref when it names a tag)")
    p.add_argument("--date", help="the commit date, YYYY-MM-DD (default: the commit's committer date, when known)")
    p.add_argument("--repository", default=DEFAULT_REPOSITORY,
                   help="the upstream repository the pin names (default: %(default)s)")


def run(args: argparse.Namespace, project: None) -> Outcome:
    req = PinRequest(sdist=args.sdist or "", subdir=args.subdir, git_url=args.git[0] if args.git else "",
                     git_ref=args.git[1] if args.git else "", commit=args.commit or "", tag=args.tag or "",
                     date=args.date or "", name=DEFAULT_NAME, repository=args.repository,
                     git_sources=())
    root = args.dir.resolve()
    result = init(root, req, default_cache_dir(), CliProgress())
    for f in result.written:
        console.print(f"  wrote {f.relative_to(root)}", highlight=False)
    console.print(f"a new project in {root}, pinned to {result.tag or result.commit}; next: `patchset apply`, "
                  "then `patchset new NAME` for the first patch", highlight=False)
    return Outcome.OK

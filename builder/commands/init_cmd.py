"""`patchset init`: a project for another fork or pin started in DIR: its pin, an empty series, its CI workflows."""

from __future__ import annotations

import argparse
import importlib.metadata
import json
from pathlib import Path
from urllib.parse import unquote, urlparse

import builder
from builder import proc
from builder.commands import jsonout
from builder.console import CliProgress, console
from builder.errors import EXIT_FAILED, EXIT_LOCKED, EXIT_OK, InputError, Outcome
from builder.project import default_cache_dir
from builder.series.init import WORKFLOWS, init
from builder.upstream.pinwrite import DEFAULT_NAME, DEFAULT_REPOSITORY, PinRequest

NAME = "init"
HELP = ("start a project for another fork or pin in DIR: upstream/llama.cpp.toml written from the upstream's own "
        "bytes (as `patchset pin` writes it), an empty patches/series, the CI workflows under .github/workflows/ "
        "(--ci: patchset.yml for the CPU, patchset-cuda.yml, patchset-metal.yml) and .patchset/ in .gitignore; "
        "refuses a folder that holds a project")
EXAMPLE = """example:
  patchset init myfork --git https://github.com/ggml-org/llama.cpp b7000 --ci cpu,cuda,metal \\
      --patchset-source git+https://github.com/OWNER/patchset@COMMIT
  cd myfork && patchset apply"""
NEEDS_PROJECT = False

EXITS = (EXIT_OK, EXIT_FAILED, EXIT_LOCKED)
"""The exit codes it returns besides errors.ANY_COMMAND (its --help lists them)."""


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
    p.add_argument("--ci", default="cpu", metavar="BACKENDS",
                   help=f"the CI workflows to write, by backend, separated by commas ({','.join(WORKFLOWS)}; "
                        "default: %(default)s)")
    p.add_argument("--bindings", metavar="REQUIREMENT|FILE",
                   help="the llama-cpp-python sdist `patchset wheel` builds (llama-cpp-python==X, a URL or an "
                        "archive), recorded in the pin by sha256; a warning when its vendored llama.cpp is not the pin")
    p.add_argument("--patchset-source", metavar="SPEC",
                   help="where the workflows install patchset from (it is not on the package index): "
                        "git+https://HOST/OWNER/patchset@COMMIT or a wheel's https URL (default: the git commit this "
                        "patchset was installed from, when its repository is on https)")
    jsonout.add_option(p, "the new project")


def run(args: argparse.Namespace, project: None) -> Outcome:
    req = PinRequest(sdist=args.sdist or "", subdir=args.subdir, git_url=args.git[0] if args.git else "",
                     git_ref=args.git[1] if args.git else "", commit=args.commit or "", tag=args.tag or "",
                     date=args.date or "", name=DEFAULT_NAME, repository=args.repository,
                     git_sources=())
    root = args.dir.resolve()
    body = {"root": str(root), "commit": None, "tag": None, "ci": None, "patchset_source": None, "written": None,
            "warnings": None}
    jsonout.emit(args, "init", body)
    source = args.patchset_source or installed_source()
    if not source:
        raise InputError("init: cannot tell where CI should install patchset from (it is not on the package index, "
                         "and this copy was not installed from a git commit of an https repository): give "
                         "--patchset-source git+https://HOST/OWNER/patchset@COMMIT or a wheel's https URL")
    ci = tuple(b.strip() for b in args.ci.split(",") if b.strip())
    result = init(root, req, default_cache_dir(), source, ci, args.bindings or "", CliProgress())
    jsonout.emit(args, "init", {**body, "commit": result.commit, "tag": result.tag or None, "ci": list(ci),
                                "patchset_source": source,
                                "written": [str(f.relative_to(root)) for f in result.written],
                                "warnings": list(result.warnings)})
    for w in result.warnings:
        console.print(f"[yellow]warning:[/] {w}", highlight=False)
    for f in result.written:
        console.print(f"  wrote {f.relative_to(root)}", highlight=False)
    console.print(f"a new project in {root}, pinned to {result.tag or result.commit}; next: `patchset apply`, "
                  "then `patchset new NAME` for the first patch", highlight=False)
    return Outcome.OK


def installed_source() -> str:
    """Where this patchset came from, when CI can install it from there as well: the git commit of an
    https repository that pip recorded (PEP 610 direct_url.json), or that of the clean git checkout
    it was installed from; '' when neither."""
    try:
        raw = importlib.metadata.distribution("patchset").read_text("direct_url.json")
    except importlib.metadata.PackageNotFoundError:
        raw = None
    data = json.loads(raw) if raw else {}
    vcs = data.get("vcs_info") or {}
    if vcs.get("vcs") == "git" and vcs.get("commit_id") and str(data.get("url", "")).startswith("https://"):
        return f"git+{data['url']}@{vcs['commit_id']}"
    url = urlparse(str(data.get("url", "")))
    where = Path(unquote(url.path)) if url.scheme == "file" else Path(builder.__file__).resolve().parent.parent
    run = [proc.run(["git", "-C", str(where), *a], check=False)
           for a in (("remote", "get-url", "origin"), ("rev-parse", "HEAD"), ("status", "--porcelain"))]
    origin, head = run[0].stdout.strip(), run[1].stdout.strip()
    if any(r.returncode for r in run) or run[2].stdout.strip() or not origin.startswith("https://"):
        return ""
    return f"git+{origin}@{head}"

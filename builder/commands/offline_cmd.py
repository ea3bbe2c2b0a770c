"""`patchset offline`: the carry folder for a machine without network made here (prepare), and the run there (run)."""

from __future__ import annotations

import argparse
import shlex
from pathlib import Path

from builder.console import CliProgress, console
from builder.deliver import carry
from builder.errors import EXIT_FAILED, EXIT_LOCKED, EXIT_OK, Outcome
from builder.orchestrate import offline
from builder.project import Project
from builder.series.model import BACKENDS

NAME = "offline"
HELP = ("the carry folder for a machine without network (prepare: the pin as a git bundle, wheels, a manifest), "
        "and the run there from it (run)")
PREPARE = ("make the carry folder here, where the pin's sources and the package index can be reached "
           "(after `patchset fetch` works)")
RUN = ("there, from the carry folder: import the pin from its bundle, apply, and run the steps (main, verify, "
       "sweep:NAME:OPS, wheel) each under what is left of --deadline; writes run-<first step>.json, log.txt and "
       "the steps' files (test.json, verify.json, sweep-NAME.json, wheel-provenance.json, wheel-check.txt) into "
       "--out, for `patchset evidence update --from`")
DEFAULTS = {"backend": "cuda", "cuda_arch": "90", "workers": 1, "deadline": 570.0, "verify_patches": ""}

EXAMPLE = """examples:
  patchset offline prepare --wheel               # .patchset/carry: copy it to the machine without network
  patchset offline run --backend cuda --carry DIR main   # there: build, test and verify into .patchset/offline-out"""
EXITS = (EXIT_OK, EXIT_FAILED, EXIT_LOCKED)
"""The exit codes it returns besides errors.ANY_COMMAND (its --help lists them)."""


def add_arguments(p: argparse.ArgumentParser) -> None:
    sub = p.add_subparsers(dest="action", metavar="ACTION", required=True, help="prepare or run")
    pr = sub.add_parser("prepare", help=PREPARE)
    pr.add_argument("dir", nargs="?", type=Path, metavar="DIR",
                    help="the carry folder, replaced whole (default: .patchset/carry in the project)")
    pr.add_argument("--wheel", action="store_true",
                    help="also what `patchset wheel` needs there: the pin's bindings sdist without its vendored "
                         "llama.cpp and the wheels of the bindings' runtime dependencies")
    r = sub.add_parser("run", help=RUN)
    r.add_argument("steps", nargs="*", metavar="STEP",
                   help="main (build, test, verify), verify (verify alone), sweep:NAME:OPS (test --against upstream "
                        "--ops OPS; OPS `all`: every op), wheel (wheel from the carried bindings sdist, installed and "
                        "imported); run in order")
    r.add_argument("--backend", choices=BACKENDS, default=DEFAULTS["backend"], help="the backend (default cuda)")
    r.add_argument("--carry", type=Path, metavar="DIR",
                   help="the carry folder `patchset offline prepare` made (default: .patchset/carry in the project)")
    r.add_argument("--cuda-arch", default=DEFAULTS["cuda_arch"], metavar="A",
                   help="the CUDA architecture of build, verify and the sweep alike, so verify reuses the build "
                        "(default 90; `native` where CMake sees the GPU)")
    r.add_argument("--workers", type=int, default=DEFAULTS["workers"], metavar="N",
                   help="parallel test-backend-ops workers of a sweep step (default 1)")
    r.add_argument("--deadline", type=float, default=DEFAULTS["deadline"], metavar="S",
                   help="seconds for the whole run (default 570): each command gets what is left; one not started "
                        "with 5 s or less left is skipped, one stopped at it is recorded with exit 124")
    r.add_argument("--verify-patches", default=DEFAULTS["verify_patches"], metavar='"N ..."',
                   help="the patches verify proves (default: every patch)")
    r.add_argument("--out", type=Path, metavar="DIR",
                   help="where the run's files go (default: .patchset/offline-out in the project); a file of an "
                        "earlier run there that this run would write is refused, never replaced")
    r.add_argument("--bootstrap-record", type=Path, metavar="FILE",
                   help="steps run before this command, put first in the run record and counted against the "
                        "deadline: one `NAME<TAB>EXIT<TAB>SECONDS<TAB>COMMAND` a line (tools/gpu/run.sh's venv "
                        "install; default: none)")


def invocation(args: argparse.Namespace, root: Path) -> str:
    """The command as the run record says it: the options that differ from their defaults, then the steps
    (not --out or --bootstrap-record: where the files went, not what ran)."""
    words = ["patchset", "offline", "run", "--backend", args.backend]
    if args.carry is not None:
        c = args.carry.absolute()
        words += ["--carry", str(c.relative_to(root) if c.is_relative_to(root) else args.carry)]
    for opt in ("cuda_arch", "workers", "deadline", "verify_patches"):
        value = getattr(args, opt)
        if value != DEFAULTS[opt]:
            words += [f"--{opt.replace('_', '-')}", f"{value:g}" if isinstance(value, float) else str(value)]
    return shlex.join([*words, *args.steps])


def run(args: argparse.Namespace, project: Project) -> Outcome:
    if args.action == "run":
        return _run(args, project)
    made = carry.prepare(project, args.dir or project.state_dir / "carry", wheel=args.wheel, progress=CliProgress())
    console.print(f"{made.folder}: {made.files} files, {made.bytes / 2**20:.1f} MiB", highlight=False, markup=False)
    console.print(f"carry folder ready: {made.folder} (copy it to the machine without network)", highlight=False,
                  markup=False)
    return Outcome.OK


def _run(args: argparse.Namespace, project: Project) -> Outcome:
    options = offline.Options(
        backend=args.backend, carry=(args.carry or project.state_dir / "carry").absolute(),
        out=(args.out or project.state_dir / "offline-out").absolute(), cuda_arch=args.cuda_arch,
        workers=args.workers, deadline=args.deadline, verify_patches=tuple(args.verify_patches.split()),
        bootstrap=args.bootstrap_record)
    # the steps' patchset is this one, on this project and series
    prefix = (*offline.PATCHSET, "--project", str(project.root), "--pin", str(project.pin_file),
              *(("--series", project.series_name) if project.series_name else ()))
    status, record = offline.offline_run(project, options, args.steps, invocation(args, project.root),
                                         patchset=prefix, say=lambda line: console.print(line, highlight=False,
                                                                                         markup=False))
    console.print(f"run record: {record}" + ("" if status == 0 else " (a step failed, was stopped or skipped)"),
                  highlight=False, markup=False)
    return Outcome.OK if status == 0 else Outcome.FAILED

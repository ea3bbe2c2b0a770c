"""`patchset wheel`: llama-cpp-python built on the committed patched tree, with its provenance inside."""

from __future__ import annotations

import argparse
from pathlib import Path

from builder import proc
from builder.commands import jsonout
from builder.console import CliProgress, console, err_console
from builder.deliver import WHEEL_BACKENDS
from builder.errors import EXIT_FAILED, EXIT_LOCKED, EXIT_OK, Outcome
from builder.project import Project

NAME = "wheel"
HELP = "build llama-cpp-python on the committed patched tree, with its provenance inside"

EXAMPLE = """example:
  patchset wheel --backend cpu --out dist
  pip install dist/llama_cpp_python-*.whl"""
EXITS = (EXIT_OK, EXIT_FAILED, EXIT_LOCKED)
"""The exit codes it returns besides errors.ANY_COMMAND (its --help lists them)."""


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.epilog = proc.BUILD_TIMEOUT_HELP
    p.add_argument("--backend", choices=WHEEL_BACKENDS, default="cpu",
                   help="cpu, cuda or metal (CMAKE_ARGS -DGGML_<X>=ON)")
    p.add_argument("--out", type=Path, help="output folder for the wheel and its provenance (default: dist/)")
    p.add_argument("--sdist", metavar="FILE|REQUIREMENT",
                   help="bindings sdist to build instead of the pin's sdist source (needs --sdist-sha256)")
    p.add_argument("--sdist-sha256", metavar="HEX", help="the sha256 the --sdist archive must have")
    p.add_argument("--strict", action="store_true", help="binding drift fails the build (default: a warning)")
    p.add_argument("--jobs", "-j", type=int, help="parallel compile jobs (default: all cores)")
    p.add_argument("--no-mtmd", action="store_true",
                   help="leave out the multimodal library (LLAVA_BUILD=OFF): faster, for tests")
    p.add_argument("--no-common", action="store_true",
                   help="leave out libllama-common.so, which the sdist builds and installs but nothing in llama_cpp "
                        "loads: about half of a CPU wheel's compile time")
    p.add_argument("--cuda-arch", help="CMAKE_CUDA_ARCHITECTURES for --backend cuda (default: ggml's list)")
    p.add_argument("--cmake-arg", action="append", default=[], metavar="-DNAME=VALUE",
                   help="one more CMake option for the tree (repeatable); recorded in the provenance")
    p.add_argument("--no-ccache", action="store_true", help="do not use ccache even when it is installed")
    jsonout.add_option(p, "the wheel, its provenance and the build")


def run(args: argparse.Namespace, project: Project) -> Outcome:
    # imported here: the wheel builder (packaging, tarfile, zipfile) weighs on every other command's start
    from builder.deliver.wheel import WheelOptions  # noqa: PLC0415
    from builder.deliver.wheel_build import build_wheel  # noqa: PLC0415

    options = WheelOptions(
        backend=args.backend, out_dir=args.out.resolve() if args.out else None, sdist=args.sdist,
        sdist_sha256=args.sdist_sha256, strict=args.strict, jobs=args.jobs, no_mtmd=args.no_mtmd,
        no_common=args.no_common,
        cuda_arch=args.cuda_arch, cmake_args=tuple(args.cmake_arg), use_ccache=not args.no_ccache,
    )
    body = {"backend": args.backend, "wheel": None, "provenance_file": None, "version": None, "upstream": None,
            "series": None, "seconds": None, "compiled": None, "ccache": None, "log": None, "drift": None}
    jsonout.emit(args, "wheel", body)
    r = build_wheel(project, options, CliProgress())
    p = r.prepared
    up = p.provenance["upstream"]
    jsonout.emit(args, "wheel", {
        **body, "backend": p.provenance["backend"], "wheel": r.wheel, "provenance_file": r.provenance_file,
        "version": p.version, "upstream": {"name": up["name"], "tag": up["tag"] or None, "commit": up["commit"]},
        "series": {"count": p.provenance["series"]["count"]}, "seconds": round(r.duration_s, 3),
        "compiled": r.compiled, "log": r.log,
        "ccache": None if r.ccache is None else {"hits": r.ccache.hits, "misses": r.ccache.misses},
        "drift": [{"function": d.function, "problem": d.problem, "header": d.header, "bindings": d.bindings or None}
                  for d in p.drift]})
    for d in p.drift:
        err_console.print(f"warning: binding drift: {d.function}: {d.problem}", highlight=False, markup=False)
        err_console.print(f"  header:   {d.header}", highlight=False, markup=False)
        err_console.print(f"  bindings: {d.bindings or '-'}", highlight=False, markup=False)
    console.print(f"wheel: {r.wheel}", highlight=False)
    console.print(f"  version {p.version}: {up['name']} {up['tag']} {up['commit'][:12]} + "
                  f"{p.provenance['series']['count']} patch(es), backend {p.provenance['backend']}", highlight=False)
    cc = "ccache: not used"
    if r.ccache is not None:
        cc = f"ccache: {r.ccache.hits} hit(s) / {r.ccache.misses} miss(es)"
    console.print(f"  {r.duration_s:.1f}s; {p.written} staged file(s) changed, {r.compiled} compile(s); {cc}",
                  highlight=False)
    console.print(f"  provenance: {r.provenance_file}", highlight=False)
    return Outcome.OK

"""The Metal backend's host sources compiled on a machine without macOS, nothing linked or run.

`patchset build --backend metal` on Linux: every C++ and Objective-C source of
`ggml/src/ggml-metal/`, and the series' Metal test programs, with clang `-fsyntax-only` against
GNUstep's Foundation and the Metal SDK stand-in kept in `builder/metal_sdk/` (its README says what
it declares and where each signature comes from).

Before compiling, the Apple names the tree uses (`MTL*`, `NS*`, `dispatch_*`, ...) are compared
with the names the stand-in and GNUstep declare: a pin that uses new API fails with the list of
what the stand-in lacks, not with a compiler error per use. Errors come from clang's serialized
diagnostics (`builder/compile/sdiag.py`), never from its text.
"""

from __future__ import annotations

import glob
import os
import re
import shutil
import time
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from builder import proc
from builder.compile import sdiag
from builder.compile.cmakebuild import BuildResult, CompilerError
from builder.errors import BuildError
from builder.fsutil import atomic_write_text

SDK_DIR = Path(__file__).parent.parent / "metal_sdk"
APT_PACKAGES = ("clang", "libgnustep-base-dev", "libblocksruntime-dev")
"""What the check needs on Debian or Ubuntu (README.md, .ci/run)."""
GNUSTEP_INCLUDE = Path("/usr/include/GNUstep")
BLOCKS_HEADER = Path("/usr/include/Block.h")
GCC_OBJC_GLOB = "/usr/lib/gcc/*/*/include/objc/objc.h"

# The Objective-C files are compiled once per CPU the tree tells apart (`#if TARGET_CPU_X86_64`),
# so that every branch of theirs is compiled by one pass.
OBJC_PASSES: tuple[tuple[str, tuple[str, ...]], ...] = (("arm64", ()), ("x86_64", ("-DPATCHSET_METAL_SDK_X86_64",)))
# The Objective-C passes compile for macOS (clang's Darwin target, with the system's C headers), so that
# Apple's availability attributes, which the stand-in carries on API newer than the tree's deployment
# target, are checked: a use of macOS 15 API outside `@available(macOS 15.0, *)` fails as it does on
# macOS. 13.3 is the deployment target of the tree's own release builds (.github/workflows/release.yml).
DEPLOYMENT_TARGET = "13.3"
# on Darwin clang predefines `__nonnull` (a nullability keyword); glibc's headers define their own
DARWIN_FLAGS = ("-target", f"x86_64-apple-macos{DEPLOYMENT_TARGET}", "-U__nonnull",
                "-Werror=unguarded-availability-new")
# The tree is written for Apple's Objective-C runtime: object subscripting (`array[i]`) and literals
# need a non-fragile one (with `-fobjc-runtime=gcc` clang reads `array[i]` as pointer arithmetic).
# Warnings that Apple's clang (LLVM 16 and later: Xcode 15 on) reports as errors by default, and clang 14
# only warns about: an undeclared function, an implicit int, an int used as a pointer, a function pointer
# of another type.
APPLE_ERRORS = ("-Werror=implicit-function-declaration", "-Werror=implicit-int", "-Werror=int-conversion",
                "-Werror=incompatible-function-pointer-types")
OBJC_FLAGS = ("-x", "objective-c", "-std=gnu11", "-fblocks", "-fobjc-runtime=macosx-14.0",
              # GNUstep's own extensions (categories such as NSString+GNUstepBase) hidden: a method only
              # GNUstep has must fail here as it fails on macOS
              "-DNO_GNUSTEP=1",
              # a selector the stand-in lacks is an error, not a guessed `id` return
              "-Werror=objc-method-access", *APPLE_ERRORS)
CXX_FLAGS = ("-x", "c++", "-std=c++17", "-Werror=incompatible-function-pointer-types")

# Apple API names: Metal, MetalPerformancePrimitives, Foundation, dispatch, os_log, Mach, QoS
API_NAME = re.compile(r"\b(?:MTL\w+|MPP\w+|NS[A-Z]\w*|dispatch_\w+|DISPATCH_\w+|os_log\w*|OS_LOG\w*|"
                      r"QOS_CLASS_\w+|vm_\w+|kern_\w+|KERN_\w+|mach_\w+|VM_FLAGS_\w+)\b")
_WORD = re.compile(r"\b\w+\b")
# comments and string or character literals, replaced by blanks (newlines kept) before a scan
_NOT_CODE = re.compile(r'//[^\n]*|/\*.*?\*/|@?"(?:\\.|[^"\\\n])*"|\'(?:\\.|[^\'\\\n])*\'', re.S)
# names the tree declares itself (`#define MTLX`, `static const NSInteger MTLGPUFamilyMetal3_GGML = ...`)
_TREE_DEFINES = re.compile(r"^\s*(?:#\s*define\s+(\w+)|(?:(?:static|const)\s+)+\w+\s+\**\s*(\w+)\s*=)", re.M)


@dataclass(frozen=True)
class ObjcToolchain:
    """clang and the headers the Objective-C half needs on Linux."""

    clang: str
    gnustep: Path
    gcc_objc: Path
    """gcc's `include/objc` folder (GNUstep's Foundation includes `<objc/objc.h>` from it)."""


@dataclass(frozen=True)
class MissingName:
    """An Apple name the tree uses that neither the stand-in nor GNUstep declares."""

    name: str
    file: str
    line: int

    def __str__(self) -> str:
        return f"{self.file}:{self.line}: {self.name}"


def find_toolchain() -> ObjcToolchain:
    """clang, GNUstep's headers and gcc's objc headers, or a BuildError naming the packages."""
    clang = shutil.which("clang")
    objc = sorted(glob.glob(GCC_OBJC_GLOB), key=_version_key)
    missing = [what for what, ok in (("clang", clang), ("GNUstep Foundation headers",
                                                          (GNUSTEP_INCLUDE / "Foundation" / "Foundation.h").is_file()),
                                      ("gcc's objc headers", objc), ("Block.h", BLOCKS_HEADER.is_file())) if not ok]
    if missing or clang is None:
        raise BuildError(f"the Linux Metal check needs {', '.join(missing)}: install the packages "
                         f"{' '.join(APT_PACKAGES)} (apt-get install -y {' '.join(APT_PACKAGES)})")
    return ObjcToolchain(clang, GNUSTEP_INCLUDE, Path(objc[-1]).parent)


def _version_key(path: str) -> tuple[int, ...]:
    # /usr/lib/gcc/<triple>/<version>/include/objc/objc.h: the newest gcc wins
    version = Path(path).parents[2].name
    return tuple(int(p) for p in re.findall(r"\d+", version))


def host_sources(source: Path) -> list[Path]:
    """Every host source of the tree's Metal backend (C++ and Objective-C)."""
    metal = source / "ggml" / "src" / "ggml-metal"
    return sorted(p for p in metal.iterdir() if p.suffix in (".cpp", ".m")) if metal.is_dir() else []


def code_of(text: str) -> str:
    """Source text with comments and string literals blanked (line numbers kept)."""
    return _NOT_CODE.sub(lambda m: re.sub(r"[^\n]", " ", m.group(0)), text)


DECLARING_HEADERS = ("Foundation/Foundation.h", "Metal/Metal.h", "dispatch/dispatch.h", "mach/mach.h",
                     "sys/qos.h", "patchset/foundation_extras.h")
"""What a host source of the tree may import: the names they declare are the names it may use."""


def declared_names(tc: ObjcToolchain, work: Path) -> set[str]:
    """Every identifier the stand-in's, GNUstep's and gcc's objc headers declare as the Objective-C
    passes see them (`-DNO_GNUSTEP=1`: GNUstep's own extensions are not declared, as on macOS): the
    identifiers of the preprocessed headers, and the names of the macros they define."""
    tu = work / "declared.m"
    # every Foundation header GNUstep has, not only those its umbrella imports (Apple's imports more)
    foundation = sorted(f"Foundation/{h.name}" for h in (tc.gnustep / "Foundation").glob("*.h"))
    atomic_write_text(tu, "".join(f"#import <{h}>\n" for h in (*DECLARING_HEADERS, *foundation)))
    argv = (tc.clang, *OBJC_FLAGS, *_objc_includes(tc, work), "-E", "-P", str(tu))
    names: set[str] = set()
    for extra in ((), ("-dM",)):
        r = proc.run([*argv, *extra], check=False, timeout=300)
        if r.returncode != 0:
            tail = (r.stderr.strip().splitlines() or [""])[-1]
            raise BuildError(f"clang could not preprocess the Metal SDK stand-in and GNUstep's headers "
                             f"(exit {r.returncode}): {tail}")
        text = r.stdout if not extra else "\n".join(
            ln.split()[1].split("(")[0] for ln in r.stdout.splitlines() if ln.startswith("#define "))
        names.update(_WORD.findall(code_of(text)))
    return names


def _objc_includes(tc: ObjcToolchain, work: Path) -> tuple[str, ...]:
    """The include flags of the Objective-C passes: the stand-in, GNUstep, and gcc's objc/ alone (its
    whole include folder would also put gcc's <stdatomic.h> before clang's)."""
    shim = work / "gcc-objc"
    shim.mkdir(parents=True, exist_ok=True)
    link = shim / "objc"
    if not (link.is_symlink() and link.resolve() == tc.gcc_objc.resolve()):
        link.unlink(missing_ok=True)
        link.symlink_to(tc.gcc_objc, target_is_directory=True)
    # the Darwin target does not search the system's C headers by itself
    triple = tc.gcc_objc.parents[2].name  # /usr/lib/gcc/<triple>/<version>/include/objc
    return (f"-I{SDK_DIR}", f"-I{tc.gnustep}", f"-I{shim}", *DARWIN_FLAGS, "-isystem", "/usr/include",
            "-isystem", f"/usr/include/{triple}")


def missing_names(files: Iterable[Path], declared: set[str], source: Path) -> list[MissingName]:
    """The Apple names `files` use that are neither in `declared` nor declared by the tree itself,
    each with its first use, in file order."""
    texts = {f: code_of(f.read_text(errors="replace")) for f in files}
    own: set[str] = set()
    metal = source / "ggml" / "src" / "ggml-metal"
    for h in sorted(metal.glob("*.h")) if metal.is_dir() else []:
        own.update(n for m in _TREE_DEFINES.finditer(code_of(h.read_text(errors="replace"))) for n in m.groups() if n)
    for text in texts.values():
        own.update(n for m in _TREE_DEFINES.finditer(text) for n in m.groups() if n)
    out: dict[str, MissingName] = {}
    for f, text in texts.items():
        for m in API_NAME.finditer(text):
            name = m.group(0)
            if name in declared or name in own or name in out:
                continue
            out[name] = MissingName(name, _rel(f, source), text.count("\n", 0, m.start()) + 1)
    return list(out.values())


def _rel(path: Path | str, source: Path) -> str:
    p = Path(path)
    try:
        return p.resolve().relative_to(source.resolve()).as_posix()
    except ValueError:
        return str(path)


@dataclass(frozen=True)
class _Compile:
    file: Path
    label: str
    argv: tuple[str, ...]
    dia: Path


def _plan(source: Path, tc: ObjcToolchain, programs: Iterable[str], work: Path) -> list[_Compile]:
    metal = source / "ggml" / "src" / "ggml-metal"
    common = ("-fsyntax-only", "-fno-color-diagnostics", f"-I{source / 'ggml/include'}", f"-I{source / 'ggml/src'}",
              f"-I{metal}")
    objc_inc = _objc_includes(tc, work)
    clangxx = tc.clang + "++" if shutil.which(tc.clang + "++") else tc.clang
    plan: list[_Compile] = []
    for f in host_sources(source):
        if f.suffix == ".m":
            for cpu, defs in OBJC_PASSES:
                dia = work / f"{f.name}.{cpu}.dia"
                plan.append(_Compile(f, f"{f.name} ({cpu})", (tc.clang, *OBJC_FLAGS, *common, *objc_inc, *defs,
                                                              "--serialize-diagnostics", str(dia), str(f)), dia))
        else:
            # ggml-metal.cpp relies on <memory> through Apple's headers (libc++ includes it transitively)
            extra = ("-include", "memory") if f.name == "ggml-metal.cpp" else ()
            dia = work / f"{f.name}.dia"
            plan.append(_Compile(f, f.name, (clangxx, *CXX_FLAGS, *common, *extra, "--serialize-diagnostics",
                                             str(dia), str(f)), dia))
    for prog in programs:
        f = source / "tests" / f"{prog}.cpp"
        if f.is_file():
            dia = work / f"{prog}.dia"
            plan.append(_Compile(f, f"tests/{prog}.cpp", (clangxx, *CXX_FLAGS, *common, "--serialize-diagnostics",
                                                          str(dia), str(f)), dia))
    return plan


def compile_check(source: Path, log: Path, programs: Iterable[str] = (), jobs: int | None = None) -> BuildResult:
    """Compile every Metal host source of `source` and the given test programs (tests/<name>.cpp)
    with -fsyntax-only; a failed check is a result with ok=False and the first error's file:line."""
    start = time.monotonic()
    tc = find_toolchain()
    work = log.parent
    work.mkdir(parents=True, exist_ok=True)
    sources = host_sources(source)
    if not sources:
        raise BuildError(f"{source / 'ggml/src/ggml-metal'}: no Metal host sources found to check")
    programs = tuple(programs)
    checked_files = [*sources, *(source / "tests" / f"{p}.cpp" for p in programs
                                 if (source / "tests" / f"{p}.cpp").is_file())]
    missing = missing_names(checked_files, declared_names(tc, work), source)
    if missing:
        listing = "".join(f"{m}: not declared by the Metal SDK stand-in (builder/metal_sdk) nor GNUstep\n"
                       for m in missing)
        atomic_write_text(log, listing)
        m0 = missing[0]
        return _result(False, 0, start, log, CompilerError(
            m0.file, m0.line, f"{m0.name} is not declared by the Metal SDK stand-in "
                              f"(and {len(missing) - 1} more name(s); see {log})"),
            (f"the tree uses {len(missing)} Apple name(s) the Metal SDK stand-in lacks (builder/metal_sdk/README.md "
             "says how to add one): " + ", ".join(m.name for m in missing),))
    plan = _plan(source, tc, programs, work)
    for c in plan:
        c.dia.unlink(missing_ok=True)

    def one(c: _Compile) -> tuple[_Compile, proc.Completed]:
        return c, proc.run(c.argv, check=False, timeout=300)

    with ThreadPoolExecutor(max_workers=jobs or os.cpu_count() or 2) as pool:
        done = list(pool.map(one, plan))
    errors: list[sdiag.Diagnostic] = []
    outputs: list[str] = []
    for c, r in done:
        outputs.append(f"== {c.label}: {' '.join(c.argv)}\n{r.stdout}{r.stderr}")
        diags = sdiag.read(c.dia) if c.dia.is_file() else []
        errs = [d for d in diags if d.is_error]
        if r.returncode != 0 and not errs:
            raise BuildError(f"clang failed on {_rel(c.file, source)} without a diagnostic (exit {r.returncode}); "
                             f"see {log}")
        errors += errs
    atomic_write_text(log, "\n".join(outputs))
    ok = not errors
    n_objc = sum(1 for f in sources if f.suffix == ".m")
    n_cxx = len(sources) - n_objc
    notes = (
        (f"compile check only: {len(checked_files)} file(s) passed clang -fsyntax-only: {n_cxx} Metal host C++, "
         f"{n_objc} Objective-C (for arm64 and x86_64) against GNUstep and the Metal SDK stand-in, "
         f"{len(checked_files) - len(sources)} test program(s)") if ok else
        f"compile check FAILED: {len(errors)} error(s) in the Metal host sources and test programs",
        "not compiled here: the .metal shaders (they need Apple's Metal compiler)",
        "nothing was run: no Metal device here",
    )
    first = None
    if errors:
        e = errors[0]
        first = CompilerError(_rel(e.file, source), e.line, e.message)
    return _result(ok, len(plan), start, log, first, notes)


def _result(ok: bool, steps: int, start: float, log: Path, first: CompilerError | None,
            notes: tuple[str, ...]) -> BuildResult:
    return BuildResult("metal", "compile-check", log.parent, log.parent, ok, False, False, steps,
                       time.monotonic() - start, log, "", "", None, first_error=first, kind="compile-check",
                       notes=notes)

"""The fork's release wheel staged: llama-cpp-python on the patched tree, saying exactly what it holds.

The bindings sdist (the pin's own sdist source, or --sdist) is staged with its `vendor/llama.cpp`
replaced by a `git archive` of the committed branch `patched`, a provenance record
(`llama_cpp/patchset.json`, read by `llama_cpp/patchset.py`), a version with a local label, and a
provenance section at the top of the description. scikit-build-core then builds it exactly as
the sdist's own pyproject.toml says, with backend switches in CMAKE_ARGS (wheel_build.py).

Incremental by construction: the staged project lives in `.patchset/wheel/<backend>/src` and only
files whose bytes changed are rewritten there (with a fresh mtime, so ninja sees them); the CMake
build folder is scikit-build-core's `build-dir` (`.patchset/wheel/<backend>/build`), kept between
runs; ccache is the compiler launcher when present. A rebuild after one patch changed compiles
the files that patch touches, and what includes them.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import re
import shutil
import sys
import tarfile
import tempfile
import tomllib
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path

from packaging.requirements import InvalidRequirement, Requirement

from builder.compile.backends import profile
from builder.compile.toolchain import find_ccache
from builder.deliver import WHEEL_BACKENDS
from builder.deliver import drift as driftmod
from builder.deliver.provenance import (
    Bindings,
    PatchRecord,
    description_section,
    local_label,
    patch_records,
    provenance,
    series_record,
)
from builder.errors import BuildError, DriftError, InputError, WorkTreeError
from builder.gitrepo import ISOLATED
from builder.progress import NullProgress, ProgressSink
from builder.project import Project
from builder.prove.pipeline import ensure_patched
from builder.series.load import load_series
from builder.series.model import Series
from builder.series.workbase import PATCHED, UPSTREAM, fingerprint
from builder.series.workrepo import WorkRepo
from builder.upstream import mirror
from builder.upstream.fetch import fetched_tree
from builder.upstream.pin import Pin, SdistSource, load_pin

BINDINGS_SERIES = "bindings"
"""The name of the second series the wheel applies to the bindings (`patches-bindings/`)."""
PACKAGE = "llama_cpp"
"""The bindings' import package; the provenance goes into it."""
MODULE_TEMPLATE = Path(__file__).with_name("llama_cpp_patchset.py")
NO_COMMON_CMAKE = Path(__file__).parent / "data" / "no_common.cmake"
"""Included by llama.cpp's project() for --no-common: the bindings force LLAMA_BUILD_COMMON on."""
BACKENDS = WHEEL_BACKENDS
_VERSION_LINE = re.compile(r"""^(__version__\s*=\s*)(["'])([^"']+)\2""", re.M)


@dataclass(frozen=True)
class WheelOptions:
    """What to build. Every field has the default `patchset wheel` uses."""

    backend: str = "cpu"
    out_dir: Path | None = None
    """Where the wheel and its provenance go (default: `dist/` in the project)."""
    sdist: str | None = None
    """A bindings sdist to use instead of the pin's: a file, or a pip requirement."""
    sdist_sha256: str | None = None
    """The sha256 the --sdist archive must have."""
    strict: bool = False
    """Binding drift fails the build instead of warning."""
    jobs: int | None = None
    no_mtmd: bool = False
    """Leave out the multimodal library (the sdist's LLAVA_BUILD option): faster, for tests."""
    no_common: bool = False
    """Leave out llama-common (`lib/libllama-common.so`), which the sdist builds and installs but nothing in
    the package loads (NO_COMMON_CMAKE): about half of a CPU wheel's compile time."""
    cuda_arch: str | None = None
    cmake_args: tuple[str, ...] = ()
    """More -D options for the tree's CMake, after ours."""
    use_ccache: bool = True


@dataclass(frozen=True)
class Prepared:
    """The staged project, ready for scikit-build-core."""

    source_dir: Path
    build_dir: Path
    version: str
    provenance: dict
    drift: tuple[driftmod.Drift, ...]
    cmake_args: tuple[str, ...]
    """Everything CMAKE_ARGS carries, tool launchers and path maps included."""
    source_date_epoch: int
    written: int
    """Files of the staged project rewritten by this run (0: nothing changed since the last)."""
    removed: int
    ccache: str | None


def wheel_root(project: Project, backend: str) -> Path:
    return project.state_dir / "wheel" / backend


def source_date_epoch(pin: Pin) -> int:
    """Midnight UTC of the pin's date: every timestamp in the wheel (zip entries) is this."""
    try:
        day = datetime.strptime((pin.date or "")[:10], "%Y-%m-%d").replace(tzinfo=UTC)
    except ValueError:
        return 315532800  # 1980-01-01, the earliest time a zip entry can hold
    return int(day.timestamp())


# -- the sdist -------------------------------------------------------------------------------------
def resolve_sdist(pin: Pin, options: WheelOptions) -> tuple[SdistSource, str]:
    """The bindings sdist to use, and where it comes from in words."""
    if options.sdist:
        sha = (options.sdist_sha256 or "").lower()
        if not re.fullmatch(r"[0-9a-f]{64}", sha):
            raise InputError(f"--sdist {options.sdist}: needs --sdist-sha256 with the archive's 64-hex sha256")
        subdir = next((s.subdir for s in pin.sources if isinstance(s, SdistSource)), "vendor/llama.cpp")
        path = Path(options.sdist).expanduser()
        if path.is_file():
            return SdistSource(sha256=sha, subdir=subdir, url=path.resolve().as_uri()), f"--sdist {path}"
        if path.suffix in (".gz", ".zip", ".tar") or os.sep in options.sdist:
            raise InputError(f"--sdist {options.sdist}: no such file")
        return SdistSource(sha256=sha, subdir=subdir, requirement=options.sdist), f"--sdist {options.sdist}"
    for src in pin.sources:
        if isinstance(src, SdistSource):
            return src, f"the pin's sdist source {src.requirement or src.url}"
    raise InputError(f"pin {pin.commit}: has no sdist source; give the bindings with --sdist FILE|REQUIREMENT "
                     "--sdist-sha256 HEX")


def _check_build_requires(pyproject: dict, where: Path) -> None:
    """The sdist's build requirements must be installed here: we build without isolation, so that
    the build folder's recorded tool paths stay valid from one run to the next."""
    for text in pyproject.get("build-system", {}).get("requires", []):
        try:
            req = Requirement(text)
        except InvalidRequirement as e:
            raise InputError(f"{where}: unreadable build requirement '{text}': {e}") from e
        try:
            have = importlib.metadata.version(req.name)
        except importlib.metadata.PackageNotFoundError:
            raise BuildError(f"{where}: build requirement '{text}' is not installed; "
                             f"`pip install '{text}'` into patchset's environment") from None
        if req.specifier and not req.specifier.contains(have, prereleases=True):
            raise BuildError(f"{where}: build requirement '{text}' is not met (installed: {req.name} {have})")


# -- the work repository ---------------------------------------------------------------------------
def _patched_commit(project: Project) -> tuple[WorkRepo, str, str]:
    """`patched` as committed, matching the series exactly: (work repo, patched commit, base commit).

    Refuses a dirty work tree (the wheel is built from commits, and the user should not think
    their uncommitted edit is in it) and commits that patches/ does not have yet (the
    provenance would then name patches that are not what was built).
    """
    work = WorkRepo(project.work_repo)
    if work.exists():
        reasons = work.unsaved_work(work.load_state())
        if reasons:
            raise WorkTreeError(
                f"{work.path}: {'; '.join(reasons)}; a wheel is built from the committed branch '{PATCHED}' "
                "and its provenance names the files in patches/: commit and `patchset refresh` first, or stash")
    work, _ = ensure_patched(project)
    state = work.load_state()
    head = work.head()
    pin = load_pin(project.pin_file)
    series = load_series(project.patches_dir)
    if not head or head != state.applied_head or state.fingerprint != fingerprint(
            pin, fetched_tree(project.cache_dir, pin), series):
        raise WorkTreeError(
            f"{work.path}: branch '{PATCHED}' has commits that are not in patches/ yet; "
            "`patchset refresh` first, so that the wheel's provenance names what it holds")
    base = work.git.rev(f"refs/heads/{UPSTREAM}") or state.upstream
    return work, head, base


# -- staging ---------------------------------------------------------------------------------------
def _files(root: Path) -> dict[str, Path]:
    return {p.relative_to(root).as_posix(): p for p in root.rglob("*") if p.is_file() or p.is_symlink()}


def _same_file(src: Path, dst: Path) -> bool:
    if not dst.is_file() or dst.is_symlink():
        return False
    a, b = src.stat(), dst.stat()
    same_mode = (a.st_mode & 0o111) == (b.st_mode & 0o111)
    return a.st_size == b.st_size and same_mode and src.read_bytes() == dst.read_bytes()


def sync_tree(stage: Path, dest: Path) -> tuple[int, int]:
    """Make `dest` hold exactly the files of `stage`, rewriting only what differs.

    A rewritten file gets the current time as mtime (the archive's old mtimes would make ninja
    think an object file is newer than its changed source). Files in `dest` that `stage` lacks
    are removed, so nothing stale (an old library, a removed source) reaches the wheel. Returns
    (files written, files removed).
    """
    want, have = _files(stage), _files(dest) if dest.exists() else {}
    written = removed = 0
    for rel, src in want.items():
        dst = dest / rel
        if src.is_symlink():
            if dst.is_symlink() and os.readlink(dst) == os.readlink(src):
                continue
        elif _same_file(src, dst):
            continue
        if dst.is_dir() and not dst.is_symlink():
            shutil.rmtree(dst)
        elif dst.exists() or dst.is_symlink():
            dst.unlink()
        dst.parent.mkdir(parents=True, exist_ok=True)
        os.replace(src, dst)
        if not dst.is_symlink():
            os.utime(dst)
        written += 1
    for rel, p in have.items():
        if rel not in want:
            p.unlink()
            removed += 1
    for d in sorted((p for p in dest.rglob("*") if p.is_dir() and not p.is_symlink()), key=lambda p: -len(p.parts)):
        if not any(d.iterdir()):
            d.rmdir()
    return written, removed


def _tree_id(work: WorkRepo, folder: Path, scratch: Path) -> str:
    """The git tree id of a folder's content, computed through a throwaway index."""
    env = {**ISOLATED, "GIT_INDEX_FILE": str(scratch / "index")}
    work.git.run("--work-tree", str(folder), "add", "--all", "--force", ".", env=env)
    tree = work.git.out("write-tree", env=env)
    (scratch / "index").unlink(missing_ok=True)
    return tree


def left_out(options: WheelOptions) -> list[str]:
    """The libraries of the sdist's build that this wheel leaves out, by the names of their CMake targets."""
    return [name for name, out in (("mtmd", options.no_mtmd), ("llama-common", options.no_common)) if out]


def _cmake_args(pin: Pin, prov_label: str, options: WheelOptions, src: Path, ccache: str | None) -> tuple[
        tuple[str, ...], tuple[str, ...]]:
    """(the args the provenance records, the tool args that are not part of what the wheel is)."""
    prof = profile(options.backend)
    build = re.match(r"^b(\d+)$", pin.tag or "")
    recorded = [
        # a wheel runs on other machines than the one that built it: no -march=native
        "-DGGML_NATIVE=OFF",
        *prof.cmake_args,
        # the tree's build info, which git cannot find in the staged copy (and must not take from
        # the project repository around it)
        *([f"-DLLAMA_BUILD_NUMBER={build.group(1)}"] if build else []),
        f"-DLLAMA_BUILD_COMMIT={pin.short}+{prov_label}",
    ]
    if options.backend == "cuda" and options.cuda_arch:
        recorded.append(f"-DCMAKE_CUDA_ARCHITECTURES={options.cuda_arch}")
    if options.no_mtmd:
        recorded.append("-DLLAVA_BUILD=OFF")
    recorded += options.cmake_args
    tools: list[str] = []
    if ccache:
        # our launcher for every language, and ggml's own ccache detection off (it would add a second)
        tools += [f"-DCMAKE_C_COMPILER_LAUNCHER={ccache}", f"-DCMAKE_CXX_COMPILER_LAUNCHER={ccache}"]
        if options.backend == "cuda":
            tools.append(f"-DCMAKE_CUDA_COMPILER_LAUNCHER={ccache}")
    tools.append("-DGGML_CCACHE=OFF")
    if options.no_common:
        # a path of this machine: the provenance names what is left out instead (left_out)
        tools.append(f"-DCMAKE_PROJECT_llama.cpp_INCLUDE={NO_COMMON_CMAKE}")
    if sys.platform != "win32":
        # __FILE__ in GGML_ASSERT & co. would embed where the project happens to be checked out
        # (given on the command line, CMAKE_<LANG>_FLAGS no longer come from CFLAGS: keep those)
        prefix_map = f"-ffile-prefix-map={src}=/llama-cpp-python"
        for lang, env_var in (("C", "CFLAGS"), ("CXX", "CXXFLAGS")):
            tools.append(f"-DCMAKE_{lang}_FLAGS={prefix_map} {os.environ.get(env_var, '')}".rstrip())
    # user args last: a later -D wins in CMake
    return tuple(recorded), tuple(tools)


def prepare(project: Project, options: WheelOptions, progress: ProgressSink | None = None) -> Prepared:
    """Stage the project to build: the sdist, the patched tree, the provenance, the version.

    Everything the build records about itself is computed here, so a caller can compare what two
    series would give without compiling.
    """
    progress = progress or NullProgress()
    if options.backend not in BACKENDS:
        raise InputError(f"unknown backend '{options.backend}' (known: {', '.join(BACKENDS)})")
    pin = load_pin(project.pin_file)
    series = load_series(project.patches_dir)
    work, commit, base = _patched_commit(project)
    src_info, origin = resolve_sdist(pin, options)
    second = _bindings_series(project, src_info)
    progress.begin(f"bindings sdist ({origin}, checked by sha256)", None)
    try:
        archive = mirror.download(src_info, project.cache_dir / "downloads", project.cache_dir / "tmp", progress)
    finally:
        progress.end()
    root = wheel_root(project, options.backend)
    root.mkdir(parents=True, exist_ok=True)
    src = root / "src"
    scratch = Path(tempfile.mkdtemp(prefix="stage-", dir=root))
    try:
        stage = scratch / "src"
        progress.begin("staging the sdist and the patched tree", None)
        if second is None:
            mirror.extract_subdir(archive, ".", stage, exclude=(src_info.subdir,))
        else:
            # the bindings series' branch 'patched': the same sdist's files (its pin's source, less
            # vendor/llama.cpp) with the bindings patches applied
            _archive_into(second.work, second.commit, stage, scratch)
        _archive_into(work, commit, stage / src_info.subdir, scratch)
        progress.end()

        pyproject_file = stage / "pyproject.toml"
        try:
            pyproject = tomllib.loads(pyproject_file.read_text(encoding="utf-8"))
        except (OSError, tomllib.TOMLDecodeError) as e:
            raise InputError(f"{archive.name}: no readable pyproject.toml: {e}") from e
        _check_build_requires(pyproject, Path(archive.name) / "pyproject.toml")
        init = stage / PACKAGE / "__init__.py"
        init_text = init.read_text(encoding="utf-8") if init.is_file() else ""
        m = _VERSION_LINE.search(init_text)
        if not m:
            raise InputError(f"{archive.name}: {PACKAGE}/__init__.py has no __version__ line")
        bindings = Bindings(
            name=str(pyproject.get("project", {}).get("name", "")), version=m.group(3), sdist=archive.name,
            sha256=src_info.sha256, source=origin,
        )

        # drift: the functions the series changes in llama.h against the sdist's ctypes declarations
        vendor = stage / src_info.subdir
        header_before = work.git.run("show", f"{base}:include/llama.h").stdout
        header_after = (vendor / "include" / "llama.h").read_text(encoding="utf-8", errors="replace")
        bindings_file = stage / PACKAGE / "llama_cpp.py"
        drift = driftmod.check(
            header_before, header_after, bindings_file.read_text(encoding="utf-8"),
            bindings_name=f"{PACKAGE}/llama_cpp.py", typedef_sources=driftmod.typedef_headers(vendor),
        )
        if drift and (options.strict or second is not None):
            why = "--strict" if second is None else (
                f"no patch of {second.project.patches_dir.name}/ follows the C change")
            raise DriftError(f"binding drift ({why}): " + "; ".join(f"{d.function}: {d.problem}" for d in drift))

        ccache = find_ccache() if options.use_ccache else None
        bindings_records = second.records if second is not None else ()
        label = local_label(pin, patch_records(series) + bindings_records)
        recorded, tools = _cmake_args(pin, label, options, src, ccache)
        data = provenance(
            pin, series, upstream_commit=base, patched_commit=commit, patched_tree=work.git.tree_of(commit),
            bindings=bindings, backend=options.backend, cmake_args=recorded, drift=[d.as_dict() for d in drift],
            left_out=left_out(options),
            bindings_series=second.record() if second is not None else None,
        )
        version = data["version"]
        init.write_text(init_text[: m.start()] + f'{m.group(1)}"{version}"' + init_text[m.end():], encoding="utf-8")
        (stage / PACKAGE / "patchset.json").write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
        shutil.copyfile(MODULE_TEMPLATE, stage / PACKAGE / "patchset.py")
        readme_name = pyproject.get("project", {}).get("readme")
        readme = stage / readme_name if isinstance(readme_name, str) else None
        if readme is not None and readme.is_file():
            readme.write_text(description_section(data) + readme.read_text(encoding="utf-8"), encoding="utf-8")

        progress.begin("updating the staged project (changed files only)", None)
        written, removed = sync_tree(stage, src)
        # what is staged is what was archived: check, do not assume
        tree = _tree_id(work, src / src_info.subdir, scratch)
        progress.end()
        if tree != data["vendored"]["tree"]:
            raise BuildError(f"{src / src_info.subdir}: staged tree {tree} is not the tree of '{PATCHED}' "
                             f"{data['vendored']['tree']}")
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return Prepared(
        source_dir=src, build_dir=root / "build", version=version, provenance=data, drift=tuple(drift),
        cmake_args=recorded + tools, source_date_epoch=source_date_epoch(pin), written=written, removed=removed,
        ccache=ccache,
    )


def _archive_into(work: WorkRepo, commit: str, dest: Path, scratch: Path) -> None:
    """The files of `commit` (a `git archive`, never the work tree's) extracted into `dest`."""
    tar = scratch / "tree.tar"
    work.git.run("archive", "--format=tar", "-o", str(tar), commit)
    with tarfile.open(tar) as tf:
        tf.extractall(dest, filter="data")
    tar.unlink()


@dataclass(frozen=True)
class SecondSeries:
    """The bindings series (`patches-bindings/`) as the wheel holds it."""

    project: Project
    pin: Pin
    work: WorkRepo
    commit: str
    base: str
    series: Series

    @property
    def records(self) -> tuple[PatchRecord, ...]:
        """Its patches, named from the main series' folder (`../patches-bindings/NAME`), so that the
        series hash of the wheel is one `sha256sum` listing of both folders."""
        return tuple(replace(r, file=f"../{self.project.patches_dir.name}/{r.file}")
                     for r in patch_records(self.series))

    def record(self) -> dict:
        return series_record(self.project.series_name, self.pin, self.series, patched_commit=self.commit,
                             patched_tree=self.work.git.tree_of(self.commit), upstream_commit=self.base)


def _bindings_series(project: Project, sdist: SdistSource) -> SecondSeries | None:
    """The project's bindings series, applied and committed, when it has one; None otherwise.

    Its pin must name the very sdist the wheel is built from: the bindings patches were made
    against that archive's files."""
    if BINDINGS_SERIES not in project.second_series():
        return None
    second = project.series(BINDINGS_SERIES)
    pin = load_pin(second.pin_file)
    pinned = [s.sha256 for s in pin.sources if isinstance(s, SdistSource)]
    if sdist.sha256 not in pinned:
        raise InputError(
            f"{second.pin_file}: the bindings series is pinned to the sdist with sha256 "
            f"{', '.join(pinned) or '(none)'}, the wheel would build from {sdist.sha256}: build without --sdist, "
            f"or pin the series to that sdist (its patches were made against the pinned one)")
    work, commit, base = _patched_commit(second)
    return SecondSeries(second, pin, work, commit, base, load_series(second.patches_dir))



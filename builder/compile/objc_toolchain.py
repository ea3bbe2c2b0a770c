"""The Linux Objective-C toolchain (`patchset toolchain objc`), built from source into the patchset cache.

libobjc2 (the GNUstep runtime 2 that clang's `-fobjc-runtime=gnustep-2.0` targets), GNUstep make
and GNUstep base, built from source archives into the patchset cache.

What is built, from which archive (URL, version, sha256), with which source fixes and which steps,
is data: `builder/compile/data/objc_toolchain.json`. The archives are taken from a mirror folder
(`--mirror`, CI: `../shared/third_party`) and checked against their sha256 before anything is
unpacked. The toolchain lies in `<cache>/toolchains/objc-<key>`, the key a hash of the archives'
sha256 and the recipe; it is built in a temporary folder of the cache and renamed into place only
once every step has passed (`build`), so a killed build is never taken as built, and a second run
finds it and reuses it.
"""

from __future__ import annotations

import glob
import hashlib
import json
import os
import shutil
import tarfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from builder import proc
from builder.compile.toolchain import find_tool
from builder.errors import BuildError, InputError, SourceError
from builder.fsutil import atomic_write_text, sha256_file
from builder.locking import hold
from builder.progress import NullProgress, ProgressSink
from builder.project import default_cache_dir

RECIPE_FILE = Path(__file__).parent / "data" / "objc_toolchain.json"
DEFAULT_TIMEOUT_S = 3600.0
HEADER_DIRS = ("/usr/include", "/usr/local/include", "/usr/include/*-linux-gnu")
MANIFEST = "patchset-toolchain.json"
"""Written into the prefix before it is renamed into place: what it was built from."""


@dataclass(frozen=True)
class Fix:
    """A named, checked edit of an unpacked source file (never of the archive)."""

    file: str
    old: str
    new: str
    count: int
    why: str


@dataclass(frozen=True)
class Archive:
    name: str
    file: str
    url: str
    version: str
    sha256: str
    needs: tuple[str, ...]
    steps: tuple[tuple[str, ...], ...]
    env: dict[str, str] = field(default_factory=dict)
    fixes: tuple[Fix, ...] = ()
    in_source: bool = False
    provides: tuple[str, ...] = ()
    """Files (relative to the prefix) its install must leave: an install that went elsewhere fails."""


@dataclass(frozen=True)
class Recipe:
    apt: dict[str, str]
    """What a need (program or header) is called among Debian's packages."""
    archives: tuple[Archive, ...]

    def upto(self, name: str | None) -> Recipe:
        """The archives up to and including `name` (all when None): a toolchain of its first parts."""
        if name is None:
            return self
        names = [a.name for a in self.archives]
        if name not in names:
            raise InputError(f"--only {name}: not an archive of the toolchain (one of {', '.join(names)})")
        return Recipe(self.apt, self.archives[: names.index(name) + 1])

    def packages(self) -> list[str]:
        """The Debian packages every need of these archives comes from, sorted."""
        return sorted({self.apt.get(n, n) for a in self.archives for n in a.needs})


@dataclass(frozen=True)
class Built:
    prefix: Path
    reused: bool
    seconds: float
    log: Path | None


def load_recipe(path: Path = RECIPE_FILE) -> Recipe:
    """The recipe file, or an InputError naming the file and what is wrong."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        archives = []
        for a in data["archives"]:
            fixes = tuple(Fix(f["file"], f["old"], f["new"], int(f["count"]), f["why"]) for f in a.get("fixes", ()))
            archives.append(Archive(a["name"], a["file"], a["url"], a["version"], a["sha256"].lower(),
                                    tuple(a.get("needs", ())), tuple(tuple(map(str, s)) for s in a["steps"]),
                                    dict(a.get("env", {})), fixes, bool(a.get("in_source", False)),
                                    tuple(a.get("provides", ()))))
        return Recipe(dict(data.get("apt", {})), tuple(archives))
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise InputError(f"{path}: not a toolchain recipe ({type(e).__name__}: {e})") from None


def cache_key(recipe: Recipe) -> str:
    """A hash of the archives' sha256 and of how they are built (a changed recipe is a new toolchain)."""
    blob = json.dumps([[a.name, a.sha256, a.steps, a.env, [f.__dict__ for f in a.fixes], a.in_source]
                       for a in recipe.archives], sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def toolchain_dir(cache_dir: Path, recipe: Recipe) -> Path:
    return cache_dir / "toolchains" / f"objc-{cache_key(recipe)}"


def find_built(cache_dir: Path, recipe: Recipe | None = None) -> Path | None:
    """The finished toolchain's prefix, or None when it has not been built (a half-built one never counts)."""
    d = toolchain_dir(cache_dir, recipe or load_recipe())
    return d if (d / MANIFEST).is_file() else None


def require_built(cache_dir: Path | None = None) -> Path:
    """The built toolchain's prefix (the default cache unless `cache_dir`), or a clear error saying how to build it."""
    found = find_built(cache_dir or default_cache_dir())
    if found is None:
        raise InputError("the metal-linux backend needs the Objective-C toolchain, not built in this cache: run "
                         "`patchset toolchain objc --mirror DIR` (DIR holding its archives; CI: ../shared/third_party)")
    return found


def _has_header(name: str) -> bool:
    return any(glob.glob(os.path.join(d, name)) for d in HEADER_DIRS)


def missing_needs(recipe: Recipe) -> list[str]:
    """The needs of the recipe's archives this machine lacks (a program on PATH, or a system header)."""
    out = []
    for a in recipe.archives:
        for n in a.needs:
            have = _has_header(n) if n.endswith(".h") else shutil.which(n) is not None
            if not have and n not in out:
                out.append(n)
    return out


def check_mirror(mirror: Path, recipe: Recipe) -> dict[str, Path]:
    """Each archive's file in the mirror folder, its sha256 checked; a missing or different one is
    refused with one line naming the file, the expected and the actual sha256."""
    if not mirror.is_dir():
        raise InputError(f"--mirror {mirror}: not a folder")
    found: dict[str, Path] = {}
    for a in recipe.archives:
        f = mirror / a.file
        if not f.is_file():
            raise SourceError(f"{f}: missing from the mirror ({a.name} {a.version}, from {a.url})")
        actual = sha256_file(f)
        if actual != a.sha256:
            raise SourceError(f"{f}: sha256 {actual}, the recipe names {a.sha256} ({a.name} {a.version}): refused")
        found[a.name] = f
    return found


def _unpack(archive: Path, into: Path) -> Path:
    """Unpack `archive` under `into` and return its single top folder (or `into`)."""
    into.mkdir(parents=True)
    with tarfile.open(archive) as t:
        t.extractall(into, filter="data")
    tops = list(into.iterdir())
    return tops[0] if len(tops) == 1 and tops[0].is_dir() else into


def apply_fixes(a: Archive, src: Path) -> None:
    """Apply the archive's fixes to its unpacked source; each must find its text exactly `count` times."""
    for fix in a.fixes:
        f = src / fix.file
        if not f.is_file():
            raise BuildError(f"{a.name}: source fix of {fix.file}: no such file in {a.file}")
        text = f.read_text(encoding="utf-8", errors="surrogateescape")
        n = text.count(fix.old)
        if n != fix.count:
            raise BuildError(f"{a.name}: source fix of {fix.file}: {fix.old!r} found {n} time(s), "
                             f"the recipe expects {fix.count} (the archive is not the one the fix was written for)")
        f.write_text(text.replace(fix.old, fix.new), encoding="utf-8", errors="surrogateescape")


def _fill(text: str, values: dict[str, str]) -> str:
    for k, v in values.items():
        text = text.replace("{" + k + "}", v)
    return text


def _clean_stale(tc_root: Path, name: str) -> None:
    """Remove what killed builds of `name` left (their temporary folders: no lock holder is running one)."""
    for d in tc_root.glob(f".tmp-{name}-*"):
        shutil.rmtree(d, ignore_errors=True)


def _point(link: Path, target: Path) -> None:
    """Make `link` a symbolic link to `target`, atomically (a new link renamed over the old one)."""
    tmp = link.with_name(f".{link.name}.link-{os.getpid()}")
    tmp.unlink(missing_ok=True)
    tmp.symlink_to(target.name if target.parent == link.parent else target, target_is_directory=True)
    tmp.replace(link)


def build(cache_dir: Path, mirror: Path, *, recipe: Recipe | None = None, timeout: float = DEFAULT_TIMEOUT_S,
          jobs: int = 2, progress: ProgressSink | None = None) -> Built:
    """The toolchain's prefix in the cache: reused when built, else built from the mirror's archives
    within `timeout` seconds (all steps together).

    The prefix the programs are built for (GNUstep bakes it into its makefiles and tools) is the
    path `<cache>/toolchains/objc-<key>`, a symbolic link. While a build runs it points to that
    build's temporary folder, which holds no manifest, so nothing takes it as built; once every step
    has passed, the manifest is written and the finished folder is renamed to `objc-<key>.tree`,
    and the link pointed at it (both renames)."""
    start = time.monotonic()
    recipe = recipe or load_recipe()
    final = toolchain_dir(cache_dir, recipe)
    if (final / MANIFEST).is_file():
        return Built(final, True, time.monotonic() - start, None)
    files = check_mirror(mirror, recipe)
    missing = missing_needs(recipe)
    if missing:
        raise BuildError(f"building the Objective-C toolchain needs {', '.join(missing)}: install the packages "
                         f"{' '.join(recipe.packages())} (apt-get install -y {' '.join(recipe.packages())})")
    root = final.parent
    root.mkdir(parents=True, exist_ok=True)
    with hold(root / f"{final.name}.lock", timeout, purpose="toolchain objc", what=f"the toolchain {final.name}"):
        if (final / MANIFEST).is_file():  # another process built it while we waited
            return Built(final, True, time.monotonic() - start, None)
        return _build_locked(final, files, recipe, start, timeout, jobs, progress or NullProgress())


def _build_locked(final: Path, files: dict[str, Path], recipe: Recipe, start: float, timeout: float, jobs: int,
                  progress: ProgressSink) -> Built:
    root = final.parent
    _clean_stale(root, final.name)
    tmp = root / f".tmp-{final.name}-{os.getpid()}"
    stage = tmp / "prefix"
    stage.mkdir(parents=True)
    if final.exists() and not final.is_symlink():
        raise BuildError(f"{final}: not a toolchain this version of patchset made (remove it)")
    _point(final, stage)
    log = tmp / "build.log"
    deadline = start + timeout
    tools = {"cmake": find_tool("cmake").path, "ninja": find_tool("ninja").path}
    total = sum(len(a.steps) for a in recipe.archives)
    done = 0
    progress.begin(f"toolchain objc ({', '.join(a.name for a in recipe.archives)})", total=total)
    try:
        for a in recipe.archives:
            src = _unpack(files[a.name], tmp / "src" / a.name)
            apply_fixes(a, src)
            bld = src if a.in_source else tmp / "build" / a.name
            bld.mkdir(parents=True, exist_ok=True)
            values = {"src": str(src), "build": str(bld), "prefix": str(final.absolute()), "jobs": str(max(1, jobs)),
                      **tools}
            env = proc.clean_env({k: _fill(v, {**values, "PATH": os.environ.get("PATH", "")})
                                  for k, v in a.env.items()})
            for i, step in enumerate(a.steps, 1):
                left = deadline - time.monotonic()
                argv = [_fill(w, values) for w in step]
                progress.update(done, total, f"{a.name}: step {i}/{len(a.steps)}: {' '.join(step[:2])}")
                r = proc.stream(argv, log_file=log, cwd=bld, env=env, timeout=max(left, 0.0))
                if r.timed_out:
                    raise BuildError(f"the Objective-C toolchain took longer than {timeout:g}s (--timeout): stopped "
                                     f"in {a.name} step {i}; log: {_keep_log(log, final)}")
                if r.returncode != 0:
                    raise BuildError(f"{a.name} step {i} ({' '.join(argv[:3])}...) failed with exit code "
                                     f"{r.returncode}; log: {_keep_log(log, final)}")
                done += 1
            lacking = [p for p in a.provides if not (stage / p).exists()]
            if lacking:
                raise BuildError(f"{a.name}: its install left no {', '.join(lacking)} in the prefix; "
                                 f"log: {_keep_log(log, final)}")
        shutil.copyfile(log, stage / "build.log")
        atomic_write_text(stage / MANIFEST, json.dumps(
            {"key": cache_key(recipe), "archives": [
                {"name": a.name, "version": a.version, "url": a.url, "sha256": a.sha256,
                 "fixes": [{"file": f.file, "why": f.why} for f in a.fixes]} for a in recipe.archives]},
            indent=2) + "\n")
        tree = root / f"{final.name}.tree"
        shutil.rmtree(tree, ignore_errors=True)
        stage.rename(tree)
        _point(final, tree)
    finally:
        progress.end()
        if not (final / MANIFEST).is_file():
            final.unlink(missing_ok=True)
        shutil.rmtree(tmp, ignore_errors=True)
    return Built(final, False, time.monotonic() - start, final / "build.log")


def _keep_log(log: Path, final: Path) -> Path:
    """Copy a failed build's log beside the toolchain folder (the temporary folder is removed)."""
    kept = final.parent / f"{final.name}.failed.log"
    if log.is_file():
        shutil.copyfile(log, kept)
    return kept


DOC_BEGIN = "<!-- objc-toolchain: generated from builder/compile/data/objc_toolchain.json; do not edit -->"
DOC_END = "<!-- /objc-toolchain -->"


def markdown(recipe: Recipe) -> str:
    """docs/design.md's table of the toolchain's archives and the apt line (tests check it is current)."""
    rows = ["| archive | version | upstream | sha256 | source fixes |", "| --- | --- | --- | --- | --- |"]
    for a in recipe.archives:
        fixes = "; ".join(f"`{f.file}`: `{f.old}` to `{f.new}` ({f.why})" for f in a.fixes) or "none"
        rows.append(f"| `{a.file}` ({a.name}) | {a.version} | {a.url} | `{a.sha256}` | {fixes} |")
    apt = " ".join(recipe.packages())
    return "\n".join([DOC_BEGIN, *rows, "", f"Debian packages it needs: `apt-get install -y {apt}`", DOC_END])

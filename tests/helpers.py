"""Builders for the synthetic upstream, its patch series and hostile archives (used by conftest and tests)."""

from __future__ import annotations

import hashlib
import io
import os
import re
import shutil
import subprocess
import sys
import tarfile
from dataclasses import dataclass
from pathlib import Path

import forkcli

from builder.compile import metalcheck, objc_toolchain
from builder.errors import BuildError
from builder.gitrepo import GitRepo, init_repo
from builder.project import Project, load_project
from builder.series.refresh import format_mails, write_series
from builder.upstream import fetch as upstream
from builder.upstream.pin import load_pin

# -- the tiny C project that stands in for llama.cpp ---------------------------------------------
A_C = """\
/* a.c */
#include <stdio.h>

int a_value(void) {
    int x = 1;
    int y = 2;
    return x + y;
}

int a_twice(int v) {
    return v * 2;
}
"""

B_C = """\
/* b.c */
#include <stddef.h>

int b_len(const char *s) {
    int n = 0;
    while (s[n]) n++;
    return n;
}
"""

TEST_X_C = """\
#include <assert.h>
int b_len(const char *s);
int main(void) {
    assert(b_len("ab") == 2);
    return 0;
}
"""

UPSTREAM_FILES = {
    "README": "tiny upstream\n",
    "src/a.c": A_C,
    "src/b.c": B_C,
    "tests/test-x.c": TEST_X_C,
}

# the three patches of the standard series: (files after, message, author, date)
PATCH1_MSG = """\
a: widen the sum

The sum of x and y could overflow.

Patchset-Status: pending
Patchset-Backends: cpu
Patchset-Test: test-x
Patchset-Test-Paths: tests/test-x.c
"""
PATCH1_A_C = A_C.replace("    return x + y;", "    return (long)x + y;")

PATCH2_MSG = """\
b: accept NULL

Callers pass NULL for an empty name.

Patchset-Status: submitted https://github.com/ggml-org/llama.cpp/pull/1
Patchset-Backends: cpu cuda
Patchset-Test: [cpu] test-x --fast
Patchset-Before: build-fails
Patchset-Mutation: mutations/0002-b-null.patch
"""
PATCH2_B_C = B_C.replace("int b_len(const char *s) {\n", "int b_len(const char *s) {\n    if (s == NULL) return 0;\n")

PATCH3_MSG = """\
tests: cover NULL in b_len

Patchset-Status: fork-only
Patchset-Backends: cpu
Patchset-Test: test-x
"""
PATCH3_TEST_X_C = TEST_X_C.replace('    assert(b_len("ab") == 2);\n',
                                   '    assert(b_len("ab") == 2);\n    assert(b_len(NULL) == 0);\n')

# a patch written against upstream that changes the same line as patch 1: conflicts after it
CONFLICT_MSG = """\
a: clamp the sum

Patchset-Status: pending
"""
CONFLICT_A_C = A_C.replace("    return x + y;", "    return x + y > 100 ? 100 : x + y;")

AUTHORS = [
    ("Ada Lovelace", "ada@example.org", "2024-01-02T03:04:05+01:00"),
    ("Grace Hopper", "grace@example.org", "2024-02-03T04:05:06-05:00"),
    ("Alan Turing", "alan@example.org", "2024-03-04T05:06:07+00:00"),
]

STANDARD_PATCHES = [
    ({"src/a.c": PATCH1_A_C}, PATCH1_MSG),
    ({"src/b.c": PATCH2_B_C}, PATCH2_MSG),
    ({"tests/test-x.c": PATCH3_TEST_X_C}, PATCH3_MSG),
]
STANDARD_NAMES = [
    "0001-a-widen-the-sum.patch",
    "0002-b-accept-NULL.patch",
    "0003-tests-cover-NULL-in-b_len.patch",
]


# a series verify can run through quickly: its trees are made, their refs and worktree written,
# and the builds fail at once (the tiny upstream has no ggml/): "build failed" evidence in seconds
VERIFY_PATCHES: list[tuple[dict[str, str | bytes | None], str]] = [
    ({"src/a.c": PATCH1_A_C, "tests/test-a.cpp": "int main() { return 0; }\n"},
     "a: widen the sum\n\nPatchset-Status: pending\nPatchset-Backends: cpu\nPatchset-Test: test-a\n"
     "Patchset-Test-Paths: tests/test-a.cpp\n"),
    ({"src/b.c": PATCH2_B_C, "tests/test-a.cpp": "int main() { return 0; } /* NULL */\n"},
     "b: accept NULL\n\nPatchset-Status: pending\nPatchset-Backends: cpu\nPatchset-Test: test-a\n"
     "Patchset-Test-Paths: tests/test-a.cpp\n"),
]


# -- git ------------------------------------------------------------------------------------------
def git(repo: Path, *args: str, env: dict[str, str] | None = None, check: bool = True) -> str:
    """Run git in `repo` (never changing the process's cwd); stdout, stripped."""
    r = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True,
                       env={**os.environ, **(env or {})}, check=False)
    if check and r.returncode != 0:
        raise AssertionError(f"git {' '.join(args)} failed ({r.returncode}):\n{r.stdout}\n{r.stderr}")
    return r.stdout.strip()


def write_files(root: Path, files: dict[str, str | bytes | None]) -> None:
    for rel, content in files.items():
        p = root / rel
        if content is None:
            p.unlink()
            continue
        p.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            p.write_bytes(content)
        else:
            p.write_text(content)


def commit(repo: Path, files: dict[str, str | bytes | None], message: str,
           author: tuple[str, str, str] | None = None) -> str:
    """Write `files` (None deletes), commit them all; the new commit id."""
    write_files(repo, files)
    git(repo, "add", "--all")
    env = {}
    if author:
        env = {"GIT_AUTHOR_NAME": author[0], "GIT_AUTHOR_EMAIL": author[1], "GIT_AUTHOR_DATE": author[2]}
    git(repo, "commit", "--quiet", "-m", message, env=env)
    return git(repo, "rev-parse", "HEAD")


@dataclass
class Upstream:
    """The synthetic upstream: a working repository, and a bare clone of it that plays the remote."""

    src: Path
    bare: Path
    commit: str
    tree: str

    @property
    def url(self) -> str:
        return self.bare.as_uri()

    def advance(self, files: dict[str, str | bytes | None], message: str) -> str:
        """A new upstream commit, pushed to the remote; its id."""
        c = commit(self.src, files, message)
        git(self.src, "push", "--quiet", str(self.bare), "HEAD:refs/heads/main")
        return c

    def tree_of(self, rev: str) -> str:
        return git(self.src, "rev-parse", f"{rev}^{{tree}}")


def make_upstream(base: Path) -> Upstream:
    src = base / "upstream-src"
    git(base, "init", "--quiet", str(src))
    c = commit(src, dict(UPSTREAM_FILES), "initial import\n",
               author=("Upstream Dev", "dev@upstream.invalid", "2023-12-01T00:00:00+00:00"))
    bare = base / "upstream.git"
    git(base, "clone", "--quiet", "--bare", str(src), str(bare))
    return Upstream(src, bare, c, git(src, "rev-parse", "HEAD^{tree}"))


# -- the project ----------------------------------------------------------------------------------
def pin_toml(up_commit: str, tree: str, sources: list[dict[str, str]], *,
             repository: str = "https://example.invalid/upstream.git", tag: str | None = "b1",
             date: str = "2023-12-01") -> str:
    """A pin file's text (`tag=None`: a pin without a tag)."""
    lines = [
        'name = "llama.cpp"',
        f'repository = "{repository}"',
        f'commit = "{up_commit}"',
        *([f'tag = "{tag}"'] if tag is not None else []),
        f'date = "{date}"',
        f'tree = "{tree}"',
    ]
    for s in sources:
        lines.append("")
        lines.append("[[source]]")
        lines += [f'{k} = "{v}"' for k, v in s.items()]
    return "\n".join(lines) + "\n"


@dataclass
class Proj:
    """A project folder on the synthetic upstream, with the paths the CLI would use."""

    root: Path
    project: Project
    upstream: Upstream
    scratch: Path
    """A clone of the remote in which the series' commits were made."""
    commits: list[str]
    """The scratch commits the series was made from, in order."""

    @property
    def patches(self) -> Path:
        return self.root / "patches"

    @property
    def work(self) -> Path:
        return self.project.work_repo

    def series(self) -> list[str]:
        lines = (self.patches / "series").read_text().splitlines()
        return [ln for ln in lines if ln.strip() and not ln.startswith("#")]

    def snapshot(self) -> dict[str, bytes]:
        """Every file under patches/, byte for byte."""
        return {p.relative_to(self.patches).as_posix(): p.read_bytes()
                for p in sorted(self.patches.rglob("*")) if p.is_file()}

    def wgit(self, *args: str, check: bool = True) -> str:
        return git(self.work, *args, check=check)

    def put_back(self, pin: bytes, patches: dict[str, bytes]) -> None:
        """The pin and patches/ as they were (a `snapshot`), as the documented way back after a
        rebase or bump does it (`rm -r patches && git checkout REV -- upstream/llama.cpp.toml patches`)."""
        shutil.rmtree(self.patches)
        self.project.pin_file.write_bytes(pin)
        for rel, data in patches.items():
            (self.patches / rel).parent.mkdir(parents=True, exist_ok=True)
            (self.patches / rel).write_bytes(data)

    def set_series(self, commits: list[str]) -> list[str]:
        """Make patches/ hold exactly these scratch commits, one mail each; the file names."""
        return write_patches(self.patches, self.scratch, commits)


def write_patches(patches_dir: Path, repo: Path, commits: list[str]) -> list[str]:
    mails = []
    g = GitRepo(repo)
    for i, c in enumerate(commits, 1):
        name, data = format_mails(g, "-1", c)[0]
        mails.append((f"{i:04d}{name[4:]}", data))
    write_series(patches_dir, mails)
    return [n for n, _ in mails]


def make_project(base: Path, up: Upstream, cache_dir: Path,
                 patches: list[tuple[dict[str, str | bytes | None], str]] | None = None,
                 sources: list[dict[str, str]] | None = None) -> Proj:
    root = base / "proj"
    (root / "upstream").mkdir(parents=True)
    pin_file = root / "upstream" / "llama.cpp.toml"
    pin_file.write_text(pin_toml(up.commit, up.tree, sources or [{"kind": "git", "url": up.url}]))
    scratch = base / "scratch"
    git(base, "clone", "--quiet", str(up.bare), str(scratch))
    commits = []
    for i, (files, msg) in enumerate(STANDARD_PATCHES if patches is None else patches):
        commits.append(commit(scratch, files, msg, author=AUTHORS[i % len(AUTHORS)]))
    patches_dir = root / "patches"
    patches_dir.mkdir()
    (patches_dir / "mutations").mkdir()
    (patches_dir / "mutations" / "0002-b-null.patch").write_text("a known-bad variant (not parsed by lint)\n")
    write_patches(patches_dir, scratch, commits)
    project = load_project(root=root, pin_file=pin_file, state_dir=root / ".patchset", cache_dir=cache_dir)
    return Proj(root, project, up, scratch, commits)


def copy_made(template: Path, base: Path, names: tuple[str, ...]) -> None:
    """Copy the folders `names` that make_upstream and make_project made under `template` to `base`, each
    path of `template` written in them (the pin's git source, the remotes in the clones' configs and
    reflogs) made a path of `base`: the same repositories, commit ids included, as if made there."""
    old, new = str(template).encode(), str(base).encode()
    for name in names:
        shutil.copytree(template / name, base / name, symlinks=True)
        for p in (base / name).rglob("*"):
            if p.is_file() and not p.is_symlink():
                data = p.read_bytes()
                if old in data:
                    p.write_bytes(data.replace(old, new))


def copied_upstream(template: Upstream, base: Path) -> Upstream:
    """make_upstream(base), copied from the one made at `template`'s folder (no git run)."""
    copy_made(template.src.parent, base, (template.src.name, template.bare.name))
    return Upstream(base / template.src.name, base / template.bare.name, template.commit, template.tree)


def copied_project(template: Proj, up: Upstream, cache_dir: Path) -> Proj:
    """make_project(up.src.parent, up, cache_dir) with the standard series, copied from `template` (made
    the same way on the upstream `up` was copied from)."""
    base, made = up.src.parent, template.root.parent
    copy_made(made, base, (template.root.name, template.scratch.name))
    root = base / template.root.name
    project = load_project(root=root, pin_file=root / "upstream" / "llama.cpp.toml", state_dir=root / ".patchset",
                           cache_dir=cache_dir)
    return Proj(root, project, up, base / template.scratch.name, list(template.commits))


# -- archives -------------------------------------------------------------------------------------
def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _info(name: str, **kw: object) -> tarfile.TarInfo:
    ti = tarfile.TarInfo(name)
    ti.mtime = 1_700_000_000
    ti.mode = 0o644
    for k, v in kw.items():
        setattr(ti, k, v)
    return ti


def make_sdist(path: Path, files: dict[str, str], *, top: str = "pkg-1.0", subdir: str = "vendor/up",
               extra: list[tarfile.TarInfo] | None = None, package_files: dict[str, str | bytes] | None = None) -> Path:
    """A .tar.gz shaped like the llama-cpp-python sdist: `top/subdir/` holds the upstream files,
    beside it package files (`package_files`, relative to `top`: e.g. the package's `.git/` or its
    `pyproject.toml`), and in it a `.git` link FILE (a submodule) that must be left out."""
    path.parent.mkdir(parents=True, exist_ok=True)
    members: dict[str, bytes] = {
        f"{top}/PKG-INFO": b"Metadata-Version: 2.1\nName: pkg\nVersion: 1.0\n",
        f"{top}/setup.py": b"# not upstream\n",
        f"{top}/{subdir}/.git": b"gitdir: ../../.git/modules/vendor/up\n",
    }
    for rel, data in (package_files or {}).items():
        members[f"{top}/{rel}"] = data.encode() if isinstance(data, str) else data
    for rel, content in files.items():
        members[f"{top}/{subdir}/{rel}"] = content.encode()
    with tarfile.open(path, "w:gz") as tf:
        dirs: set[str] = set()
        for name in sorted(members):
            parts = name.split("/")[:-1]
            for i in range(1, len(parts) + 1):
                d = "/".join(parts[:i])
                if d not in dirs:
                    dirs.add(d)
                    tf.addfile(_info(d, type=tarfile.DIRTYPE, mode=0o755))
            data = members[name]
            tf.addfile(_info(name, size=len(data)), io.BytesIO(data))
        for ti in extra or []:
            tf.addfile(ti, io.BytesIO(b"evil\n") if ti.isfile() else None)
    return path


NOTE = {"notes/pin.txt": "the pinned commit\n"}
"""A file of the pinned commit: a commit after upstream's first, so that it has a parent (`sdist_with_commit`)."""


def sdist_with_commit(path: Path, up: Upstream, commit: str, files: dict[str, str]) -> Path:
    """An sdist of `files` (the tree of `commit`) carrying the submodule's git dir: HEAD and the
    commit's loose object, as upstream's git wrote it."""
    obj = (up.src / ".git" / "objects" / commit[:2] / commit[2:]).read_bytes()
    return make_sdist(path, files, package_files={".git/modules/vendor/up/HEAD": f"{commit}\n",
                                                  f".git/modules/vendor/up/objects/{commit[:2]}/{commit[2:]}": obj})


def sdist_first(archive: Path, up: Upstream) -> list[dict[str, str]]:
    # the sdist first: the pin never comes from git; the git source serves only the history after it
    return [{"kind": "sdist", "url": archive.as_uri(), "sha256": sha256(archive), "subdir": "vendor/up"},
            {"kind": "git", "url": up.url}]


def evil_member(name: str, *, symlink_to: str | None = None, hardlink_to: str | None = None,
                device: bool = False) -> tarfile.TarInfo:
    if symlink_to is not None:
        return _info(name, type=tarfile.SYMTYPE, linkname=symlink_to, mode=0o777)
    if hardlink_to is not None:
        return _info(name, type=tarfile.LNKTYPE, linkname=hardlink_to)
    if device:
        return _info(name, type=tarfile.CHRTYPE, devmajor=1, devminor=3)
    return _info(name, size=5)


def sdist_pin_sources(archive: Path, *, bogus_git_first: bool = True, subdir: str = "vendor/up",
                      sha: str | None = None) -> list[dict[str, str]]:
    srcs = []
    if bogus_git_first:
        srcs.append({"kind": "git", "url": (archive.parent / "no-such-repo.git").as_uri()})
    srcs.append({"kind": "sdist", "url": archive.as_uri(), "sha256": sha or sha256(archive), "subdir": subdir})
    return srcs


# -- the command, as a separate process ----------------------------------------------------------
def patchset_argv() -> list[str]:
    """The installed console script when there is one, else the module."""
    exe = shutil.which("patchset")
    return [exe] if exe else [sys.executable, "-m", "builder.cli"]


def run_patchset(*args: str, env: dict[str, str] | None = None, timeout: float = 180,
                 ) -> subprocess.CompletedProcess[str]:
    """`patchset ARGS` in a process of its own (never in another cwd), with extra environment: forked from a
    process that imported patchset once (tests/forkcli.py)."""
    return forkcli.run(list(args), {**os.environ, **(env or {})}, timeout, patchset_argv())


def start_patchset(*args: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    return subprocess.Popen([*patchset_argv(), *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, **(env or {})})


def fsck_clean(repo: Path) -> None:
    """Every ref resolves and every object is there (the borrowed ones included)."""
    r = subprocess.run(["git", "-C", str(repo), "fsck", "--no-dangling", "--no-progress"], capture_output=True,
                       text=True, check=False)
    assert r.returncode == 0 and "missing" not in r.stdout + r.stderr, f"git fsck {repo}:\n{r.stdout}{r.stderr}"
    for ref in git(repo, "for-each-ref", "--format=%(refname)").split():
        git(repo, "rev-parse", "--verify", "--quiet", f"{ref}^{{object}}")
    assert not (repo / ".git" / "index.lock").exists() if (repo / ".git").is_dir() else True


REPO_ROOT = Path(__file__).resolve().parent.parent


def copy_real_project(root: Path, cache: Path) -> Project:
    """This checkout's pin and series copied to `root` (so that the work repository is not made inside the
    checkout), on the cache that holds the real pin."""
    shutil.copytree(REPO_ROOT / "upstream", root / "upstream")
    shutil.copytree(REPO_ROOT / "patches", root / "patches")
    return load_project(root=root, pin_file=root / "upstream" / "llama.cpp.toml", state_dir=root / ".patchset",
                        cache_dir=cache)


def objc_mirror(files: list[str]) -> Path | None:
    """The mirror folder of the Objective-C toolchain's archives that holds `files`: $PATCHSET_OBJC_MIRROR, or
    `shared/third_party` beside the checkout (a clean clone sits next to `shared/`) or beside its parent (a
    worktree); None when none holds them all."""
    given = [Path(p) for p in (os.environ.get("PATCHSET_OBJC_MIRROR"),) if p]
    for m in [*given, REPO_ROOT.parent / "shared" / "third_party", REPO_ROOT.parent.parent / "shared" / "third_party"]:
        if all((m / f).is_file() for f in files):
            return m
    return None


def reuse_objc_toolchain(cache: Path, built_in: Path) -> Path | None:
    """The Objective-C toolchain built in the patchset cache `built_in`, named in `cache` too (a link where
    `patchset`'s commands on `cache` find it; the prefix stays the path it was built for, which GNUstep bakes
    in), never built here: the path in `cache`, or None when `built_in` holds no built toolchain."""
    recipe = objc_toolchain.load_recipe()
    built = objc_toolchain.find_built(built_in, recipe)
    if built is None:
        return None
    link = objc_toolchain.toolchain_dir(cache, recipe)
    if link == built:
        return link
    link.parent.mkdir(parents=True, exist_ok=True)
    tmp = link.with_name(f".{link.name}.link-{os.getpid()}")
    tmp.unlink(missing_ok=True)
    tmp.symlink_to(built, target_is_directory=True)
    tmp.replace(link)
    return link


def objc_toolchain_found() -> bool:
    """Whether the Linux Metal check's clang, GNUstep and blocks runtime headers are installed."""
    try:
        metalcheck.find_toolchain()
    except BuildError:
        return False
    return True


UPSTREAM_FIXES = Path(__file__).resolve().parent / "data" / "fixed-upstream"
"""Upstream's own fixes of our bugs on the real pin (not our diffs), one mail each."""


def real_pin_moved_on(cache: Path, dest: Path, mails: list[Path]) -> list[Path]:
    """Upstream moving on from the real pin: each of `mails` committed on the commit before (the first on
    the pin's commit in `cache`), in a bare repository at `dest` that borrows the cache's objects. Returns,
    per commit, a pin file that names it, with that repository as its git source (for `rebase --onto`)."""
    pin = load_pin(REPO_ROOT / "upstream" / "llama.cpp.toml")
    fetched = upstream.fetch(cache, pin)
    repo = init_repo(dest / "upstream.git", bare=True)
    (repo.path / "objects" / "info" / "alternates").write_text(f"{(fetched.repo / 'objects').resolve()}\n")
    # the pin is upstream's own commit without its parents: a fetch from here must not walk to them. Only the
    # pin: a warm cache also holds, each without its parents, the commits made here by an earlier run (fetched
    # as pins), which would cut this upstream's own history where it makes them again
    (repo.path / "shallow").write_text(f"{fetched.commit}\n")
    index = {"GIT_INDEX_FILE": str(dest / "index")}
    who = {f"GIT_{role}_{what}": value for role in ("AUTHOR", "COMMITTER")
           for what, value in (("NAME", "upstream"), ("EMAIL", "upstream@invalid"),
                               ("DATE", "2026-10-02T12:00:00+00:00"))}
    commit = fetched.commit
    pins = []
    for i, mail in enumerate(mails, 1):
        repo.run("read-tree", commit, env=index)
        repo.run("apply", "--cached", str(mail), env=index)
        tree = repo.out("write-tree", env=index)
        subject = next(line for line in mail.read_text().splitlines() if line.startswith("Subject: "))
        commit = repo.out("commit-tree", tree, "-p", commit, "-m", subject.removeprefix("Subject: "),
                          env={**index, **who})
        repo.update_ref(f"refs/heads/up-{i}", commit)
        pin_file = dest / f"up-{i}.toml"
        pin_file.write_text(pin_toml(commit, tree, [{"kind": "git", "url": repo.path.as_uri()}],
                                     repository=pin.repository, tag=None, date="2026-10-02"))
        pins.append(pin_file)
    return pins


def compiled_sources(compiled: list[Path]) -> set[str]:
    """The names of the source files behind compiled files (sources, or their objects X.cpp.o): each file a
    unity batch of CMake includes, in its place (the suite compiles libllama and llama-common in batches,
    PATCHSET_LLAMA_UNITY in tests/conftest.py)."""
    names: set[str] = set()
    for path in compiled:
        source = path.with_suffix("") if path.suffix == ".o" else path
        if source.parent.name == "Unity":
            names |= {Path(inc).name for inc in re.findall(r'^#include "([^"]+)"', source.read_text(), re.M)}
        else:
            names.add(source.name)
    return names


# -- the JSON documents of `--json` ----------------------------------------------------------------
def json_document(text: str) -> dict:
    """The one document `text` holds (a command's stdout with --json, or the file --json FILE wrote),
    checked against the schema every document validates against (`patchset help --json-schema`)."""
    import json  # noqa: PLC0415 (only the JSON tests need them)

    import jsonschema  # noqa: PLC0415

    from builder.commands import jsonout  # noqa: PLC0415

    doc = json.loads(text)
    jsonschema.Draft202012Validator(json.loads(jsonout.schema_text())).validate(doc)
    return doc

"""The scratch repository of a dry run, and what it reads of mails: hunks, renames, patch-ids, blob ids."""

from __future__ import annotations

import contextlib
import re
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

from builder import proc
from builder.errors import ProcessError, SeriesError
from builder.fsutil import atomic_write_text
from builder.gitrepo import ISOLATED, GitRepo, init_repo
from builder.series import resolutions as rr
from builder.upstream import fetch as upstream
from builder.upstream.fetch import merge_shallow
from builder.upstream.pin import GitSource, Pin


class Scratch:
    """A bare scratch repository and one temporary index in it."""

    def __init__(self, root: Path, borrow: list[Path]) -> None:
        self.git = init_repo(root / "scratch.git", bare=True)
        (root / "scratch.git" / "objects" / "info" / "alternates").write_text(
            "".join(f"{p.resolve()}\n" for p in dict.fromkeys(borrow)))
        self.env = {"GIT_INDEX_FILE": str(root / "index")}
        self.root = root
        self.resolutions: dict[str, rr.Resolution] = {}
        """The series' recorded resolutions (patches/resolutions/), reused where a conflict has one."""
        self.hunks = True
        """Whether a conflict's row lists the hunks that do not apply, each tried on its own (canary
        asks for them only at the commit it reports: a range's other conflicts need no detail)."""

    def apply(self, tree: str, mail: Path, *flags: str) -> tuple[bool, str]:
        """Apply `mail` on `tree` in the index: (applied, the resulting tree or '')."""
        self.git.run("read-tree", tree, env=self.env)
        if self.git.run("apply", "--cached", *flags, str(mail), env=self.env, check=False).returncode != 0:
            return False, ""
        return True, ("" if "--check" in flags else self.git.out("write-tree", env=self.env))

    def applies(self, tree: str, mail: Path, *flags: str) -> bool:
        return self.apply(tree, mail, "--check", *flags)[0]

    def applies_all(self, tree: str, mails: list[Path]) -> bool:
        """Do the mails apply on `tree` in order, each as is? One `git apply` of them all: it
        applies each patch on the result of those before it, all or nothing (not with `--check`,
        which tries each on `tree` alone)."""
        self.git.run("read-tree", tree, env=self.env)
        return self.git.run("apply", "--cached", *map(str, mails), env=self.env, check=False).returncode == 0

    def stack(self, base: str, mails: list[Path]) -> str:
        """`base` with each mail applied in order (3-way where a plain apply fails); one that does
        not apply at all is left out."""
        tree = base
        for mail in mails:
            ok, after = self.apply(tree, mail)
            if not ok:
                ok, after = self.three_way(tree, mail)
            tree = after if ok else tree
        return tree

    def three_way(self, tree: str, mail: Path) -> tuple[bool, str]:
        self.git.run("read-tree", tree, env=self.env)
        rc = self.git.run("apply", "--cached", "--3way", str(mail), env=self.env, check=False).returncode
        if rc != 0 or self.unmerged():
            return False, ""
        return True, self.git.out("write-tree", env=self.env)

    def on_pin(self, tree: str, names: list[str], mails: list[Path], short: str) -> None:
        """Apply the series on its own base (the pin `short`), each patch on the result of those
        before it: every patch must apply there, and applying writes the intermediate blobs that
        3-way merges elsewhere need (the patches name them)."""
        for name, mail in zip(names, mails, strict=True):
            ok, tree = self.apply(tree, mail)
            if not ok:
                raise SeriesError(f"{name}: does not apply on the current pin {short}; "
                                  "run `patchset apply` to see where")

    def follow(self, mails: list[Path], moved: dict[str, str]) -> tuple[list[Path], list[tuple[str, ...]]]:
        """The mails with their paths following `moved` (`renames`), written into the scratch folder
        where a path changes, and per mail the renames followed (`old -> new`)."""
        out: list[Path] = []
        followed: list[tuple[str, ...]] = []
        for i, mail in enumerate(mails):
            data, done = follow_renames(mail.read_bytes(), moved)
            if done:
                out.append(self.root / f"followed-{i}-{mail.name}")
                out[-1].write_bytes(data)
            else:
                out.append(mail)
            followed.append(done)
        return out, followed

    def reuse(self, tree: str, mail: Path) -> tuple[str, tuple[str, ...]]:
        """`mail` on `tree` by a 3-way merge whose conflicts each have a recorded resolution that fits:
        (the tree, the keys reused); ('', ()) otherwise. The merge runs in a scratch work tree holding
        only the mail's files, so the conflicted files are those `rebase` would meet."""
        wt = self.root / "wt"
        shutil.rmtree(wt, ignore_errors=True)
        wt.mkdir()
        work = f"--work-tree={wt}"
        self.git.run("read-tree", tree, env=self.env)
        paths = [p for p, _h, _l in split_hunks(mail.read_bytes())]
        self.git.run(work, "checkout-index", "-f", "--", *paths, env=self.env, check=False)
        self.git.run(work, "apply", "--3way", str(mail), env=self.env, check=False)
        conflicted = self.unmerged()
        keys: list[str] = []
        if not conflicted:
            return "", ()
        # the conflicted files with their markers, merged again from the index's stages (`apply --3way`
        # with a work tree of a bare repository leaves the file as it was)
        self.git.run(work, "checkout", "-m", "--", *conflicted, env=self.env, check=False)
        for path in conflicted:
            text = (wt / path).read_bytes() if (wt / path).is_file() else b""
            res = self.resolutions.get(rr.key_of(text))
            resolved = rr.carry(res, text) if res else None
            if res is None or resolved is None:
                return "", ()
            (wt / path).write_bytes(resolved)
            keys.append(res.key)
        self.git.run(work, "add", "--", *conflicted, env=self.env)
        if self.unmerged():
            return "", ()
        return self.git.out("write-tree", env=self.env), tuple(dict.fromkeys(keys))

    def unmerged(self) -> list[str]:
        out = self.git.run("ls-files", "--unmerged", "-z", env=self.env).stdout
        # <mode> <oid> <stage>\t<path>\0 ...
        return list(dict.fromkeys(e.split("\t", 1)[1] for e in out.split("\0") if "\t" in e))

    def failed_hunks(self, tree: str, mail: Path) -> tuple[list[str], list[str]]:
        """(files, hunks) of `mail` that do not apply on `tree`, each hunk tried on its own."""
        files: list[str] = []
        hunks: list[str] = []
        for i, (path, header, hunk_list) in enumerate(split_hunks(mail.read_bytes())):
            file_ok = True
            for j, (line, body) in enumerate(hunk_list or [(0, b"")]):
                one = self.root / f"hunk-{i}-{j}.patch"
                one.write_bytes(header + body)
                if not self.applies(tree, one):
                    file_ok = False
                    if hunk_list:
                        hunks.append(f"{path}:{line}")
            if not file_ok:
                files.append(path)
        return files, hunks


_HUNK = re.compile(rb"^@@ -(\d+)(?:,(\d+))? \+\d+(?:,(\d+))? @@")


def split_hunks(mail: bytes) -> list[tuple[str, bytes, list[tuple[int, bytes]]]]:
    """The diff of a mail as (path, file header, [(old start line, hunk)]) per file.

    Hunks are read by their line counts, so a trailing signature is never taken for a line.
    """
    lines = mail.splitlines(keepends=True)
    files: list[tuple[str, bytes, list[tuple[int, bytes]]]] = []
    i = 0
    while i < len(lines):
        if not lines[i].startswith(b"diff --git "):
            i += 1
            continue
        m = re.match(rb"diff --git a/(.*) b/(.*)$", lines[i].rstrip(b"\n"))
        path = (m.group(2) if m else lines[i][11:].strip()).decode("utf-8", "replace")
        header = [lines[i]]
        i += 1
        while i < len(lines) and not lines[i].startswith((b"@@", b"diff --git ")):
            header.append(lines[i])
            i += 1
        hunks: list[tuple[int, bytes]] = []
        while i < len(lines) and (h := _HUNK.match(lines[i])):
            old_n = int(h.group(2)) if h.group(2) is not None else 1
            new_n = int(h.group(3)) if h.group(3) is not None else 1
            body = [lines[i]]
            i += 1
            while i < len(lines) and (old_n > 0 or new_n > 0 or lines[i].startswith(b"\\")):
                tag = lines[i][:1]
                if tag in (b" ", b"\n"):
                    old_n, new_n = old_n - 1, new_n - 1
                elif tag == b"-":
                    old_n -= 1
                elif tag == b"+":
                    new_n -= 1
                body.append(lines[i])
                i += 1
            hunks.append((int(h.group(1)), b"".join(body)))
        files.append((path, b"".join(header), hunks))
    return files


def renames(git: GitRepo, old: str, new: str) -> dict[str, str]:
    """The files upstream renamed or moved between two trees or commits, by git's rename detection
    (`diff -M`, the default similarity): old path -> new path. A renamed path is gone from `new`."""
    fields = git.run("diff-tree", "-r", "-M", "--name-status", "-z", old, new).stdout.split("\0")
    moved: dict[str, str] = {}
    i = 0
    while i < len(fields) - 1:
        status = fields[i]
        if status[:1] in ("R", "C"):
            if status[:1] == "R":
                moved[fields[i + 1]] = fields[i + 2]
            i += 3
        else:
            i += 2
    return moved


_PATH_LINES = (b"--- a/", b"+++ b/", b"rename from ", b"rename to ", b"copy from ", b"copy to ")
_DIFF_GIT = re.compile(rb"^diff --git a/(.*) b/(.*?)(\r?\n)?$")


def follow_renames(mail: bytes, moved: dict[str, str]) -> tuple[bytes, tuple[str, ...]]:
    """`mail` with each path upstream renamed (`renames`) rewritten to its new name, in the diff's
    file headers only, and the renames followed (`old -> new`).

    Upstream moving a file a patch touches is what left Ollama's bump with "sha1 information is
    lacking or useless": the patch names a path the new tree does not have. With the path
    rewritten, `git apply` finds the file, and `--3way` merges from the blob the patch names.
    """
    out: list[bytes] = []
    done: dict[str, None] = {}
    in_header = False

    def new_name(raw: bytes) -> bytes:
        path = raw.decode("utf-8", "surrogateescape")
        if path in moved:
            done[f"{path} -> {moved[path]}"] = None
            return moved[path].encode("utf-8", "surrogateescape")
        return raw

    for line in mail.splitlines(keepends=True):
        if line.startswith(b"diff --git "):
            in_header = True
            m = _DIFF_GIT.match(line)
            out.append(b"diff --git a/" + new_name(m.group(1)) + b" b/" + new_name(m.group(2)) + (m.group(3) or b"")
                       if m else line)
            continue
        if in_header and line.startswith(b"@@"):
            in_header = False
        elif in_header and line.startswith(_PATH_LINES):
            head = next(p for p in _PATH_LINES if line.startswith(p))
            body = line[len(head):]
            eol = body[len(body.rstrip(b"\r\n")):]
            out.append(head + new_name(body[:len(body) - len(eol)]) + eol)
            continue
        out.append(line)
    return b"".join(out), tuple(done)


UNCHANGED = "unchanged"
CONTEXT_ONLY = "context only"
CHANGED = "changed"


def _own_lines(mail: bytes) -> list[bytes]:
    """The lines a mail's diff adds and removes, in order, without paths, context or line numbers."""
    return [ln for _p, _h, hunks in split_hunks(mail) for _n, body in hunks
            for ln in body.splitlines()[1:] if ln[:1] in (b"+", b"-")]


def _bodies(mail: bytes) -> list[bytes]:
    return [body for _p, _h, hunks in split_hunks(mail) for _n, body in hunks]


def change_class(old: bytes, new: bytes) -> str:
    """What a move did to a patch, as Electron's roll tooling separates them: `unchanged` (the same
    hunks), `context only` (upstream moved or changed the lines around the patch's own; the lines it
    adds and removes are the same: no new review needed) or `changed` (its own lines differ: a
    3-way merge or a resolution changed what it does)."""
    if _bodies(old) == _bodies(new):
        return UNCHANGED
    return CONTEXT_ONLY if _own_lines(old) == _own_lines(new) else CHANGED


HISTORY_DEPTH = 2000
"""The most upstream commits a `--fixed-upstream` check fetches to compare patch-ids with."""


def _history(git: GitRepo, cache_repo: Path, new_pin: Pin, old_commit: str, new_commit: str) -> None:
    """The commits between the pins, into the scratch repository, and which commits it holds
    without their parents (its `shallow` file).

    The cache holds each pin at depth 1; patch-id needs the commits upstream made in between. They
    are fetched from the new pin's git source, if it has one, offering only the old pin as what we
    have (`--negotiation-tip`; the cache's other refs are not offered), so that only the commits in
    between and the files they change come, at most HISTORY_DEPTH commits. Best effort: without
    them only the new commit itself is compared.
    """
    cache = cache_repo / "shallow"
    listed = cache.read_text().split() if cache.exists() else []
    # the new commit is no longer without parents once they come; the old one stays so
    atomic_write_text(git.path / "shallow", "".join(
        f"{c}\n" for c in dict.fromkeys([*(c for c in listed if c != new_commit), old_commit])))
    git.update_ref("refs/old", old_commit)
    for src in new_pin.sources:
        if not isinstance(src, GitSource):
            continue
        with contextlib.suppress(ProcessError):
            r = git.run("-c", "http.lowSpeedLimit=1000", "-c", "http.lowSpeedTime=60",
                        "-c", "core.alternateRefsCommand=true", "fetch", "--quiet", "--no-tags",
                        "--negotiation-tip=refs/old", f"--depth={HISTORY_DEPTH}", src.url, new_commit,
                        env={"GIT_TERMINAL_PROMPT": "0"}, timeout=upstream.fetch_timeout(), check=False)
            if r.returncode == 0:
                return
    merge_shallow(cache_repo, git.path)


def missing_history(git: GitRepo, old: str, new: str) -> str:
    """'' when `git` holds the history from `old` to `new` (patch-ids can be compared over it), else
    what was not checked and why, as a row says it."""
    if git.run("merge-base", "--is-ancestor", old, new, check=False).returncode == 0:
        return ""
    # a commit of a shallow history reads as a root: one commit is the new pin alone
    if git.out("rev-list", "--count", new) == "1":
        return "not checked, no history before the new pin"
    return f"not checked, the history fetched ({HISTORY_DEPTH} commits at most) does not reach the old pin"


def merged_as(git: GitRepo, old: str, new: str, mails: list[Path]) -> dict[str, str]:
    """Per mail name: the commit of `old..new` with the same patch-id (`git` holds that history:
    `missing_history` says when it does not)."""
    r = git.run("log", "-p", "--no-color", "--no-renames", "--format=commit %H", new, "--not", old, check=False)
    if r.returncode != 0 or not r.stdout:
        return {}
    ids = patch_ids(r.stdout)
    found: dict[str, str] = {}
    for mail in mails:
        mine = patch_ids(mail.read_text(encoding="utf-8", errors="replace"))
        for pid in mine:
            if pid in ids:
                found[mail.name] = ids[pid]
    return found


def patch_ids(text: str) -> dict[str, str]:
    """patch-id -> the commit (or mail) it was read from, by `git patch-id --stable`."""
    r = proc.run(["git", "patch-id", "--stable"], input_text=text, env=ISOLATED)
    out: dict[str, str] = {}
    for line in r.stdout.splitlines():
        pid, _, commit = line.partition(" ")
        out.setdefault(pid, commit)
    return out


def moved_files(git: GitRepo, tree: str, mails: list[Path]) -> dict[str, str]:
    """Without an old base to compare with (`apply --dry-run`): each file a mail changes that `tree`
    lacks, found at another path of `tree` by the blob id the mail starts from (a file moved as it
    was; one moved and changed is not found). Old path -> new path, as `renames` gives them."""
    starts: dict[str, str] = {}
    for mail in mails:
        for path, (old, _new) in blob_ids(mail.read_bytes()).items():
            starts.setdefault(path, old)
    wanted = {p: b for p, b in starts.items() if b.strip("0")}
    if not wanted:
        return {}
    listing = git.run("ls-tree", "-r", "-z", tree).stdout.split("\0")
    # <mode> SP <type> SP <object> TAB <path>
    blobs = [(e.split("\t", 1)[0].split()[2], e.split("\t", 1)[1]) for e in listing if "\t" in e]
    present = {path for _b, path in blobs}
    moved: dict[str, str] = {}
    for path, start in wanted.items():
        if path in present:
            continue
        found = [p for b, p in blobs if _same_blob(b, start)]
        if len(found) == 1:
            moved[path] = found[0]
    return moved


@contextlib.contextmanager
def scratch_repo(borrow: list[Path]) -> Iterator[Scratch]:
    root = Path(tempfile.mkdtemp(prefix="patchset-dry-run-"))
    try:
        yield Scratch(root, borrow)
    finally:
        shutil.rmtree(root, ignore_errors=True)


_INDEX = re.compile(rb"^index ([0-9a-f]+)\.\.([0-9a-f]+)", re.M)


def blob_ids(mail: bytes) -> dict[str, tuple[str, str]]:
    """Per file of the diff: (the blob id it starts from, the blob id it writes), as the mail's
    `index` lines give them (full with `--full-index`, else abbreviated); a new file starts from 0s."""
    out: dict[str, tuple[str, str]] = {}
    for path, header, _hunks in split_hunks(mail):
        m = _INDEX.search(header)
        if m:
            out[path] = (m.group(1).decode(), m.group(2).decode())
    return out


def _same_blob(a: str, b: str) -> bool:
    n = min(len(a), len(b))
    return n >= 7 and a[:n] == b[:n] and a.strip("0") != ""

"""A synthetic fork-sized series on the real pin, for the scale benchmark (never committed as data).

About 400 small patches spread over many files of the pinned tree, as a long-lived fork carries
them: most are independent one-line changes, every 12th changes a line that an earlier patch
added (so it depends on that patch), and every 80th also edits `tests/test-opt.cpp` and declares
a test. Every patch carries the trailers a real fork's patch would (`Patchset-Status`,
`Patchset-Origin`). The mails are written by the same code as `patchset refresh`, so the series
is byte for byte what the tool itself would keep.

Usage: python benchmarks/fork_series.py OUT_PROJECT [-n 400]
"""

from __future__ import annotations

import argparse
import random
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

from _common import ROOT

sys.path.insert(0, str(ROOT))

from builder.gitrepo import COMMITTER, GitRepo, init_repo
from builder.project import default_cache_dir
from builder.series.refresh import format_mails, write_series
from builder.upstream import fetch as upstream
from builder.upstream.pin import load_pin

_COMMENT = {".c": "//", ".cpp": "//", ".h": "//", ".cu": "//", ".cuh": "//", ".m": "//", ".metal": "//",
            ".py": "#", ".cmake": "#", ".txt": "#", ".sh": "#"}
_SKIP = ("tests/", "vendor/", ".github/", "docs/", "gguf-py/tests/")


@dataclass(frozen=True)
class Planned:
    index: int
    path: str
    line: int
    depends_on: int | None
    with_test: bool


def _candidates(git: GitRepo, commit: str) -> list[str]:
    names = git.out("ls-tree", "-r", "--name-only", commit).splitlines()
    return sorted(n for n in names if Path(n).suffix in _COMMENT and not n.startswith(_SKIP) and n.count("/") >= 1)


def plan(files: list[str], n: int, seed: int = 11) -> list[Planned]:
    rng = random.Random(seed)
    chosen = rng.sample(files, min(len(files), n))
    out: list[Planned] = []
    for i in range(1, n + 1):
        if i % 12 == 0 and i > 12:
            dep = rng.randrange(1, i - 1)
            while out[dep - 1].depends_on is not None:
                dep -= 1
            out.append(Planned(i, out[dep - 1].path, out[dep - 1].line, dep, False))
        else:
            out.append(Planned(i, chosen[(i - 1) % len(chosen)], 0, None, i % 80 == 0))
    return out


def generate(dest: Path, n: int, cache: Path | None = None) -> Path:
    """Write a project at `dest` (pin + patches/) whose series holds `n` synthetic patches."""
    cache = cache or default_cache_dir()
    pin = load_pin(ROOT / "upstream" / "llama.cpp.toml")
    fetched = upstream.fetch(cache, pin)
    if dest.exists():
        shutil.rmtree(dest)
    shutil.copytree(ROOT / "upstream", dest / "upstream")
    (dest / "patches").mkdir(parents=True)
    scratch = dest / ".gen"
    git = init_repo(scratch)
    (scratch / ".git" / "objects" / "info" / "alternates").write_text(str((fetched.repo / "objects").resolve()) + "\n")
    git.run("checkout", "--quiet", "-B", "fork", fetched.commit)
    added: dict[int, int] = {}
    for p in plan(_candidates(git, fetched.commit), n):
        f = scratch / p.path
        lines = f.read_text(encoding="utf-8", errors="surrogateescape").splitlines(keepends=True)
        mark = _COMMENT[Path(p.path).suffix]
        if p.depends_on is None:
            at = len(lines) // 2
            lines.insert(at, f"{mark} fork: local change {p.index}\n")
            added[p.index] = at
        else:
            at = added[p.depends_on]
            lines[at] = f"{mark} fork: local change {p.depends_on}, revised by {p.index}\n"
        f.write_text("".join(lines), encoding="utf-8", errors="surrogateescape")
        trailers = ["Patchset-Status: fork-only", f"Patchset-Origin: https://example.invalid/fork/pull/{p.index}"]
        if p.with_test:
            t = scratch / "tests" / "test-opt.cpp"
            t.write_text(t.read_text(encoding="utf-8") + f"// fork: test note {p.index}\n", encoding="utf-8")
            trailers += ["Patchset-Backends: cpu", "Patchset-Test: test-opt",
                         "Patchset-Test-Paths: tests/test-opt.cpp"]
        module = p.path.split("/")[1] if p.path.startswith("ggml/") else p.path.split("/")[0]
        msg = f"{module} : local change {p.index}\n\nA synthetic fork patch.\n\n" + "\n".join(trailers) + "\n"
        git.run("commit", "--quiet", "-a", "-m", msg, env={**COMMITTER, "GIT_AUTHOR_NAME": "Fork Dev",
                                                             "GIT_AUTHOR_EMAIL": "dev@example.invalid",
                                                             "GIT_AUTHOR_DATE": f"2026-10-02T00:00:{p.index % 60:02d}Z",
                                                             "GIT_COMMITTER_DATE": "2026-10-02T00:00:00Z"})
    write_series(dest / "patches", format_mails(git, f"{fetched.commit}..fork"))
    shutil.rmtree(scratch)
    return dest


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("out", type=Path)
    ap.add_argument("-n", type=int, default=400)
    args = ap.parse_args()
    generate(args.out.resolve(), args.n)
    print(f"{args.n} patches in {args.out / 'patches'}")


if __name__ == "__main__":
    main()

"""A fork-sized series on the real pin: do the verbs stay fast at 100, 200 and 400 patches?

Each verb is timed as a user runs it (a new `patchset` process), beside its anchor measured in
the same run: `apply` into a new work repository against plain `git am` of the same mails in one
process (into a new repository borrowing the same objects), `refresh` against `git format-patch`
of the range. The read-only verbs (`check`, `status`, `refresh --check`, `rebase --dry-run`) and
the no-op `apply` have an absolute target. `refresh` is timed three ways against the same anchor:
right after `apply` (apply formatted the commits it made, so refresh compares and writes), again
with nothing changed, and after the last commit was amended (only it is formatted). The anchor and
the two repeatable refresh rows are the median of three runs (each is a fraction of a second, and
one run of either side moves by a third). The time per patch at each size shows whether a verb
grows faster than linearly.

Targets on 2 cores: apply and refresh within 1.5x of the git commands; every no-op or read-only
verb under 2 s; no verb whose time per patch grows with the series.

Usage: python benchmarks/scale.py [--sizes 100,200,400] [--keep DIR]
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from statistics import median

from _common import ROOT, tempdir
from fork_series import generate

sys.path.insert(0, str(ROOT))

from builder.cli import build_parser
from builder.project import default_cache_dir
from builder.series.refresh import FORMAT_PATCH_FLAGS
from builder.upstream import fetch as upstream
from builder.upstream.pin import load_pin


def _has_flag(command: str, flag: str) -> bool:
    sub = next(a for a in build_parser()._actions if a.dest == "command")
    parser = sub.choices.get(command)  # type: ignore[attr-defined]
    return parser is not None and any(flag in a.option_strings for a in parser._actions)


def _cli(project: Path, env: dict[str, str], *args: str, ok: tuple[int, ...] = (0,)) -> float:
    start = time.perf_counter()
    rc = subprocess.run([sys.executable, "-m", "builder.cli", "--project", str(project), *args], env=env,
                        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, check=False)
    took = time.perf_counter() - start
    if rc.returncode not in ok:
        raise SystemExit(f"patchset {' '.join(args)} exited {rc.returncode}: {rc.stderr.strip()}")
    return took


def _git(*args: str, cwd: Path | None = None) -> float:
    start = time.perf_counter()
    subprocess.run(["git", "-c", "core.hooksPath=/dev/null", "-c", "commit.gpgsign=false", *args], cwd=cwd,
                   check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                   env={**os.environ, "GIT_COMMITTER_NAME": "bench", "GIT_COMMITTER_EMAIL": "bench@localhost",
                        "GIT_CONFIG_GLOBAL": "/dev/null", "GIT_CONFIG_NOSYSTEM": "1"})
    return time.perf_counter() - start


def _subset(full: Path, dest: Path, n: int) -> Path:
    shutil.copytree(full / "upstream", dest / "upstream")
    (dest / "patches").mkdir(parents=True)
    names = [line for line in (full / "patches" / "series").read_text().splitlines()
             if line and not line.startswith("#")][:n]
    for name in names:
        shutil.copy2(full / "patches" / name, dest / "patches" / name)
    (dest / "patches" / "series").write_text("".join(f"{name}\n" for name in names))
    return dest


def _plain_am(cache_repo: Path, commit: str, mails: list[Path], dest: Path) -> float:
    """The anchor: a new repository borrowing the cache's objects, checkout, `git am` of all mails."""
    start = time.perf_counter()
    _git("init", "--quiet", str(dest))
    (dest / ".git" / "objects" / "info" / "alternates").write_text(str(cache_repo / "objects") + "\n")
    _git("-c", "checkout.workers=0", "checkout", "--quiet", "-B", "patched", commit, cwd=dest)
    _git("am", "--keep", "--committer-date-is-author-date", "--quiet", *map(str, mails), cwd=dest)
    return time.perf_counter() - start


def _amend_and_refresh(project: Path, env: dict[str, str]) -> float:
    """The last patch's date changed: refresh formats that commit and rewrites its file."""
    _git("commit", "--quiet", "--amend", "--no-edit", "--date=now", cwd=project / ".patchset" / "work" / "llama.cpp")
    return _cli(project, env, "refresh")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="100,200,400")
    ap.add_argument("--keep", type=Path, help="keep the generated projects here")
    args = ap.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    base = args.keep or tempdir("patchset-bench-scale-")
    # the pin from the user's cache; parsed mails go to a cache of this run's own, so that the
    # first `check` really parses every mail (the cold row)
    real_cache = default_cache_dir()
    pin = load_pin(ROOT / "upstream" / "llama.cpp.toml")
    fetched = upstream.fetch(real_cache, pin)
    cache = base / "cache"
    cache.mkdir(parents=True, exist_ok=True)
    for part in ("upstream", "downloads"):
        if not (cache / part).exists():
            (cache / part).symlink_to(real_cache / part)
    # as installed: pip byte-compiles a package when it installs it, so a user's `patchset` does not
    # compile its modules on every start (this machine sets PYTHONDONTWRITEBYTECODE=1, which would)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env.update({"PATCHSET_CACHE": str(cache), "CI": "1"})
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(ROOT / "builder")], check=True, env=env)
    full = generate(base / "full", max(sizes), real_cache)
    has_refresh_check = _has_flag("refresh", "--check")
    has_dry_run = _has_flag("rebase", "--dry-run")
    rows: list[tuple[str, int, float, float | None, str]] = []
    for n in sizes:
        project = _subset(full, base / f"n{n}", n)
        mails = [project / "patches" / name for name in (project / "patches" / "series").read_text().split()]
        rows.append(("check, cold (git parses every mail)", n, _cli(project, env, "check"), None, ""))
        rows.append(("check", n, _cli(project, env, "check"), None, "< 2 s"))
        am = _plain_am(fetched.repo, fetched.commit, mails, base / f"am{n}")
        rows.append(("apply (new work repository)", n, _cli(project, env, "apply"), am, "<= 1.5x git am"))
        rows.append(("apply, no-op", n, _cli(project, env, "apply"), None, "< 2 s"))
        rows.append(("status", n, _cli(project, env, "status"), None, "< 2 s"))
        work = project / ".patchset" / "work" / "llama.cpp"
        # a fraction of a second each: the anchor and the repeatable rows are the median of 3
        fp = median(_git("-C", str(work), "format-patch", *FORMAT_PATCH_FLAGS, "-o", str(base / f"fp{n}-{i}"),
                         "upstream..patched") for i in range(3))
        rows.append(("refresh after apply", n, _cli(project, env, "refresh"), fp, "<= 1.5x format-patch"))
        rows.append(("refresh again (nothing changed)", n, median(_cli(project, env, "refresh") for _ in range(3)),
                     fp, "<= 1.5x format-patch"))
        rows.append(("refresh after amending the last commit", n,
                     median(_amend_and_refresh(project, env) for _ in range(3)), fp, "<= 1.5x format-patch"))
        if has_refresh_check:
            rows.append(("refresh --check", n, _cli(project, env, "refresh", "--check"), None, "< 2 s"))
        if has_dry_run:
            rows.append(("rebase --dry-run onto the pin itself", n,
                         _cli(project, env, "rebase", "--onto", str(project / "upstream" / "llama.cpp.toml"),
                              "--dry-run", ok=(0, 3)), None, "< 2 s"))
    print(f"patchset on a synthetic fork series over the real pin ({base})")
    print(f"{'verb':<40} {'n':>4} {'seconds':>8} {'ms/patch':>9} {'anchor s':>9} {'ratio':>6}  target")
    for label, n, secs, anchor, target in rows:
        ratio = f"{secs / anchor:6.2f}" if anchor else "     -"
        anchor_s = f"{anchor:9.2f}" if anchor else "        -"
        print(f"{label:<40} {n:>4} {secs:8.2f} {1000 * secs / n:9.2f} {anchor_s} {ratio}  {target}")
    if not has_refresh_check or not has_dry_run:
        print("not measured (the verb does not exist in this build):",
              ", ".join(v for v, has in (("refresh --check", has_refresh_check), ("rebase --dry-run", has_dry_run))
                        if not has))
    if not args.keep:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()

"""`patchset canary` against a linear scan on any git history (issue 35): per patch the first commit
where it stops applying, found by bisection and by trying every commit, side by side.

Given a git source (a URL or a local repository), a series folder (`patches/`: `series` and its
mails, e.g. `patchset export --layout ggml` of the shipped series for ggml-org/ggml's history) and
a range OLD..NEW of that source, it writes a throwaway project pinned at OLD (`patchset pin --git`),
runs `patchset canary --json` and `patchset canary --scan --json` over the range (each a new
process, the same cache), and prints for each patch the tries of each, whether both name the same
first breaking commit, and the bound 2*ceil(log2(commits)); then the wall time of each run.
Exit 1 when the two disagree on some patch or the bisection goes over the bound.

`--backport` is for a series written on another base (the shipped series, exported for ggml's layout at
the llama.cpp pin, is newer than ggml's history here): each mail is applied at OLD in order, as it is or
by a 3-way merge that finds the blobs the mail starts from in `--objects` (the patchset cache's upstream
repository), and re-formatted there; a mail that does not merge at OLD is left out, and the report says
so. `--label` and `--series-label` name the source and the series in the report (no local path), `--out
FILE` also writes the report there (`--append`: after the reports the file holds already).

Usage: python benchmarks/canary.py --source URL --series DIR --range OLD..NEW [--step N] [--cache DIR]
           [--backport --objects DIR] [--label NAME] [--series-label TEXT] [--out FILE [--append]]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from _common import ROOT, tempdir

# the flags refresh formats mails with (builder.series.refresh.FORMAT_PATCH_FLAGS)
sys.path.insert(0, str(ROOT))
from builder.series.refresh import FORMAT_PATCH_FLAGS


def patchset(project: Path, cache: Path, *args: str) -> tuple[float, subprocess.CompletedProcess[str]]:
    env = {**os.environ, "PATCHSET_CACHE": str(cache), "PYTHONPATH": str(ROOT)}
    start = time.perf_counter()
    r = subprocess.run([sys.executable, "-m", "builder.cli", "--project", str(project), *args], env=env,
                       capture_output=True, text=True, check=False)
    return time.perf_counter() - start, r


def git(repo: Path, *args: str, env: dict[str, str] | None = None, stdin: bytes | None = None,
        check: bool = True) -> subprocess.CompletedProcess[bytes]:
    ident = {"GIT_AUTHOR_NAME": "bench", "GIT_AUTHOR_EMAIL": "bench@example.org", "GIT_COMMITTER_NAME": "bench",
             "GIT_COMMITTER_EMAIL": "bench@example.org"}
    return subprocess.run(["git", "-C", str(repo), *args], env={**os.environ, **ident, **(env or {})}, input=stdin,
                          capture_output=True, check=check)


def backport(source: str, old: str, series: Path, objects: list[Path], work: Path, dest: Path) -> list[str]:
    """The series' mails applied at OLD in order (as they are, else 3-way; a conflict leaves the mail
    out), written to `dest` as a series folder; the names of the mails left out."""
    repo = work / "backport.git"
    git(work, "init", "--quiet", "--bare", str(repo))
    git(repo, "fetch", "--quiet", "--depth=1", "--no-tags", source, old)
    alternates = repo / "objects" / "info" / "alternates"
    alternates.write_text("".join(f"{d.resolve()}\n" for d in objects))
    env = {"GIT_INDEX_FILE": str(work / "backport.index")}
    head = git(repo, "rev-parse", "FETCH_HEAD^{commit}").stdout.decode().strip()
    start = head
    names = [ln.strip() for ln in (series / "series").read_text().splitlines() if ln.strip() and not ln.startswith("#")]
    left_out = []
    kept = []
    for name in names:
        mail = (series / name).resolve()
        git(repo, "read-tree", head, env=env)
        ok = git(repo, "apply", "--cached", str(mail), env=env, check=False).returncode == 0
        if not ok:
            git(repo, "read-tree", head, env=env)
            r = git(repo, "apply", "--cached", "--3way", str(mail), env=env, check=False)
            ok = r.returncode == 0 and not git(repo, "ls-files", "--unmerged", env=env).stdout
        if not ok:
            left_out.append(name)
            continue
        tree = git(repo, "write-tree", env=env).stdout.decode().strip()
        info = git(repo, "mailinfo", str(work / "msg"), str(work / "patch"), stdin=mail.read_bytes()).stdout.decode()
        subject = next(ln[9:] for ln in info.splitlines() if ln.startswith("Subject: "))
        message = subject + "\n\n" + (work / "msg").read_text()
        head = git(repo, "commit-tree", tree, "-p", head, stdin=message.encode()).stdout.decode().strip()
        kept.append(name)
    dest.mkdir(parents=True)
    out = work / "formatted"
    git(repo, "format-patch", *FORMAT_PATCH_FLAGS, "-o", str(out), f"{start}..{head}")
    # under their own names: a Patchset-Depends trailer names the files
    for name, m in zip(kept, sorted(out.glob("*.patch")), strict=True):
        (dest / name).write_bytes(m.read_bytes().rstrip(b"\n") + b"\n")
    (dest / "series").write_text("".join(f"{name}\n" for name in kept))
    return left_out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--source", required=True, help="git URL or local repository of the upstream")
    ap.add_argument("--series", type=Path, required=True, help="a patches/ folder (series file and mails) for OLD")
    ap.add_argument("--range", dest="range_", required=True, metavar="OLD..NEW")
    ap.add_argument("--step", type=int, default=1)
    ap.add_argument("--cache", type=Path, help="PATCHSET_CACHE to use (default: a new one)")
    ap.add_argument("--backport", action="store_true",
                    help="apply the series at OLD first (3-way where needed), leaving out the mails that do not merge")
    ap.add_argument("--objects", type=Path, action="append", default=[],
                    help="with --backport: an objects folder holding the blobs the mails start from")
    ap.add_argument("--series-label", help="how the report names the series (default: not named)")
    ap.add_argument("--label", help="how the report names the source (default: the source as given)")
    ap.add_argument("--out", type=Path, help="also write the report to this file")
    ap.add_argument("--append", action="store_true", help="with --out: add the report after what the file holds")
    args = ap.parse_args()
    old, _, new = args.range_.partition("..")
    source = str(Path(args.source).resolve()) if Path(args.source).exists() else args.source
    base = tempdir("patchset-canary-bench-")
    try:
        project = base / "project"
        (project / "upstream").mkdir(parents=True)
        left_out: list[str] = []
        if args.backport:
            left_out = backport(source, old, args.series, [Path(o) for o in args.objects], base, project / "patches")
        else:
            shutil.copytree(args.series, project / "patches")
        cache = args.cache or base / "cache"
        # written beside the project, then moved in (`pin --out` refuses the pin in use)
        _, r = patchset(project, cache, "pin", "--git", source, old, "--out", str(base / "pin.toml"))
        if r.returncode != 0:
            print(r.stderr, file=sys.stderr)
            return 2
        (base / "pin.toml").replace(project / "upstream" / "llama.cpp.toml")
        common = ["canary", "--json", "--range", f"..{new}", "--step", str(args.step)]
        t_bisect, rb = patchset(project, cache, *common)
        t_scan, rs = patchset(project, cache, *common, "--scan")
        if rb.returncode not in (0, 3) or rs.returncode not in (0, 3):
            print(rb.stderr or rs.stderr, file=sys.stderr)
            return 2
        bisect, scan = json.loads(rb.stdout), json.loads(rs.stdout)
    finally:
        shutil.rmtree(base, ignore_errors=True)
    n = bisect["commits"]
    bound = 2 * math.ceil(math.log2(max(2, math.ceil(n / args.step))))
    label = args.label or source
    lines = [f"python benchmarks/canary.py --source {label} --range {args.range_} --step {args.step}"
             + (" --backport" if args.backport else ""),
             f"{label} {bisect['old'][:12]}..{bisect['new'][:12]}: {n} first-parent commit(s), step {args.step}"]
    if args.series_label:
        lines.append(f"series: {args.series_label}")
    if args.backport:
        lines.append(f"series at OLD: {len(bisect['patches'])} mail(s) applied there (as they are or by 3-way); "
                     f"left out, not merging at OLD: {', '.join(left_out) or 'none'}")
    lines.append("tries: the commits at which `patchset canary` applied that patch (text checks in a scratch index; "
                 "no builds: builds needed 0 for both)")
    lines.append(f"{'patch':<48} {'breaks at':<12} {'class':<18} {'bisect':>6} {'scan':>5}  same")
    ok = True
    for b, s in zip(bisect["patches"], scan["patches"], strict=True):
        at_b = (b["broken_at"] or {}).get("commit", "")
        at_s = (s["broken_at"] or {}).get("commit", "")
        same = at_b == at_s
        ok = ok and same and b["tries"] <= bound
        lines.append(f"{b['patch'][:48]:<48} {at_b[:12] or '-':<12} {b['class'] or 'applies':<18} {b['tries']:>6} "
                     f"{s['tries']:>5}  {'yes' if same else 'NO: scan ' + at_s[:12]}")
        if b["broken_at"]:
            lines.append(f"    {at_b[:12]} {b['broken_at']['subject'][:90]} ({', '.join(b['broken_at']['files'][:4])})")
    lines.append(f"bound per patch 2*ceil(log2(commits)) = {bound}; commits tried (dry-run tables): bisection "
                 f"{bisect['tried']}, scan {scan['tried']}")
    lines.append(f"newest commit where the whole series applies: bisection {bisect['newest_whole']['commit'][:12]}, "
                 f"scan {scan['newest_whole']['commit'][:12]}")
    lines.append(f"wall: bisection {t_bisect:.1f} s, scan {t_scan:.1f} s (2 shared cores)")
    print("\n".join(lines))
    if args.out:
        before = args.out.read_text() + "\n" if args.append and args.out.exists() else ""
        args.out.write_text(before + "\n".join(lines) + "\n")
    return 0 if ok and bisect["newest_whole"] == scan["newest_whole"] else 1

if __name__ == "__main__":
    sys.exit(main())

"""Export of the real series on the real pin: every mail applies with `git am` on a clean checkout of
the pin, alone or after the dependencies its package names, and every file export writes is clean
(builder/deliver/clean.py); the rule findings are printed."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest
from helpers import copy_real_project, git

from builder.deliver.clean import check_tree
from builder.deliver.export import export
from builder.deliver.export_package import ExportOptions
from builder.series.load import load_series
from builder.upstream import fetch as upstream
from builder.upstream.pin import load_pin

pytestmark = pytest.mark.integration



def test_real_series_exports_and_every_mail_applies_on_the_pin(real_pin_cache: Path, tmp_path: Path,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    root = tmp_path / "proj"
    project = copy_real_project(root, real_pin_cache)
    series = load_series(project.patches_dir)
    started = time.monotonic()

    result = export(project, ExportOptions(author="Jane Doe <jane@example.org>", cover=True))

    took = time.monotonic() - started
    # the fork-only patch is never packaged, and said so
    assert [p.patch for p in result.packages] == [p.name for p in series.patches if not p.meta.fork_only]
    assert [line.split(":")[0] for line in result.left_out] == [p.name for p in series.patches if p.meta.fork_only]
    pin = upstream.lookup(real_pin_cache, load_pin(project.pin_file))
    assert pin is not None
    clean = tmp_path / "clean"
    git(project.work_repo, "worktree", "add", "--quiet", "--detach", str(clean), pin.commit)
    for pkg in result.packages:
        files = [f for f in pkg.directory.rglob("*") if f.is_file()]
        assert all("Patchset-" not in f.read_text(errors="replace") for f in files), pkg.directory
        deps = sorted((pkg.directory / "deps").glob("*.patch"))
        assert [d.name[:4] for d in deps] == [d[:4] for d in pkg.deps]
        git(clean, "checkout", "--quiet", "--force", "--detach", pin.commit)
        r = subprocess.run(["git", "-C", str(clean), "am", "--quiet", *map(str, deps),
                            str(pkg.directory / f"{pkg.patch}")], capture_output=True, text=True, check=False)
        assert r.returncode == 0, f"{pkg.patch}: {r.stderr}"
        assert git(clean, "rev-parse", "HEAD^{tree}") == git(project.work_repo, "rev-parse",
                                                              f"refs/heads/pr/{pkg.slug}^{{tree}}")
        submit = (pkg.directory / "submit.txt").read_text()
        if pin.commit != load_pin(project.pin_file).commit:  # the sdist's stand-in: no push of the branch
            assert f"git checkout -b pr/{pkg.slug} {load_pin(project.pin_file).commit}" in submit
            assert "git -C" not in submit
    # what leaves the machine: no local path, no .patchset/, no Patchset- name, no repr, valid tables
    written = [f for f in result.out.rglob("*") if f.is_file()]
    assert {f.name for f in written} >= {"PR.md", "ISSUE.md", "submit.txt", "COVER.md"}
    assert [str(p) for p in check_tree(result.out)] == []
    # the Metal patches' reproducer is for Metal, which upstream can run; their failing output is the replay's
    for pkg in result.packages:
        issue = pkg.directory / "ISSUE.md"
        if pkg.patch.startswith(("0001-", "0005-")) and issue.is_file():
            text = issue.read_text()
            assert "-DGGML_METAL=ON" in text and "PATCHSET_METAL_REPLAY" not in text and "MTL0-REPLAY" not in text
    with capsys.disabled():
        print(f"\nexport of {len(result.packages)} patch(es) on the real pin: {took:.1f}s")
        for pkg in result.packages:
            print(f"{pkg.patch}: deps {', '.join(pkg.deps) or 'none'}")
        for f in (f for pkg in result.packages for f in pkg.findings):
            print(f)

"""After a rebase: the range-diff of the old series against the new one, and the way back (issue 23, part 4)."""

from __future__ import annotations

import json
import re

import pytest
from helpers import B_C, PATCH1_A_C, STANDARD_NAMES, Proj, git

from builder.cli import main
from builder.series.apply import apply


def test_rebase_reports_the_range_diff_and_keeps_the_series_as_it_was(
        proj: Proj, capsys: pytest.CaptureFixture[str]) -> None:
    apply(proj.project)
    old_head = proj.wgit("rev-parse", "patched")
    pin_before, patches_before = proj.project.pin_file.read_bytes(), proj.snapshot()
    # upstream takes patch 1 as is (dropped), and moves a line of patch 2's context (3-way)
    new = proj.upstream.advance({"src/a.c": PATCH1_A_C,
                                 "src/b.c": B_C.replace("    while (s[n]) n++;", "    while (s[n] != 0) n++;")},
                                "upstream moves on\n")

    assert main(["--project", str(proj.root), "rebase", "--onto", new]) == 0

    old = proj.upstream.commit
    ref = f"refs/patchset/before-{old[:7]}"
    assert proj.wgit("rev-parse", ref) == old_head
    # what git itself says about the two series, in the report and on the terminal
    want = git(proj.work, "range-diff", "--no-color", f"{old}..{ref}", "upstream..patched")
    data = json.loads((proj.project.state_dir / f"rebase-{old[:7]}-{new[:7]}.json").read_text())
    assert data["range_diff"].strip() == want and data["recovery_ref"] == ref
    pairs = [m.group(1) for m in re.finditer(r"^\S+:\s+\S+ ([<>=!]) ", want, re.M)]
    # patch 1: gone (upstream has it); patch 2: its context moved; patch 3: the same
    assert pairs == ["<", "!", "="]
    out = capsys.readouterr().out
    assert "git range-diff" in out and ref in out.replace("\n", "")

    # the way back (docs/upstream.md): the pin and patches/ as the fork's git holds them
    # (`rm -r patches && git checkout REV -- upstream/llama.cpp.toml patches`), then apply --force
    proj.put_back(pin_before, patches_before)
    assert main(["--project", str(proj.root), "apply", "--force"]) == 0
    assert proj.wgit("rev-parse", "patched^{tree}") == proj.wgit("rev-parse", f"{ref}^{{tree}}")
    assert proj.series() == STANDARD_NAMES

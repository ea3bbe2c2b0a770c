"""Committed evidence answers for the tests the patch declares now (issue 47 point 3): trailers are
not in the tree, so a verdict on the same after tree may be of another `Patchset-Test`."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from test_evidence_cmd import PATCH, STEM, evidence, proj  # noqa: F401  (proj: a fixture)
from test_export import AUTHOR
from test_export_evidence import verified  # noqa: F401  (the fixture: a project proven by verify)

from builder.deliver import committed
from builder.deliver.export import export
from builder.deliver.export_package import ExportOptions
from builder.project import load_project

OLD_TEST = b"Patchset-Test: [cpu,cuda] test-add\n"
NEW_TEST = b"Patchset-Test: [cpu,cuda] test-add --other\n"


def _retest(root: Path) -> None:
    """Patchset-Test changed in the message only: the same trees, another declared test."""
    mail = root / "patches" / PATCH
    assert OLD_TEST in mail.read_bytes()
    mail.write_bytes(mail.read_bytes().replace(OLD_TEST, NEW_TEST))


def test_update_leaves_out_a_verdict_on_the_same_tree_for_other_declared_tests(proj: Path) -> None:  # noqa: F811
    _retest(proj)
    code, out = evidence(proj, "update")
    assert code == 0, out
    assert any(line.startswith(f"left out: {PATCH} on cpu: made for other declared tests (`test-add`; the patch "
                               "declares `test-add --other` now)") for line in out), out
    assert not (proj / "docs" / "evidence" / "cpu").exists()


def _committed_for_other_tests(root: Path, *, strip_declared: bool) -> None:
    """What an `evidence update` that took a verdict by its tree alone left: the record of `test-add`,
    recorded in the manifest as covering the patch's bytes that declare `test-add --other`."""
    assert evidence(root, "update")[0] == 0
    _retest(root)
    docs = root / "docs" / "evidence"
    manifest = json.loads((docs / "MANIFEST.json").read_text())
    for entry in manifest["files"].values():
        if PATCH in entry["patches"]:
            entry["patches"][PATCH] = committed.sha256_file(root / "patches" / PATCH)
    if strip_declared:  # evidence made before `declared` was recorded
        path = docs / "cpu" / "verify.json"
        data = json.loads(path.read_text())
        del data["patches"][STEM]["declared"]
        path.write_text(json.dumps(data, indent=1) + "\n")
        manifest["files"]["cpu/verify.json"]["sha256"] = committed.sha256_file(path)
    (docs / "MANIFEST.json").write_text(json.dumps(manifest, indent=1) + "\n")


@pytest.mark.parametrize("strip_declared", [False, True], ids=["declared", "older-evidence"])
def test_check_finds_committed_evidence_of_other_declared_tests(proj: Path, strip_declared: bool) -> None:  # noqa: F811
    _committed_for_other_tests(proj, strip_declared=strip_declared)
    code, out = evidence(proj, "check")
    assert code == 1, out
    assert f"docs/evidence/cpu/verify.json: {PATCH}: not what `patchset verify` makes: made for other declared " \
           "tests (`test-add`; the patch declares `test-add --other` now)" in out, out


def test_export_does_not_show_the_output_of_other_declared_tests(verified: object, tmp_path: Path) -> None:  # noqa: F811
    src = verified.root  # type: ignore[attr-defined]
    root = tmp_path / "proj"
    shutil.copytree(src, root, symlinks=True, ignore=shutil.ignore_patterns("build", "verify"))
    _retest(root)
    project = load_project(root=root, cache_dir=verified.cache_dir)  # type: ignore[attr-defined]
    pkg = export(project, ExportOptions(author=AUTHOR, out=tmp_path / "out")).packages[0]
    pr = (pkg.directory / "PR.md").read_text()
    assert "not run on CPU for this version of the patch" in pr
    assert "add(want=5): FAIL" not in pr

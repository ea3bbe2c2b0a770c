"""`patchset --series bindings export`: a bindings patch as a llama-cpp-python pull request.

The synthetic projects of tests/test_verify_python.py (a title `fix: ...`) and tests/test_second_series.py
(a title `llama_cpp: ...`, against llama-cpp-python's `<tag>: <title>` rule): the main series changes
`llama_opt_epoch` in llama.h, the bindings patch its ctypes declaration.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import Proj, json_document
from test_second_series import two  # noqa: F401 (a fixture)
from test_verify_python import BEHAVIOUR_TEST, _two

from builder.cli import main

AUTHOR = "Jane Doe <jane@example.com>"


def _export(p: Proj, capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, dict, str]:
    capsys.readouterr()
    rc = main(["--project", str(p.root), "--series", "bindings", "export", "--json", *args])
    out, err = capsys.readouterr()
    return rc, json_document(out) if out.strip() else {}, err


def test_a_bindings_package_follows_llama_cpp_python_and_names_the_llama_cpp_change_it_needs(
        tmp_path: Path, cache_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    p = _two(tmp_path, cache_dir, BEHAVIOUR_TEST)
    # a placeholder identity (the series' own author is one) is refused, as for llama.cpp
    rc, _, err = _export(p, capsys, "--author", "Patchset Bindings <bindings@patchset.invalid>")
    assert rc == 2 and "placeholder address" in err

    rc, got, _ = _export(p, capsys, "--author", AUTHOR)
    assert rc == 0, (got, _)
    [pkg] = got["packages"]
    folder = Path(pkg["directory"])
    assert folder.parent.name == "0001-fix-return-the-ggml_status-of-llama_opt_epoch" and folder.name == "v1"
    assert folder.parent.parent == p.root / ".patchset" / "export-bindings"
    assert sorted(f.name for f in folder.iterdir()) == [
        "0001-fix-return-the-ggml_status-of-llama_opt_epoch.patch", "NOTES.md", "PR.md", "submit.txt"]
    mail = (folder / "0001-fix-return-the-ggml_status-of-llama_opt_epoch.patch").read_text()
    assert "From: Jane Doe <jane@example.com>" in mail and "Patchset-" not in mail
    pr = (folder / "PR.md").read_text()
    # the sdist has no pull-request template: ours, marked as such, with CONTRIBUTING.md's sections
    assert "patchset's own minimal pull-request template: llama-cpp-python has none" in pr
    assert "## What changed" in pr and "## How it was tested" in pr
    # the llama.cpp change it needs, read from the declarations (not from the message), and its release
    assert "`llama : llama_opt_epoch returns a status` (the fork's patch 1, changes `llama_opt_epoch`)" in pr
    assert "the first llama.cpp release (a bNNNN tag after the pinned b1) that carries it; it is not merged " \
           "upstream yet (not-sent" in pr
    assert "python -m pytest tests/test_opt.py" in pr
    assert "not run on CPU" in pr  # no verify evidence yet: said, not made up
    submit = (folder / "submit.txt").read_text()
    assert "# Wait for: llama.cpp 'llama : llama_opt_epoch returns a status'" in submit
    assert "gh pr create --draft --repo https://example.invalid/bindings --base main" in submit
    # CONTRIBUTING.md's rules that a diff shows: no CHANGELOG.md entry here
    assert [f["rule"] for f in pkg["findings"]] == ["changelog"]

    # unchanged: the same version again
    rc, got, _ = _export(p, capsys, "--author", AUTHOR)
    assert rc == 0 and got["packages"][0]["state"] == "unchanged"


def test_a_title_without_a_contributing_tag_is_an_error(two: tuple[Proj, Path],  # noqa: F811
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    p, _ = two
    rc, got, _ = _export(p, capsys, "--author", AUTHOR)
    assert rc == 1
    rules = {f["rule"]: f for f in got["packages"][0]["findings"]}
    assert rules["pr-title"]["severity"] == "error"
    assert "is not `<tag>: <title>`" in rules["pr-title"]["message"]

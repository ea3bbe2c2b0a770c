"""series lint: each problem found, located by file and line; `patchset check` exits 1."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import STANDARD_NAMES, Proj, json_document

from builder.cli import main
from builder.errors import SeriesError
from builder.series.load import lint, load_series
from builder.series.model import Finding
from builder.series.trailers import deprecations


def _line(path: Path, needle: str) -> int:
    lines = path.read_text().splitlines()
    hits = [n for n, line in enumerate(lines, 1) if needle in line]
    assert hits, f"{needle!r} not in {path}"
    return hits[0]


def _only(findings: list[Finding]) -> Finding:
    assert len(findings) == 1, [str(f) for f in findings]
    return findings[0]


def _edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text
    path.write_text(text.replace(old, new))


def test_clean_series_has_no_findings(proj: Proj, capsys: pytest.CaptureFixture[str]) -> None:
    series, findings = lint(proj.patches)
    assert findings == []
    assert [p.name for p in series.patches] == STANDARD_NAMES
    p2 = series.patches[1]
    # the fixture's deprecated `Patchset-Status: submitted URL`, read in Patchset-Upstream's words
    assert (p2.meta.upstream, p2.meta.upstream_ref, p2.meta.upstream_from) == (
        "sent", "https://github.com/ggml-org/llama.cpp/pull/1", "Patchset-Status")
    assert p2.meta.backends == ("cpu", "cuda")
    assert [str(t) for t in p2.meta.tests] == ["[cpu] test-x --fast"]
    assert p2.meta.before == "build-fails"
    assert p2.meta.mutation == ("mutations/0002-b-null.patch",)
    assert series.patches[0].files == ("src/a.c",)
    assert main(["--project", str(proj.root), "check"]) == 0
    assert "series OK: 3 patch(es)" in capsys.readouterr().out


def test_listed_file_missing(proj: Proj, capsys: pytest.CaptureFixture[str]) -> None:
    (proj.patches / STANDARD_NAMES[1]).unlink()
    f = _only(lint(proj.patches)[1])
    assert f.file == proj.patches / "series"
    assert f.line == _line(proj.patches / "series", STANDARD_NAMES[1])
    assert "does not exist" in f.message
    assert main(["--project", str(proj.root), "check"]) == 1
    assert f"series:{f.line}:" in capsys.readouterr().out
    with pytest.raises(SeriesError, match=f"series:{f.line}:"):
        load_series(proj.patches)


def test_patch_file_not_listed(proj: Proj) -> None:
    extra = proj.patches / "0004-stray.patch"
    extra.write_bytes((proj.patches / STANDARD_NAMES[0]).read_bytes())
    f = _only(lint(proj.patches)[1])
    assert (f.file, f.line) == (extra, 0)
    assert "not listed" in f.message
    assert main(["--project", str(proj.root), "check"]) == 1


def test_duplicate_entry(proj: Proj) -> None:
    series_file = proj.patches / "series"
    series_file.write_text(series_file.read_text() + STANDARD_NAMES[0] + "\n")
    f = _only(lint(proj.patches)[1])
    assert f.file == series_file
    assert f.line == len(series_file.read_text().splitlines())
    assert "duplicate" in f.message
    assert f"first on line {_line(series_file, STANDARD_NAMES[0])}" in f.message
    assert main(["--project", str(proj.root), "check"]) == 1


@pytest.mark.parametrize(
    ("corrupt", "expect"),
    [
        pytest.param(lambda text: "this is not a patch\njust words\n", "holds no diff", id="garbage"),
        # a hunk that promises more lines than it has
        pytest.param(lambda text: text.replace("@@ -4,7 +4,7 @@", "@@ -4,9 +4,9 @@"), "not a parseable patch",
                     id="truncated-hunk"),
        # a hunk body line with no ' ', '+' or '-' prefix
        pytest.param(lambda text: text.replace("\n     int y = 2;\n", "\nint y = 2;\n"), "not a parseable patch",
                     id="corrupt-hunk-line"),
    ],
)
def test_unparseable_patch(proj: Proj, corrupt, expect: str) -> None:  # type: ignore[no-untyped-def]
    path = proj.patches / STANDARD_NAMES[0]
    path.write_text(corrupt(path.read_text()))
    f = _only(lint(proj.patches)[1])
    assert f.file == path
    assert f.line == 0
    assert expect in f.message
    assert main(["--project", str(proj.root), "check"]) == 1


@pytest.mark.parametrize("target", ["../x", "/etc/passwd"])
def test_patch_touching_a_path_outside_the_tree(proj: Proj, target: str) -> None:
    path = proj.patches / STANDARD_NAMES[0]
    text = path.read_text()
    path.write_text(text.replace("a/src/a.c", f"a/{target}").replace("b/src/a.c", f"b/{target}"))
    findings = lint(proj.patches)[1]
    assert findings, "a path outside the tree was accepted"
    assert all(f.file == path and "outside the tree" in f.message for f in findings)
    assert findings[0].line == _line(path, "diff --git ")
    assert target in findings[0].message
    assert main(["--project", str(proj.root), "check"]) == 1


@pytest.mark.parametrize(
    ("patch", "old", "new", "expect"),
    [
        pytest.param(0, "Patchset-Backends: cpu", "Patchset-Backends: cpu\nPatchset-Foo: bar",
                     "unknown trailer", id="unknown-trailer"),
        pytest.param(0, "Patchset-Status: pending", "Patchset-Status: maybe", "'maybe' is not one of",
                     id="bad-status-word"),
        pytest.param(1, "Patchset-Status: submitted https://github.com/ggml-org/llama.cpp/pull/1",
                     "Patchset-Status: submitted", "needs a pull-request URL", id="submitted-without-url"),
        pytest.param(1, "Patchset-Backends: cpu cuda", "Patchset-Backends: cpu vulkan", "unknown backend(s) vulkan",
                     id="unknown-backend"),
        pytest.param(1, "Patchset-Test: [cpu] test-x", "Patchset-Test: [rocm] test-x", "unknown backend(s) rocm",
                     id="unknown-test-backend"),
        pytest.param(1, "Patchset-Before: build-fails", "Patchset-Before: sometimes", "'sometimes' is not one of",
                     id="bad-before"),
        pytest.param(1, "Patchset-Mutation: mutations/0002-b-null.patch", "Patchset-Mutation: mutations/nope.patch",
                     "does not exist", id="missing-mutation"),
        pytest.param(0, "Patchset-Status: pending", "Patchset-Status: pending\nPatchset-Status: fork-only",
                     "given more than once", id="repeated-status"),
        pytest.param(1, "Patchset-Mutation: mutations/0002-b-null.patch",
                     "Patchset-Mutation: mutations/0002-b-null.patch\nPatchset-Mutation: mutations/0002-b-null.patch",
                     "named twice", id="same-mutation-twice"),
        pytest.param(0, "Patchset-Backends: cpu", "Patchset-Backends: cpu\nPatchset-Hunk: src/a.c",
                     "expected FILE:START-END", id="hunk-without-lines"),
        pytest.param(0, "Patchset-Backends: cpu", "Patchset-Backends: cpu\nPatchset-Hunk: src/a.c:a_value()",
                     "only be named to exempt", id="hunk-function-without-exempt"),
        pytest.param(0, "Patchset-Backends: cpu", "Patchset-Backends: cpu\nPatchset-Hunk: src/a.c:9-3 exempt: x",
                     "bad line range", id="hunk-backwards-range"),
        pytest.param(0, "Patchset-Backends: cpu", "Patchset-Backends: cpu\nPatchset-Hunk: src/a.c:3 exempt:",
                     "needs a reason", id="hunk-exempt-without-reason"),
    ],
)
def test_malformed_trailers(proj: Proj, patch: int, old: str, new: str, expect: str) -> None:
    path = proj.patches / STANDARD_NAMES[patch]
    _edit(path, old, new)
    f = _only(lint(proj.patches)[1])
    assert f.file == path
    assert expect in f.message
    bad_line = new.splitlines()[-1]
    assert f.line == _line(path, bad_line)
    assert main(["--project", str(proj.root), "check"]) == 1


def test_origin_and_effect_trailers_are_read(proj: Proj) -> None:
    path = proj.patches / STANDARD_NAMES[0]
    _edit(path, "Patchset-Status: pending\n", "Patchset-Status: pending\n"
          "Patchset-Origin: https://github.com/example/llama.cpp/pull/44 (the fork's PR)\n"
          "Patchset-Effect: test-x fails without the fix\nPatchset-Effect: 2 of 3 cases\n")
    series, findings = lint(proj.patches, strict=False)
    assert findings == []
    meta = series.patches[0].meta
    assert meta.origin == "https://github.com/example/llama.cpp/pull/44 (the fork's PR)"
    assert meta.effects == ("test-x fails without the fix", "2 of 3 cases")


def test_strict_requires_an_origin(proj: Proj, capsys: pytest.CaptureFixture[str]) -> None:
    assert lint(proj.patches)[1] == []
    findings = [f for f in lint(proj.patches, strict=True)[1] if "Patchset-Origin" in f.message]
    assert [f.file.name for f in findings] == STANDARD_NAMES
    assert main(["--project", str(proj.root), "check", "--strict"]) == 1
    assert "no Patchset-Origin trailer" in capsys.readouterr().out
    for name in STANDARD_NAMES:
        _edit(proj.patches / name, "Patchset-Status:", "Patchset-Origin: 0123abcd\nPatchset-Status:")
    assert [f for f in lint(proj.patches, strict=True)[1] if "Patchset-Origin" in f.message] == []


def test_bad_origin_value(proj: Proj) -> None:
    path = proj.patches / STANDARD_NAMES[0]
    _edit(path, "Patchset-Status: pending\n", "Patchset-Status: pending\nPatchset-Origin: the fork\n")
    f = _only(lint(proj.patches)[1])
    assert (f.file, f.line) == (path, _line(path, "Patchset-Origin: the fork"))
    assert "URL" in f.message


def test_a_wrapped_trailer_value_breaks_the_block_and_is_reported(proj: Proj) -> None:
    # git ends the trailer block at a line in column 0 that is not a trailer: every Patchset-*
    # line of the block is then silently ignored (the test program below would never run)
    path = proj.patches / STANDARD_NAMES[0]
    _edit(path, "Patchset-Test: test-x\n", "Patchset-Test: test-x --with-a-long-value\nthat wrapped\n")
    series, findings = lint(proj.patches)
    assert series.patches[0].meta.tests == ()  # what git itself reads: nothing
    assert {(f.file, f.line) for f in findings} == {
        (path, _line(path, key)) for key in ("Patchset-Status:", "Patchset-Backends:", "Patchset-Test:",
                                             "Patchset-Test-Paths:")}
    assert all("not read as a trailer by git" in f.message for f in findings)


def test_parse_cache_serves_the_same_answer_and_follows_edits(proj: Proj, cache_dir: Path) -> None:
    first = lint(proj.patches)
    assert list((cache_dir / "parsed").rglob("*.json")), "nothing was cached"
    assert lint(proj.patches) == first
    assert lint(proj.patches, cache=False) == first
    # a changed file is a new key: the edit is seen, never an old answer
    path = proj.patches / STANDARD_NAMES[2]
    _edit(path, "Patchset-Status: fork-only", "Patchset-Status: bogus")
    f = _only(lint(proj.patches)[1])
    assert "'bogus' is not one of" in f.message
    # a corrupt cache entry is recomputed, not trusted
    for entry in (cache_dir / "parsed").rglob("*.json"):
        entry.write_text("{not json")
    assert _only(lint(proj.patches)[1]) == f


def test_hunk_rules_mutations_and_test_paths_none(proj: Proj) -> None:
    path = proj.patches / STANDARD_NAMES[0]
    _edit(path, "Patchset-Test-Paths: tests/test-x.c",
          "Patchset-Test-Paths: none\nPatchset-Hunk: src/a.c:6-7\n"
          "Patchset-Hunk: src/a.c:a_value() exempt: a log line only")
    series, findings = lint(proj.patches)
    assert findings == []
    meta = series.patches[0].meta
    assert meta.test_in_tree and meta.test_paths == ()
    assert [str(r) for r in meta.hunks] == ["src/a.c:6-7", "src/a.c:a_value() exempt: a log line only"]
    assert not meta.hunks[0].exempt and meta.hunks[1].exempt


def test_upstream_trailer_each_value_and_status_shows_it(proj: Proj, capsys: pytest.CaptureFixture[str]) -> None:
    values = {
        STANDARD_NAMES[0]: ("merged 0123abcd4567", ("merged", "0123abcd4567")),
        STANDARD_NAMES[1]: ("rejected https://github.com/ggml-org/llama.cpp/pull/1 (wants a test)",
                            ("rejected", "https://github.com/ggml-org/llama.cpp/pull/1 (wants a test)")),
        STANDARD_NAMES[2]: ("not-needed upstream fixed it in 89abcdef",
                            ("not-needed", "upstream fixed it in 89abcdef")),
    }
    for name, (value, _) in values.items():
        path = proj.patches / name
        text = path.read_text()
        start = text.index("Patchset-Status:")
        path.write_text(text[:start] + f"Patchset-Upstream: {value}" + text[text.index("\n", start):])
    series, findings = lint(proj.patches, strict=False)
    assert findings == []
    assert [(p.meta.upstream, p.meta.upstream_ref) for p in series.patches] == [v for _, v in values.values()]
    assert deprecations(series) == []

    assert main(["--project", str(proj.root), "status", "--json"]) == 0
    rows = json_document(capsys.readouterr().out)["patches"]
    assert [(r["upstream"], r["upstream_ref"]) for r in rows] == [v for _, v in values.values()]
    assert main(["--project", str(proj.root), "status"]) == 0
    out = capsys.readouterr().out
    assert "rejected" in out and "not-needed" in out and "merged" in out


@pytest.mark.parametrize(("value", "why"), [
    ("pending", "is not one of not-sent, sent, merged, rejected, not-needed"),
    ("sent", "needs the pull request's URL"),
    ("sent github.com/x/y/pull/1", "needs the pull request's URL"),
    ("rejected", "needs the pull request's URL"),
    ("merged", "needs the upstream commit id or a URL"),
    ("not-needed", "needs a reason"),
])
def test_a_bad_upstream_value_is_located(proj: Proj, value: str, why: str) -> None:
    path = proj.patches / STANDARD_NAMES[0]
    _edit(path, "Patchset-Status: pending\n", f"Patchset-Upstream: {value}\n")
    f = _only(lint(proj.patches)[1])
    assert (f.file, f.line) == (path, _line(path, f"Patchset-Upstream: {value}"))
    assert why in f.message


def test_old_status_trailer_is_read_with_a_deprecation_line_and_fails_strict(
        proj: Proj, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--project", str(proj.root), "check"]) == 0
    out = capsys.readouterr().out
    first = proj.patches / STANDARD_NAMES[0]
    assert (f"deprecated: {first}:{_line(first, 'Patchset-Status:')}: Patchset-Status is deprecated: "
            "write `Patchset-Upstream: not-sent` instead") in out.replace("\n", "")
    assert "`Patchset-Upstream: not-sent fork-only`" in out.replace("\n", "")
    # --strict wants the new trailer on every patch
    strict = [f for f in lint(proj.patches, strict=True)[1] if "Patchset-Upstream" in f.message]
    assert [f.file.name for f in strict] == STANDARD_NAMES
    # both at once: which one counts would be a guess
    _edit(first, "Patchset-Status: pending\n", "Patchset-Status: pending\nPatchset-Upstream: not-sent\n")
    f = _only(lint(proj.patches)[1])
    assert "both given" in f.message and f.line == _line(first, "Patchset-Upstream:")


def test_strict_accepts_a_series_with_upstream_and_origin(proj: Proj) -> None:
    for name in STANDARD_NAMES:
        path = proj.patches / name
        text = path.read_text()
        start = text.index("Patchset-Status:")
        path.write_text(text[:start] + "Patchset-Origin: 0123abcd\nPatchset-Upstream: not-sent"
                        + text[text.index("\n", start):])
    assert lint(proj.patches, strict=True)[1] == []


def test_fork_only_needs_a_reason_and_status_shows_it(proj: Proj, capsys: pytest.CaptureFixture[str]) -> None:
    path = proj.patches / STANDARD_NAMES[2]
    _edit(path, "Patchset-Status: fork-only\n", "Patchset-Upstream: fork-only\n")
    f = _only(lint(proj.patches)[1])
    assert f.line == _line(path, "Patchset-Upstream: fork-only") and "'fork-only' needs a reason" in f.message
    _edit(path, "Patchset-Upstream: fork-only\n", "Patchset-Upstream: fork-only upstream asserts instead\n")
    series, findings = lint(proj.patches)
    assert findings == []
    meta = series.patches[2].meta
    assert (meta.upstream, meta.upstream_ref, meta.fork_only) == ("fork-only", "upstream asserts instead", True)
    assert not series.patches[0].meta.fork_only

    assert main(["--project", str(proj.root), "status", "--json"]) == 0
    rows = json_document(capsys.readouterr().out)["patches"]
    assert (rows[2]["upstream"], rows[2]["upstream_ref"]) == ("fork-only", "upstream asserts instead")
    assert main(["--project", str(proj.root), "status"]) == 0
    assert "fork-only upstream asserts instead" in capsys.readouterr().out.replace("\n", "")


def test_test_depends_is_read_apart_from_depends_and_linted(proj: Proj) -> None:
    third = proj.patches / STANDARD_NAMES[2]
    _edit(third, "Patchset-Status: fork-only\n",
          f"Patchset-Status: pending\nPatchset-Test-Depends: {STANDARD_NAMES[0]}\n")
    series, findings = lint(proj.patches)
    assert findings == []
    assert (series.patches[2].meta.depends, series.patches[2].meta.test_depends) == ((), (STANDARD_NAMES[0],))

    # a later patch, or one that is not in the series: located like Patchset-Depends
    first = proj.patches / STANDARD_NAMES[0]
    _edit(first, "Patchset-Status: pending\n",
          f"Patchset-Status: pending\nPatchset-Test-Depends: {STANDARD_NAMES[1]}\n")
    f = _only(lint(proj.patches)[1])
    assert (f.file, f.line) == (first, _line(first, "Patchset-Test-Depends:"))
    assert "is not earlier in the series" in f.message and f.message.startswith("Patchset-Test-Depends:")
    _edit(first, f"Patchset-Test-Depends: {STANDARD_NAMES[1]}\n", "")

    # named as both a code and a test dependency
    _edit(third, "Patchset-Status: pending\n", f"Patchset-Status: pending\nPatchset-Depends: {STANDARD_NAMES[0]}\n")
    f = _only(lint(proj.patches)[1])
    assert "also in Patchset-Depends" in f.message


def test_a_patch_to_send_may_not_need_a_fork_only_one(proj: Proj) -> None:
    first, third = proj.patches / STANDARD_NAMES[0], proj.patches / STANDARD_NAMES[2]
    _edit(first, "Patchset-Status: pending\n", "Patchset-Upstream: fork-only the fork's own logging\n")
    _edit(third, "Patchset-Status: fork-only\n",
          f"Patchset-Upstream: not-sent\nPatchset-Depends: {STANDARD_NAMES[0]}\n")
    f = _only(lint(proj.patches)[1])
    assert f.file == third and "is fork-only (never sent upstream)" in f.message
    # a fork-only patch may need another
    _edit(third, "Patchset-Upstream: not-sent\n", "Patchset-Upstream: fork-only rides on patch 1\n")
    assert lint(proj.patches)[1] == []

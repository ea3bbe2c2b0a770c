"""Every command that takes --json, run with it on the synthetic upstream: apply (dry or not, and stopped at a
conflict), the series verbs, pin, init, wheel and the error document each print one document that validates
against the one schema, on exit 0 and on 1 to 3 alike. The commands that build and test are run on the
small llama.cpp-shaped tree of tests/test_cli_pipeline.py (JSON_FORMATS_ON_MINI); between the two modules
every format of FORMATS has a run (test_every_format_has_a_run)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers import (
    AUTHORS,
    CONFLICT_A_C,
    CONFLICT_MSG,
    STANDARD_NAMES,
    Proj,
    commit,
    git,
    json_document,
    make_upstream,
)

from builder.cli import main
from builder.commands import jsonout, load
from builder.errors import ANY_COMMAND
from builder.series.workrepo import OUTCOME_CLEAN

RUNS: dict[str, str] = {
    # format: the test of this module that runs a command printing it (each test checks its own list)
    "apply": "test_apply_prints_what_it_applied_and_where_it_stopped",
    "mark": "test_series_verbs_print_the_series_they_leave",
    "drop": "test_series_verbs_print_the_series_they_leave",
    "move": "test_series_verbs_print_the_series_they_leave",
    "undo": "test_series_verbs_print_the_series_they_leave",
    "edit": "test_series_verbs_print_the_series_they_leave",
    "new": "test_series_verbs_print_the_series_they_leave",
    "import": "test_series_verbs_print_the_series_they_leave",
    "pin": "test_pin_and_init_print_the_pin_and_the_project",
    "init": "test_pin_and_init_print_the_pin_and_the_project",
    "wheel": "test_wheel_prints_its_document_when_drift_stops_it",
    "error": "test_an_error_before_the_command_prints_the_error_document",
}


class Runner:
    """Runs `patchset --project ROOT ...` in this process; each document checked against the schema and its
    format's name; the formats seen kept for the test's own check of RUNS."""

    def __init__(self, root: Path | None, capsys: pytest.CaptureFixture[str]) -> None:
        self.root, self.capsys, self.seen = root, capsys, set[str]()

    def __call__(self, name: str, *args: str, code: int = 0, before: tuple[str, ...] = ()) -> dict:
        argv = [*(["--project", str(self.root)] if self.root else []), *before, *args]
        got = main(argv)
        out, err = self.capsys.readouterr()
        assert got == code, (argv, got, out, err)
        doc = json_document(out)  # the document alone on stdout, valid against the schema
        assert doc["format"] == f"patchset-{name}/{jsonout.FORMATS[name][0]}", (argv, doc)
        assert (doc["exit"], doc["ok"]) == (code, code == 0)
        # an exit the command's --help lists (its EXITS, or one of every command's)
        assert code in {*load(args[0]).EXITS, *ANY_COMMAND}, (args[0], code)
        self.seen.add(name)
        return doc

    def ran_what_runs_says(self, test: str) -> None:
        assert self.seen == {f for f, t in RUNS.items() if t == test}


def names(doc: dict) -> list[str]:
    assert [p["index"] for p in doc["patches"]] == list(range(1, len(doc["patches"]) + 1))
    return [p["patch"] for p in doc["patches"]]


def test_apply_prints_what_it_applied_and_where_it_stopped(proj: Proj, capsys: pytest.CaptureFixture[str]) -> None:
    run = Runner(proj.root, capsys)
    doc = run("apply", "apply", "--json")
    assert names(doc) == STANDARD_NAMES and not doc["dry_run"] and doc["noop"] is False
    assert doc["head"] == proj.wgit("rev-parse", "patched") and doc["new"] == proj.upstream.commit
    assert [p["commit"] for p in doc["patches"]] == proj.wgit("rev-list", "--reverse", "upstream..patched").split()
    assert all(p["outcome"] == OUTCOME_CLEAN for p in doc["patches"])
    assert run("apply", "apply", "--json")["noop"] is True
    # a series whose patch 2 changes the line patch 1 changed: stopped there, exit 3, the patch and its file named
    git(proj.scratch, "checkout", "--quiet", "-b", "side", proj.upstream.commit)
    clash = commit(proj.scratch, {"src/a.c": CONFLICT_A_C}, CONFLICT_MSG, author=AUTHORS[1])
    series = proj.set_series([proj.commits[0], clash, proj.commits[2]])
    doc = run("apply", "apply", "--json", code=3)
    first, row = doc["patches"]
    assert (first["index"], first["patch"], first["outcome"]) == (1, series[0], OUTCOME_CLEAN)
    assert first["commit"] == proj.wgit("rev-parse", "HEAD")  # where `git am` stopped: on patch 1
    assert (row["index"], row["patch"], row["outcome"], row["files"]) == (2, series[1], "conflict", ["src/a.c"])
    assert doc["head"] is None and series[1] in doc["problems"][0]["message"]
    doc = run("apply", "apply", "--abort", "--json")
    assert doc["aborted"] is True and doc["patches"] == []
    # the dry run: the same format, each patch tried in a scratch index
    doc = run("apply", "apply", "--dry-run", "--json", code=3)
    assert doc["dry_run"] and names(doc) == series and doc["patches"][1]["outcome"] == "conflict"
    run.ran_what_runs_says("test_apply_prints_what_it_applied_and_where_it_stopped")


def test_a_rebase_stopped_at_a_conflict_prints_its_own_document(proj: Proj,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    """Exit 3 of a rebase is the rebase's document, not the error one: the patches moved before the conflict,
    the one it stopped at with its file, and the problem naming that patch."""
    from tests.test_rebase import _advance_with_conflict  # noqa: PLC0415 (that module's upstream history)

    run = Runner(proj.root, capsys)
    run("apply", "apply", "--json")
    new = _advance_with_conflict(proj)
    doc = run("rebase", "rebase", "--onto", new, "--json", code=3)
    assert (doc["old"], doc["new"], doc["dry_run"]) == (proj.upstream.commit, new, False)
    first, row = doc["patches"]
    assert (first["index"], first["patch"]) == (1, STANDARD_NAMES[0])
    assert (row["index"], row["patch"], row["outcome"], row["files"]) == (2, STANDARD_NAMES[1], "conflict",
                                                                          ["src/b.c"])
    (problem,) = doc["problems"]
    assert problem["patch"] == STANDARD_NAMES[1] and "rebase --continue" in problem["message"]
    doc = run("rebase", "rebase", "--abort", "--json")
    assert doc["aborted"] is True and doc["old"] == proj.upstream.commit and doc["patches"] == []


def test_series_verbs_print_the_series_they_leave(proj: Proj, tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    run = Runner(proj.root, capsys)
    assert main(["--project", str(proj.root), "apply"]) == 0
    capsys.readouterr()
    url = "https://github.com/ggml-org/llama.cpp/pull/7"
    doc = run("mark", "mark", "1", "sent", url, "--json")
    assert (doc["patch"], doc["state"], doc["value"], names(doc)) == (STANDARD_NAMES[0], "sent", url, STANDARD_NAMES)
    assert doc["recovery"] and doc["editing"] is None
    assert proj.wgit("rev-parse", doc["recovery"])  # the ref is there
    doc = run("drop", "drop", "2", "--reason", "upstream took another design", "--json")
    assert (doc["patch"], doc["reason"]) == (STANDARD_NAMES[1], "upstream took another design")
    assert names(doc) == proj.series() and STANDARD_NAMES[1] not in names(doc) and len(names(doc)) == 2
    doc = run("undo", "undo", "--json")
    assert doc["restored"]["verb"] == "drop" and doc["moved"] is False and names(doc) == STANDARD_NAMES
    assert [r["verb"] for r in doc["kept"]] == ["mark"]
    doc = run("move", "move", "3", "--before", "1", "--json")
    assert doc["patch"] == STANDARD_NAMES[2] and names(doc) == proj.series() and len(names(doc)) == 3
    assert run("undo", "undo", "--json")["restored"]["verb"] == "move"
    # a move that a later patch does not let through: exit 3, its own document, nothing changed (no series)
    commit(proj.work, {"src/a.c": (proj.work / "src/a.c").read_text().replace("(long)x + y", "(long)x + y + 0")},
           "a: plus zero\n")
    assert main(["--project", str(proj.root), "refresh"]) == 0
    capsys.readouterr()
    doc = run("move", "move", "4", "--before", "1", "--json", code=3)
    assert doc["patches"] is None and doc["recovery"] is None and "does not apply" in doc["problems"][0]["message"]
    # a patch number the series does not have: exit 2, the verb's document with `patch` null
    doc = run("drop", "drop", "9", "--json", code=2)
    assert (doc["n"], doc["patch"], doc["patches"]) == (9, None, None)
    assert main(["--project", str(proj.root), "drop", "4"]) == 0
    capsys.readouterr()
    doc = run("edit", "edit", "2", "--json")
    assert doc["editing"] and doc["work_tree"] == str(proj.work) and doc["patch"] == STANDARD_NAMES[1]
    assert run("undo", "undo", "--json")["restored"]["verb"] == "edit"
    msg = tmp_path / "msg.txt"
    msg.write_text("Why.\n\nPatchset-Status: pending\n")
    doc = run("new", "new", "c : a new fix", "-F", str(msg), "--json")
    assert doc["name"] == "c : a new fix" and doc["editing"] == "c : a new fix"
    assert run("undo", "undo", "--json")["restored"]["verb"] == "new"
    # a range of another clone: two commits on top
    clone = tmp_path / "fork"
    git(tmp_path, "clone", "--quiet", str(proj.upstream.bare), str(clone))
    git(clone, "checkout", "--quiet", "-b", "fixes")
    commit(clone, {"docs/notes.md": "our notes\n"}, "docs : our notes\n")
    commit(clone, {"README": "tiny upstream, our build\n"}, "readme : say it is our build\n")
    doc = run("import", "import", "--repo", str(clone), "main..fixes", "--json")
    assert doc["imported"] == 2 and names(doc) == proj.series() and len(names(doc)) == 5
    assert "Patchset-Test" in doc["to_fill"] and doc["origin"] is None
    run.ran_what_runs_says("test_series_verbs_print_the_series_they_leave")


def test_pin_and_init_print_the_pin_and_the_project(proj: Proj, tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    run = Runner(proj.root, capsys)
    # without --out: the pin's text is in the document, and stdout holds the document alone
    doc = run("pin", "pin", "--git", proj.upstream.url, "main", "--json")
    assert (doc["commit"], doc["tree"], doc["out"], doc["tag"]) == (proj.upstream.commit, proj.upstream.tree, None,
                                                                    None)
    assert proj.upstream.commit in doc["text"] and doc["sources"][0] == {"kind": "git", "url": proj.upstream.url}
    out = tmp_path / "next.toml"
    doc = run("pin", "pin", "--git", proj.upstream.url, "main", "--out", str(out), "--json")
    assert doc["out"] == str(out) and out.read_text() == doc["text"]
    # refused before anything is made: the pin's fields null
    doc = run("pin", "pin", "--git", proj.upstream.url, "main", "--out", str(out), "--json", code=2)
    assert doc["commit"] is None and "exists" in doc["problems"][0]["message"]
    (tmp_path / "u").mkdir()
    up = make_upstream(tmp_path / "u")
    root = tmp_path / "fork"
    source = "git+https://example.org/owner/patchset@" + "0" * 40
    init = Runner(None, capsys)
    doc = init("init", "init", str(root), "--git", up.url, "main", "--patchset-source", source, "--ci", "cpu,cuda",
               "--json")
    assert (doc["root"], doc["commit"], doc["ci"], doc["patchset_source"]) == (str(root), up.commit,
                                                                              ["cpu", "cuda"], source)
    assert "upstream/llama.cpp.toml" in doc["written"] and all((root / f).is_file() for f in doc["written"])
    doc = init("init", "init", str(root), "--git", up.url, "main", "--patchset-source", source, "--json", code=2)
    assert doc["written"] is None and "already holds" in doc["problems"][0]["message"]
    run.seen |= init.seen
    run.ran_what_runs_says("test_pin_and_init_print_the_pin_and_the_project")


def test_wheel_prints_its_document_when_drift_stops_it(tmp_path: Path, cache_dir: Path,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    # the whole build runs in the integration tier (tests/test_integration_wheel.py): here drift stops it first
    from test_wheel import _project  # noqa: PLC0415 (its synthetic llama.h and sdist)

    p, _ = _project(tmp_path, cache_dir)
    run = Runner(p.root, capsys)
    doc = run("wheel", "wheel", "--strict", "--json", code=1)
    assert doc["backend"] == "cpu" and doc["wheel"] is None and doc["drift"] is None
    assert "llama_opt_epoch" in doc["problems"][0]["message"]
    run.ran_what_runs_says("test_wheel_prints_its_document_when_drift_stops_it")


def test_an_error_before_the_command_prints_the_error_document(tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    # a global option the command does not take: refused before the command runs, so before its own document
    run = Runner(tmp_path / "nowhere", capsys)
    doc = run("error", "slice", "--json", code=2, before=("--series", "side"))
    assert doc["command"] == "slice" and "does not take --series" in doc["problems"][0]["message"]
    run.ran_what_runs_says("test_an_error_before_the_command_prints_the_error_document")


def test_every_format_has_a_run() -> None:
    from test_cli_pipeline import JSON_FORMATS_ON_MINI  # noqa: PLC0415 (the formats its runs check)

    assert set(RUNS) | set(JSON_FORMATS_ON_MINI) == set(jsonout.FORMATS)
    assert not set(RUNS) & set(JSON_FORMATS_ON_MINI)
    # every test RUNS names is one of this module's
    assert set(RUNS.values()) <= {n for n in globals() if n.startswith("test_")}
    assert json.loads(jsonout.schema_text())["$defs"].keys() >= jsonout.FORMATS.keys()

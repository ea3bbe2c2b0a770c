"""The one output contract of `--json`: every document has the envelope (format, ok, exit, problems),
is printed on every exit (errors included), and validates against the schema the package ships
(`patchset help --json-schema`). The documents of the other tests go through the same check
(helpers.json_document)."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest
from helpers import Proj, json_document

from builder.cli import main
from builder.commands import jsonout


def test_the_schema_is_a_schema_of_every_format(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["help", "--json-schema"]) == 0
    schema = json.loads(capsys.readouterr().out)
    jsonschema.Draft202012Validator.check_schema(schema)
    assert schema == json.loads(jsonout.schema_text())
    # one definition per format, of the version FORMATS says
    named = schema["allOf"][1]["properties"]["format"]["enum"]
    assert named == [f"patchset-{n}/{v}" for n, (v, _, _) in jsonout.FORMATS.items()]
    assert set(jsonout.FORMATS) <= set(schema["$defs"])


def test_a_document_that_breaks_the_envelope_is_refused() -> None:
    good = jsonout.text("fetch", {"commit": "c", "tree": "t", "source": "s", "cached": True})
    assert json_document(good)["ok"] is True
    for bad in ({"ok": False}, {"exit": -1}, {"problems": ["a line"]}, {"format": "patchset-fetch/9"}):
        with pytest.raises(jsonschema.ValidationError):
            json_document(json.dumps({**json.loads(good), **bad}))


def test_an_error_prints_the_error_document(proj: Proj, capsys: pytest.CaptureFixture[str]) -> None:
    # a bad argument of the command itself: exit 2, one line on stderr, and on stdout the envelope with the error
    assert main(["--project", str(proj.root), "gc", "--older-than", "-1", "--json"]) == 2
    out, err = capsys.readouterr()
    doc = json_document(out)
    assert (doc["format"], doc["ok"], doc["exit"], doc["command"]) == ("patchset-error/1", False, 2, "gc")
    problem, = doc["problems"]
    assert problem["message"] in err and problem["message"].startswith("--older-than -1")
    # a project that is not there: no project, still the document
    assert main(["--project", str(proj.root / "nowhere"), "status", "--json"]) == 2
    assert json_document(capsys.readouterr().out)["exit"] == 2


def test_the_exit_and_findings_are_in_the_document(proj: Proj, capsys: pytest.CaptureFixture[str]) -> None:
    # check with a bad series: exit 1, each finding located (file, line, patch) and the series' patches indexed
    series = proj.root / "patches" / "series"
    series.write_text(series.read_text() + "0099-missing.patch\n")
    assert main(["--project", str(proj.root), "check", "--json"]) == 1
    doc = json_document(capsys.readouterr().out)
    assert (doc["format"], doc["ok"], doc["exit"]) == ("patchset-check/2", False, 1)
    assert [p["index"] for p in doc["patches"]] == list(range(1, len(doc["patches"]) + 1))
    found = [p for p in doc["problems"] if "0099-missing.patch" in p["message"]]
    assert found and found[0]["file"] == str(series) and found[0]["line"] == len(series.read_text().splitlines())


def test_a_file_document_holds_the_exit_too(proj: Proj, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # `--json FILE` (test, all): the error document goes to the file, as the command's own would
    out = tmp_path / "t.json"
    code = main(["--project", str(proj.root / "nowhere"), "test", "--json", str(out)])
    assert code == 2 and not capsys.readouterr().out
    assert json_document(out.read_text())["exit"] == 2

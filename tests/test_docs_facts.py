"""Facts the README and docs/ state that the code can check: the help's exit codes and environment
variables, every option's help and default, the README's table of commands (generated from the
parser), the patch counts, the workflows listed and the commands named."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import pytest

from builder import proc
from builder.cli import build_parser, main
from builder.commands.help_cmd import MARKERS, markdown
from builder.errors import EXIT_CODES
from builder.series.init import WORKFLOWS

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
DOCS = [README, *sorted((ROOT / "docs").glob("*.md")), ROOT / "CONTRIBUTING.md"]


def _sub(p: argparse.ArgumentParser) -> argparse._SubParsersAction | None:
    return next((a for a in p._actions if isinstance(a, argparse._SubParsersAction)), None)


def _all_parsers() -> list[tuple[str, argparse.ArgumentParser]]:
    out: list[tuple[str, argparse.ArgumentParser]] = []
    todo = [("patchset", build_parser())]
    while todo:
        name, p = todo.pop()
        out.append((name, p))
        if (s := _sub(p)) is not None:
            todo += [(f"{name} {n}", q) for n, q in s.choices.items()]
    return out


def test_top_help_lists_exit_codes_and_environment(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["--help"])
    text = " ".join(capsys.readouterr().out.split())
    for code, what in EXIT_CODES.items():
        assert f"{code} {' '.join(what.split())}" in text
    for name, (default, _) in proc.TIMEOUTS.items():
        assert name in text and f"(default: {default:g})" in text
    for name in ("PATCHSET_CACHE", "PATCHSET_STATE", "NO_COLOR", "CI", "CXX"):
        assert name in text


def test_every_option_has_help_and_its_default() -> None:
    missing = []
    for name, p in _all_parsers():
        fmt = p._get_formatter()
        for a in p._actions:
            if isinstance(a, argparse._HelpAction | argparse._SubParsersAction._ChoicesPseudoAction):
                continue
            text = fmt._get_help_string(a) if a.help else ""
            if not text:
                missing.append(f"{name} {a.option_strings or a.dest}: no help")
                continue
            d = a.default
            if a.option_strings and d not in (None, False, True, [], argparse.SUPPRESS) and "default" not in text:
                missing.append(f"{name} {a.option_strings}: default {d!r} not said")
    assert missing == []


def test_readme_command_table_is_the_parsers() -> None:
    text = README.read_text(encoding="utf-8")
    start, end = (text.index(m) for m in MARKERS)
    table = text[start + len(MARKERS[0]):end].strip()
    assert table == markdown(build_parser()), "README's table of commands is stale: run `patchset help --markdown`"


def test_json_formats_table_is_the_codes() -> None:
    from builder.commands import jsonout  # noqa: PLC0415

    text = (ROOT / "docs" / "json.md").read_text(encoding="utf-8")
    start, end = (text.index(m) for m in jsonout.MARKERS)
    assert text[start + len(jsonout.MARKERS[0]):end].strip() == jsonout.markdown().strip(), \
        "docs/json.md's table is stale: run `patchset help --json-formats`"
    # every command that takes --json prints a document the table lists
    sub = _sub(build_parser())
    assert sub is not None
    takes = set()
    for name, p in sub.choices.items():
        inner = _sub(p)
        for q in (inner.choices.values() if inner else [p]):
            if any("--json" in a.option_strings for a in q._actions):
                takes.add(name)
    assert takes == {cmd.split()[0] for _, cmd, _ in jsonout.FORMATS.values()} - {"COMMAND"}


def test_help_markdown_prints_the_table(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["help", "--markdown"]) == 0
    out = capsys.readouterr().out
    assert out.strip() == markdown(build_parser())
    assert "| `patchset evidence check" in out and "| `patchset all " in out


def test_patch_counts_in_docs_match_the_series() -> None:
    series = [ln for ln in (ROOT / "patches/series").read_text(encoding="utf-8").splitlines()
              if ln.strip() and not ln.startswith("#")]
    words = {3: "three", 4: "four", 5: "five", 6: "six", 7: "seven"}
    wrong = []
    for doc in DOCS:
        for i, line in enumerate(doc.read_text(encoding="utf-8").splitlines(), 1):
            for m in re.finditer(r"\b(three|four|five|six|seven|\d) (?:patches|fixes)\b", line):
                said = m.group(1)
                if re.search(r"series (?:holds|of|carries)|the series'?s? |shipped", line) and \
                        said not in (str(len(series)), words.get(len(series))):
                    wrong.append(f"{doc.name}:{i}: {m.group(0)}")
    # the wheel version's example: <bindings>+<build>.<number of patches>.g<hash>
    for doc in DOCS:
        for i, line in enumerate(doc.read_text(encoding="utf-8").splitlines(), 1):
            wrong += [f"{doc.name}:{i}: version +{m}" for m in re.findall(r"\+\d+\.(\d+)\.g[0-9a-fX]{8}", line)
                      if m != str(len(series))]
    assert wrong == []


def test_workflows_listed_are_the_ones_there() -> None:
    there = sorted(p.name for p in (ROOT / ".github/workflows").glob("*.yml"))
    for doc in DOCS:
        named = set(re.findall(r"\.github/workflows/([\w-]+\.yml)", doc.read_text(encoding="utf-8")))
        named -= {name for name, _ in WORKFLOWS.values()}  # the workflows `patchset init` writes into a new project
        assert named <= set(there), f"{doc.name} names workflows that do not exist: {sorted(named - set(there))}"
    readme = README.read_text(encoding="utf-8")
    assert [w for w in there if f"`{w}`" not in readme] == [], "README lists every workflow"


def test_commands_named_in_docs_exist() -> None:
    parsers = dict(_all_parsers())
    verbs = {n.split()[1] for n in parsers if n.count(" ") == 1}
    wrong = []
    for doc in DOCS:
        for i, line in enumerate(doc.read_text(encoding="utf-8").splitlines(), 1):
            for m in re.finditer(r"`patchset ([a-z][a-z-]*)((?: --?[a-z][a-z0-9-]*)*)", line):
                verb, flags = m.group(1), m.group(2).split()
                if verb not in verbs:
                    wrong.append(f"{doc.name}:{i}: patchset {verb}")
                    continue
                known = {o for a in parsers[f"patchset {verb}"]._actions for o in a.option_strings}
                known |= {o for n, p in parsers.items() if n.startswith(f"patchset {verb} ")
                          for a in p._actions for o in a.option_strings}
                wrong += [f"{doc.name}:{i}: patchset {verb} {f}" for f in flags if f not in known]
    assert wrong == []


GLOSSARY_TERMS = ("pin", "before tree, after tree, parent tree", "known-positive", "guard case", "stand-in", "sweep",
                  "mutation", "hunk", "evidence", "carry folder", "lane")


def test_the_glossary_defines_each_term_with_the_command_that_shows_it() -> None:
    text = (ROOT / "docs" / "glossary.md").read_text(encoding="utf-8")
    entries = {m[1]: m[2] for m in re.finditer(r"^\*\*(.+?)\*\*: (.+?)(?=\n\n|\Z)", text, re.M | re.S)}
    assert list(entries) == list(GLOSSARY_TERMS)
    for term, what in entries.items():
        assert "`patchset " in what, f"glossary: {term} names no command that shows it"
        assert len(what.split()) <= 90, f"glossary: {term} is not short"
    assert "metal-replay" in entries["stand-in"] and "metal-linux" in entries["stand-in"]
    for doc in ("README.md", "docs/guide.md"):
        assert "glossary.md" in (ROOT / doc).read_text(encoding="utf-8"), f"{doc} does not link the glossary"

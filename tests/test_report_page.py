"""`patchset report --html` (issue 46): the page is made from the records the CLI prints, says nothing
they do not, and its matrix fits a 1280 px screen in a real browser (Debian's chromium)."""

from __future__ import annotations

import json
import os
import re
import shutil
import struct
import subprocess
from datetime import UTC, datetime
from html.parser import HTMLParser
from pathlib import Path

import pytest
from helpers import json_document

from builder.cli import main
from builder.commands import jsonout
from builder.compile.backends import PROFILES
from builder.deliver import report_page
from builder.errors import InputError
from builder.prove import backends_doc
from builder.prove.cases import ROLES
from builder.prove.verdicts import OUTCOMES
from builder.series.canary import CanaryReport, Commit, PatchCanary
from builder.series.dropped import DropRecord
from builder.series.load import load_series
from builder.series.status import PatchStatus
from builder.upstream.pin import load_pin

ROOT = Path(__file__).resolve().parent.parent
EVIDENCE = ROOT / "docs" / "evidence"
NOW = datetime(2026, 12, 4, 12, 0, tzinfo=UTC)
SCREENSHOT = ROOT / ".patchset" / "report-screenshot.png"
"""Where the browser test leaves its screenshot at 1280 px: CI uploads it with the page."""


class Page(HTMLParser):
    """The page as a reader sees it: each matrix cell's words, each patch row, and all the text."""

    def __init__(self, html: str) -> None:
        super().__init__(convert_charrefs=True)
        self.cells: dict[tuple[str, str], str] = {}
        self.marks: dict[tuple[str, str], list[str]] = {}
        self.rows: list[str] = []
        self.tags: list[str] = []
        self.text: list[str] = []
        self._cell: tuple[str, str] | None = None
        self._span = ""
        self.feed(html)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        self.tags.append(tag)
        if tag == "td" and a.get("data-backend"):
            self._cell = (a["data-patch"] or "", a["data-backend"] or "")
            self.cells[self._cell] = ""
            self.marks[self._cell] = []
        if tag == "tr" and a.get("class") == "patch":
            self.rows.append(a.get("id") or "")
        if tag in ("span", "a"):
            self._span = a.get("class") or ""

    def handle_endtag(self, tag: str) -> None:
        if tag == "td":
            self._cell = None
        if tag in ("span", "a"):
            self._span = ""

    def handle_data(self, data: str) -> None:
        self.text.append(data)
        if self._cell and self._span == "word":
            self.cells[self._cell] += data
        elif self._cell and self._span == "mark":
            self.marks[self._cell].append(data)

    @property
    def all_text(self) -> str:
        return "".join(self.text)


def _statuses(root: Path) -> tuple[PatchStatus, ...]:
    """The patches as `status` reads them (no work repository: nothing applied)."""
    return tuple(PatchStatus(p.index, p.name, p.subject, False, False, p.meta.upstream, p.meta.upstream_ref)
                 for p in load_series(root / "patches").patches)


def _real_page(**kw: object) -> report_page.Page:
    return report_page.gather(load_series(ROOT / "patches"), _statuses(ROOT), load_pin(ROOT / "upstream" /
                              "llama.cpp.toml"), EVIDENCE, now=NOW, **kw)  # type: ignore[arg-type]


def test_the_page_of_the_real_series_says_what_its_committed_records_say(tmp_path: Path, monkeypatch:
                                                                          pytest.MonkeyPatch,
                                                                          capsys: pytest.CaptureFixture[str]) -> None:
    """Every patch in order, every backend cell with the words `verify --report` prints for the same
    records (copied where verify keeps them), each record's reason, note and cases verbatim."""
    state = tmp_path / "state"
    committed: dict[tuple[str, str], dict] = {}
    for folder in sorted(p for p in EVIDENCE.iterdir() if (p / "verify.json").is_file()):
        for stem, rec in json.loads((folder / "verify.json").read_text())["patches"].items():
            committed[(f"{stem}.patch", folder.name)] = rec
            target = state / "evidence" / stem / f"{folder.name}.json"
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(json.dumps(rec))
    assert committed, "no committed verify records under docs/evidence/"
    monkeypatch.setenv("PATCHSET_STATE", str(state))
    assert main(["--project", str(ROOT), "verify", "--report", "--json"]) == 0
    report = json_document(capsys.readouterr().out)
    words = {(p["patch"], b): w for p in report["patches"] for b, w in p["outcomes"].items()}
    assert set(words) == set(committed)

    page = Page(report_page.render(_real_page()))
    series = load_series(ROOT / "patches")
    assert page.rows == [f"patch-{p.index}" for p in series.patches]
    with_evidence = {b.name for b in EVIDENCE.iterdir() if any(b.glob("run-*.json"))}
    for p in series.patches:
        assert p.subject in page.all_text and p.meta.upstream in page.all_text
        for b in PROFILES:
            shown = page.cells[(p.name, b)]
            if (p.name, b) in words:
                assert shown == words[(p.name, b)], f"{p.name} on {b}"
                rec = committed[(p.name, b)]
                # the record's own text; its Markdown `code` spans shown as code
                assert rec["reason"].replace("`", "") in page.all_text
                assert ("stand-in" in page.marks[(p.name, b)]) == bool(rec.get("note"))
                if rec.get("note"):
                    assert rec["note"].replace("`", "") in page.all_text
                for case in rec.get("cases", []):
                    assert case["case"] in page.all_text and case["role"] in page.all_text
                for step in rec["steps"]:
                    assert not step["label"] or step["label"] in page.all_text
            else:
                assert shown == (backends_doc.NOT_VERIFIED if b in with_evidence else backends_doc.NOT_RUN)
    # the run behind each backend's evidence, from the manifest
    manifest = json.loads((EVIDENCE / "MANIFEST.json").read_text())["files"]
    for b in with_evidence:
        entry = manifest[f"{b}/verify.json"]
        assert entry["command"] in page.all_text and entry["date"] in page.all_text
    assert "script" not in page.tags and "link" not in page.tags
    # what the words mean: verify's own tables, their `code` spans as code
    for _word, meaning in (*OUTCOMES, *ROLES):
        assert meaning.replace("`", "") in page.all_text

    # --state: the very files verify --report read, the same words; no record is "not verified there"
    assert main(["--project", str(ROOT), "report", "--html", str(tmp_path / "site"), "--state"]) == 0
    mine = Page((tmp_path / "site" / "index.html").read_text())
    assert {k: w for k, w in mine.cells.items() if w != backends_doc.NOT_VERIFIED} == words
    assert "this machine's evidence under .patchset/evidence/" in mine.all_text
    host = next(iter(committed.values()))["host"]
    assert host["compiler"] in mine.all_text


def _evidence_root(tmp_path: Path, records: dict[str, dict], backend: str = "metal-linux") -> Path:
    root = tmp_path / "evidence"
    folder = root / backend
    folder.mkdir(parents=True)
    (folder / "run-verify.json").write_text(json.dumps({"format": "patchset-device-run/1", "date": "2026-12-01",
                                                        "steps": [], "patches": []}))
    (folder / "verify.json").write_text(json.dumps({"format": "patchset-verify-evidence/1", "backend": backend,
                                                    "patches": records}))
    return root


def test_a_record_of_a_newer_format_shows_its_words_and_an_old_one_still_reads(tmp_path: Path) -> None:
    """Fields this page does not know (a newer verify's) are shown as the record writes them; fields an
    old record lacks are left out; `cannot tell` and the stand-in's note are marked with their words;
    the record's text is escaped, never run."""
    series = load_series(ROOT / "patches")
    first, second = (p.name.removesuffix(".patch") for p in series.patches[:2])
    root = _evidence_root(tmp_path, {
        first: {"outcome": "not proven", "created": "2026-12-01T00:00:00Z",
                "reason": "cannot tell: the before run of <script>alert(1)</script> stopped at its time limit",
                "note": "a stand-in, not Apple hardware", "flaky": ["CASE(a=1)"],
                "steps": [{"tree": "before", "verdict": "fails", "timed_out": True,
                           "tests": [{"command": "test-x", "verdict": "timeout", "confirm_runs": 3}]}]},
        second: {"outcome": "proven"}})
    page_html = report_page.render(report_page.gather(series, _statuses(ROOT), load_pin(ROOT / "upstream" /
                                                      "llama.cpp.toml"), root, now=NOW))
    assert "<script>" not in page_html and "&lt;script&gt;" in page_html
    page = Page(page_html)
    cell = (series.patches[0].name, "metal-linux")
    assert page.cells[cell] == "not proven"
    assert page.marks[cell] == ["cannot tell", "stand-in"]
    for field, value in (("flaky", '["CASE(a=1)"]'), ("timed_out", "true"), ("confirm_runs", "3")):
        assert f"{field}{value}" in page.all_text.replace("\n", "")
    assert "3 days old" in page.all_text
    assert page.cells[(series.patches[1].name, "metal-linux")] == "proven"
    assert page.cells[(series.patches[2].name, "metal-linux")] == backends_doc.NOT_VERIFIED
    assert page.cells[(series.patches[0].name, "cpu")] == backends_doc.NOT_RUN


def _canary(tmp_path: Path) -> Path:
    series = load_series(ROOT / "patches")
    report = CanaryReport("a" * 40, "b" * 40, 120, 1, 8, "c" * 40, "ggml : the newest good one", patches=(
        PatchCanary(series.patches[0].name, 7, Commit("d" * 40, "metal : rework buffers", ("ggml/src/x.m",)),
                    "e" * 40, "conflict", hunks=("ggml/src/x.m:12",)),
        *(PatchCanary(p.name, 7) for p in series.patches[1:])), checked="build", builds=9)
    path = tmp_path / "canary.json"
    path.write_text(jsonout.text("canary", report.as_json()))
    return path


def test_the_canary_map_is_the_canary_report(tmp_path: Path) -> None:
    path = _canary(tmp_path)
    report = report_page.load_canary(path)
    assert json.loads(path.read_text()) == jsonout.document("canary", report.as_json())
    page = Page(report_page.render(_real_page(canary=report, canary_file=path.name)))
    text = page.all_text
    assert report.where() in text and "Newest commit where the whole series applies and builds" in text
    assert "dddddddddddd metal : rework buffers" in text and "files: ggml/src/x.m; hunks: ggml/src/x.m:12" in text
    assert text.count("applies") >= 4


def test_report_writes_the_page_and_refuses_a_file_that_is_not_a_canary_report(tmp_path: Path,
                                                                               monkeypatch: pytest.MonkeyPatch,
                                                                               capsys: pytest.CaptureFixture[str]
                                                                               ) -> None:
    root = tmp_path / "proj"
    for d in ("patches", "upstream", "docs/evidence"):
        shutil.copytree(ROOT / d, root / d)
    monkeypatch.setenv("PATCHSET_STATE", str(tmp_path / "state"))
    bad = tmp_path / "status.json"
    bad.write_text(json.dumps({"format": "patchset-status/1"}))
    out = tmp_path / "site"
    assert main(["--project", str(root), "report", "--html", str(out), "--canary", str(bad)]) == 2
    err = capsys.readouterr().err
    assert "status.json: not a canary report" in err and len(err.strip().splitlines()) == 1
    assert not out.exists()
    (tmp_path / "canary.json").write_text("{")
    with pytest.raises(InputError, match=r"canary.json:1: not valid JSON"):
        report_page.load_canary(tmp_path / "canary.json")

    assert main(["--project", str(root), "report", "--html", str(out), "--canary", str(_canary(tmp_path))]) == 0
    assert [p.name for p in out.iterdir()] == ["index.html"]
    page = Page((out / "index.html").read_text())
    assert len(page.rows) == len(load_series(root / "patches").patches)
    assert "metal : rework buffers" in page.all_text


# -- in a real browser --------------------------------------------------------------------------
_MEASURE = """<script>
window.addEventListener('load', () => setTimeout(() => {
  const m = document.querySelector('table.matrix').getBoundingClientRect();
  const out = document.createElement('pre');
  out.id = 'measure';
  out.textContent = JSON.stringify({viewport: window.innerWidth, page: document.documentElement.scrollWidth,
                                    left: m.left, right: m.right, top: m.top,
                                    open: [...document.querySelectorAll('details[open]')].map(d => d.id)});
  document.body.appendChild(out);
}, 100));
</script>"""
"""Added to a copy of the page only: the page itself has no script."""


def _chromium(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    browser = shutil.which("chromium") or shutil.which("chromium-browser") or "chromium"
    env = {**os.environ, "HOME": str(tmp_path / "home")}
    # --no-sandbox: CI containers and root cannot start chromium's sandbox; the page is our own
    return subprocess.run([browser, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                           f"--user-data-dir={tmp_path / 'profile'}", *args], capture_output=True, text=True,
                          env=env, timeout=180, check=False)


def _measure(tmp_path: Path, page: Path, width: int, fragment: str = "") -> dict:
    probe = page.with_name(f"measure-{width}.html")
    probe.write_text(page.read_text().replace("</body>", _MEASURE + "</body>"))
    r = _chromium(tmp_path, "--virtual-time-budget=5000", f"--window-size={width},900", "--dump-dom",
                  probe.as_uri() + fragment)
    assert r.returncode == 0, r.stderr[-2000:]
    start = r.stdout.index('<pre id="measure">') + len('<pre id="measure">')
    return json.loads(r.stdout[start: r.stdout.index("</pre>", start)])


@pytest.mark.skipif(shutil.which("chromium") is None and shutil.which("chromium-browser") is None,
                    reason="Debian's chromium is not installed (`apt-get install chromium`; .ci/run and CI install it)")
def test_the_matrix_fits_a_1280_px_screen_in_chromium(tmp_path: Path) -> None:
    """The page of the real series, with the canary map, in headless Chromium: at 1280 px the matrix is
    on the screen whole (no sideways scrolling, its top in the first screenful); on a phone's 390 px the
    page does not scroll sideways either. The screenshot at 1280 px is kept for CI's artifacts."""
    page = report_page.write(_real_page(canary=report_page.load_canary(_canary(tmp_path)), canary_file="canary.json"),
                             tmp_path / "site")
    wide = _measure(tmp_path, page, 1280)
    assert wide["viewport"] == 1280
    assert wide["page"] <= 1280 and wide["left"] >= 0 and wide["right"] <= 1280, wide
    assert wide["top"] < 900, wide
    assert wide["open"] == []
    narrow = _measure(tmp_path, page, 390)
    assert narrow["page"] <= narrow["viewport"], narrow
    # a cell's words link into its record, which the browser opens: the cases one click from the cell
    link = re.search(r'<a class="word" href="(#patch-3-cpu-evidence)"', page.read_text())
    assert link, "patch 3's cpu cell links to its record"
    assert _measure(tmp_path, page, 1280, link[1])["open"] == ["patch-3-cpu"]

    shot = tmp_path / "report-screenshot.png"
    r = _chromium(tmp_path, f"--screenshot={shot}", "--window-size=1280,900", page.as_uri())
    assert r.returncode == 0 and shot.is_file(), r.stderr[-2000:]
    head = shot.read_bytes()[:24]
    assert head[:8] == b"\x89PNG\r\n\x1a\n" and struct.unpack(">II", head[16:24]) == (1280, 900)
    SCREENSHOT.parent.mkdir(exist_ok=True)
    shutil.copyfile(shot, SCREENSHOT)


def test_upstream_words_are_status_words_a_url_is_a_link_and_dropped_patches_are_listed() -> None:
    """The upstream column shows the word status reads from `Patchset-Upstream` (a word this page does not
    know, such as a newer `fork-only`, as written) and what follows it, a URL as a link; the patches
    `patches/dropped` took out are listed with why; status's problems are shown."""
    series = load_series(ROOT / "patches")
    rows = list(_statuses(ROOT))
    url = "https://github.com/ggml-org/llama.cpp/pull/1234?a=1&b=2"
    rows[0] = PatchStatus(rows[0].index, rows[0].name, rows[0].subject, False, False, "sent", url)
    rows[1] = PatchStatus(rows[1].index, rows[1].name, rows[1].subject, False, False, "fork-only", "")
    dropped = (DropRecord("0009-ggml-old-fix.patch", "1" * 40, "2" * 40, "fixed-upstream",
                          "test-x: CASE(a=1) passes on upstream without the fix"),)
    html = report_page.render(report_page.gather(series, tuple(rows), load_pin(ROOT / "upstream" / "llama.cpp.toml"),
                                                 EVIDENCE, dropped=dropped, problems=("a problem status saw",),
                                                 now=NOW))
    assert f'<a href="{url.replace("&", "&amp;")}">' in html
    text = Page(html).all_text
    assert "fork-only" in text and "0009-ggml-old-fix.patch" in text and "fixed-upstream" in text
    assert "test-x: CASE(a=1) passes on upstream without the fix" in text and "a problem status saw" in text


def test_a_damaged_verify_json_is_shown_as_no_record_not_a_crash(tmp_path: Path) -> None:
    """A `verify.json` whose `patches` is not an object, or a record of odd types, renders: the cells say
    there is no record, or show the values as written."""
    series = load_series(ROOT / "patches")
    root = _evidence_root(tmp_path, {})
    (root / "metal-linux" / "verify.json").write_text(json.dumps({"patches": ["not", "an", "object"]}))
    stem = series.patches[0].name.removesuffix(".patch")
    _evidence_root(tmp_path / "other", {stem: {"outcome": "proven", "created": 20261201, "cases": ["x"],
                                               "hunks": "none", "steps": [{"tests": "none"}, "x"]}}, "cuda")
    shutil.copytree(tmp_path / "other" / "evidence" / "cuda", root / "cuda")
    page = Page(report_page.render(report_page.gather(series, _statuses(ROOT), load_pin(ROOT / "upstream" /
                                                      "llama.cpp.toml"), root, now=NOW)))
    assert page.cells[(series.patches[0].name, "metal-linux")] == backends_doc.NOT_VERIFIED
    assert page.cells[(series.patches[0].name, "cuda")] == "proven"
    assert "20261201" in page.all_text

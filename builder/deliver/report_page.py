"""`patchset report --html`: the series at a glance, one static page made from the records the CLI prints.

The page holds, in the series' order, each patch's subject and where it stands upstream (the
`Patchset-Upstream` word and what follows it, as `status --json` prints them; the patches
`patches/dropped` took out), the proof matrix patch x backend from the committed evidence
(`docs/evidence/<backend>/verify.json`: each cell the words `verify --report` prints for the record,
`backends_doc`'s words where there is none), the run behind each backend's evidence (its
`MANIFEST.json` entry: command, date, machine) and, with a canary report (`canary --json`), where
each patch breaks over the range. With `state`, the records are this machine's instead (the
state folder's `evidence/<patch>/<backend>.json`, exactly what `verify --report` reads: a CI job's own
runs, committed or not). Behind each cell, one click away (`<details>`), the record's own
text: its reason, note, steps and test runs, cases, mutations and hunks. Fields this renderer does
not know (newer evidence) are shown as the record writes them; absent ones are old evidence.

HTML from a Jinja2 template (builder/deliver/data/report.html.j2), autoescaped: no script, no
external font or style; readable without colour, on paper and on a narrow screen.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import jinja2
import markupsafe

from builder.compile.backends import PROFILES
from builder.deliver import committed
from builder.errors import InputError
from builder.fsutil import atomic_write_text, load_json, sha256_file
from builder.prove import backends_doc, evidence
from builder.prove.cases import CANNOT_TELL, ROLES
from builder.prove.verdicts import OUTCOMES, recorded_outcome
from builder.series.canary import CanaryReport
from builder.series.dropped import DropRecord
from builder.series.model import Series
from builder.series.status import PatchStatus
from builder.upstream.pin import Pin
from builder.words import BUILD_FAILED, NEEDS, NOT_PROVEN, PROVEN, REGRESSED

PAGE = "index.html"
STAND_IN = "stand-in"
"""A record that carries a `note`: a run on a stand-in for the backend's hardware, not on it."""

# the fields each level of a verify record is known to hold; any other is shown as the record writes it
_RECORD_KNOWN = {"patch", "subject", "backend", "outcome", "reason", "pin", "steps", "key", "host", "created",
                 "reused", "note", "hunks", "hunks_checked", "depends", "cases", "holds"}
_STEP_KNOWN = {"tree", "commit", "tree_id", "build_ok", "build_command", "build_duration_s", "build_errors",
               "errors_only_in_test_paths", "tests", "verdict", "label"}
_TEST_KNOWN = {"command", "returncode", "signal", "verdict", "passed", "failed", "skipped", "duration_s", "log",
               "failing", "notes", "trace"}
_URL = re.compile(r"^https?://\S+$")


@dataclass(frozen=True)
class TestRun:
    """One test command's run on one tree, as the record has it."""

    command: str
    verdict: str
    exit: str
    """The exit code, or the signal that killed it, or '' when the record has neither."""
    counts: str
    failing: tuple[str, ...]
    extra: tuple[tuple[str, str], ...]


@dataclass(frozen=True)
class TreeRun:
    """One tree of a proof (before, after, a mutation, the parent): its build and tests."""

    tree: str
    label: str
    verdict: str
    build: str
    build_errors: tuple[str, ...]
    tests: tuple[TestRun, ...]
    extra: tuple[tuple[str, str], ...]


@dataclass(frozen=True)
class Cell:
    """One patch on one backend."""

    backend: str
    word: str
    """`verify --report`'s words for the record, or NOT_RUN / NOT_VERIFIED where there is none."""
    state: str
    """For the style only (every state has its word): proven, not-proven, needs, failed, none."""
    marks: tuple[str, ...] = ()
    """More words the record says: `cannot tell` (its reason), `stand-in` (its note), `older revision`."""
    created: str = ""
    age: str = ""
    reason: str = ""
    note: str = ""
    holds: str = ""
    trees: tuple[TreeRun, ...] = ()
    cases: tuple[dict, ...] = ()
    hunks: tuple[dict, ...] = ()
    host: tuple[tuple[str, str], ...] = ()
    """Where the run was made, as the record's `host` says it (platform, cpus, compiler, ...)."""
    extra: tuple[tuple[str, str], ...] = ()

    @property
    def has_evidence(self) -> bool:
        return bool(self.created or self.reason or self.trees)

    @property
    def mutations(self) -> tuple[TreeRun, ...]:
        return tuple(t for t in self.trees if t.tree.startswith("mutation"))


@dataclass(frozen=True)
class Row:
    index: int
    name: str
    subject: str
    upstream: str
    """The `Patchset-Upstream` word (status's `upstream`)."""
    upstream_ref: str
    upstream_url: str
    """`upstream_ref` when it is a URL (a link), else ''."""
    cells: tuple[Cell, ...]


@dataclass(frozen=True)
class Column:
    """One backend: what made its committed evidence."""

    backend: str
    stand_in: bool
    note: str
    command: str = ""
    date: str = ""
    age: str = ""
    machine: str = ""
    pin: str = ""


@dataclass(frozen=True)
class Page:
    title: str
    pin: str
    made: str
    source: str
    """Where the proof records come from, in words (the committed evidence, or this machine's)."""
    committed: bool
    rows: tuple[Row, ...]
    columns: tuple[Column, ...]
    dropped: tuple[DropRecord, ...]
    canary: CanaryReport | None
    canary_file: str
    problems: tuple[str, ...]


def _text(value: object) -> str:
    """A value as the record writes it: text as is, anything else as compact JSON."""
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def _extra(d: dict, known: set[str]) -> tuple[tuple[str, str], ...]:
    return tuple((k, _text(v)) for k, v in d.items() if k not in known and v not in (None, "", [], {}))


def _age(date: str, now: datetime) -> str:
    """`N days` between an ISO date of a record and `now`, or '' when the date does not parse."""
    try:
        then = datetime.fromisoformat(date.replace("Z", "+00:00"))
    except ValueError:
        return ""
    if then.tzinfo is None:
        then = then.replace(tzinfo=UTC)
    days = (now - then).days
    return "today" if days <= 0 else f"{days} day{'s' if days != 1 else ''} old"


def _failing(value: object) -> tuple[str, ...]:
    if isinstance(value, list | tuple):
        return tuple(_text(v) for v in value)
    return (value,) if isinstance(value, str) and value else ()


def _test(t: dict) -> TestRun:
    code = t.get("returncode")
    exit_ = f"signal {t['signal']}" if t.get("signal") else ("" if code is None else f"exit {code}")
    counts = ", ".join(f"{t[k]} {k}" for k in ("passed", "failed", "skipped") if isinstance(t.get(k), int))
    return TestRun(_text(t.get("command", "")), _text(t.get("verdict", "")), exit_, counts,
                   _failing(t.get("failing")), _extra(t, _TEST_KNOWN))


def _tree(s: dict) -> TreeRun:
    build = "" if "build_ok" not in s else ("built" if s["build_ok"] else "did not build")
    return TreeRun(_text(s.get("tree", "")), _text(s.get("label", "")), _text(s.get("verdict", "")), build,
                   tuple(_text(e) for e in s.get("build_errors") or ()),
                   tuple(_test(t) for t in s.get("tests") or () if isinstance(t, dict)), _extra(s, _STEP_KNOWN))


def _state(word: str) -> str:
    if word.split(" (", 1)[0] == PROVEN:
        return "proven"
    if word.startswith(NEEDS):
        return "needs"
    if word.startswith((REGRESSED, BUILD_FAILED)):
        return "failed"
    if word.startswith(NOT_PROVEN):
        return "not-proven"
    return "other"


def cell_of(backend: str, rec: dict, now: datetime, older: str = "") -> Cell:
    """The cell of one committed verify record (a `verify.json` entry), read defensively: a field the
    record lacks is old evidence, one it has that this page does not know is shown as written."""
    hunks = tuple(h for h in rec.get("hunks") or () if isinstance(h, dict))
    word = recorded_outcome(_text(rec.get("outcome", "?")), hunks, bool(rec.get("hunks_checked")))
    reason, note = _text(rec.get("reason", "")), _text(rec.get("note", ""))
    marks = ((CANNOT_TELL,) if reason.startswith(CANNOT_TELL) else ()) + ((STAND_IN,) if note else ()) + \
        ((f"older revision {older[:12]}",) if older else ())
    holds = rec.get("holds") or {}
    host = rec.get("host") or {}
    created = _text(rec.get("created", ""))
    return Cell(backend, word, _state(word), marks, created, _age(created, now), reason, note,
                _text(holds.get("why", "")) if isinstance(holds, dict) else "",
                tuple(_tree(s) for s in rec.get("steps") or () if isinstance(s, dict)),
                tuple(c for c in rec.get("cases") or () if isinstance(c, dict)), hunks,
                _extra(host, set()) if isinstance(host, dict) else (), _extra(rec, _RECORD_KNOWN))


def state_records(series: Series, state_evidence: Path) -> dict[str, dict[str, dict]]:
    """This machine's records, backend -> patch stem -> record: the files `verify --report` reads
    (`evidence.paths`); one that does not parse is no record, as there."""
    found: dict[str, dict[str, dict]] = {}
    for p in series.patches:
        for b in PROFILES:
            path = evidence.paths(state_evidence, p.name, b)[0]
            try:
                data = json.loads(path.read_text(encoding="utf-8"))
            except (OSError, UnicodeDecodeError, ValueError):
                continue
            if isinstance(data, dict):
                found.setdefault(b, {})[p.name.removesuffix(".patch")] = data
    return found


def load_canary(path: Path) -> CanaryReport:
    """The canary report `canary --json` printed into `path`; one line naming the file when it is not one."""
    data = load_json(path)
    fmt = data.get("format", "") if isinstance(data, dict) else ""
    if not isinstance(fmt, str) or not fmt.startswith("patchset-canary/"):
        raise InputError(f"{path}: not a canary report (`patchset canary --json` prints one; format {fmt!r})")
    try:
        return CanaryReport.from_json(data)  # type: ignore[arg-type]
    except (KeyError, TypeError, ValueError, AttributeError) as e:
        raise InputError(f"{path}: a canary report without the field {e}") from e


def gather(series: Series, patches: tuple[PatchStatus, ...], pin: Pin, evidence_root: Path, *,
           dropped: tuple[DropRecord, ...] = (), problems: tuple[str, ...] = (), canary: CanaryReport | None = None,
           canary_file: str = "", now: datetime | None = None, state: Path | None = None) -> Page:
    """The page's records: `patches` as `status` reads them, the committed evidence under `evidence_root`
    (docs/evidence/) and its manifest (with `state`, a state folder's evidence folder: this machine's
    records instead, no manifest), and the canary report when one is given."""
    now = now or datetime.now(UTC)
    if state is None:
        found = backends_doc.load_evidence(evidence_root)
        records = {b: ev.verify.get("patches") for b, ev in found.items()}
        manifest = committed.load_manifest(evidence_root)
        recorded = {b: backends_doc.verify_run_patches(ev) for b, ev in found.items()}
    else:
        records, manifest, recorded = dict(state_records(series, state)), {}, {}
    backends = [*PROFILES, *sorted(b for b in records if b not in PROFILES)]
    columns = []
    for b in backends:
        note = PROFILES[b].note if b in PROFILES else ""
        entry = manifest.get(f"{b}/verify.json")
        columns.append(Column(b, bool(note), note) if entry is None else Column(
            b, bool(note), note, entry.command, entry.date, _age(entry.date, now), entry.machine, entry.pin))
    by_name = {p.name: p for p in series.patches}
    rows = []
    for st in patches:
        stem = st.name.removesuffix(".patch")
        patch = by_name.get(st.name)
        sha = sha256_file(patch.path) if patch else ""
        cells = []
        for b in backends:
            recs = records.get(b)
            rec = recs.get(stem) if isinstance(recs, dict) else None
            if b not in records and state is None:
                cells.append(Cell(b, backends_doc.NOT_RUN, "none"))
            elif not isinstance(rec, dict) or not rec:
                cells.append(Cell(b, backends_doc.NOT_VERIFIED, "none"))
            else:
                then = recorded.get(b, {}).get(st.name)
                cells.append(cell_of(b, rec, now, then if then and sha and then != sha else ""))
        ref = st.upstream_ref
        rows.append(Row(st.index, st.name, st.subject, st.upstream, ref, ref if _URL.match(ref) else "",
                        tuple(cells)))
    title = f"{pin.name} {pin.tag or pin.commit[:12]}: {len(rows)} patch{'es' if len(rows) != 1 else ''}"
    source = ("the committed evidence under docs/evidence/" if state is None else
              "this machine's evidence under .patchset/evidence/ (what verify --report reads; not committed)")
    return Page(title, f"{pin.name} {pin.tag or ''} {pin.commit}".replace("  ", " "),
                now.strftime("%Y-%m-%d %H:%M UTC"), source, state is None, tuple(rows), tuple(columns), dropped,
                canary, canary_file, problems)


def _ticks(text: str) -> markupsafe.Markup:
    """`text` escaped, its `backquoted` spans (the Markdown of the docs' tables) as <code>."""
    parts = text.split("`")
    return markupsafe.Markup("").join(markupsafe.Markup("<code>%s</code>") % p if i % 2 else markupsafe.escape(p)
                                      for i, p in enumerate(parts))


def _environment() -> jinja2.Environment:
    env = jinja2.Environment(loader=jinja2.PackageLoader("builder.deliver", "data"), autoescape=True,
                             undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True,
                             keep_trailing_newline=True)
    env.filters["ticks"] = _ticks
    return env


def render(page: Page) -> str:
    """The page as one self-contained HTML document."""
    # the words' meanings are verify's own tables (docs/verify.md prints the same)
    return _environment().get_template("report.html.j2").render(
        page=page, not_run=backends_doc.NOT_RUN, not_verified=backends_doc.NOT_VERIFIED, outcomes=OUTCOMES,
        roles=ROLES)


def write(page: Page, out_dir: Path) -> Path:
    """Write the page as `out_dir/index.html` (the folder made when missing); returns its path."""
    if out_dir.exists() and not out_dir.is_dir():
        raise InputError(f"{out_dir}: not a folder (report --html writes {PAGE} into a folder)")
    out_dir.mkdir(parents=True, exist_ok=True)
    target = out_dir / PAGE
    atomic_write_text(target, render(page))
    return target

"""`patchset evidence update`: the current series' evidence copied into `docs/evidence/`, recorded.

`patchset evidence update` copies the evidence of the current series into `docs/evidence/`:
verify's evidence of the patches as they are now (a proof of these bytes, or a verdict on the
same after tree) from the state folder (`.patchset/evidence/<patch>/<backend>.json`, as
`<backend>/verify.json`, a run record `<backend>/run-verify.json` and one Markdown page per patch)
and the outputs of `patchset offline run` (`--from DIR`: its `run-*.json` records and the files their
steps wrote; never its log). Every string is made relative to the tree (builder/deliver/clean.py).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import shlex
import tempfile
from dataclasses import dataclass, replace
from pathlib import Path

from builder.compile import cmakebuild as buildmod
from builder.deliver import clean
from builder.deliver import evidence_facts as facts
from builder.deliver.committed import (
    COUNTS_BEGIN,
    COUNTS_END,
    FORMAT,
    MANIFEST,
    PATCHES_DOC,
    UPDATE,
    Entry,
    SeriesNow,
    counts_block,
    load_manifest,
)
from builder.errors import InputError, SeriesError
from builder.fsutil import atomic_write_text, load_json, sha256_file
from builder.locking import project_lock
from builder.project import Project
from builder.prove import backends_doc, evidence
from builder.prove import evidence_rules as rules
from builder.series.load import load_series
from builder.series.model import Series
from builder.series.workrepo import WorkRepo
from builder.upstream.fetch import fetch
from builder.upstream.pin import load_pin

# an offline run's step and the files it writes besides those named by `--json`
_STEP_FILES = {"verify": ("verify.json",), "wheel-check": ("wheel-provenance.json", "wheel-check.txt")}


@dataclass(frozen=True)
class UpdateResult:
    written: tuple[str, ...]
    skipped: tuple[str, ...]
    """What was left out, and why."""
    dropped: tuple[str, ...] = ()
    """Committed files removed (stale, with drop_stale) or forgotten (deleted by hand)."""


def _save_manifest(root: Path, entries: dict[str, Entry]) -> None:
    files = {k: entries[k].__dict__ for k in sorted(entries)}
    atomic_write_text(root / MANIFEST, json.dumps({"format": FORMAT, "files": files}, indent=1) + "\n")


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _clean_json(value: object) -> object:
    """Every string of a JSON value with this machine's paths made relative to the tree."""
    if isinstance(value, str):
        return clean.drop_trailer_notes(clean.relative(value))
    if isinstance(value, list):
        return [_clean_json(v) for v in value]
    if isinstance(value, dict):
        return {k: _clean_json(v) for k, v in value.items()}
    return value


def _pin_text(pin: dict) -> str:
    return f"{pin.get('name', '?')} {pin.get('tag', '')} {pin.get('commit', '?')}".replace("  ", " ")


def _machine(host: dict, gpu: str = "") -> str:
    cpu = f"{host.get('platform', '?')}, {host.get('cpus', '?')} CPUs"
    return f"{gpu.split(',', maxsplit=1)[0].strip()}; {cpu}" if gpu else cpu


class _Writer:
    """Files to write under docs/evidence/, each with its manifest entry."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.files: dict[str, tuple[str, Entry]] = {}

    def add(self, rel: str, text: str, command: str, date: str, machine: str, pin: str,
            patches: dict[str, str], inputs: dict[str, str] | None = None, programs: list[str] | None = None,
            proves: list[str] | None = None) -> None:
        self.files[rel] = (text, Entry(clean.relative(command), date, machine, pin, dict(sorted(patches.items())),
                                       _sha(text), dict(sorted((inputs or {}).items())),
                                       list(programs or []) if inputs else [], sorted(proves or [])))


# -- update --------------------------------------------------------------------------------------
def after_trees(project: Project) -> dict[str, str]:
    """Patch name -> the tree after it (the pin plus the patches up to it), as verify and export
    make them: what tells evidence of these patch bytes from evidence of others."""
    # imported here: export's rules and templates weigh on the start of `evidence check`
    from builder.deliver.export_commits import Chain  # noqa: PLC0415

    series = load_series(project.patches_dir)
    pin = load_pin(project.pin_file)
    with project_lock(project.lock_file):
        fetched = fetch(project.cache_dir, pin)
        work = WorkRepo(project.work_repo)
        work.attach_upstream(fetched, pin)
        with tempfile.TemporaryDirectory(prefix="patchset-evidence-") as tmp:
            chain = Chain(work.git, fetched.commit, Path(tmp))
            trees: dict[str, str] = {}
            mails: tuple[Path, ...] = ()
            for p in series.patches:
                mails += (p.path,)
                tree = chain.tree(mails)
                if tree is None:
                    break
                trees[p.name] = tree
    return trees


def series_programs(series: Series) -> list[str]:
    """The programs a device run of this series builds: the defaults and those the patches name."""
    names = list(buildmod.DEFAULT_PROGRAMS)
    names += [t.program for p in series.patches for t in p.meta.tests if t.program not in names]
    return sorted(dict.fromkeys(names))


def _local(series: Series, state_evidence: Path, out: _Writer, docs_root: Path,
           trees: dict[str, str], now: SeriesNow) -> list[str]:
    """verify's evidence of the current patches, per backend: a proof that records these patch
    bytes, or any verdict whose after tree is the patch's after tree now (`trees`)."""
    current = now.sha
    programs = series_programs(series)
    skipped: list[str] = []
    by_backend: dict[str, dict[str, dict]] = {}
    # per backend: every record taken is of its patch's after tree now (then the run was of these trees)
    on_trees_now: dict[str, bool] = {}
    for patch in series.patches:
        stem = patch.name.removesuffix(".patch")
        for jpath in sorted((state_evidence / stem).glob("*.json")):
            backend = jpath.stem
            try:
                data = json.loads(jpath.read_text(encoding="utf-8"))
            except (OSError, ValueError):
                skipped.append(f"{jpath.name} of {patch.name}: unreadable")
                continue
            if not isinstance(data, dict):
                skipped.append(f"{jpath.name} of {patch.name}: not an evidence record")
                continue
            # the tree holds no trailer and the patch's bytes no mutation file: a verdict on the same
            # tree, or of the same bytes, may be of other declared tests or mutations
            other = rules.declared_differs(data, rules.declared(patch, backend), backend)
            if other:
                skipped.append(f"{patch.name} on {backend}: {other}")
                continue
            recorded = (data.get("depends") or {}).get("patch_sha256")
            same_tree = patch.name in trees and facts.load(state_evidence, patch, backend, trees[patch.name]).data
            if recorded != current[patch.name] and not same_tree:
                skipped.append(f"{patch.name} on {backend}: made for other bytes of the patch")
                continue
            by_backend.setdefault(backend, {})[stem] = _clean_json(data)  # type: ignore[assignment]
            on_trees_now[backend] = on_trees_now.get(backend, True) and bool(same_tree)
    for backend, found in by_backend.items():
        folder = docs_root / backend
        # what an offline run of this update or an earlier update committed for the other patches
        existing: dict = {}
        pending = out.files.get(f"{backend}/verify.json")
        prior = pending[1] if pending is not None else load_manifest(docs_root).get(f"{backend}/verify.json")
        if pending is not None:
            existing = json.loads(pending[0]).get("patches", {})
        elif (folder / "verify.json").exists():
            existing = load_json(folder / "verify.json").get("patches", {})
        merged = {**existing, **found}
        kept = set(existing) - set(found)
        # the patches kept from before stay covered, with the bytes and command they were proven with
        kept_shas = {n: sha for n, sha in (prior.patches if prior else {}).items() if n.removesuffix(".patch") in kept}
        newest = max(found.values(), key=lambda d: d.get("created", ""))
        host, pin = newest.get("host", {}), newest.get("pin", {})
        shas = {p.name: current[p.name] for p in series.patches if p.name.removesuffix(".patch") in found}
        with_hunks = {n for n, d in found.items() if d.get("hunks_checked")}
        command = verify_command(backend, [(p.index, p.name.removesuffix(".patch")) for p in series.patches
                                           if p.name in shas], with_hunks)
        date, machine, pin_text = newest.get("created", ""), _machine(host), _pin_text(pin)
        text = json.dumps({"format": "patchset-verify-evidence/1", "backend": backend, "patches": merged},
                          indent=1) + "\n"
        merged_command = command
        if prior and kept:
            merged_command = prior.command if prior.command.endswith(command) else f"{prior.command}; then {command}"
        # made on the trees of now: each patch's input_digest, as a device run on these bytes records them, so
        # that a later device run of other patches keeps these proofs while they hold (_keep_proofs)
        inputs = now.digests(programs) if on_trees_now.get(backend) else {}
        proves = [n for n in (prior.proves if prior else []) if n.removesuffix(".patch") in kept] + list(shas)
        out.add(f"{backend}/verify.json", text, merged_command, date, machine, pin_text, {**kept_shas, **shas},
                inputs, programs, proves)
        run = {"format": "patchset-device-run/1", "date": date, "backend": backend, "host": host, "gpu": "",
               "compiler": host.get("compiler", ""), "pin": pin,
               "patches": [{"name": n, "sha256": s} for n, s in shas.items()],
               "steps": [{"step": "verify", "command": command, "exit": None, "seconds": "-"}]}
        out.add(f"{backend}/run-verify.json", json.dumps(run, indent=1) + "\n", command, date, machine, pin_text, shas)
        for stem, data in found.items():
            name = f"{stem}.patch"
            try:
                ev = evidence.from_dict(data)
            except (TypeError, KeyError, ValueError):
                skipped.append(f"{name} on {backend}: evidence of an older format")
                continue
            page = (f"<!-- written by `{UPDATE}` from the evidence of `{command}` -->\n"
                    + evidence.markdown(replace(ev)))
            out.add(f"{backend}/{stem}.md", page, command, data.get("created", date), machine, pin_text,
                    {name: shas[name]})
    return skipped


def _keep_proofs(out: _Writer, rel: str, body: str, command: str, now: SeriesNow) -> tuple[str, str, list[str]]:
    """A device run's verify.json (made on the current bytes) with the proofs of the patches it did
    not verify that the file had before (written earlier in this update, or committed), where those
    still hold for the current series."""
    pending = out.files.get(rel)
    path = out.root / rel
    if pending is not None:
        prior_text, prior = pending
    elif rel in (entries := load_manifest(out.root)) and path.exists():
        prior_text, prior = path.read_text(encoding="utf-8"), entries[rel]
    else:
        return body, command, []
    new = json.loads(body)
    kept = {stem: ev for stem, ev in json.loads(prior_text).get("patches", {}).items()
            if stem not in new.get("patches", {}) and _proof_holds(prior, f"{stem}.patch", now)}
    if not kept:
        return body, command, []
    merged = {**new, "patches": dict(sorted({**kept, **new.get("patches", {})}.items()))}
    return (json.dumps(merged, indent=1) + "\n", f"{prior.command}; then {command}",
            [f"{stem}.patch" for stem in kept])


def _proof_holds(prior: Entry, name: str, now: SeriesNow) -> bool:
    """A committed proof of patch `name` holds now when the patch and every patch before it (its
    trees are made of those alone) has the bytes it was proven with, or, for an earlier patch, bytes
    with the same `input_digest`."""
    for q in now.sha:
        if prior.patches.get(q) != now.sha[q] and (
                q == name or q not in prior.inputs or prior.inputs[q] != now.digest(q, prior.programs)):
            return False
        if q == name:
            return True
    return False


def verify_command(backend: str, patches: list[tuple[int, str]], with_hunks: set[str]) -> str:
    """The verify commands that reproduce evidence of (number, stem) patches: `--hunks` only for
    those whose hunks were checked (one command claiming --hunks for all would not be true)."""
    groups = [(flag, [str(n) for n, stem in patches if (stem in with_hunks) == hunks])
              for hunks, flag in ((True, " --hunks"), (False, ""))]
    return "; ".join(f"patchset verify --backend {backend}{flag} {' '.join(nums)}" for flag, nums in groups if nums)


def _outputs(run: dict) -> dict[str, str]:
    """File name -> the step command that wrote it, for one offline run record."""
    made: dict[str, str] = {}
    for s in run.get("steps", []):
        cmd = str(s.get("command", ""))
        words = shlex.split(cmd) if cmd else []
        for i, w in enumerate(words[:-1]):
            if w == "--json":
                made[Path(words[i + 1]).name] = cmd
        for f in _STEP_FILES.get(str(s.get("step", "")), ()):
            made[f] = cmd
    return made


_VERIFY_VALUED = {"--backend", "--cuda-arch", "--jobs", "-j", "--lanes", "--timeout", "--confirm"}
_VERIFY_FLAGS = {"--hunks", "--no-reuse"}


def verified_patches(command: str, series: Series) -> set[str] | None:
    """The evidence names of the patches a recorded `patchset verify ...` command ran on; None for every patch
    (no patch named) or for a command of another shape, whose records are all taken as before. A name of no
    patch: a command verify refused, whose records are all taken as before too."""
    words = shlex.split(command)
    if words[:2] != ["patchset", "verify"]:
        return None
    named, rest = [], iter(words[2:])
    for w in rest:
        if w in _VERIFY_VALUED:
            next(rest, None)
        elif w.startswith("-") and w not in _VERIFY_FLAGS:
            return None
        elif not w.startswith("-"):
            named.append(w)
    found = named_stems(series, named)
    return set(found.values()) if named and len(found) == len(set(named)) else None


def named_stems(series: Series, names: list[str] | tuple[str, ...]) -> dict[str, str]:
    """Each of `names` that names a patch as verify takes it (a number, a file name, a prefix) -> that patch's
    evidence name; a name of no patch is left out."""
    found = {}
    for n in names:
        with contextlib.suppress(SeriesError):
            found[n] = series.by_name(n).name.removesuffix(".patch")
    return found


@dataclass(frozen=True)
class GpuFolder:
    """An output folder of `patchset offline run`, read and checked before anything is written or deleted."""

    folder: Path
    runs: tuple[tuple[Path, dict], ...]
    """Each run record, oldest first."""
    files: dict[str, object]
    """The JSON value of every JSON file a step of a run wrote (verify.json checked: `check_verify`)."""


def read_gpu(folder: Path, now: SeriesNow, trees: dict[str, str] | None = None, pin_commit: str = "") -> GpuFolder:
    """Read the outputs of `patchset offline run` in `folder`: every run record and JSON file parsed, and its
    verify.json checked against the series now (`check_verify`); InputError names the first file
    that is not what the run says."""
    runs = sorted(folder.glob("run-*.json"))
    if not runs:
        raise InputError(f"{folder}: no run-*.json: not an output folder of `patchset offline run`")
    loaded = []
    for rpath in runs:
        run = load_json(rpath)
        if not isinstance(run, dict) or run.get("format") != "patchset-device-run/1":
            got = run.get("format") if isinstance(run, dict) else type(run).__name__
            raise InputError(f"{rpath}: format {got!r}, expected patchset-device-run/1")
        loaded.append((rpath, run))
    loaded.sort(key=lambda x: str(x[1].get("date", "")))
    files: dict[str, object] = {}
    for _rpath, run in loaded:
        for name in _outputs(run):
            if name.endswith(".json") and (folder / name).exists() and name not in files:
                files[name] = load_json(folder / name)
        if "verify.json" in files and run.get("backend") and "verify.json" in _outputs(run):
            check_verify(folder / "verify.json", files["verify.json"], str(run["backend"]), now, trees or {},
                         pin_commit)
    return GpuFolder(folder, tuple(loaded), files)


def check_verify(path: Path, data: object, backend: str, now: SeriesNow, trees: dict[str, str],
                 pin_commit: str) -> None:
    """A device run's verify.json holds only records `patchset verify` makes, each consistent with
    itself and with the series now (builder.prove.evidence_rules); else InputError, one line naming
    the file and the patch."""
    if not isinstance(data, dict) or data.get("format") != "patchset-verify-evidence/1" \
            or not isinstance(data.get("patches"), dict):
        raise InputError(f"{path}: not verify's evidence (format patchset-verify-evidence/1 with its patches)")
    if data.get("backend") != backend:
        raise InputError(f"{path}: evidence of backend {data.get('backend')!r}, made by a {backend} run")
    by_stem = {p.name.removesuffix(".patch"): p for p in now.series.patches}
    for stem, record in data["patches"].items():
        patch = by_stem.get(stem)
        if patch is None:
            raise InputError(f"{path}: {stem}.patch: refused: not a patch of the series now")
        expected = rules.Expected(
            patch, backend, now.sha[patch.name],
            {m: sha256_file(patch.path.parent / m) if (patch.path.parent / m).is_file() else ""
             for m in patch.meta.mutation},
            trees.get(patch.name, ""), pin_commit)
        found = rules.problems(record, expected)
        if found:
            more = f" (and {len(found) - 1} more)" if len(found) > 1 else ""
            raise InputError(f"{path}: {patch.name}: refused: {found[0]}{more}")


def _from_gpu(gpu: GpuFolder, out: _Writer, now: SeriesNow) -> list[str]:
    """The outputs of `patchset offline run` (read_gpu): the run records and the files their steps wrote.
    A run made on the series' current bytes records each patch's `input_digest`; its verify.json
    keeps the committed proofs of other patches that still hold."""
    skipped: list[str] = []
    folder = gpu.folder
    claimed: set[str] = set()
    programs = series_programs(now.series)
    for rpath, run in gpu.runs:
        backend = str(run.get("backend", "unknown"))
        shas = {p["name"]: p["sha256"] for p in run.get("patches", [])}
        machine = _machine(run.get("host", {}), run.get("gpu", "") if backend != "cpu" else "")
        # a run records its own command (`invocation`); an older record of tools/gpu/run.sh has only its steps
        invocation = str(run.get("invocation") or f"tools/gpu/run.sh --backend {backend} (steps: " + ", ".join(
            str(s.get("step")) for s in run.get("steps", [])) + ")")
        common = (str(run.get("date", "")), machine, _pin_text(run.get("pin", {})), shas)
        inputs = now.digests(programs) if shas == now.sha else {}
        outputs = _outputs(run)
        proven = []
        files = dict(gpu.files)
        verify_json = files.get("verify.json")
        if "verify.json" in outputs and isinstance(verify_json, dict):
            ran = verified_patches(outputs["verify.json"], now.series)
            if ran is not None:
                # a record of another patch is an earlier run's, left on a machine kept between runs: not this command's
                verify_json = files["verify.json"] = {**verify_json, "patches": {
                    k: v for k, v in verify_json.get("patches", {}).items() if k in ran}}
            proven = [f"{stem}.patch" for stem in verify_json.get("patches", {})]
        text = json.dumps(_clean_json(run), indent=1) + "\n"
        out.add(f"{backend}/{rpath.name}", text, invocation, *common, inputs, programs, proven)
        claimed.add(rpath.name)
        for name, cmd in outputs.items():
            src = folder / name
            if not src.exists():
                continue
            if name in files:
                body = json.dumps(_clean_json(files[name]), indent=1) + "\n"
            else:
                body = clean.relative(src.read_text(encoding="utf-8", errors="replace"))
            rel = f"{backend}/{name}"
            made_by, kept = cmd, list[str]()
            if name == "verify.json" and inputs:
                body, made_by, kept = _keep_proofs(out, rel, body, cmd, now)
            out.add(rel, body, made_by, *common, inputs, programs, proven + kept if name == "verify.json" else [])
            claimed.add(name)
    for f in sorted(folder.iterdir()):
        if f.is_file() and f.name not in claimed:
            skipped.append(f"{f.name}: no run record names it" + (" (logs are not committed)" if "log" in f.name
                                                                     else ""))
    return skipped


def _drop(now: SeriesNow, docs_root: Path, stale: bool) -> list[str]:
    """Forget the manifest entries of files deleted by hand; with `stale`, also delete the files
    that cover a patch whose bytes changed (or that left the series)."""
    entries = load_manifest(docs_root)
    dropped = []
    for rel, entry in sorted(entries.items()):
        path = docs_root / rel
        if path.exists() and not (stale and entry.stale_for(now)):
            continue
        path.unlink(missing_ok=True)
        del entries[rel]
        dropped.append(rel)
    if dropped:
        _save_manifest(docs_root, entries)
    return dropped


def update(series: Series, root: Path, state_evidence: Path, from_dirs: tuple[Path, ...] = (),
           trees: dict[str, str] | None = None, drop_stale: bool = False, pin_commit: str = "") -> UpdateResult:
    """Copy the current series' evidence into docs/evidence/ (`root`) and record it; regenerate the
    doc blocks that are made from it. `trees`: the after tree of each patch now (after_trees);
    `drop_stale`: first delete the committed files that cover other bytes of a patch; `pin_commit`:
    the pin now, which a device run's proofs must have been made on. Every `from_dirs` folder is read
    and checked first: a refused file leaves docs/evidence/ as it was."""
    docs_root = root / "docs" / "evidence"
    now = SeriesNow(series)
    gpus = [read_gpu(folder, now, trees, pin_commit) for folder in from_dirs]
    dropped = _drop(now, docs_root, drop_stale) if docs_root.is_dir() else []
    out = _Writer(docs_root)
    skipped: list[str] = []
    for gpu in gpus:
        skipped += _from_gpu(gpu, out, now)
    # then verify's own evidence, newer than a device run's for the patches it covers
    if state_evidence.is_dir():
        skipped += _local(series, state_evidence, out, docs_root, trees or {}, now)
    entries = load_manifest(docs_root)
    for rel, (text, entry) in out.files.items():
        atomic_write_text(docs_root / rel, text)
        entries[rel] = entry
    if out.files or entries:
        _save_manifest(docs_root, entries)
    docs = root / "docs"
    backends_doc.write(series, docs_root, docs / "backends.md")
    write_counts(series, docs_root, root / PATCHES_DOC)
    return UpdateResult(tuple(sorted(out.files)), tuple(skipped), tuple(dropped))


def write_counts(series: Series, docs_root: Path, target: Path) -> bool:
    """Regenerate the counts block of docs/patches.md where the file has its markers."""
    if not target.exists():
        return False
    text = target.read_text(encoding="utf-8")
    start, end = text.find(COUNTS_BEGIN), text.find(COUNTS_END)
    if start < 0 or end < start:
        return False
    new = text[:start] + counts_block(series, docs_root) + text[end + len(COUNTS_END) + 1:]
    if new == text:
        return False
    atomic_write_text(target, new)
    return True

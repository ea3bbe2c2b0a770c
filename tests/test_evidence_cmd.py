"""`patchset evidence update` and `check` on real evidence: a tiny llama.cpp-shaped library whose one
patch `patchset verify` proved on the CPU (tests/test_export_evidence.py), and a tools/gpu output
folder as run.sh writes it."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
from helpers import run_patchset
from test_export_evidence import verified  # noqa: F401  (the fixture: a project proven by verify)

from builder.deliver import clean, committed, committed_update
from builder.errors import InputError
from builder.project import load_project
from builder.series.load import load_series
from builder.upstream.pin import load_pin

PATCH = "0001-calc-add-adds.patch"
STEM = PATCH.removesuffix(".patch")


@pytest.fixture
def proj(verified: object, tmp_path: Path) -> Path:  # noqa: F811
    """A copy of the proven project: its series, pin and verify's evidence."""
    src = verified.root  # type: ignore[attr-defined]
    root = tmp_path / "proj"
    for d in ("patches", "upstream"):
        shutil.copytree(src / d, root / d)
    shutil.copytree(verified.evidence_dir, root / ".patchset" / "evidence")  # type: ignore[attr-defined]
    (root / "docs").mkdir()
    (root / "docs" / "patches.md").write_text(f"# Patches\n\nHand text.\n\n{committed.COUNTS_BEGIN}\n"
                                              f"{committed.COUNTS_END}\n\nMore hand text.\n")
    return root


def evidence(root: Path, *args: str) -> tuple[int, list[str]]:
    r = run_patchset("--project", str(root), "evidence", *args, env=dict(os.environ))
    return r.returncode, (r.stdout + r.stderr).splitlines()


def record(root: Path, backend: str = "cpu") -> dict:
    """verify's own evidence record of the patch (a proof on the CPU), as a device's verify.json holds
    it; for another backend the record verify makes there: the patch declares only the CPU for its
    proof, so on `backend` only the after tree is run (`needs cpu`)."""
    data = json.loads((root / ".patchset" / "evidence" / STEM / "cpu.json").read_text())
    if backend != "cpu":
        data = {**data, "backend": backend, "outcome": "needs cpu", "depends": {},
                "reason": "the failing-before half can only run on cpu; with the fix its tests pass",
                "steps": [s for s in data["steps"] if s["tree"] == "after"]}
    return data


def device_verify_output(folder: Path, records: dict[str, object], *, backend: str = "cpu",
                         date: str = "2026-12-01T10:00:01Z", patches: list[dict] | None = None) -> Path:
    """What tools/gpu/run.sh leaves after its verify step: the run record and verify.json."""
    folder.mkdir()
    run = {"format": "patchset-device-run/1", "date": date, "backend": backend,
           "invocation": f"tools/gpu/run.sh --backend {backend} main", "host": {"platform": "Linux-gpu", "cpus": 16},
           "gpu": "", "pin": {"name": "llama.cpp", "tag": "b1", "commit": "0c1e570"}, "patches": patches or [],
           "steps": [{"step": "verify", "exit": 0, "seconds": 100,
                      "command": f"patchset verify --backend {backend} {date[-3:-1]}"}]}
    (folder / "run-main.json").write_text(json.dumps(run))
    (folder / "verify.json").write_text(json.dumps({"format": "patchset-verify-evidence/1", "backend": backend,
                                                    "patches": records}))
    return folder


def gpu_output(folder: Path, patch_sha: str) -> Path:
    """What tools/gpu/run.sh leaves in $OUT after `main` on a machine whose checkout is /root/work."""
    folder.mkdir()
    run = {"format": "patchset-device-run/1", "date": "2026-11-30T06:30:34Z", "backend": "cuda",
           "invocation": "tools/gpu/run.sh --backend cuda main",
           "host": {"platform": "Linux-gpu", "machine": "x86_64", "python": "3.12.3", "cpus": 16},
           "gpu": "NVIDIA H200, 580.159.04, 143771 MiB", "nvcc": "Build cuda_13.0", "compiler": "c++ 13.3.0",
           "pin": {"name": "llama.cpp", "tag": "b1", "commit": "0c1e570", "tree": "b2da535"},
           "patches": [{"name": PATCH, "sha256": patch_sha}],
           "steps": [{"step": "test", "exit": 0, "seconds": 3,
                      "command": ".patchset/gpu-venv/bin/patchset test --backend cuda --json /root/out/test.json"}]}
    (folder / "run-main.json").write_text(json.dumps(run))
    (folder / "test.json").write_text(json.dumps({"cases": [{"log": "/root/work/.patchset/build/cuda/x.log",
                                                             "failing": []}]}))
    (folder / "log.txt").write_text("== build: /root/work/.patchset/gpu-venv/bin/patchset build\n")
    return folder


def test_update_commits_the_current_evidence_with_what_made_it_and_check_passes(proj: Path, tmp_path: Path) -> None:
    sha = committed.sha256_file(proj / "patches" / PATCH)
    code, out = evidence(proj, "update", "--from", str(gpu_output(tmp_path / "out", sha)))
    assert code == 0, out
    docs = proj / "docs" / "evidence"
    written = sorted(p.relative_to(docs).as_posix() for p in docs.rglob("*") if p.is_file())
    assert written == ["MANIFEST.json", f"cpu/{STEM}.md", "cpu/run-verify.json", "cpu/verify.json",
                       "cuda/run-main.json", "cuda/test.json"]
    assert "left out: log.txt: no run record names it (logs are not committed)" in out
    manifest = json.loads((docs / "MANIFEST.json").read_text())["files"]
    assert manifest["cpu/verify.json"]["command"] == "patchset verify --backend cpu 1"
    assert manifest["cpu/verify.json"]["patches"] == {PATCH: sha}
    assert manifest["cuda/test.json"]["command"] == "patchset test --backend cuda --json test.json"
    assert manifest["cuda/test.json"]["machine"].startswith("NVIDIA H200; Linux-gpu")
    assert manifest["cuda/run-main.json"]["command"] == "tools/gpu/run.sh --backend cuda main"
    assert all(e["date"] and e["pin"] and e["sha256"] for e in manifest.values())
    # paths relative to the tree, nothing of this machine or the device's
    assert clean.check_tree(docs) == []
    assert json.loads((docs / "cuda" / "test.json").read_text())["cases"][0]["log"] == "build/x.log"
    page = (proj / "docs" / "patches.md").read_text()
    assert page.startswith("# Patches\n\nHand text.\n\n") and page.endswith("\n\nMore hand text.\n")
    assert "| 1 | cpu | proven | " in page and "| 0 pass, 1 fail, 0 skip | 1 pass, 0 fail, 0 skip | 1/1 |" in page
    assert evidence(proj, "check") == (0, ["committed evidence: every file recorded, none stale, every cited "
                                           "file present"])


def test_check_names_the_file_and_patch_of_stale_hand_made_and_missing_evidence(proj: Path) -> None:
    assert evidence(proj, "update")[0] == 0
    mail = proj / "patches" / PATCH
    mail.write_bytes(mail.read_bytes().replace(b"calc : add adds", b"calc : add adds up"))
    (proj / "docs" / "evidence" / "cpu" / "transcript.txt").write_text("pasted by hand\n")
    verify_json = proj / "docs" / "evidence" / "cpu" / "verify.json"
    verify_json.write_text(verify_json.read_text().replace('"proven"', '"proven!"'))
    (proj / "docs" / "notes.md").write_text("See docs/evidence/cpu/gone.md.\n")
    code, out = evidence(proj, "check")
    assert code == 1
    problems = out[:-1]
    assert out[-1] == f"{len(problems)} problem(s) in the committed evidence"
    assert f"docs/evidence/cpu/{STEM}.md: {PATCH}: stale: the patch's bytes changed since" in "\n".join(problems)
    assert any(p.startswith(f"docs/evidence/cpu/verify.json: {PATCH}: stale: ") and
               p.endswith("run `patchset verify --backend cpu 1` again") for p in problems), problems
    assert "docs/evidence/cpu/transcript.txt: hand-made: no command recorded for it (not written by " \
           "`patchset evidence update`)" in problems
    assert "docs/evidence/cpu/verify.json: edited since `patchset evidence update` wrote it (made by " \
           "`patchset verify --backend cpu 1`)" in problems
    assert "docs/notes.md:1: cites docs/evidence/cpu/gone.md, which is missing" in problems
    assert "docs/patches.md: its counts table is not what the evidence says (run `patchset evidence " \
           "update`)" in problems


def test_update_leaves_out_evidence_of_another_tree_and_takes_a_reworded_patch(proj: Path) -> None:
    mail = proj / "patches" / PATCH
    original = mail.read_bytes()
    # the message alone changed: the trees are the same, the proof holds for the new bytes
    mail.write_bytes(original.replace(b"calc : add adds", b"calc : add adds up"))
    assert evidence(proj, "update")[0] == 0
    entry = json.loads((proj / "docs" / "evidence" / "MANIFEST.json").read_text())["files"]["cpu/verify.json"]
    assert entry["patches"] == {PATCH: committed.sha256_file(mail)}
    shutil.rmtree(proj / "docs" / "evidence")
    # the test changed: another tree, the evidence is not for it
    mail.write_bytes(original.replace(b'printf("Backend 1/1: CPU\\n");', b'printf("Backend 1/1: CPU \\n");'))
    assert mail.read_bytes() != original
    code, out = evidence(proj, "update")
    assert code == 0
    assert f"left out: {PATCH} on cpu: made for other bytes of the patch" in out
    assert not (proj / "docs" / "evidence" / "cpu").exists()


def test_an_absolute_path_in_committed_evidence_is_a_problem(proj: Path) -> None:
    assert evidence(proj, "update")[0] == 0
    page = proj / "docs" / "evidence" / "cpu" / f"{STEM}.md"
    text = page.read_text() + "\nbuilt in /home/someone/llama.cpp/.patchset/build/cpu\n"
    page.write_text(text)
    code, out = evidence(proj, "check")
    assert code == 1
    n = len(text.splitlines())
    assert f"docs/evidence/cpu/{STEM}.md:{n}: a path into the state folder .patchset/" in out
    assert f"docs/evidence/cpu/{STEM}.md:{n}: an absolute local path: /home/someone/llama.cpp/.patchset/build/cpu" \
        in out


def test_a_device_verdict_on_a_patch_not_in_the_series_is_refused(proj: Path, tmp_path: Path) -> None:
    """A device run's verify.json is taken only whole: a verdict on a patch the series does not have
    refuses it all, nothing written; a valid one is committed (this machine's own proof of the same
    patch, newer, takes its place in cpu/verify.json)."""
    other = "0002-other-fix"
    refused = device_verify_output(tmp_path / "other", {STEM: record(proj), other: {**record(proj),
                                                                                   "patch": f"{other}.patch"}})
    code, out = evidence(proj, "update", "--from", str(refused))
    assert code == 2 and f"{refused / 'verify.json'}: {other}.patch: refused: not a patch of the series now" \
        in "\n".join(out), out
    assert not (proj / "docs" / "evidence").exists()

    sha = committed.sha256_file(proj / "patches" / PATCH)
    out_dir = device_verify_output(tmp_path / "cpu-out", {STEM: record(proj)}, patches=[{"name": PATCH, "sha256": sha}])
    assert evidence(proj, "update", "--from", str(out_dir))[0] == 0
    entry = json.loads((proj / "docs" / "evidence" / "MANIFEST.json").read_text())["files"]["cpu/verify.json"]
    assert entry["patches"] == {PATCH: sha}
    assert entry["command"] == "patchset verify --backend cpu 1"
    assert (proj / "docs" / "evidence" / "cpu" / "run-main.json").exists()
    assert evidence(proj, "check")[0] == 0


def test_drop_stale_removes_what_covers_other_bytes_and_check_passes_again(proj: Path) -> None:
    assert evidence(proj, "update")[0] == 0
    mail = proj / "patches" / PATCH
    mail.write_bytes(mail.read_bytes().replace(b'printf("Backend 1/1: CPU\\n");', b'printf("Backend 1/1: CPU \\n");'))
    assert evidence(proj, "check")[0] == 1
    code, out = evidence(proj, "update", "--drop-stale")
    assert code == 0
    assert {ln for ln in out if ln.startswith("removed ")} == {
        f"removed docs/evidence/cpu/{STEM}.md", "removed docs/evidence/cpu/run-verify.json",
        "removed docs/evidence/cpu/verify.json"}
    assert json.loads((proj / "docs" / "evidence" / "MANIFEST.json").read_text())["files"] == {}
    assert evidence(proj, "check")[0] == 0
    assert "| 1 | cpu |" not in (proj / "docs" / "patches.md").read_text()


def test_the_recorded_verify_command_claims_hunks_only_for_the_patches_whose_hunks_were_checked() -> None:
    # a run of `verify 2 3 --hunks` then `verify` of all was once recorded as `verify --hunks 2 3 4 5`
    patches = [(2, "b"), (3, "c"), (4, "d"), (5, "e")]
    assert committed_update.verify_command("cpu", patches, {"b", "c"}) == \
        "patchset verify --backend cpu --hunks 2 3; patchset verify --backend cpu 4 5"
    assert committed_update.verify_command("cpu", patches[2:], set()) == "patchset verify --backend cpu 4 5"
    assert committed_update.verify_command("cuda", patches[:1], {"b"}) == "patchset verify --backend cuda --hunks 2"


def _add_hunk(mail: Path, path: str, line: str) -> None:
    """Append a new file `path` of one line to the patch's diff (before the mail's signature)."""
    text = mail.read_text()
    extra = (f"diff --git a/{path} b/{path}\nnew file mode 100644\nindex 0000000..1111111\n--- /dev/null\n"
             f"+++ b/{path}\n@@ -0,0 +1 @@\n+{line}\n")
    cut = text.rfind("\n-- \n")
    mail.write_text(text[:cut + 1] + extra + text[cut + 1:] if cut >= 0 else text + extra)


def _stale_files(root: Path) -> set[str]:
    code, out = evidence(root, "check")
    return {f for f in (ln.split(":", 1)[0] for ln in out[:-1]) if f.startswith("docs/evidence/")} if code else set()


def test_a_device_runs_results_stay_true_until_a_patch_changes_what_its_programs_compile(
        proj: Path, tmp_path: Path) -> None:
    """A run made on the series' bytes records each patch's input digest over the programs it built;
    a change outside them (a message, another program's test) leaves its test run true, a change
    to what they compile does not. The local proof (`proves` its patch) is stale on any change."""
    mail = proj / "patches" / PATCH
    assert evidence(proj, "update", "--from", str(gpu_output(tmp_path / "out", committed.sha256_file(mail))))[0] == 0
    entry = json.loads((proj / "docs" / "evidence" / "MANIFEST.json").read_text())["files"]["cuda/test.json"]
    assert entry["programs"] == ["test-add", "test-backend-ops", "test-opt"] and set(entry["inputs"]) == {PATCH}
    original = mail.read_bytes()

    mail.write_bytes(original.replace(b"calc : add adds", b"calc : add adds up"))
    _add_hunk(mail, "tests/test-elsewhere.cpp", "int main() { return 0; }")
    assert _stale_files(proj) == {f"docs/evidence/cpu/{STEM}.md", "docs/evidence/cpu/run-verify.json",
                                  "docs/evidence/cpu/verify.json"}

    for changed in (b"return a + b;", b'printf("Backend 1/1: CPU\\n");'):  # the fix; test-add's source
        mail.write_bytes(original.replace(changed, changed.replace(b";", b" ;")))
        assert mail.read_bytes() != original
        assert {"docs/evidence/cuda/test.json", "docs/evidence/cuda/run-main.json"} <= _stale_files(proj)


def test_a_device_verify_keeps_the_proofs_it_did_not_redo_only_while_they_hold(proj: Path, tmp_path: Path) -> None:
    """A second device run's verify.json is merged with the committed proofs of the patches it did
    not verify; a proof of bytes the patch no longer has is not carried over."""
    mail = proj / "patches" / PATCH
    sha = committed.sha256_file(mail)

    def device_verify(folder: Path, proofs: dict[str, object], patch_sha: str, date: str) -> Path:
        out = gpu_output(folder, patch_sha)
        run = json.loads((out / "run-main.json").read_text())
        run["date"] = date
        run["steps"].append({"step": "verify", "exit": 0, "seconds": 9,
                             "command": f"patchset verify --backend cuda {date[-3:-1]}"})
        (out / "run-main.json").write_text(json.dumps(run))
        (out / "verify.json").write_text(json.dumps({"format": "patchset-verify-evidence/1", "backend": "cuda",
                                                     "patches": proofs}))
        return out

    assert evidence(proj, "update", "--from", str(device_verify(tmp_path / "a", {STEM: record(proj, "cuda")},
                                                                 sha, "2026-12-01T10:00:01Z")))[0] == 0
    assert evidence(proj, "update", "--from",
                    str(device_verify(tmp_path / "b", {}, sha, "2026-12-01T10:00:02Z")))[0] == 0
    docs = proj / "docs" / "evidence"
    entry = json.loads((docs / "MANIFEST.json").read_text())["files"]["cuda/verify.json"]
    kept = json.loads((docs / "cuda" / "verify.json").read_text())["patches"]
    assert list(kept) == [STEM] and kept[STEM]["outcome"] == "needs cpu"
    assert entry["proves"] == [PATCH]
    assert entry["command"] == "patchset verify --backend cuda 01; then patchset verify --backend cuda 02"

    mail.write_bytes(mail.read_bytes().replace(b"calc : add adds", b"calc : add adds up"))
    assert "docs/evidence/cuda/verify.json" in _stale_files(proj)  # it proves the patch: any change
    new_sha = committed.sha256_file(mail)
    assert evidence(proj, "update", "--from", str(device_verify(tmp_path / "c", {}, new_sha,
                                                                 "2026-12-01T10:00:03Z")))[0] == 0
    assert json.loads((docs / "cuda" / "verify.json").read_text())["patches"] == {}


def test_bad_json_given_by_the_user_is_bad_input_naming_the_file_and_line(proj: Path, tmp_path: Path) -> None:
    """A run folder's or the committed evidence's JSON that does not parse is the user's input: exit 2
    with `FILE:LINE:` (json's own line number) in one line, never exit 70 ("a bug in patchset")."""
    mail = proj / "patches" / PATCH
    out = gpu_output(tmp_path / "out", committed.sha256_file(mail))
    (out / "test.json").write_text('{\n "cases": [\n  {"log": "x.log",}\n ]\n}\n')
    code, lines = evidence(proj, "update", "--from", str(out))
    assert code == 2, lines
    errors = [ln for ln in lines if "error" in ln]
    assert len(errors) == 1 and f"{out / 'test.json'}:3: not valid JSON: " in errors[0], lines
    assert not (proj / "docs" / "evidence").exists()

    assert evidence(proj, "update")[0] == 0
    manifest = proj / "docs" / "evidence" / "MANIFEST.json"
    text = manifest.read_text()
    line = text[:text.index('"files": {')].count("\n") + 1
    manifest.write_text(text.replace('"files": {', '"files": {{', 1))
    code, lines = evidence(proj, "check")
    assert code == 2 and f"{manifest}:{line}: not valid JSON: " in "\n".join(lines), lines


def _forge(how: str, data: dict, root: Path) -> dict:
    """verify's proof of the patch, changed by hand as `how` says."""
    steps = {s["tree"]: s for s in data["steps"]}
    if how == "bare outcome":
        return {"outcome": "proven"}
    if how == "steps removed":
        return {**data, "steps": []}
    if how == "mutation step removed":
        return {**data, "steps": [s for s in data["steps"] if s["tree"] != "mutation"]}
    if how == "after failed but outcome proven":
        t = {**steps["after"]["tests"][0], "verdict": "failed", "returncode": 1, "passed": 0, "failed": 1}
        return {**data, "steps": [{**s, "tests": [t], "verdict": "fails"} if s["tree"] == "after" else s
                                  for s in data["steps"]]}
    if how == "after's counts edited to pass":
        t = {**steps["before"]["tests"][0]}
        return {**data, "steps": [{**s, "tests": [t]} if s["tree"] == "after" else s for s in data["steps"]]}
    if how == "before passed":
        t = {**steps["after"]["tests"][0]}
        return {**data, "steps": [{**s, "tests": [t], "verdict": "passes"} if s["tree"] == "before" else s
                                  for s in data["steps"]]}
    if how == "log references removed":
        return {**data, "steps": [{**s, "tests": [{**t, "log": ""} for t in s["tests"]]} for s in data["steps"]]}
    if how == "digest of another patch":
        # another patch's proof: its bytes, and its trees (the after tree of the mutation here)
        other = committed.sha256_file(root / "patches" / "mutations" / "add-multiplies.patch")
        return {**data, "depends": {**data["depends"], "patch_sha256": other},
                "steps": [{**s, "tree_id": steps["mutation"]["tree_id"]} if s["tree"] == "after" else s
                          for s in data["steps"]]}
    if how == "record of another patch":
        return {**data, "patch": "0009-some-other-fix.patch"}
    raise AssertionError(how)


FORGERIES = [
    ("bare outcome",
     "not an evidence record of `patchset verify`: no patch, subject, backend, reason, pin, steps, key"),
    ("steps removed", "proven without exactly one before and one after step"),
    ("mutation step removed", "proven without a run of the mutation mutations/add-multiplies.patch"),
    ("after failed but outcome proven", "proven, but the after tree (with the fix) fails"),
    ("after's counts edited to pass", "the after tree: verdict 'passes' but its test runs say 'fails'"),
    ("before passed", "proven, but the before tree passes where Patchset-Before is test-fails"),
    ("log references removed", "the before tree: a test run with no log"),
    ("digest of another patch", "proven for other bytes of the patch (sha256 "),
    ("record of another patch", f"the record is of 0009-some-other-fix.patch, filed under {PATCH}"),
]


def test_a_forged_verify_json_is_refused_in_one_line_and_nothing_is_written(proj: Path, tmp_path: Path) -> None:
    """`--from` takes a verdict only with the runs that make it, made on the series now: a proof
    edited by hand is refused, exit 2, one line naming the file and the patch; docs/evidence/ (and
    what --drop-stale would delete) is left as it was."""
    sha = committed.sha256_file(proj / "patches" / PATCH)
    assert evidence(proj, "update")[0] == 0
    docs = proj / "docs" / "evidence"
    before = {p: p.read_bytes() for p in docs.rglob("*") if p.is_file()}
    # stale for a moment: --drop-stale would delete the committed proof
    (docs / "MANIFEST.json").write_text((docs / "MANIFEST.json").read_text().replace(sha, "ab" * 32))
    stale = (docs / "MANIFEST.json").read_bytes()
    assert _stale_files(proj)
    project = load_project(root=proj)
    series, trees = load_series(project.patches_dir), committed_update.after_trees(project)
    for n, (how, why) in enumerate(FORGERIES):
        forged = _forge(how, record(proj), proj)
        folder = device_verify_output(tmp_path / how.replace(" ", "-").replace("'", ""), {STEM: forged},
                                      patches=[{"name": PATCH, "sha256": sha}])
        if n == 0:  # the command: exit 2, one line
            code, out = evidence(proj, "update", "--drop-stale", "--from", str(folder))
            assert code == 2, (how, out)
            assert len(out) == 1, out
            said = out[0].removeprefix("error: ")
        else:  # the same through the library, for each way of forging
            with pytest.raises(InputError) as e:
                committed_update.update(series, proj, project.evidence_dir, (folder,), trees, drop_stale=True,
                                        pin_commit=load_pin(project.pin_file).commit)
            said = str(e.value)
        assert said.startswith(f"{folder / 'verify.json'}: {PATCH}: refused: {why}"), (how, said)
        assert {p: p.read_bytes() for p in docs.rglob("*") if p.is_file()} == {**before, docs / "MANIFEST.json": stale}
    # the record as verify wrote it goes through
    (docs / "MANIFEST.json").write_bytes(before[docs / "MANIFEST.json"])
    real = device_verify_output(tmp_path / "real", {STEM: record(proj)}, patches=[{"name": PATCH, "sha256": sha}])
    assert evidence(proj, "update", "--from", str(real))[0] == 0


def test_check_finds_a_committed_verdict_that_verify_would_not_have_made(proj: Path) -> None:
    """A forged record committed before --from refused it (recorded in the manifest with its sha256,
    so not "edited since") is still found: check applies the same rules, less the bytes of the series."""
    assert evidence(proj, "update")[0] == 0
    docs = proj / "docs" / "evidence"
    path = docs / "cpu" / "verify.json"
    data = json.loads(path.read_text())
    data["patches"][STEM] = _forge("after failed but outcome proven", data["patches"][STEM], proj)
    path.write_text(json.dumps(data, indent=1) + "\n")
    manifest = json.loads((docs / "MANIFEST.json").read_text())
    manifest["files"]["cpu/verify.json"]["sha256"] = committed.sha256_file(path)
    (docs / "MANIFEST.json").write_text(json.dumps(manifest, indent=1) + "\n")
    code, out = evidence(proj, "check")
    assert code == 1, out
    assert f"docs/evidence/cpu/verify.json: {PATCH}: not what `patchset verify` makes: proven, but the after " \
           f"tree (with the fix) fails" in out, out

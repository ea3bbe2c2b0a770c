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

from builder.deliver import clean, committed

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


def test_a_device_runs_patches_stay_covered_when_verify_adds_its_own(proj: Path, tmp_path: Path) -> None:
    """verify.json merges a tools/gpu run's evidence with this machine's: the manifest keeps the
    device run's patches (with their bytes then), so a change to one of them is still found."""
    out = tmp_path / "cpu-out"
    out.mkdir()
    other = "0002-other-fix.patch"
    run = {"format": "patchset-device-run/1", "date": "2026-11-30T06:44:53Z", "backend": "cpu",
           "invocation": "tools/gpu/run.sh --backend cpu main", "host": {"platform": "Linux-gpu", "cpus": 16},
           "gpu": "", "pin": {"name": "llama.cpp", "tag": "b1", "commit": "0c1e570"},
           "patches": [{"name": PATCH, "sha256": "ab" * 32}, {"name": other, "sha256": "cd" * 32}],
           "steps": [{"step": "verify", "exit": 0, "seconds": 100, "command": "patchset verify --backend cpu"}]}
    (out / "run-main.json").write_text(json.dumps(run))
    (out / "verify.json").write_text(json.dumps({"format": "patchset-verify-evidence/1", "backend": "cpu",
                                                 "patches": {STEM: {"outcome": "proven"},
                                                             other.removesuffix(".patch"): {"outcome": "proven"}}}))
    assert evidence(proj, "update", "--from", str(out))[0] == 0
    entry = json.loads((proj / "docs" / "evidence" / "MANIFEST.json").read_text())["files"]["cpu/verify.json"]
    assert entry["patches"] == {PATCH: committed.sha256_file(proj / "patches" / PATCH), other: "cd" * 32}
    assert entry["command"] == "patchset verify --backend cpu; then patchset verify --backend cpu 1"
    code, out_lines = evidence(proj, "check")
    assert code == 1
    assert f"docs/evidence/cpu/verify.json: {other}: stale: covers a patch that is no longer in the series" \
        in out_lines


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
    assert committed.verify_command("cpu", patches, {"b", "c"}) == \
        "patchset verify --backend cpu --hunks 2 3; patchset verify --backend cpu 4 5"
    assert committed.verify_command("cpu", patches[2:], set()) == "patchset verify --backend cpu 4 5"
    assert committed.verify_command("cuda", patches[:1], {"b"}) == "patchset verify --backend cuda --hunks 2"


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

    assert evidence(proj, "update", "--from", str(device_verify(tmp_path / "a", {STEM: {"outcome": "proven"}},
                                                                 sha, "2026-12-01T10:00:01Z")))[0] == 0
    assert evidence(proj, "update", "--from",
                    str(device_verify(tmp_path / "b", {}, sha, "2026-12-01T10:00:02Z")))[0] == 0
    docs = proj / "docs" / "evidence"
    entry = json.loads((docs / "MANIFEST.json").read_text())["files"]["cuda/verify.json"]
    assert json.loads((docs / "cuda" / "verify.json").read_text())["patches"] == {STEM: {"outcome": "proven"}}
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

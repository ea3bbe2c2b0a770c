"""The `patchset` command: exit codes, one-line errors, machine-readable status."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest
from helpers import STANDARD_NAMES, Proj, json_document, run_patchset

from builder.cli import main


def _patchset(*args: str) -> subprocess.CompletedProcess[str]:
    """The installed console script when there is one, else the module; never in another cwd."""
    exe = shutil.which("patchset")
    cmd = [exe] if exe else [sys.executable, "-m", "builder.cli"]
    return subprocess.run([*cmd, *args], capture_output=True, text=True, env=os.environ.copy(), check=False,
                          timeout=120)


def test_malformed_pin_is_a_one_line_usage_error(proj: Proj) -> None:
    pin = proj.project.pin_file
    pin.write_text("\n".join(line for line in pin.read_text().splitlines() if not line.startswith("tree =")) + "\n")

    r = _patchset("--project", str(proj.root), "status")

    assert r.returncode == 2, r.stderr
    assert "llama.cpp.toml" in r.stderr
    assert "'tree'" in r.stderr
    assert "Traceback" not in r.stderr + r.stdout
    assert len(r.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize("command", ["fetch", "apply", "status"])
def test_invalid_toml_pin_exit_2(proj: Proj, capsys: pytest.CaptureFixture[str], command: str) -> None:
    proj.project.pin_file.write_text("name = \n")
    assert main(["--project", str(proj.root), command]) == 2
    err = capsys.readouterr().err
    assert "llama.cpp.toml" in err
    assert "not valid TOML" in err
    assert "Traceback" not in err


def test_status_json_lists_patches(proj: Proj) -> None:
    assert main(["--project", str(proj.root), "apply"]) == 0

    r = _patchset("--project", str(proj.root), "status", "--json")

    assert r.returncode == 0, r.stderr
    data = json_document(r.stdout)
    assert data["verified"] is True
    assert data["pin"]["commit"] == proj.upstream.commit
    assert data["pin"]["tree"] == proj.upstream.tree
    assert data["branch"] == "patched"
    assert data["work_tree_clean"] is True
    assert data["operation"] is None
    assert data["extra_commits"] == 0
    assert data["problems"] == []
    assert [p["name"] for p in data["patches"]] == STANDARD_NAMES
    assert [p["index"] for p in data["patches"]] == [1, 2, 3]
    assert all(p["applied"] and not p["dirty"] for p in data["patches"])
    # the deprecated `Patchset-Status: submitted URL` of the fixture, in Patchset-Upstream's words
    assert [(p["upstream"], p["upstream_ref"]) for p in data["patches"]] == [
        ("not-sent", ""), ("sent", "https://github.com/ggml-org/llama.cpp/pull/1"), ("not-sent", "fork-only")]


def test_status_before_apply_and_with_extra_commit(proj: Proj, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--project", str(proj.root), "status", "--json"]) == 0
    data = json_document(capsys.readouterr().out)
    assert data["verified"] is False
    assert [p["applied"] for p in data["patches"]] == [False, False, False]

    assert main(["--project", str(proj.root), "apply"]) == 0
    proj.wgit("commit", "--quiet", "--allow-empty", "-m", "extra")
    capsys.readouterr()
    assert main(["--project", str(proj.root), "status", "--json"]) == 0
    data = json_document(capsys.readouterr().out)
    assert data["extra_commits"] == 1
    assert data["verified"] is True


def test_rebase_without_onto_is_usage_error(proj: Proj, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--project", str(proj.root), "rebase"]) == 2
    assert "--onto" in capsys.readouterr().err


def test_refresh_before_apply_is_refused(proj: Proj, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--project", str(proj.root), "refresh"]) == 2
    assert "patchset apply" in capsys.readouterr().err


def test_a_verb_imports_its_own_command_only(proj: Proj) -> None:
    code = ("import sys\nfrom builder.cli import main\n"
            f"rc = main(['--project', {str(proj.root)!r}, 'check'])\n"
            "print(rc, sorted(m for m in sys.modules if m.endswith('_cmd')))\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                       env={**os.environ, "PATCHSET_CACHE": str(proj.project.cache_dir)})
    assert r.stdout.strip().splitlines()[-1] == "0 ['builder.commands.check_cmd']"


def test_options_before_the_verb_and_unknown_options_after_it(proj: Proj, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--debug", "--project", str(proj.root), "check"]) == 0
    with pytest.raises(SystemExit) as ei:
        main([f"--project={proj.root}", "status", "--no-such-flag"])
    assert ei.value.code == 2
    assert "--no-such-flag" in capsys.readouterr().err


@pytest.mark.parametrize(("name", "value"), [
    ("PATCHSET_GIT_TIMEOUT", "abc"),
    ("PATCHSET_FETCH_TIMEOUT", "-5"),
    ("PATCHSET_LOCK_TIMEOUT", "nan"),
    ("PATCHSET_LOCK_TIMEOUT", ""),
    ("PATCHSET_BUILD_TIMEOUT", "2h"),
])
def test_a_malformed_time_limit_is_a_one_line_usage_error_naming_it(proj: Proj, name: str, value: str) -> None:
    # not the default limit in silence: a typo in a limit would otherwise go unnoticed until it mattered
    r = run_patchset("--project", str(proj.root), "apply", env={name: value})
    assert r.returncode == 2, r.stdout + r.stderr
    assert "Traceback" not in r.stdout + r.stderr
    errors = [line for line in r.stderr.splitlines() if line.strip()]
    assert len(errors) == 1 and errors[0].startswith("error:"), r.stderr
    assert f"{name}={value!r}" in errors[0]
    assert not proj.work.exists()  # refused before anything ran

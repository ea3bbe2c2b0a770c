"""`patchset completion bash|zsh`: the script argcomplete makes from the parser, loaded in a real
bash, completes a command and an option (and leaves out a refused spelling)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import run_patchset


def _complete(script: Path, words: list[str]) -> list[str]:
    """What bash completes for `words` (the last one being typed), with the script loaded."""
    line = " ".join(words)
    prog = f"""
source {script}
COMP_LINE={line!r}; COMP_POINT=${{#COMP_LINE}}; COMP_WORDS=({' '.join(words)}); COMP_CWORD={len(words) - 1}
_python_argcomplete patchset
printf '%s\\n' "${{COMPREPLY[@]}}"
"""
    # the script runs the `patchset` found on PATH: this environment's
    path = os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])
    r = subprocess.run(["bash", "--norc", "--noprofile", "-c", prog], capture_output=True, text=True,
                       env={**os.environ, "PATH": path}, timeout=60, check=False)
    assert r.returncode == 0, r.stderr
    return [w.strip() for w in r.stdout.splitlines() if w.strip()]


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
def test_bash_completes_a_command_and_an_option(tmp_path: Path) -> None:
    r = run_patchset("completion", "bash")
    assert r.returncode == 0, r.stderr
    script = tmp_path / "patchset.bash"
    script.write_text(r.stdout)
    assert _complete(script, ["patchset", "sta"]) == ["status"]
    assert _complete(script, ["patchset", "verify", "--no-r"]) == ["--no-reuse"]
    assert _complete(script, ["patchset", "completion", "z"]) == ["zsh"]
    # a spelling refused with a pointer to its new name is not offered
    assert _complete(script, ["patchset", "verify", "--fo"]) == []


def test_zsh_script_and_an_unknown_shell() -> None:
    r = run_patchset("completion", "zsh")
    assert r.returncode == 0 and "#compdef patchset" in r.stdout
    r = run_patchset("completion", "fish")
    assert r.returncode == 2 and "invalid choice" in r.stderr

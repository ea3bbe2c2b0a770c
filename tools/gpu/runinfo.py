"""Write run-<label>.json for tools/gpu/run.sh: what ran where, from its ledger (stdlib only).

usage: runinfo.py LEDGER OUT BACKEND CARRY_DIR [RUN_SH_ARGUMENTS]
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import shutil
import subprocess
import sys
import time
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent


def _out(cmd: list[str]) -> str:
    if not shutil.which(cmd[0]):
        return ""
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=60, check=False).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


def main(ledger: Path, out: Path, backend: str, carry: Path, invocation: str = "") -> None:
    steps = []
    for line in ledger.read_text().splitlines():
        name, rc, seconds, command = line.split("\t", 3)
        steps.append({"step": name, "exit": None if rc == "skipped" else int(rc), "seconds": int(seconds),
                      "command": command.replace(str(ROOT) + "/", "")})
    pin = tomllib.loads((ROOT / "upstream" / "llama.cpp.toml").read_text())
    series = [ln.strip() for ln in (ROOT / "patches" / "series").read_text().splitlines()
              if ln.strip() and not ln.startswith("#")]
    nvcc = _out(["nvcc", "--version"]).splitlines()
    manifest = carry / "manifest.json"
    info = {
        "format": "patchset-device-run/1",
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "backend": backend,
        "invocation": f"tools/gpu/run.sh {invocation}".strip(),
        "host": {"platform": platform.platform(), "machine": platform.machine(), "python": platform.python_version(),
                 "cpus": len(os.sched_getaffinity(0))},
        "gpu": _out(["nvidia-smi", "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"]),
        "nvcc": nvcc[-1] if nvcc else "",
        "compiler": (_out(["c++", "--version"]).splitlines() or [""])[0],
        "pin": {"name": pin["name"], "tag": pin.get("tag", ""), "commit": pin["commit"], "tree": pin["tree"]},
        "patches": [{"name": n, "sha256": hashlib.sha256((ROOT / "patches" / n).read_bytes()).hexdigest()}
                    for n in series],
        "project_commit": _out(["git", "-C", str(ROOT), "rev-parse", "HEAD"]) or "unknown",
        "carry_manifest_sha256": hashlib.sha256(manifest.read_bytes()).hexdigest() if manifest.exists() else None,
        "steps": steps,
    }
    out.write_text(json.dumps(info, indent=1) + "\n")


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3], Path(sys.argv[4]), " ".join(sys.argv[5:]))

# runs on the bindings' oldest Python (3.8): typing.Dict & co., not dict[...]
# ruff: noqa: UP006, UP035, UP045
"""Which upstream llama.cpp and which patches this build of llama-cpp-python holds.

Written into the wheel as `llama_cpp/patchset.py` by `patchset wheel`, beside the data it reads,
`llama_cpp/patchset.json`. It runs inside the user's Python (3.8 or newer, like the bindings) and
imports nothing of patchset.

    python -m llama_cpp.patchset          # a summary
    python -m llama_cpp.patchset --json   # the whole record

    from llama_cpp.patchset import provenance
    provenance()["series"]["patches"]
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any, Dict, List, Optional

_DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "patchset.json")


def provenance() -> Dict[str, Any]:
    """The build's record: upstream commit and tree, bindings sdist, backend, and every patch."""
    with open(_DATA, encoding="utf-8") as fh:
        return json.load(fh)


def summary(data: Optional[Dict[str, Any]] = None) -> str:
    """The record in a few lines of text."""
    d = data if data is not None else provenance()
    up = d["upstream"]
    lines: List[str] = [
        "llama-cpp-python {} ({} backend)".format(d["version"], d["backend"]),
        "upstream: {} {} commit {} tree {}".format(up["name"], up["tag"], up["commit"], up["tree"]),
        "vendored tree: {} (commit {})".format(d["vendored"]["tree"], d["vendored"]["commit"]),
        "bindings: {} {} sdist sha256 {}".format(
            d["bindings"]["name"], d["bindings"]["version"], d["bindings"]["sdist_sha256"]),
        "series: {} patch(es), hash {}".format(d["series"]["count"], d["series"]["hash"]),
    ]
    if d.get("left_out"):
        lines.append("left out of this build: {}".format(", ".join(d["left_out"])))
    for i, p in enumerate(d["series"]["patches"], 1):
        status = (p["status"] + " " + p["status_ref"]).strip()
        lines.append("  {}. {} [{}]".format(i, p["file"], status))
        lines.append("     {}  sha256 {}".format(p["subject"], p["sha256"]))
    second = d.get("bindings_series")
    if second:
        lines.append("bindings series '{}': {} {} commit {}: {} patch(es), hash {}".format(
            second["name"], second["upstream"]["name"], second["upstream"]["tag"], second["upstream"]["commit"],
            second["count"], second["hash"]))
        for i, p in enumerate(second["patches"], 1):
            status = (p["status"] + " " + p["status_ref"]).strip()
            lines.append("  B{}. {} [{}]".format(i, p["file"], status))
            lines.append("     {}  sha256 {}".format(p["subject"], p["sha256"]))
    for drift in d.get("binding_drift", []):
        lines.append("binding drift: {}: {}".format(drift["function"], drift["problem"]))
    return "\n".join(lines)


def main(argv: Optional[List[str]] = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args == ["--json"]:
        print(json.dumps(provenance(), indent=1))
    elif not args:
        print(summary())
    else:
        print("usage: python -m llama_cpp.patchset [--json]", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The `patchset` that tests/test_guide.py puts first on PATH: patchset itself, with `--json` added
where the guide does not read the command's output, and each document kept.

A call whose stdout is the guide's log (GUIDE_LOG: nothing in the guide's block reads it, no pipe, no
`$(...)`, no redirection) and whose command takes `--json` (GUIDE_JSON_VERBS: derived by the test from
the CLI's parser) runs with `--json` appended; its stdout, the document, is written to the next
numbered file of GUIDE_JSON_DIR with the command line and exit status beside it, while the human
output goes to stderr, into the log. Any other call runs unchanged. The exit status is patchset's.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

WITH_VALUE = ("--project", "--pin", "--series")
"""patchset's options before the command word that take a value."""


def command(args: list[str], verbs: set[str]) -> str | None:
    """The command of `args` that takes --json ("wheel", "evidence check"), or None."""
    rest = iter(args)
    for a in rest:
        if a in WITH_VALUE:
            next(rest, None)
        elif a.startswith("-"):
            if a == "--debug" or a.startswith(tuple(f"{o}=" for o in WITH_VALUE)):
                continue
            return None
        else:
            sub = next(rest, "")
            return f"{a} {sub}" if f"{a} {sub}" in verbs else a if a in verbs else None
    return None


def main() -> int:
    patchset = json.loads(os.environ["GUIDE_PATCHSET_ARGV"])
    args = sys.argv[1:]
    log = os.environ["GUIDE_LOG"]
    verb = command(args, set(json.loads(os.environ["GUIDE_JSON_VERBS"])))
    to_log = os.path.samestat(os.fstat(1), os.stat(log))
    if verb is None or not to_log or "--json" in args or "--help" in args or "-h" in args:
        os.execv(patchset[0], [*patchset, *args])
    out = Path(os.environ["GUIDE_JSON_DIR"])
    out.mkdir(exist_ok=True)
    stem = out / f"{len(list(out.glob('*.json'))) + 1:03d}-{verb.replace(' ', '-')}"
    with open(f"{stem}.json", "wb") as doc:
        code = subprocess.run([*patchset, *args, "--json"], stdout=doc, check=False).returncode
    Path(f"{stem}.call").write_text(json.dumps({"args": args, "exit": code, "cwd": os.getcwd()}) + "\n")
    return code


if __name__ == "__main__":
    sys.exit(main())

"""`patchset init`: a new project started for another fork or pin.

It writes the pin (by the pin writer, from the upstream's own bytes), an empty series, the CI
workflows (CPU, and CUDA and Metal when asked) and the ignore file."""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass
from pathlib import Path

from builder.errors import InputError
from builder.fsutil import atomic_write_text
from builder.progress import ProgressSink
from builder.project import DEFAULT_PIN
from builder.series.refresh import write_series
from builder.upstream.pin import Pin, SdistSource, dump_pin
from builder.upstream.pinwrite import PinRequest, make_pin

_HEAD = """\
# Written by `patchset init`. PATCHSET_SOURCE is where patchset is installed from: it is not on the
# package index, so a git commit of its repository (`git+https://...@COMMIT`) or a wheel's URL.
"""

_ON = """
on:
  push:
  pull_request:
  workflow_dispatch:

permissions:
  contents: read

env:
  PATCHSET_SOURCE: "@SOURCE@"
  PATCHSET_CACHE: ${{ github.workspace }}/.ci-cache/pin
"""

_PIN_CACHE = """\
      - name: pinned upstream (verified again on use)
        uses: actions/cache@v5
        with:
          path: .ci-cache/pin
          key: pin-${{ hashFiles('upstream/llama.cpp.toml') }}
"""

# checkout, Python, the pin's cache and patchset, on a hosted runner that has Python's setup action
_PYTHON_STEPS = """\
    steps:
      - uses: actions/checkout@v5
      - uses: actions/setup-python@v6
        with:
          python-version: "3.11"
""" + _PIN_CACHE + """\
      - name: install patchset
        run: python -m pip install "$PATCHSET_SOURCE"
"""

# exit 6: a patch whose proof needs a backend this machine lacks (Metal, CUDA) is named "not proven
# on this machine", which is all this job can say of it; any other failure fails the job
_OR_NEEDS_BACKEND = ' || { rc=$?; [ "$rc" -eq 6 ] || exit "$rc"; }'


def _test_and_prove(backend: str) -> str:
    """The steps after install on a machine with `backend`: build, the op tests, the proofs, the evidence."""
    return f"""\
      - name: build and op tests
        run: |
          patchset build --backend {backend}
          patchset test --backend {backend} --json {backend}-test.json --junit {backend}-test.xml
      - name: known-positive proofs
        run: patchset verify --backend {backend}{_OR_NEEDS_BACKEND}
      - name: evidence
        if: always()
        uses: actions/upload-artifact@v6
        with:
          name: {backend}-evidence
          path: |
            {backend}-test.json
            {backend}-test.xml
            .patchset/evidence/
"""


WORKFLOWS = {
    "cpu": ("patchset.yml", _HEAD + """\
# The series on its pin, on every push: lint, apply, patches/ as refresh writes them, build, test and
# prove every patch on the CPU (`patchset all`).
name: patchset
""" + _ON + """
jobs:
  series:
    runs-on: ubuntu-24.04
    timeout-minutes: 120
""" + _PYTHON_STEPS + """\
      - name: the series is well-formed
        run: patchset check --strict
      - name: the series applies on the pin, patches/ is what refresh writes
        run: |
          patchset apply
          patchset refresh --check
      - name: build, test and prove every patch
        run: patchset all --backend cpu""" + _OR_NEEDS_BACKEND + "\n"),
    "cuda": ("patchset-cuda.yml", _HEAD + """\
# CUDA: a build in NVIDIA's CUDA container on every push (GitHub's hosted runners have no GPU); the
# tests and proofs on a self-hosted runner labelled `gpu` when the repository variable
# PATCHSET_GPU_RUNNER is true.
name: patchset-cuda
""" + _ON + """
jobs:
  build:
    runs-on: ubuntu-24.04
    container: nvidia/cuda:12.8.1-devel-ubuntu24.04
    timeout-minutes: 120
    steps:
      - name: tools
        run: |
          apt-get update
          apt-get install -y --no-install-recommends git ca-certificates python3 python3-venv python3-pip
      - uses: actions/checkout@v5
""" + _PIN_CACHE + """\
      - name: install patchset
        run: |
          python3 -m venv /opt/patchset
          /opt/patchset/bin/pip install "$PATCHSET_SOURCE"
          echo /opt/patchset/bin >> "$GITHUB_PATH"
      - name: build (no GPU here, so name the architecture)
        run: patchset build --backend cuda --cuda-arch 90

  gpu:
    if: vars.PATCHSET_GPU_RUNNER == 'true'
    runs-on: [self-hosted, linux, x64, gpu]
    timeout-minutes: 180
    steps:
      - uses: actions/checkout@v5
      - name: install patchset
        run: |
          python3 -m venv .ci-venv
          .ci-venv/bin/pip install "$PATCHSET_SOURCE"
          echo "$PWD/.ci-venv/bin" >> "$GITHUB_PATH"
""" + _test_and_prove("cuda")),
    "metal": ("patchset-metal.yml", _HEAD + """\
# Metal on Apple silicon: build, the op tests and the known-positive proofs, the evidence uploaded.
# A self-hosted Apple-silicon runner can be named in the repository variable PATCHSET_METAL_RUNNER.
name: patchset-metal
""" + _ON + """
jobs:
  metal:
    runs-on: ${{ vars.PATCHSET_METAL_RUNNER || 'macos-14' }}
    timeout-minutes: 90
""" + _PYTHON_STEPS + """\
""" + _test_and_prove("metal")),
}
"""The workflows `init --ci` can write, by backend: (file name under .github/workflows/, text)."""

ACTIONLINT = """\
# labels of the self-hosted runners the workflows may use (actionlint checks runs-on against these)
self-hosted-runner:
  labels:
    - gpu
"""
"""Written with the CUDA workflow, whose GPU job runs on a self-hosted runner labelled `gpu`."""

_SOURCE = re.compile(r"git\+https://\S+@[0-9a-f]{40}|https://\S+\.whl")


def check_source(source: str) -> str:
    """`source` when CI can install patchset from it as written: a pinned git commit of its
    repository (`git+https://HOST/PATH@<40-hex>`) or a wheel's https URL; else InputError."""
    if not _SOURCE.fullmatch(source):
        raise InputError(f"--patchset-source '{source}': give git+https://HOST/OWNER/patchset@<full commit id> or "
                         "the https URL of a patchset wheel (patchset is not on the package index)")
    return source


GITIGNORE = ".patchset/\n"

BINDINGS_SUBDIR = "vendor/llama.cpp"
"""Where the llama-cpp-python sdist carries llama.cpp (the folder `patchset wheel` replaces)."""


def _with_bindings(cache_dir: Path, pin: Pin, bindings: str,
                   progress: ProgressSink | None) -> tuple[Pin, tuple[str, ...]]:
    """`pin` with the bindings sdist as its last source, which `patchset wheel` builds from (it takes the
    pin's first sdist source); a warning when the sdist's vendored llama.cpp is not the pin's tree.
    Then the sdist records no tree of its own: as a source of the pin it fails verification (its
    files are another commit's), never passes for the pin."""
    req = PinRequest(sdist=bindings, subdir=BINDINGS_SUBDIR, name=pin.name, repository=pin.repository)
    try:
        got = make_pin(cache_dir, req, progress).pin
    except InputError:
        # no commit marker in the archive: the trees alone say whether it vendors the pin
        got = make_pin(cache_dir, dataclasses.replace(req, commit=pin.commit), progress).pin
    src = got.sources[-1]
    assert isinstance(src, SdistSource)
    if got.commit == pin.commit and got.tree == pin.tree:
        return dataclasses.replace(pin, sources=(*pin.sources, src)), ()
    archive_tree = src.tree or got.tree
    if archive_tree == pin.tree:
        return dataclasses.replace(pin, sources=(*pin.sources, dataclasses.replace(src, tree=""))), ()
    vendored = got.commit if got.commit != pin.commit else f"a tree {archive_tree[:12]}"
    return dataclasses.replace(pin, sources=(*pin.sources, dataclasses.replace(src, tree=""))), (
        f"--bindings {bindings}: its vendored llama.cpp is {vendored}, not the pin {pin.commit[:12]}: "
        "`patchset wheel` builds it on the patched pin all the same, but its Python declarations were written "
        "for that other tree (the wheel's drift check lists the functions that differ); recorded as the "
        "pin's last source, which cannot give the pin",)


@dataclass(frozen=True)
class InitResult:
    root: Path
    written: tuple[Path, ...]
    commit: str
    tag: str
    warnings: tuple[str, ...] = ()
    """What the person should know and decide (the bindings' vendored llama.cpp is not the pin)."""


def init(root: Path, req: PinRequest, cache_dir: Path, source: str, ci: tuple[str, ...] = ("cpu",),
         bindings: str = "", progress: ProgressSink | None = None) -> InitResult:
    """Start a project in `root` (made if missing); refuses a folder that already holds one. `ci`: the
    backends whose workflow is written (WORKFLOWS), each installing patchset from `source`;
    `bindings`: the llama-cpp-python sdist `patchset wheel` builds, recorded in the pin."""
    check_source(source)
    unknown = [b for b in ci if b not in WORKFLOWS]
    if unknown or not ci:
        raise InputError(f"--ci {','.join(ci)}: give backends among {', '.join(WORKFLOWS)}, separated by commas")
    pin_file = root / DEFAULT_PIN
    series = root / "patches" / "series"
    for f in (pin_file, series):
        if f.exists():
            raise InputError(f"{f}: {root} already holds a patchset project; nothing written")
    result = make_pin(cache_dir, req, progress)
    pin, warnings = (_with_bindings(cache_dir, result.pin, bindings, progress) if bindings
                     else (result.pin, ()))
    written = []
    atomic_write_text(pin_file, dump_pin(pin))
    written.append(pin_file)
    series.parent.mkdir(parents=True, exist_ok=True)
    write_series(series.parent, [])
    written.append(series)
    for backend in ci:
        name, text = WORKFLOWS[backend]
        workflow = root / ".github" / "workflows" / name
        if not workflow.exists():
            atomic_write_text(workflow, text.replace("@SOURCE@", source))
            written.append(workflow)
    lint = root / ".github" / "actionlint.yaml"
    if "cuda" in ci and not lint.exists():
        atomic_write_text(lint, ACTIONLINT)
        written.append(lint)
    ignore = root / ".gitignore"
    text = ignore.read_text(encoding="utf-8") if ignore.is_file() else ""
    if ".patchset/" not in text.split():
        atomic_write_text(ignore, text + ("" if not text or text.endswith("\n") else "\n") + GITIGNORE)
        written.append(ignore)
    return InitResult(root, tuple(written), pin.commit, pin.tag or "", warnings)

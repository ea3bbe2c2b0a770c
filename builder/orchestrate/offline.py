"""`patchset offline run`: the steps of a run on a machine without network, under one deadline, and its record.

Each step runs through the real CLI, and the record is what `patchset evidence update --from` takes.

The machine has a checkout and the carry folder `patchset offline prepare` made (builder/deliver/carry.py).
The run imports the pin from the carried bundle (`patchset fetch --bundle`), applies the series, and runs
its steps in order, each a command of patchset (a child process of this Python, so a step that hangs
is stopped and what came before is kept):

- `main`: `build`, `test --json test.json` and `verify` of the backend -> test.json, verify.json;
- `verify`: `verify` alone (of `--verify-patches`, else every patch) -> verify.json;
- `sweep:NAME:OPS`: `test --against upstream --ops OPS` (every op: OPS `all`) -> sweep-NAME.json;
- `wheel`: `wheel` from the carried bindings sdist, installed into a new venv with no index and
  imported from an empty folder -> wheel-provenance.json, wheel-check.txt.

Each command gets what is left of the deadline: one not started when 5 s or less are left is
`skipped`, one stopped at it is recorded with exit 124 (and 128+N when a signal N killed it). The
evidence of a verify is copied as verify.json only from a verify that ran to its end (its exit code
aside): one that was stopped or skipped wrote some patches' evidence or none, never this step's.
Every run writes `run-<first step>.json` (format `patchset-device-run/1`: the commands, exit codes,
seconds, date, host, GPU, pin, patch hashes) and `log.txt` (the commands' output) into the output
folder, whatever happened.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import re
import shlex
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from builder import proc
from builder.deliver import carry
from builder.deliver.committed_update import named_stems
from builder.errors import InputError, ProcessError, ProcessTimeout
from builder.fsutil import atomic_write_text
from builder.project import Project
from builder.series.load import load_series
from builder.upstream.pin import load_pin

FORMAT = "patchset-device-run/1"
EVIDENCE_FORMAT = "patchset-verify-evidence/1"
SKIP_MARGIN_S = 5
"""A step not started while this many seconds or fewer are left of the deadline is skipped."""
STOPPED = 124
"""The exit code recorded for a step stopped at the deadline (timeout(1)'s)."""
STEP_WORDS = "main, verify, sweep:NAME:OPS, wheel"
TEST_JSON, VERIFY_JSON = "test.json", "verify.json"
WHEEL_FILES = ("wheel-provenance.json", "wheel-check.txt")
"""What the steps write into --out, beside `sweep_json` and the run record (`run_files` reads them too)."""
PATCHSET = (sys.executable, "-m", "builder.cli")
"""How a step runs patchset: this Python, this package (a checkout installed editable runs its own code)."""
TOOLS = ("git", "cmake", "c++")

WHEEL_CHECK = '''"""What the installed package holds and whether ggml finds the backend it was built for."""
import glob
import os

import llama_cpp

here = os.path.dirname(llama_cpp.__file__)
print("llama_cpp", llama_cpp.__version__, "from", here)
print("libraries:", sorted(os.path.basename(p) for p in glob.glob(os.path.join(here, "lib", "*.so*"))))
print("gpu offload:", llama_cpp.llama_supports_gpu_offload())
llama_cpp.llama_backend_init()
print("system info:", llama_cpp.llama_print_system_info().decode())
'''
"""Run by the `wheel` step with the new venv's Python, from an empty folder (as wheel_check.py there)."""


@dataclass(frozen=True)
class Step:
    """One step of a run, as given on the command line."""

    word: str
    kind: str
    name: str = ""
    ops: str = ""


def parse_step(word: str) -> Step:
    """`main`, `verify`, `wheel` or `sweep:NAME:OPS`; InputError naming the word otherwise."""
    if word in ("main", "verify", "wheel"):
        return Step(word, word)
    if word.startswith("sweep:"):
        parts = word.split(":", 2)
        if len(parts) == 3 and re.fullmatch(r"[A-Za-z0-9_.-]+", parts[1]) and parts[2]:
            return Step(word, "sweep", parts[1], parts[2])
        raise InputError(f"step '{word}': a sweep is sweep:NAME:OPS (NAME of letters, digits, '.', '_', '-'; "
                         "OPS a list of ops or `all`)")
    raise InputError(f"unknown step '{word}': the steps are {STEP_WORDS}")


def parse_steps(words: Sequence[str]) -> list[Step]:
    """Every step word parsed, before anything runs; at least one."""
    if not words:
        raise InputError(f"name at least one step ({STEP_WORDS})")
    return [parse_step(w) for w in words]


def run_label(first: str) -> str:
    """The name of a run's record, run-LABEL.json: its first step, with every character but letters,
    digits, '_', '.' and '-' made '_', at most 40 characters."""
    return re.sub(r"[^A-Za-z0-9_.-]", "_", first)[:40]


@dataclass(frozen=True)
class Options:
    backend: str
    carry: Path
    out: Path
    cuda_arch: str = "90"
    workers: int = 1
    deadline: float = 570.0
    verify_patches: tuple[str, ...] = ()
    bootstrap: Path | None = None
    """A record of the steps run before this one (tools/gpu/run.sh's venv install), put first."""


@dataclass(frozen=True)
class Ran:
    """One line of the ledger: a step, its exit code (None: skipped), its seconds and its command."""

    step: str
    exit: int | None
    seconds: int
    command: str


def read_ledger(path: Path) -> list[Ran]:
    """The steps of a ledger file, one `NAME<TAB>EXIT|skipped<TAB>SECONDS<TAB>COMMAND` a line."""
    out = []
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        parts = line.split("\t", 3)
        if len(parts) != 4 or not parts[2].isdigit() or not (parts[1] == "skipped" or parts[1].lstrip("-").isdigit()):
            raise InputError(f"{path}:{n}: not NAME<TAB>EXIT<TAB>SECONDS<TAB>COMMAND")
        out.append(Ran(parts[0], None if parts[1] == "skipped" else int(parts[1]), int(parts[2]), parts[3]))
    return out


@dataclass
class Runner:
    """Runs the steps of one run and keeps its ledger (a step at a time, each under the deadline)."""

    project: Project
    options: Options
    invocation: str
    patchset: tuple[str, ...] = PATCHSET
    say: Callable[[str], None] = print
    clock: Callable[[], float] = time.monotonic
    env: dict[str, str] = field(default_factory=dict)
    ledger: list[Ran] = field(default_factory=list)
    output: str = ""
    """What the last step printed."""
    status: int = 0
    last_finished: bool = False
    """Whether the last step ran to its end (was neither stopped at the deadline nor skipped)."""

    def __post_init__(self) -> None:
        self.root = self.project.root
        self.out = self.options.out
        self.log = self.out / "log.txt"
        self.start = self.clock()
        self.env = {"NO_COLOR": "1", "PYTHONUNBUFFERED": "1", **self.env}
        if self.options.bootstrap is not None:
            # read before anything runs: a bad record is bad input, refused with nothing written
            if not self.options.bootstrap.is_file():
                raise InputError(f"{self.options.bootstrap}: no such file (--bootstrap-record)")
            before = read_ledger(self.options.bootstrap)
            self.ledger[:0] = before
            self.start -= sum(r.seconds for r in before)  # the installs counted against the deadline

    # -- the ledger and the log ---------------------------------------------------------------------
    def note(self, text: str) -> None:
        self.say(f"== {text}")
        with self.log.open("a", encoding="utf-8") as f:
            f.write(f"== {text}\n")

    def shown(self, argv: Sequence[str]) -> str:
        """A command as the record says it: patchset as `patchset`, this Python as `python`, paths under
        the project relative to it."""
        words = list(argv)
        if tuple(words[:len(self.patchset)]) == self.patchset:
            words = ["patchset", *words[len(self.patchset):]]
        prefix = f"{self.root}/"
        words = ["python" if w == sys.executable else w.removeprefix(prefix) for w in words]
        return shlex.join(words)

    def left(self) -> int:
        """Whole seconds left of the deadline (the seconds gone counted whole, as `date +%s` would)."""
        return int(self.options.deadline - int(self.clock() - self.start))

    def step(self, name: str, argv: Sequence[str], *, cwd: Path | None = None) -> int | None:
        """Run `argv` with what is left of the deadline, its output appended to the log (and kept in
        `output`), and record it in the ledger: its exit code, None when it was skipped (the deadline near)."""
        shown = self.shown(argv)
        left = self.left()
        self.output = ""
        if left <= SKIP_MARGIN_S:
            self.note(f"{name}: skipped, deadline reached")
            self.ledger.append(Ran(name, None, 0, shown))
            self.status, self.last_finished = max(self.status, 1), False
            return None
        self.note(f"{name}: {shown} (at most {left}s)")
        t0 = self.clock()
        try:
            done = proc.stream(argv, log_file=self.log, cwd=cwd or self.root, env=self.env, timeout=left)
            rc = STOPPED if done.timed_out else (128 - done.returncode if done.returncode < 0 else done.returncode)
            self.output, self.last_finished = done.stdout, not done.timed_out and done.returncode >= 0
        except ProcessError as e:  # not found, not executable
            with self.log.open("a", encoding="utf-8") as f:
                f.write(f"{e.stderr}\n")
            rc, self.last_finished = e.returncode, True
        seconds = round(self.clock() - t0)
        self.ledger.append(Ran(name, rc, seconds, shown))
        self.note(f"{name}: exit {rc} in {seconds}s")
        return rc

    def ok(self, name: str, argv: Sequence[str], *, cwd: Path | None = None) -> bool:
        """`step`, true when it ran and exited 0; else the run fails (status 1)."""
        if self.step(name, argv, cwd=cwd) != 0:
            self.status = max(self.status, 1)
            return False
        return True

    def ps(self, *args: str | Path) -> list[str]:
        return [*self.patchset, *(str(a) for a in args)]

    def arch(self) -> list[str]:
        # one architecture for build, verify and the sweep: the same flags, so verify reuses the patched
        # tree's build instead of compiling ggml-cuda again
        return ["--cuda-arch", self.options.cuda_arch] if self.options.backend == "cuda" and self.options.cuda_arch \
            else []

    # -- the steps ------------------------------------------------------------------------------------
    def run(self, steps: Sequence[Step]) -> int:
        """Import the pin, apply, run `steps`; the run's status (0 every step passed, 1 one did not)."""
        o = self.options
        if any(r.exit != 0 for r in self.ledger):  # an install before this run failed
            self.status = 1
            return self.status
        if not self.ok("fetch", self.ps("fetch", "--bundle", o.carry / carry.BUNDLE)) or \
                not self.ok("apply", self.ps("apply")):
            return self.status
        for s in steps:
            if s.kind == "main":
                if self.ok("build", self.ps("build", "--backend", o.backend, *self.arch())):
                    self.ok("test", self.ps("test", "--backend", o.backend, "--json", o.out / TEST_JSON))
                    self.verify_step()
            elif s.kind == "verify":
                self.verify_step()
            elif s.kind == "sweep":
                sel = ["--all"] if s.ops == "all" else ["--ops", s.ops]
                workers = ["--workers", str(o.workers)] if o.workers > 1 else []
                mode = ["--mode", "test"] if o.backend == "cuda" else []
                self.ok(f"sweep-{s.name}", self.ps("test", "--against", "upstream", "--backend", o.backend, *mode,
                                                   *sel, *workers, *self.arch(), "--json",
                                                   o.out / sweep_json(s.name)))
            else:
                self.wheel_step()
        return self.status

    def verify_step(self) -> None:
        """verify, then its evidence of the backend as verify.json, only from a verify that ran to its end
        (exit 0, 4, 6 ...)."""
        o = self.options
        self.ok("verify", self.ps("verify", "--backend", o.backend, *self.arch(), *o.verify_patches))
        if not self.last_finished:
            # stopped at the deadline, or skipped: the evidence there is of some patches, or of earlier runs
            self.note("verify: did not finish: no verify.json")
            self.status = max(self.status, 1)
            return
        doc = verify_evidence(self.project, o.backend, o.verify_patches)
        atomic_write_text(o.out / VERIFY_JSON, json.dumps(doc, indent=1) + "\n")

    def wheel_step(self) -> None:
        o = self.options
        state = self.project.state_dir
        dist = state / f"dist-{o.backend}"
        shutil.rmtree(dist, ignore_errors=True)
        sdist = o.carry / carry.BINDINGS_SDIST
        sha = (o.carry / carry.BINDINGS_SHA256).read_text(encoding="utf-8").strip()
        if not self.ok("wheel", self.ps("wheel", "--backend", o.backend, *self.arch(), "--sdist", sdist,
                                        "--sdist-sha256", sha, "--out", dist)):
            return
        wheels = sorted(dist.glob("*.whl"))
        wv = state / "wheel-venv"
        shutil.rmtree(wv, ignore_errors=True)
        if not wheels:
            self.note(f"wheel: no wheel in {dist}")
            self.status = 1
            return
        if not self.ok("wheel-venv", [sys.executable, "-m", "venv", "--without-pip", str(wv)]):
            return
        if not self.ok("wheel-install", [sys.executable, "-m", "pip", "--python", str(wv / "bin" / "python"),
                                         "install", "--quiet", "--disable-pip-version-check", "--no-index",
                                         "--find-links", str(o.carry / "wheels"), str(wheels[0])]):
            return
        with tempfile.TemporaryDirectory(prefix="patchset-wheel-check-") as empty:
            (Path(empty) / "wheel_check.py").write_text(WHEEL_CHECK, encoding="utf-8")
            python = str(wv / "bin" / "python")
            left = self.left()
            self.ok("wheel-check", [python, "wheel_check.py"], cwd=Path(empty))
            said = self.output
            (Path(empty) / "wheel_check.py").unlink()
            try:
                prov = proc.run([python, "-m", "llama_cpp.patchset", "--json"], cwd=Path(empty), check=False,
                                timeout=max(1, self.left()))
                atomic_write_text(o.out / WHEEL_FILES[0], prov.stdout)
                with self.log.open("a", encoding="utf-8") as f:
                    f.write(prov.stderr)
                if prov.returncode != 0:
                    self.status = 1
            except (ProcessError, ProcessTimeout) as e:
                self.note(f"wheel provenance: {e}")
                self.status = 1
        check = self.ledger[-1]
        lines = [f"== wheel-check: {check.command} (at most {left}s)"]
        lines += [said.rstrip("\n")] if said.strip() else []
        lines.append(f"== wheel-check: exit {check.exit} in {check.seconds}s" if check.exit is not None
                     else "== wheel-check: skipped, deadline reached")
        lines += [f"{p.stat().st_size:>12} {p.name}" for p in sorted(dist.iterdir())]
        atomic_write_text(o.out / WHEEL_FILES[1], "\n".join(lines) + "\n")

    # -- the record -----------------------------------------------------------------------------------
    def record(self) -> dict:
        """What ran where: the run record (format patchset-device-run/1)."""
        nvcc = _out(["nvcc", "--version"], self.env).splitlines()
        manifest = self.options.carry / carry.MANIFEST
        return {
            "format": FORMAT,
            "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "backend": self.options.backend,
            "invocation": self.invocation,
            "host": {"platform": platform.platform(), "machine": platform.machine(),
                     "python": platform.python_version(), "cpus": len(os.sched_getaffinity(0))},
            "gpu": _out(["nvidia-smi", "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"],
                        self.env),
            "nvcc": nvcc[-1] if nvcc else "",
            "compiler": (_out(["c++", "--version"], self.env).splitlines() or [""])[0],
            "pin": pin_fields(self.project),
            "patches": patch_hashes(self.project),
            "project_commit": _out(["git", "-C", str(self.root), "rev-parse", "HEAD"], self.env) or "unknown",
            "carry_manifest_sha256": hashlib.sha256(manifest.read_bytes()).hexdigest() if manifest.is_file() else None,
            "steps": [{"step": r.step, "exit": r.exit, "seconds": r.seconds, "command": r.command}
                      for r in self.ledger],
        }

    def write_record(self, label: str) -> Path:
        path = self.out / f"run-{label}.json"
        atomic_write_text(path, json.dumps(self.record(), indent=1) + "\n")
        return path


def _out(cmd: list[str], env: dict[str, str]) -> str:
    """What `cmd` printed, or "" where it is not there or fails."""
    path = os.pathsep.join([env.get("PATH", ""), os.environ.get("PATH", "")])
    if not shutil.which(cmd[0], path=path):
        return ""
    try:
        return proc.run(cmd, env=env, check=False, timeout=60).stdout.strip()
    except (ProcessError, ProcessTimeout):
        return ""


def pin_fields(project: Project) -> dict[str, str]:
    pin = load_pin(project.pin_file)
    return {"name": pin.name, "tag": pin.tag, "commit": pin.commit, "tree": pin.tree}


def patch_hashes(project: Project) -> list[dict[str, str]]:
    """The series' patches in order, each with the sha256 of its file (read as it is: the record is written
    whatever happened, a series that does not load included)."""
    names = [ln.strip() for ln in (project.patches_dir / "series").read_text(encoding="utf-8").splitlines()
             if ln.strip() and not ln.startswith("#")]
    return [{"name": n, "sha256": hashlib.sha256((project.patches_dir / n).read_bytes()).hexdigest()}
            for n in names if (project.patches_dir / n).is_file()]


def verify_evidence(project: Project, backend: str, patches: Sequence[str] = ()) -> dict:
    """verify's evidence of `backend` for the patches this verify ran on (`patches`, as verify takes them;
    none: every patch), as verify.json holds it. An earlier run's evidence of another patch, still in the
    state folder of a machine kept between runs, stays out: its own run's record names the command that
    made it, and `evidence update --from` keeps the committed proofs that still hold."""
    stems = set(named_stems(load_series(project.patches_dir), tuple(patches)).values()) if patches else None
    found = {p.parent.name: json.loads(p.read_text(encoding="utf-8"))
             for p in sorted(project.evidence_dir.glob(f"*/{backend}.json"))
             if stems is None or p.parent.name in stems}
    return {"format": EVIDENCE_FORMAT, "backend": backend, "patches": found}


def machine_env(backend: str) -> dict[str, str]:
    """What the steps need of this machine, checked before anything runs: InputError naming what is
    missing; the environment the steps run with (PATH with CUDA's nvcc where it is not on it)."""
    missing = [t for t in TOOLS if shutil.which(t) is None]
    if missing:
        raise InputError(f"missing on this machine: {', '.join(missing)}")
    if backend != "cuda" or shutil.which("nvcc"):
        return {}
    for d in [Path("/usr/local/cuda/bin"), *sorted(Path("/usr/local").glob("cuda-*/bin"))]:
        if (d / "nvcc").is_file() and os.access(d / "nvcc", os.X_OK):
            return {"PATH": f"{d}{os.pathsep}{os.environ.get('PATH', '')}"}
    raise InputError("missing on this machine: nvcc (CUDA's compiler; not on PATH nor in /usr/local/cuda*/bin)")


def check_carry(folder: Path, steps: Sequence[Step]) -> None:
    """The carry folder holds what the steps need; InputError naming the folder otherwise."""
    if not (folder / carry.MANIFEST).is_file():
        raise InputError(f"{folder}: no carry folder (no {carry.MANIFEST}): run `patchset offline prepare` where "
                         "the network is, and copy the folder here")
    if not (folder / carry.BUNDLE).is_file():
        raise InputError(f"{folder}: no {carry.BUNDLE}: not a carry folder of `patchset offline prepare`")
    if any(s.kind == "wheel" for s in steps) and not all(
            (folder / f).is_file() for f in (carry.BINDINGS_SDIST, carry.BINDINGS_SHA256)):
        raise InputError(f"{folder}: no bindings sdist ({carry.BINDINGS_SDIST}) for the wheel step: run "
                         "`patchset offline prepare --wheel`")


def sweep_json(name: str) -> str:
    """The file a `sweep:NAME:OPS` step writes."""
    return f"sweep-{name}.json"


def run_files(steps: Sequence[Step]) -> list[str]:
    """The files a run of `steps` writes into its --out folder (the log, which it appends to, aside)."""
    files = [f"run-{run_label(steps[0].word)}.json"]
    for s in steps:
        files += {"main": [TEST_JSON, VERIFY_JSON], "verify": [VERIFY_JSON], "sweep": [sweep_json(s.name)],
                  "wheel": list(WHEEL_FILES)}[s.kind]
    return list(dict.fromkeys(files))


def check_out(folder: Path, steps: Sequence[Step]) -> None:
    """No file of an earlier run in `folder` that this run would replace; InputError naming it otherwise."""
    for name in run_files(steps):
        if (folder / name).exists():
            raise InputError(f"{folder / name}: written by an earlier run, and this run would replace it: move it "
                             "away or give another --out")


def offline_run(project: Project, options: Options, words: Sequence[str], invocation: str, *,
                patchset: tuple[str, ...] = PATCHSET, say: Callable[[str], None] = print) -> tuple[int, Path]:
    """Run the steps `words` on this machine from the carry folder: the run's status (0: every step
    passed; 1: one failed, was stopped or skipped) and its record. Bad input (an unknown step, no carry
    folder, a tool missing, a file of an earlier run in the out folder) is refused before anything runs or is
    written."""
    steps = parse_steps(words)
    check_carry(options.carry, steps)
    check_out(options.out, steps)
    env = machine_env(options.backend)
    runner = Runner(project, options, invocation, patchset=patchset, say=say, env=env)
    options.out.mkdir(parents=True, exist_ok=True)
    try:
        status = runner.run(steps)
    finally:
        record = runner.write_record(run_label(steps[0].word))
    return status, record

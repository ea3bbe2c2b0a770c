"""`patchset offline prepare` on a project pinned to the test upstream: the carry folder holds a bundle of
the pin that a fetch takes, the wheels of patchset's requirements (from a local folder of wheels made
here: pip with no index, as on a machine without network), with --wheel the bindings sdist without its
vendored tree, and a manifest of every file; a failed download leaves the folder before it as it was."""

from __future__ import annotations

import json
import re
import subprocess
import tarfile
import zipfile
from pathlib import Path

import pytest
from helpers import UPSTREAM_FILES, Upstream, make_project, make_sdist, sdist_pin_sources
from packaging.requirements import Requirement
from packaging.version import Version

from builder.cli import main
from builder.deliver import carry
from builder.fsutil import sha256_file

BINDINGS_PYPROJECT = '[project]\nname = "pkg"\nversion = "1.0"\ndependencies = ["numpy>=1.20", "diskcache>=5"]\n'


def wheel_of(folder: Path, requirement: str) -> None:
    """A pure-Python wheel with no files of its own, of a version `requirement` takes."""
    req = Requirement(requirement)
    tried = [*(s.version for s in req.specifier), "1.0"]
    version = next(v for v in tried if Version(v) in req.specifier or not req.specifier)
    name = re.sub(r"[-_.]+", "_", req.name).lower()
    info = f"{name}-{version}.dist-info"
    files = {f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {req.name}\nVersion: {version}\n",
             f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"}
    files[f"{info}/RECORD"] = "".join(f"{f},,\n" for f in [*files, f"{info}/RECORD"])
    with zipfile.ZipFile(folder / f"{name}-{version}-py3-none-any.whl", "w") as z:
        for f, text in files.items():
            z.writestr(f, text)


@pytest.fixture
def index(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """pip with no index and a folder of wheels: patchset's requirements and the bindings' runtime ones."""
    found = tmp_path / "find-links"
    found.mkdir()
    for r in [*carry.requirements(), *(re.findall(r'"([^"]+)"', BINDINGS_PYPROJECT.split("dependencies")[1]))]:
        wheel_of(found, r)
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(found))
    return found


def _manifest_holds_every_file(folder: Path) -> dict:
    manifest = json.loads((folder / "manifest.json").read_text())
    assert manifest["format"] == "patchset-carry/1"
    on_disk = {p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file()} - {"manifest.json"}
    assert set(manifest["files"]) == on_disk
    for rel, f in manifest["files"].items():
        assert f == {"bytes": (folder / rel).stat().st_size, "sha256": sha256_file(folder / rel)}
    return manifest


def test_the_carry_holds_the_pin_the_wheels_and_a_manifest(tmp_path: Path, up: Upstream, cache_dir: Path,
                                                            index: Path, capsys: pytest.CaptureFixture[str],
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    proj = make_project(tmp_path, up, cache_dir)
    assert main(["--project", str(proj.root), "offline", "prepare", str(tmp_path / "carry")]) == 0
    out = capsys.readouterr().out
    folder = tmp_path / "carry"
    assert f"carry folder ready: {folder}" in out
    manifest = _manifest_holds_every_file(folder)
    wheels = {Path(f).name.split("-")[0] for f in manifest["files"] if f.startswith("wheels/")}
    assert wheels == {re.sub(r"[-_.]+", "_", Requirement(r).name).lower() for r in carry.requirements()}
    assert "cmake" not in wheels and not (folder / "wheel").exists()
    # the bundle holds the pin's commit, which git can take without any other object
    heads = subprocess.run(["git", "bundle", "list-heads", str(folder / "llama.cpp.bundle")], capture_output=True,
                           text=True, check=True).stdout
    assert heads.split()[0] == up.commit
    # a fetch into an empty cache, with the pin's own source gone, takes the pin from the bundle
    up.bare.rename(up.bare.with_name("gone.git"))
    monkeypatch.setenv("PATCHSET_CACHE", str(tmp_path / "another-cache"))
    capsys.readouterr()
    assert main(["--project", str(proj.root), "fetch", "--bundle", str(folder / "llama.cpp.bundle")]) == 0
    assert f"upstream tree {up.tree} verified (fetched from bundle" in capsys.readouterr().out


def test_with_wheel_it_carries_the_bindings_without_their_vendored_tree(tmp_path: Path, up: Upstream,
                                                                         cache_dir: Path, index: Path) -> None:
    archive = make_sdist(tmp_path / "dist" / "pkg-1.0.tar.gz", UPSTREAM_FILES, subdir="vendor/llama.cpp",
                         package_files={"pyproject.toml": BINDINGS_PYPROJECT})
    proj = make_project(tmp_path, up, cache_dir, sources=sdist_pin_sources(archive, subdir="vendor/llama.cpp"))
    assert main(["--project", str(proj.root), "offline", "prepare", "--wheel", str(tmp_path / "carry")]) == 0
    folder = tmp_path / "carry"
    manifest = _manifest_holds_every_file(folder)
    with tarfile.open(folder / "wheel" / "bindings.tar.gz") as t:
        names = t.getnames()
    assert "pkg-1.0/pyproject.toml" in names and not [n for n in names if "/vendor/llama.cpp/" in n + "/"]
    assert (folder / "wheel" / "bindings.sha256").read_text().strip() == sha256_file(folder / "wheel" /
                                                                                     "bindings.tar.gz")
    assert (folder / "wheel" / "runtime.txt").read_text().split() == ["numpy>=1.20", "diskcache>=5"]
    assert {"numpy", "diskcache"} <= {Path(f).name.split("-")[0] for f in manifest["files"]}


def test_a_failed_download_leaves_the_folder_before_it(tmp_path: Path, up: Upstream, cache_dir: Path, index: Path,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    proj = make_project(tmp_path, up, cache_dir)
    folder = tmp_path / "carry"
    folder.mkdir()
    (folder / "manifest.json").write_text("the carry of before\n")
    next(index.glob("rich-*.whl")).unlink()
    assert main(["--project", str(proj.root), "offline", "prepare", str(folder)]) == 1
    err = capsys.readouterr().err
    assert "pip download for CPython 3.11 from requirements.txt failed" in err and "Traceback" not in err
    assert [p.name for p in folder.iterdir()] == ["manifest.json"]
    assert (folder / "manifest.json").read_text() == "the carry of before\n"
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".carry")] == []

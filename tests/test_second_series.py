"""A second series in the same project (`--series bindings`): its own folder, pin and work repository,
the same verbs; and the wheel that applies both series, records both and fails on binding drift that
no bindings patch follows.

Synthetic upstreams: llama.cpp's stand-in from `make_upstream`, and the bindings' stand-in, the
package files of a small llama-cpp-python-shaped sdist (tests/test_wheel.py's) whose tree is pinned
with its `vendor/llama.cpp` left out, as the real `upstream/bindings.toml` pins llama-cpp-python.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import Proj, commit, git, make_sdist, sha256, write_patches
from test_wheel import BINDINGS, LLAMA_H, SDIST_TOP, STATUS_H, STATUS_MSG, _project

from builder.cli import main
from builder.deliver.wheel import WheelOptions, prepare
from builder.errors import DriftError, InputError
from builder.gitrepo import init_repo
from builder.progress import NullProgress
from builder.project import load_project
from builder.upstream.fetch import import_tree
from builder.upstream.pin import load_pin

B1_BINDINGS = BINDINGS.replace(
    '@ctypes_function("llama_opt_epoch", [llama_context_p_ctypes, ctypes.c_void_p, ctypes.c_int64], None)\n'
    "def llama_opt_epoch(lctx, dataset, idata_split, /): ...",
    '@ctypes_function("llama_opt_epoch", [llama_context_p_ctypes, ctypes.c_void_p, ctypes.c_int64], ctypes.c_int)\n'
    "def llama_opt_epoch(lctx, dataset, idata_split, /) -> int: ...")
B1_MSG = """\
llama_cpp: llama_opt_epoch returns the epoch's ggml_status

Patchset-Upstream: not-sent
Patchset-Backends: cpu
Patchset-Test: python tests/test_opt.py
Patchset-Test-Paths: tests/test_opt.py
Patchset-Origin: https://example.invalid/bindings/pull/1
Patchset-Not-In-CI: python tests/test_opt.py: needs a model file
"""
OTHER_MSG = """\
llama_cpp: a README line

Patchset-Upstream: not-sent
Patchset-Backends: cpu
Patchset-Test: python tests/test_readme.py
Patchset-Test-Paths: tests/test_readme.py
Patchset-Origin: https://example.invalid/bindings/pull/2
Patchset-Not-In-CI: python tests/test_readme.py: a synthetic test
"""


def _add_bindings_series(p: Proj, archive: Path, patches: list[tuple[dict[str, str | bytes | None], str]],
                         package_files: dict[str, str] | None = None) -> Path:
    """patches-bindings/ and upstream/bindings.toml on the sdist's package files (vendor/llama.cpp left
    out): the bindings' upstream is a git repository holding those files and one more, pinned by the
    sdist with the tree id of its import. Returns the bindings' upstream repository."""
    base = p.root.parent / "bindings-up"
    src = base / "src"
    git(p.root.parent, "init", "--quiet", str(src))
    files = {**(SDIST_TOP if package_files is None else package_files),
             "PKG-INFO": "Metadata-Version: 2.1\nName: pkg\nVersion: 1.0\n", "setup.py": "# not upstream\n"}
    commit(src, dict(files), "bindings 1.2.3\n", author=("Bindings Dev", "dev@bindings.invalid",
                                                        "2023-12-01T00:00:00+00:00"))
    # the sdist leaves out a file of the git tree (as the real one leaves out the submodule link): its
    # import gives a tree of its own, recorded on the sdist source
    git_tree = git(src, "rev-parse", "HEAD^{tree}")
    commit(src, {".github/ci.yml": "on: push\n"}, "ci\n")
    up_commit, tree = git(src, "rev-parse", "HEAD"), git(src, "rev-parse", "HEAD^{tree}")
    scratch = base / "q"
    imported, _ = import_tree(init_repo(scratch / "q.git", bare=True), archive, ".", scratch, NullProgress(),
                              exclude=("vendor/llama.cpp",))
    assert imported == git_tree != tree
    (p.root / "upstream" / "bindings.toml").write_text(f"""\
name = "llama-cpp-python"
repository = "https://example.invalid/bindings"
commit = "{up_commit}"
tag = "v1.2.3"
date = "2023-12-01"
tree = "{tree}"

[[source]]
kind = "sdist"
url = "{archive.as_uri()}"
sha256 = "{sha256(archive)}"
subdir = "."
exclude = ["vendor/llama.cpp"]
tree = "{imported}"
""")
    commits = [commit(src, files_, msg) for files_, msg in patches]
    (p.root / "patches-bindings").mkdir()
    write_patches(p.root / "patches-bindings", src, commits)
    return src


@pytest.fixture
def two(tmp_path: Path, cache_dir: Path) -> tuple[Proj, Path]:
    p, archive = _project(tmp_path, cache_dir, patches=[({"include/llama.h": STATUS_H}, STATUS_MSG)])
    _add_bindings_series(p, archive, [({"llama_cpp/llama_cpp.py": B1_BINDINGS}, B1_MSG)])
    return p, archive


def _names(folder: Path) -> list[str]:
    return [ln for ln in (folder / "series").read_text().splitlines() if ln.strip() and not ln.startswith("#")]


def _cli(p: Proj, *args: str) -> int:
    return main(["--project", str(p.root), *args])


def test_the_verbs_address_the_second_series_by_name(two: tuple[Proj, Path], capsys: pytest.CaptureFixture[str]
                                                     ) -> None:
    p, _ = two
    assert _cli(p, "--series", "bindings", "apply") == 0
    bwork = p.root / ".patchset" / "work" / "bindings"
    # the bindings' work repository: their upstream (imported from the sdist, vendor/llama.cpp left out) + B1
    assert git(bwork, "show", "patched:llama_cpp/llama_cpp.py") == B1_BINDINGS.rstrip("\n")
    assert git(bwork, "ls-tree", "--name-only", "upstream").split() == sorted(
        ["CMakeLists.txt", "PKG-INFO", "README.md", "llama_cpp", "pyproject.toml", "setup.py"])
    assert git(bwork, "log", "--format=%s", "upstream..patched") == "llama_cpp: llama_opt_epoch returns the epoch's " \
        "ggml_status"
    assert not p.project.work_repo.exists()  # the main series' work repository is untouched
    capsys.readouterr()

    assert _cli(p, "--series", "bindings", "status") == 0
    out = capsys.readouterr().out
    assert "llama-cpp-python v1.2.3" in out and "sdist" in out and "0001-llama_cpp-llama_opt_epoch" in out

    assert _cli(p, "--series", "bindings", "check", "--strict") == 0
    assert "series OK: 1 patch(es)" in capsys.readouterr().out

    # refresh writes the bindings' folder, not patches/
    before_main = p.snapshot()
    commit(bwork, {"README.md": "# bindings\n\nbetter\n"}, OTHER_MSG)
    assert _cli(p, "--series", "bindings", "refresh") == 0
    assert "added patches-bindings/0002-llama_cpp-a-README-line.patch" in capsys.readouterr().out
    assert _names(p.root / "patches-bindings") == [
        "0001-llama_cpp-llama_opt_epoch-returns-the-epoch-s-ggml_s.patch", "0002-llama_cpp-a-README-line.patch"]
    assert p.snapshot() == before_main

    # a series verb: mark writes the trailer into patches-bindings/
    assert _cli(p, "--series", "bindings", "mark", "1", "sent", "https://example.invalid/bindings/pull/7") == 0
    assert "Patchset-Upstream: sent https://example.invalid/bindings/pull/7" in (
        p.root / "patches-bindings" / _names(p.root / "patches-bindings")[0]).read_text()
    assert p.snapshot() == before_main

    # the main series is addressed as before
    assert _cli(p, "apply") == 0
    assert git(p.work, "show", "patched:include/llama.h") == STATUS_H.rstrip("\n")


def test_an_unknown_series_is_one_line_and_exit_2(two: tuple[Proj, Path], capsys: pytest.CaptureFixture[str]) -> None:
    p, _ = two
    assert _cli(p, "--series", "nope", "status") == 2
    err = capsys.readouterr().err
    assert "no series 'nope'" in err and "patches-nope/series" in err and len(err.strip().splitlines()) == 1
    with pytest.raises(InputError, match="not a series name"):
        load_project(root=p.root, series="../x")
    # a command that works on llama.cpp's tree only (build, test, rebase, ...) refuses it
    assert _cli(p, "--series", "bindings", "build") == 2
    err = capsys.readouterr().err
    assert "patchset build does not take --series" in err and len(err.strip().splitlines()) == 1


def test_an_sdist_pin_leaves_the_excluded_folder_out_and_round_trips(two: tuple[Proj, Path], tmp_path: Path) -> None:
    p, _ = two
    from builder.upstream.pin import dump_pin  # noqa: PLC0415

    pin = load_pin(p.root / "upstream" / "bindings.toml")
    assert pin.sources[0].exclude == ("vendor/llama.cpp",)  # type: ignore[union-attr]
    again = tmp_path / "again.toml"
    again.write_text(dump_pin(pin))
    assert load_pin(again) == pin
    bad = tmp_path / "bad.toml"
    bad.write_text(dump_pin(pin).replace('"vendor/llama.cpp"', '"../x"'))
    with pytest.raises(InputError, match="exclude must be a list of relative paths"):
        load_pin(bad)


def test_the_wheel_applies_both_series_and_records_both(two: tuple[Proj, Path], tmp_path: Path) -> None:
    p, _ = two
    prep = prepare(p.project, WheelOptions())
    src = prep.source_dir
    # the bindings as B1 leaves them, the vendored tree as the main series leaves it
    assert (src / "llama_cpp/llama_cpp.py").read_text() == B1_BINDINGS
    assert (src / "vendor/llama.cpp/include/llama.h").read_text() == STATUS_H
    assert prep.drift == ()  # B1 follows the C change
    data = prep.provenance
    second = data["bindings_series"]
    bwork = p.root / ".patchset" / "work" / "bindings"
    assert second["name"] == "bindings" and second["upstream"]["name"] == "llama-cpp-python"
    assert second["applied"]["commit"] == git(bwork, "rev-parse", "patched")
    names = _names(p.root / "patches-bindings")
    assert [x["file"] for x in second["patches"]] == names
    assert [x["sha256"] for x in second["patches"]] == [sha256(p.root / "patches-bindings" / n) for n in names]
    # the version counts and hashes both folders: `cd patches && sha256sum MAIN... ../patches-bindings/B... | sha256sum`
    listing = subprocess.run(
        ["sha256sum", *p.series(), *(f"../patches-bindings/{n}" for n in names)], cwd=p.patches, capture_output=True,
        text=True, check=True).stdout
    h = subprocess.run(["sha256sum"], input=listing, capture_output=True, text=True, check=True).stdout.split()[0]
    assert prep.version == f"1.2.3+1.2.g{h[:8]}"
    assert data["series"]["count"] == 1  # the main series alone

    # the installed module prints both
    pkg = tmp_path / "site" / "llama_cpp"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    for name in ("patchset.py", "patchset.json"):
        (pkg / name).write_bytes((src / "llama_cpp" / name).read_bytes())
    text = subprocess.run([sys.executable, "-m", "llama_cpp.patchset"], capture_output=True, text=True, cwd=tmp_path,
                          env={"PYTHONPATH": str(tmp_path / "site")}, check=True).stdout
    assert "bindings series 'bindings': llama-cpp-python v1.2.3" in text and f"B1. {names[0]}" in text
    assert json.loads((src / "llama_cpp/patchset.json").read_text()) == data


def test_the_wheel_fails_on_a_c_change_no_bindings_patch_follows(tmp_path: Path, cache_dir: Path) -> None:
    p, archive = _project(tmp_path, cache_dir, patches=[({"include/llama.h": STATUS_H}, STATUS_MSG)])
    _add_bindings_series(p, archive, [({"README.md": "# bindings\n\nbetter\n"}, OTHER_MSG)])
    with pytest.raises(DriftError, match=r"no patch of patches-bindings/ follows the C change\): llama_opt_epoch: "
                                         r"returns enum ggml_status"):
        prepare(p.project, WheelOptions())
    # and on the command line: exit 1, one line, nothing built
    assert main(["--project", str(p.root), "wheel", "--no-ccache"]) == DriftError.exit_code


def test_the_bindings_series_must_be_pinned_to_the_wheels_sdist(two: tuple[Proj, Path], tmp_path: Path) -> None:
    p, _ = two
    other = make_sdist(tmp_path / "other" / "llama_cpp_python-1.2.4.tar.gz", {"include/llama.h": LLAMA_H},
                       top="llama_cpp_python-1.2.4", subdir="vendor/llama.cpp", package_files=SDIST_TOP)
    with pytest.raises(InputError, match="the bindings series is pinned to the sdist with sha256"):
        prepare(p.project, WheelOptions(sdist=str(other), sdist_sha256=sha256(other)))

"""`patchset toolchain objc` with tiny fake archives whose build is a trivial script: the mirror's
sha256 check, the cache key, the named source fixes, the atomic install (a failed or killed build is
never taken as built) and the reuse. The real archives' build is tests/test_integration_objc_toolchain.py."""

from __future__ import annotations

import hashlib
import io
import sys
import tarfile
from pathlib import Path

import pytest

from builder.cli import main
from builder.compile import objc_toolchain as ot
from builder.errors import BuildError, SourceError

# installs {src}/lib.txt as {prefix}/lib/<name>.txt, after checking the earlier archives' files are
# at {prefix} (as GNUstep base's build finds libobjc2 and GNUstep make there)
SCRIPT = """import os, sys, shutil
src, prefix, need = sys.argv[1:4]
if need != "-": assert os.path.isfile(os.path.join(prefix, "lib", need)), need
os.makedirs(prefix + "/lib", exist_ok=True)
shutil.copy(os.path.join(src, "lib.txt"), prefix + "/lib/" + os.path.basename(src) + ".txt")
if os.environ.get("FAKE_FAIL") == os.path.basename(src): sys.exit(3)
"""


def make_archive(mirror: Path, name: str, content: str) -> tuple[str, str]:
    mirror.mkdir(parents=True, exist_ok=True)
    f = mirror / f"{name}.tar.gz"
    with tarfile.open(f, "w:gz") as t:
        for member, text in ((f"{name}/lib.txt", content), (f"{name}/build.py", SCRIPT)):
            data = text.encode()
            info = tarfile.TarInfo(member)
            info.size = len(data)
            t.addfile(info, io.BytesIO(data))
    return f.name, hashlib.sha256(f.read_bytes()).hexdigest()


def fake_recipe(mirror: Path, fail: str = "", fixes: tuple[ot.Fix, ...] = ()) -> ot.Recipe:
    archives = []
    need = "-"
    for name in ("runtime", "foundation"):
        file, sha = make_archive(mirror, name, f"{name} 1\n")
        env = {"FAKE_FAIL": fail}
        steps = ((sys.executable, "{src}/build.py", "{src}", "{prefix}", need),)
        archives.append(ot.Archive(name, file, f"https://example.invalid/{file}", "1", sha, (), steps, env,
                                   fixes if name == "foundation" else (), provides=(f"lib/{name}.txt",)))
        need = "runtime.txt"
    return ot.Recipe({}, tuple(archives))


def test_the_toolchain_is_built_into_the_cache_and_reused(tmp_path: Path) -> None:
    recipe = fake_recipe(tmp_path / "mirror")
    assert ot.find_built(tmp_path / "cache", recipe) is None
    first = ot.build(tmp_path / "cache", tmp_path / "mirror", recipe=recipe)
    assert not first.reused and first.prefix == ot.toolchain_dir(tmp_path / "cache", recipe)
    assert (first.prefix / "lib" / "foundation.txt").read_text() == "foundation 1\n"
    assert ot.find_built(tmp_path / "cache", recipe) == first.prefix
    # reused without the mirror: the archives are not even read again
    second = ot.build(tmp_path / "cache", tmp_path / "gone", recipe=recipe)
    assert second.reused and second.prefix == first.prefix and second.seconds < 1
    assert not list(first.prefix.parent.glob(".tmp-*"))


def test_the_cache_key_follows_the_archives_sha256(tmp_path: Path) -> None:
    recipe = fake_recipe(tmp_path / "mirror")
    other = ot.Recipe({}, (recipe.archives[0], ot.Archive(**{**recipe.archives[1].__dict__, "sha256": "0" * 64})))
    assert ot.cache_key(recipe) != ot.cache_key(other)
    assert ot.cache_key(recipe) == ot.cache_key(fake_recipe(tmp_path / "mirror"))
    assert ot.cache_key(recipe.upto("runtime")) != ot.cache_key(recipe)


def test_an_archive_with_the_wrong_sha256_is_refused_in_one_line(tmp_path: Path) -> None:
    recipe = fake_recipe(tmp_path / "mirror")
    (tmp_path / "mirror" / "foundation.tar.gz").write_bytes(b"not the archive")
    with pytest.raises(SourceError) as e:
        ot.build(tmp_path / "cache", tmp_path / "mirror", recipe=recipe)
    msg = str(e.value)
    assert "\n" not in msg and "foundation.tar.gz" in msg and recipe.archives[1].sha256 in msg and "refused" in msg
    assert ot.find_built(tmp_path / "cache", recipe) is None


@pytest.mark.parametrize("how", ["fails", "times out"])
def test_a_half_built_toolchain_is_never_taken_as_built(tmp_path: Path, how: str) -> None:
    mirror = tmp_path / "mirror"
    recipe = fake_recipe(mirror, fail="foundation" if how == "fails" else "")
    if how == "times out":
        slow = (sys.executable, "-c", "import time; time.sleep(30)")
        recipe = ot.Recipe({}, (recipe.archives[0], ot.Archive(**{**recipe.archives[1].__dict__, "steps": (slow,)})))
    with pytest.raises(BuildError, match="failed with exit code 3" if how == "fails" else "longer than 2s"):
        ot.build(tmp_path / "cache", mirror, recipe=recipe, timeout=2)
    final = ot.toolchain_dir(tmp_path / "cache", recipe)
    assert not final.exists() and not final.is_symlink() and ot.find_built(tmp_path / "cache", recipe) is None
    assert not list(final.parent.glob(".tmp-*"))
    assert (final.parent / f"{final.name}.failed.log").is_file()


def test_an_install_that_leaves_what_the_recipe_names_elsewhere_fails(tmp_path: Path) -> None:
    recipe = fake_recipe(tmp_path / "mirror")
    elsewhere = ot.Archive(**{**recipe.archives[0].__dict__, "provides": ("lib/libruntime.so",)})
    recipe = ot.Recipe({}, (elsewhere, recipe.archives[1]))
    with pytest.raises(BuildError, match=r"runtime: its install left no lib/libruntime\.so in the prefix"):
        ot.build(tmp_path / "cache", tmp_path / "mirror", recipe=recipe)
    assert ot.find_built(tmp_path / "cache", recipe) is None


def test_a_killed_builds_leftovers_are_not_the_toolchain_and_are_cleaned(tmp_path: Path) -> None:
    recipe = fake_recipe(tmp_path / "mirror")
    final = ot.toolchain_dir(tmp_path / "cache", recipe)
    # what a build killed after its last install step leaves: the whole prefix in its temporary
    # folder, the prefix's link pointing at it, no manifest
    left = final.parent / f".tmp-{final.name}-999999999" / "prefix"
    (left / "lib").mkdir(parents=True)
    (left / "lib" / "foundation.txt").write_text("half\n")
    final.symlink_to(left, target_is_directory=True)
    assert ot.find_built(tmp_path / "cache", recipe) is None
    built = ot.build(tmp_path / "cache", tmp_path / "mirror", recipe=recipe)
    assert not built.reused and not left.parent.exists()
    assert (built.prefix / "lib" / "foundation.txt").read_text() == "foundation 1\n"


def test_a_source_fix_is_applied_to_the_unpacked_source_and_checked(tmp_path: Path) -> None:
    good = ot.Fix("lib.txt", "foundation 1", "foundation 1 (fixed)", 1, "a test")
    recipe = fake_recipe(tmp_path / "mirror", fixes=(good,))
    built = ot.build(tmp_path / "cache", tmp_path / "mirror", recipe=recipe)
    assert (built.prefix / "lib" / "foundation.txt").read_text() == "foundation 1 (fixed)\n"
    bad = ot.Fix("lib.txt", "not there", "x", 1, "a test")
    recipe = fake_recipe(tmp_path / "mirror2", fixes=(bad,))
    with pytest.raises(BuildError, match=r"source fix of lib.txt: 'not there' found 0 time\(s\), the recipe expects 1"):
        ot.build(tmp_path / "cache", tmp_path / "mirror2", recipe=recipe)


def test_the_projects_recipe_names_every_archive_and_its_apt_packages() -> None:
    recipe = ot.load_recipe()
    assert [a.name for a in recipe.archives] == ["libobjc2", "gnustep-make", "gnustep-base"]
    assert all(len(a.sha256) == 64 and a.url.startswith("https://") for a in recipe.archives)
    assert "robin-map-dev" in recipe.upto("libobjc2").packages()
    base = recipe.archives[2]
    assert [f.file for f in base.fixes] == ["Source/NSKeyedUnarchiver.m", "Source/NSNotificationCenter.m"]


def test_design_md_lists_the_recipes_archives_and_apt_packages() -> None:
    text = (Path(__file__).resolve().parents[1] / "docs" / "design.md").read_text(encoding="utf-8")
    start, end = text.index(ot.DOC_BEGIN), text.index(ot.DOC_END) + len(ot.DOC_END)
    assert text[start:end] == ot.markdown(ot.load_recipe()), "docs/design.md's toolchain table is stale"


def test_the_missing_apt_packages_are_named_from_the_recipe(tmp_path: Path) -> None:
    recipe = fake_recipe(tmp_path / "mirror")
    needy = ot.Archive(**{**recipe.archives[0].__dict__, "needs": ("no-such-program-x", "no/such-header.h")})
    recipe = ot.Recipe({"no-such-program-x": "pkg-x", "no/such-header.h": "pkg-h-dev"}, (needy,))
    with pytest.raises(BuildError) as e:
        ot.build(tmp_path / "cache", tmp_path / "mirror", recipe=recipe)
    assert str(e.value) == ("building the Objective-C toolchain needs no-such-program-x, no/such-header.h: install "
                            "the packages pkg-h-dev pkg-x (apt-get install -y pkg-h-dev pkg-x)")


def test_the_command_refuses_a_mirror_with_a_wrong_archive_in_one_line(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    root = tmp_path / "proj"
    (root / "patches").mkdir(parents=True)
    (root / "patches" / "series").write_text("")
    mirror = tmp_path / "mirror"
    mirror.mkdir()
    (mirror / "libobjc2-ecef7f1.tar.gz").write_bytes(b"something else")
    monkeypatch.setenv("PATCHSET_CACHE", str(tmp_path / "cache"))
    assert main(["--project", str(root), "toolchain", "objc", "--mirror", str(mirror), "--only", "libobjc2"]) == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "libobjc2-ecef7f1.tar.gz: sha256" in err and "refused" in err
    assert not (tmp_path / "cache" / "toolchains").exists() or not any((tmp_path / "cache" / "toolchains").iterdir())

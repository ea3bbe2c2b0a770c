"""`patchset offline prepare` (tools/gpu/prepare.sh) asks pip for wheels by platform tag (`pip download
--platform ...`): every platform list it gives must take a wheel of each of patchset's dependencies.
The tags are pip's own metadata of the wheels installed here (each distribution's WHEEL file), read
offline: a pinned dependency whose only wheels are tagged for a newer manylinux than the carry asks
for made the carry impossible to build on a fresh machine."""

from __future__ import annotations

import importlib.metadata
import tomllib
from pathlib import Path

from helpers import REPO_ROOT
from packaging.requirements import Requirement

from builder.deliver import carry


def pip_downloads() -> list[list[str]]:
    """The words of each `pip download` command the carry runs: patchset's own, then the bindings'."""
    return [carry.pip_download(Path("wheels"), Path("requirements.txt"), python, carry.PLATFORMS)
            for python in carry.PYTHONS] + [
        carry.pip_download(Path("wheels"), Path("runtime.txt"), carry.BINDINGS_PYTHON, carry.BINDINGS_PLATFORMS)]


def platforms(words: list[str]) -> set[str]:
    return {words[i + 1] for i, w in enumerate(words) if w == "--platform"}


def wheel_platforms(name: str) -> set[str]:
    """The platform tags of the wheel of `name` installed here (its WHEEL file's `Tag:` lines)."""
    wheel = importlib.metadata.distribution(name).read_text("WHEEL") or ""
    return {line.split(":", 1)[1].strip().split("-")[2] for line in wheel.splitlines() if line.startswith("Tag:")}


def carried_requirements() -> list[Requirement]:
    """What the first download fetches: pyproject's dependencies less cmake (the carry's requirements.txt)."""
    deps = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    carried = [r for r in map(Requirement, deps) if r.name.lower() != "cmake"]
    assert [str(r) for r in carried] == carry.requirements()[:len(carried)]
    return carried


def test_every_dependency_has_a_wheel_for_the_platforms_asked() -> None:
    downloads = pip_downloads()
    asked = platforms(downloads[0])
    assert "-r" in downloads[0] and asked
    missing = []
    for req in carried_requirements():
        tags = wheel_platforms(req.name)
        if tags and "any" not in tags and not tags & asked:
            missing.append(f"{req} (wheel tags {sorted(tags)})")
    assert not missing, f"the carry asks pip for {sorted(asked)} only; no wheel of: {', '.join(missing)}"


def test_the_pinned_clang_format_is_among_them() -> None:
    # the dependency that made the carry fail: exactly pinned, wheels for manylinux_2_27/_2_28 only
    pinned = [r for r in carried_requirements() if any(s.operator == "==" for s in r.specifier)]
    assert "clang-format" in {r.name for r in pinned}
    assert wheel_platforms("clang-format") & platforms(pip_downloads()[0])

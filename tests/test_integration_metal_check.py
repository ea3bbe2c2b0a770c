"""The Linux Metal check on the real pin and the real series: every host source of ggml-metal, the
two Objective-C files included, and the series' Metal test programs compile against GNUstep and the
Metal SDK stand-in, on the patched tree and on the pin alike. Needs the apt packages the check needs."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from helpers import copy_real_project, objc_toolchain_found

from builder.compile import metalcheck
from builder.gitrepo import GitRepo
from builder.project import Project
from builder.prove.pipeline import declared_tests, run_build
from builder.series.load import load_series

pytestmark = [pytest.mark.integration,
              pytest.mark.skipif(sys.platform != "linux" or not objc_toolchain_found(),
                                 reason="the Linux Metal check needs Linux, clang and GNUstep")]


@pytest.fixture(scope="module")
def project(real_pin_cache: Path, tmp_path_factory: pytest.TempPathFactory) -> Project:
    return copy_real_project(tmp_path_factory.mktemp("real-project"), real_pin_cache)


def test_the_patched_tree_and_the_pin_pass_the_linux_metal_check(project: Project, tmp_path: Path) -> None:
    r = run_build(project, "metal")
    assert r.ok, f"{r.first_error} (log {r.log})"
    assert r.kind == "compile-check"
    log = r.log.read_text()
    sources = metalcheck.host_sources(project.work_repo)
    assert {p.name for p in sources} >= {"ggml-metal-context.m", "ggml-metal-device.m", "ggml-metal.cpp"}
    for p in sources:
        assert p.name in log
    programs = [prog for prog, _ in declared_tests(load_series(project.patches_dir), "metal")]
    for prog in programs:
        if (project.work_repo / "tests" / f"{prog}.cpp").is_file():
            assert f"tests/{prog}.cpp" in log

    pin = tmp_path / "pin"
    GitRepo(project.work_repo).run("worktree", "add", "--detach", str(pin), "upstream")
    try:
        r = metalcheck.compile_check(pin, tmp_path / "pin-check" / "check.log", programs)
        assert r.ok, f"{r.first_error} (log {r.log})"
        assert "ggml-metal-context.m (arm64)" in r.log.read_text()
    finally:
        GitRepo(project.work_repo).run("worktree", "remove", "--force", str(pin))

"""Proofs in lanes at once give the verdicts of proofs one after another: the same outcomes, cases,
mutations caught and hunks, on the synthetic series of test_verify (one patch per outcome)."""

from __future__ import annotations

import shutil
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from test_verify import project_dir  # noqa: F401 (the fixture)

from builder.compile import cmakebuild
from builder.compile.jobserver import Jobserver
from builder.gitrepo import GitRepo, init_repo
from builder.project import load_project
from builder.prove import evidence, trees
from builder.prove.schedule import Beside, FirstBuilds, lanes_for, run_lanes
from builder.prove.treebuild import lane_build_dir
from builder.prove.verdicts import VerifyReport
from builder.prove.verifier import Verifier
from builder.prove.verify import verify
from builder.series.apply import apply


def _run(base: Path, src: Path, lanes: int) -> tuple[VerifyReport, dict]:
    root = base / f"lanes-{lanes}"
    shutil.copytree(src, root)
    project = load_project(root=root, cache_dir=base / f"cache-{lanes}")
    apply(project)
    report = verify(project, backends=["cpu"], lanes=lanes, hunks=True, reuse=False)
    found = {}
    for v in report.verdicts:
        e = evidence.load(project.evidence_dir, v.patch, v.backend)
        assert e is not None
        # the hunks without their times and log paths
        hunks = [{k: h[k] for k in ("file", "lines", "outcome", "reason", "failing", "errors", "commit")}
                 for h in e.hunks]
        found[v.patch] = {"outcome": e.outcome, "reason": e.reason, "cases": e.cases, "hunks": hunks,
                          "steps": [(s.tree, s.label, s.build_ok, s.verdict) for s in e.steps]}
    return report, found


@pytest.mark.parametrize("lanes", [3])
def test_lanes_give_the_verdicts_of_one_lane(project_dir: Path, tmp_path: Path, lanes: int) -> None:  # noqa: F811
    one, one_found = _run(tmp_path, project_dir, 1)
    many, many_found = _run(tmp_path, project_dir, lanes)
    assert [(v.patch, v.outcome, v.reason) for v in many.verdicts] == [(v.patch, v.outcome, v.reason)
                                                                     for v in one.verdicts]
    for patch, found in one_found.items():
        for what, value in found.items():
            assert many_found[patch][what] == value, (patch, what)
    # the lanes really ran: each in its own worktree and build folder
    root = tmp_path / f"lanes-{lanes}"
    project = load_project(root=root, cache_dir=tmp_path / f"cache-{lanes}")
    assert (project.verify_dir / "src-1").is_dir()
    assert (project.build_root / "verify-cpu-minimal-1").is_dir()


def test_how_many_lanes() -> None:
    # on 2 or 3 slots one lane (a canary round); else at most one per two slots, one per chain
    assert lanes_for(5, 2) == 1 and lanes_for(5, 3) == 1
    # verify's trees run tests between their builds: two lanes on 2 or 3 slots (a build beside a test), one on 1
    assert lanes_for(5, 2, with_tests=True) == 2 and lanes_for(5, 3, with_tests=True) == 2
    assert lanes_for(5, 1, with_tests=True) == 1 and lanes_for(1, 2, with_tests=True) == 1
    assert lanes_for(5, 16, with_tests=True) == lanes_for(5, 16)
    assert 1 <= lanes_for(5, 16) <= 5 and lanes_for(20, 16) <= 8
    assert lanes_for(5, 2, lanes=3) == 3 and lanes_for(2, 16, lanes=3) == 2 and lanes_for(1, 16) == 1


def test_no_compiler_cache_is_one_lane() -> None:
    """Lanes share the library's objects only through the compiler cache: without one each lane compiles the
    whole library again (a cold `all` on 16 cores without ccache did not finish its lanes in the time the
    sequential run took), so the default is one lane; lanes asked for are still given."""
    assert lanes_for(5, 16, shared_objects=False) == 1
    assert lanes_for(5, 16, lanes=3, shared_objects=False) == 3
    assert lanes_for(5, 16, shared_objects=True) > 1


def test_lanes_with_the_same_library_build_it_one_after_another() -> None:
    """The first build of a library waits for another lane's first build of the same one (then the compiler
    cache has its objects); a lane with another library does not wait."""
    first = FirstBuilds()
    order: list[str] = []
    building = threading.Event()
    release = threading.Event()

    def lane(name: str, key: str, hold: bool) -> None:
        with first.first(key) as mine:
            order.append(f"{name} {'builds' if mine else 'finds it built'}")
            if hold:
                building.set()
                release.wait(5)

    a = threading.Thread(target=lane, args=("a", "cuda@1", True))
    a.start()
    assert building.wait(5)
    b = threading.Thread(target=lane, args=("b", "cuda@1", False))
    c = threading.Thread(target=lane, args=("c", "cpu@1", False))
    b.start()
    c.start()
    c.join(5)
    assert order == ["a builds", "c builds"], "a lane of another library waited, or one of the same did not"
    release.set()
    a.join(5)
    b.join(5)
    assert order == ["a builds", "c builds", "b finds it built"]


def test_a_build_ahead_holds_every_first_build_on_its_backend_until_its_libraries_are_built() -> None:
    """`all` beside its proofs: each lane's first build on the patched tree's backend waits until that tree's
    libraries are built (their objects are then in the compiler cache), its slot lent meanwhile; a lane on
    another backend does not wait; a lane that reuses the work tree's build waits for the whole build."""
    order: list[str] = []
    libraries, whole = threading.Event(), threading.Event()

    def build_and_test(beside: Beside, pool: Jobserver) -> str:
        order.append("build starts")
        assert libraries.wait(5)
        order.append("libraries built")
        beside.libraries_built()
        assert whole.wait(5)
        order.append("build ends")
        beside.built()
        return "tested"

    beside = Beside("cpu", build_and_test)  # type: ignore[arg-type]
    first = FirstBuilds()
    beside.attach(first)
    lent: list[str] = []

    def work(lane: int, chain: tuple[str, str, bool]) -> str:
        name, backend, reuses = chain

        @contextmanager
        def idle() -> Iterator[None]:
            lent.append(name)
            yield

        if reuses:
            beside.wait_built(idle)
            order.append(f"{name} reuses the build")
            return name
        with first.first(f"{backend}@{name}", backend, idle):
            order.append(f"{name} builds first")
        if name == "metal":
            libraries.set()
        if name == "a":
            whole.set()
        return name

    with Jobserver(4, 4) as pool:
        done = run_lanes([("metal", "metal-replay", False), ("a", "cpu", False), ("head", "cpu", True)], 3, work,
                         pool=pool, beside=beside)
    assert done == ["metal", "a", "head"]
    assert beside.outcome() == "tested"
    assert order.index("metal builds first") < order.index("libraries built") < order.index("a builds first")
    assert order.index("build ends") < order.index("head reuses the build")
    assert sorted(lent) == ["a", "head"]


def test_lanes_of_the_libraries_built_ahead_do_not_take_turns_after_it() -> None:
    """The build ahead (`all`'s patched tree) is the first build of its own library keys: once its libraries are
    built, two lanes with one of those keys build at once (each compiles only its own test programs); two lanes of
    another key still take turns."""
    first = FirstBuilds()
    libraries_built = first.ahead("cpu", [("cpu", "head")])
    started: list[str] = []
    holding = {name: threading.Event() for name in ("a", "b", "c", "d")}
    release = threading.Event()

    def lane(name: str, key: tuple[str, str]) -> None:
        with first.first(key, "cpu"):
            started.append(name)
            holding[name].set()
            release.wait(5)

    threads = [threading.Thread(target=lane, args=(n, k)) for n, k in
               (("a", ("cpu", "head")), ("b", ("cpu", "head")), ("c", ("cpu", "other")), ("d", ("cpu", "other")))]
    for t in threads:
        t.start()
    time.sleep(0.3)
    assert started == [], "a first build did not wait for the libraries built ahead"
    libraries_built()
    assert holding["a"].wait(5) and holding["b"].wait(5), "a lane of the libraries built ahead waited for the other"
    deadline = time.monotonic() + 5
    while len(started) < 3 and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(0.3)
    assert len(started) == 3 and {"a", "b"} < set(started), f"two lanes of another key built at once: {started}"
    release.set()
    for t in threads:
        t.join(5)
    assert sorted(started) == ["a", "b", "c", "d"]


def test_the_patched_trees_build_is_the_first_of_the_series_heads_library_key(project_dir: Path,  # noqa: F811
                                                                               tmp_path: Path) -> None:
    """What `all` registers for the build beside the lanes is the key a lane computes for a tree with the head's
    library sources (else the lanes would take turns after it as before); the pin's differs."""
    root = tmp_path / "p"
    shutil.copytree(project_dir, root)
    project = load_project(root=root, cache_dir=tmp_path / "cache")
    apply(project)
    v = Verifier(project)
    made = v.make_trees()
    b = v.builder
    b.reference = made[max(made)].after
    keys = b.head_keys("cpu")
    assert b.library_key(b.target(made[max(made)].after)[0], "cpu", ("test-add",)) in keys
    assert b.library_key(b.target(made[min(made)].parent)[0], "cpu", ("test-add",)) not in keys


def test_a_lane_compiles_its_own_test_program_while_the_libraries_are_built_beside(project_dir: Path,  # noqa: F811
                                                                                      tmp_path: Path) -> None:
    """While a lane's first build waits for the libraries of the build beside it (`all` on 8 job slots or more),
    it compiles the objects of its test programs whose source is not the head's (the build beside makes the
    head's): the program's objects only, nothing linked, each version in one lane; not once the libraries are
    built. On 16 cores patch 4's lane compiled test-backend-ops.cpp (17 s) only after those libraries."""
    root = tmp_path / "p"
    shutil.copytree(project_dir, root)
    project = load_project(root=root, cache_dir=tmp_path / "cache")
    apply(project)
    v = Verifier(project)
    one = v.make_trees()[1]
    b = v.builder
    # a head without patch 1's test-add.cpp: that version is not the one the build beside compiles
    b.reference = one.parent
    b.first_builds = FirstBuilds()
    libraries_built = b.first_builds.ahead("cpu")
    b.checkout(one.after)
    spec = cmakebuild.BuildSpec(source=b.src, build_dir=lane_build_dir(project, "cpu", 0), backend="cpu",
                                targets="minimal", programs=("test-add",), build_targets=("test-add",), jobs=2,
                                platform_cache=project.platform_cache)
    b.compile_ahead(spec, one.after, "cpu")
    (obj,) = spec.build_dir.rglob("test-add.cpp.o")
    assert not (spec.build_dir / "bin" / "test-add").exists()
    assert not list(spec.build_dir.rglob("calc.c.o"))  # nor the library's (ggml's) objects
    assert cmakebuild.built_from(spec.build_dir) is None  # not recorded as a built folder
    # the same version is compiled by one lane only, and by none once the libraries are built
    obj.unlink()
    b.compile_ahead(spec, one.after, "cpu")
    assert not obj.exists()
    b.first_builds = FirstBuilds()
    b.first_builds.ahead("cpu")()
    b.compile_ahead(spec, one.after, "cpu")
    assert not obj.exists()
    libraries_built()


def test_an_error_beside_the_lanes_is_raised_after_them() -> None:
    def fails(beside: Beside, pool: Jobserver) -> None:
        raise RuntimeError("the build beside broke")

    beside = Beside("cpu", fails)  # type: ignore[arg-type]
    first = FirstBuilds()
    beside.attach(first)
    with Jobserver(2, 1) as pool:
        # its end releases the lanes that wait for it
        assert run_lanes(["x"], 1, lambda lane, c: beside.wait_built() or c, pool=pool, beside=beside) == ["x"]
    with pytest.raises(RuntimeError, match="the build beside broke"):
        beside.outcome()


def test_the_library_sources_of_a_tree(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    init_repo(repo)
    git = GitRepo(repo)

    def commit(files: dict[str, str]) -> str:
        for name, text in files.items():
            (repo / name).parent.mkdir(parents=True, exist_ok=True)
            (repo / name).write_text(text)
        git.run("add", "-A")
        git.run("-c", "user.name=t", "-c", "user.email=t@t", "commit", "--quiet", "-m", "x")
        return git.out("rev-parse", "HEAD")

    base = commit({"ggml/include/ggml.h": "int a;\n", "ggml/src/ggml.c": "int b;\n",
                   "ggml/src/ggml-cpu/ops.c": "int c;\n", "ggml/src/ggml-metal/ops.m": "int d;\n",
                   "ggml/src/ggml-cuda/ops.cu": "int e;\n", "tests/test-a.cpp": "int main() {}\n"})
    test = commit({"tests/test-a.cpp": "int main() { return 0; }\n"})
    metal = commit({"ggml/src/ggml-metal/ops.m": "int d2;\n"})
    header = commit({"ggml/include/ggml.h": "int a2;\n"})
    cpu = trees.library_sources
    assert cpu(git, base, "cpu") == cpu(git, test, "cpu") == cpu(git, metal, "cpu")
    assert cpu(git, metal, "cuda") == cpu(git, base, "cuda")
    assert cpu(git, metal, "metal-replay") != cpu(git, base, "metal-replay")
    assert cpu(git, header, "cpu") != cpu(git, metal, "cpu")
    assert cpu(git, base, "cpu") != cpu(git, base, "cuda")

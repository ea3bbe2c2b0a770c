"""`verify --plan`: every tree a run would build and test, why, what it waits for, its estimated
cost and the critical path, printed before anything is built; `--plan --json` is what CI shards on."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import test_workflows as tw
from helpers import copy_real_project, json_document, run_patchset
from test_verify import project_dir  # noqa: F401 (the fixture)

from builder.project import Project, load_project
from builder.prove.verify import plan
from builder.series.load import load_series


def test_the_plan_names_each_tree_and_builds_nothing(project_dir: Path, tmp_path: Path) -> None:  # noqa: F811
    root = tmp_path / "project"
    shutil.copytree(project_dir, root)
    cache = tmp_path / "cache"
    r = run_patchset("--project", str(root), "verify", "--backend", "cpu", "--plan", "--json",
                     env={"PATCHSET_CACHE": str(cache)})
    assert r.returncode == 0, r.stderr
    doc = json_document(r.stdout)
    assert doc["format"] == "patchset-plan/1"
    chains = {c["patch"].split("-")[0]: c for c in doc["chains"]}
    nodes = {n["id"]: n for n in doc["nodes"]}
    # patch 1: after, its mutation, before, in that order in one chain, each waiting for the one before
    one = [nodes[i] for i in chains["0001"]["nodes"]]
    assert [n["tree"] for n in one] == ["after", "mutation", "before"]
    assert one[0]["waits_for"] == [] and one[1]["waits_for"] == [one[0]["id"]]
    assert all(n["why"] and n["cost_s"] > 0 and n["cost_from"] == "estimate" for n in one)
    # patch 5 needs cuda: nothing to build on the cpu (no test runs there)
    assert "0005" not in chains
    assert any(s["patch"].startswith("0005") for s in doc["settled"])
    # the longest chain first, and it is the critical path
    costs = [c["cost_s"] for c in doc["chains"]]
    assert costs == sorted(costs, reverse=True)
    assert doc["critical_path"]["nodes"] == doc["chains"][0]["nodes"]
    assert doc["matrix"]["include"] == [{"backend": "cpu", "patch": c["patch"]} for c in doc["chains"]]
    # nothing was built, no worktree was made
    project = load_project(root=root, cache_dir=cache)
    assert not project.build_root.exists() or not any(project.build_root.iterdir())
    assert not (project.verify_dir / "src").exists()
    text = run_patchset("--project", str(root), "verify", "--backend", "cpu", "--plan",
                        env={"PATCHSET_CACHE": str(cache)})
    assert text.returncode == 0 and "critical path" in text.stdout, text.stderr


@pytest.mark.integration
def test_the_ci_matrix_from_the_real_series_plan(real_pin_cache: Path, tmp_path: Path) -> None:
    """The real series' plan on the cpu and the Metal replay: one job per patch and backend that builds a tree,
    which `patchset verify PATCH --backend BACKEND` proves (the workflow's shard)."""
    project: Project = copy_real_project(tmp_path / "real", real_pin_cache)
    planned = plan(project, backends=["cpu", "metal-replay"], reuse=False)
    matrix = planned.to_json()["matrix"]["include"]
    names = {p.name for p in load_series(project.patches_dir).patches}
    assert matrix and {m["patch"] for m in matrix} <= names
    assert {m["backend"] for m in matrix} <= {"cpu", "metal-replay"}
    assert len(matrix) == len({(m["patch"], m["backend"]) for m in matrix})
    assert not project.build_root.exists() or not any(project.build_root.iterdir())
    # verify-shards.yml with this matrix: each job's call parses, and names its patch and backend
    calls = [argv for _, argv in tw.workflow_calls(tw.ROOT / ".github" / "workflows" / "verify-shards.yml", matrix)]
    shards = [argv for argv in calls if argv[:1] == ["verify"] and "--plan" not in argv and len(argv) == 4]
    assert [tw.parse_error(argv) for argv in shards] == [None] * len(shards)
    assert sorted((argv[1], argv[3]) for argv in shards) == sorted((m["patch"], m["backend"]) for m in matrix)

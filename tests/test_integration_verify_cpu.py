"""The real pin's series verified whole on the CPU: every patch's trees built, run and proven. The longest test
of the suite, so a module of its own (tests/conftest.py starts it first): on another worker than
test_integration_build.py it runs on that worker's copy of the real project, while the build module's other
tests run beside it; the session's CPU build is made once (conftest.py `real_cpu_build`, the other worker
waits for it) and each tree verify builds takes the objects it shares with it from the compiler cache.
Slow (a cold ggml build on 2 cores, and every patch's trees): marked integration."""

from __future__ import annotations

import json

import pytest

# the build module's fixtures, found by pytest in this module's namespace: the session's real project and its
# CPU build (the same objects where both modules run on one worker)
from test_integration_build import built, project

from builder.compile.testrun import FAILED
from builder.project import Project
from builder.prove.verify import verify
from builder.series.load import load_series
from builder.words import PROVEN

pytestmark = pytest.mark.integration
__all__ = ["built", "project"]


def test_verify_on_the_cpu(project: Project, built) -> None:
    # one run a tree: what confirming runs decide is checked on real trees at the default confirm by
    # test_integration_build.py's hunks of patch 3 and the replay, metal-linux and wheel verifies (patches 5, 1,
    # B1), and at confirm 10 on patch 3's proof; two more runs here were a sixth of the suite's longest test
    report = verify(project, backends=["cpu"], confirm=1)
    outcomes = {v.patch: v for v in report.verdicts}
    names = sorted(outcomes)
    assert len(names) == 6
    nil_lookup, eval_status, opt_free, grad_inplace, acc_set, nil_fails_graph = names
    assert outcomes[eval_status].outcome == PROVEN, outcomes[eval_status].reason
    assert outcomes[opt_free].outcome == PROVEN, outcomes[opt_free].reason
    # a fix to the test program itself: the tree before it aborts in grad mode
    assert outcomes[grad_inplace].outcome == PROVEN, outcomes[grad_inplace].reason
    # metal-linux is here only where its toolchain is built in this cache (the metal-linux module may have linked it)
    for metal_patch in (nil_lookup, acc_set, nil_fails_graph):
        assert outcomes[metal_patch].outcome in ("needs metal", "needs metal metal-linux"), outcomes[metal_patch]
    assert report.ok and not report.regressed
    # patch 5's (the Metal ACC/SET fix) tests run on the CPU with the fix, and pass there
    data = json.loads(outcomes[acc_set].evidence_json.read_text())
    assert [s["tree"] for s in data["steps"]] == ["after"]
    assert data["steps"][0]["verdict"] == "passes"
    # its after tree is patch 6's parent, built in verify's own folder (the work tree is patch 6's)
    assert data["steps"][0]["build_command"].startswith(f"cmake --build {project.build_root / 'verify-cpu-minimal'}")
    # patch 3's proof includes its three mutations, each seen failing; its cases use the public API only,
    # so the tree before the fix builds and its test fails
    data = json.loads(outcomes[opt_free].evidence_json.read_text())
    # (and the parent tree, pin + patches 1-2 without its test part, tells which cases it adds or changes)
    assert [s["tree"] for s in data["steps"]] == ["before", "after", "mutation", "mutation", "mutation", "parent"]
    assert [s["label"] for s in data["steps"][2:5]] == list(load_series(project.patches_dir).patches[2].meta.mutation)
    assert data["steps"][0]["verdict"] == "fails"
    assert {s["verdict"] for s in data["steps"][2:5]} == {"fails"}
    # its before tree lacks its one line of comment in ggml-backend.h, which every object of ggml includes: it is
    # checked out as the series head has it, as after and the mutations had it, so the switch compiled none of them
    # again (patch 6's comment in ggml-metal-fusion.cpp is the head's in every tree before it too)
    assert "ggml/include/ggml-backend.h" in data["steps"][0]["reference_comments"]
    assert data["steps"][0]["comment_only"] == []
    assert "ggml/include/ggml-backend.h" not in data["steps"][1]["reference_comments"]
    # patch 2's tree before the fix builds and fails by behaviour; its mutations (iter and opt_i advanced, the
    # failed step recorded, the partial gradients kept) are seen failing too
    data = json.loads(outcomes[eval_status].evidence_json.read_text())
    assert [s["tree"] for s in data["steps"]] == ["before", "after", "mutation", "mutation", "mutation", "parent"]
    # every tree of patch 2 lacks that line too: compiled alike, in the head's version
    assert all("ggml/include/ggml-backend.h" in s["reference_comments"] for s in data["steps"])
    assert data["steps"][0]["verdict"] == "fails"
    assert {s["verdict"] for s in data["steps"][2:5]} == {"fails"}
    assert FAILED not in {s["verdict"] for s in data["steps"]}

"""A fork's first day: `drop --reason` writes the drop log, `import` brings a branch range, an mbox or a
pull request's .patch file into the series. Through the CLI on the synthetic upstream; each verb
leaves `patched` and patches/ in step and `undo` takes it back."""

from __future__ import annotations

from helpers import STANDARD_NAMES, Proj, run_patchset
from test_series_verbs import in_step, ps

from builder.series.dropped import BY_HAND, parse


def applied(proj: Proj) -> Proj:
    assert ps(proj, "apply")[0] == 0
    return proj


def test_drop_with_a_reason_logs_it_and_undo_takes_both_back(proj: Proj) -> None:
    applied(proj)
    before = proj.snapshot()
    pin = proj.upstream.commit
    rc, out = ps(proj, "drop", "2", "--reason", "upstream took another design\t(see #12)")
    assert rc == 0, out
    assert STANDARD_NAMES[1] not in proj.series()
    [(_, record)] = parse(proj.patches / "dropped")[0]
    assert (record.patch, record.commit, record.why) == (STANDARD_NAMES[1], pin, BY_HAND)
    assert record.evidence == "upstream took another design (see #12)" and len(record.patch_id) == 40
    in_step(proj)
    assert run_patchset("--project", str(proj.root), "check").returncode == 0
    # a second drop appends; undo takes back only its own record
    rc, out = ps(proj, "drop", "1", "--reason", "not needed on our hardware")
    assert rc == 0, out
    assert [r.patch for _, r in parse(proj.patches / "dropped")[0]] == [STANDARD_NAMES[1], STANDARD_NAMES[0]]
    rc, out = ps(proj, "undo")
    assert rc == 0, out
    assert [r.patch for _, r in parse(proj.patches / "dropped")[0]] == [STANDARD_NAMES[1]]
    rc, out = ps(proj, "undo")
    assert rc == 0, out
    assert proj.snapshot() == before  # the log the first drop made went with its record
    assert run_patchset("--project", str(proj.root), "check").returncode == 0
    in_step(proj)


def test_drop_without_a_reason_or_with_an_empty_one(proj: Proj) -> None:
    applied(proj)
    rc, out = ps(proj, "drop", "3", "--reason", "  ")
    assert rc == 2 and "--reason" in out
    assert len(proj.series()) == 3 and not (proj.patches / "dropped").exists()
    rc, out = ps(proj, "drop", "3")
    assert rc == 0, out
    assert not (proj.patches / "dropped").exists()

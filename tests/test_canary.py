"""patchset canary: the first commit that breaks each patch over a synthetic upstream history, by
bisection, checked against a linear scan; and renames followed (canary, rebase --dry-run)."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from helpers import (
    A_C,
    B_C,
    PATCH1_A_C,
    PATCH1_MSG,
    PATCH3_TEST_X_C,
    STANDARD_PATCHES,
    TEST_X_C,
    Proj,
    commit,
    git,
    json_document,
    make_project,
    make_upstream,
    pin_toml,
    write_patches,
)

from builder.cli import main
from builder.commands import jsonout
from builder.series.canary import FOLLOWED, KIND_CONFLICT, KIND_DEPENDS, KIND_RENAME, KIND_UPSTREAM, canary

PATCH4_TEST_X_C = PATCH3_TEST_X_C.replace("assert(b_len(NULL) == 0);", 'assert(b_len(NULL) == 0 && "empty");')
COMMITS = 40
RENAME, FIXED, CONFLICTS, LOST = 12, 25, 31, 36
"""The commits (1-based, after the pin) where upstream moves src/b.c to lib/b.c (followed), takes
patch 1 as is, rewrites the line patch 3 inserts after, and moves lib/b.c again while rewriting it
(git sees no rename: patch 2 is lost)."""


def _history(proj: Proj) -> list[str]:
    """The commits, made in the upstream's working repository and pushed to its remote at once."""
    up = proj.upstream
    ids = []
    for i in range(1, COMMITS + 1):
        files: dict[str, str | bytes | None] = {f"notes/n{i}.txt": f"note {i}\n"}
        if i == RENAME:
            files |= {"src/b.c": None, "lib/b.c": B_C}
        elif i == FIXED:
            files |= {"src/a.c": PATCH1_A_C}
        elif i == CONFLICTS:
            files |= {"tests/test-x.c": TEST_X_C.replace('assert(b_len("ab") == 2);', 'assert(b_len("abc") == 3);')}
        elif i == LOST:
            files |= {"lib/b.c": None, "core/strings.c": "/* rewritten */\nint b_size(const char *s);\n"}
        ids.append(commit(up.src, files, f"upstream change {i}\n"))
    git(up.src, "push", "--quiet", str(up.bare), "HEAD:refs/heads/main")
    return ids


@pytest.fixture
def ranged(tmp_path: Path, cache_dir: Path) -> tuple[Proj, list[str]]:
    up = make_upstream(tmp_path)
    # patch 4 is fork-only: canary maps it like any other
    patches = [*STANDARD_PATCHES, ({"tests/test-x.c": PATCH4_TEST_X_C}, "tests: say why NULL is 0\n\n"
                                   "Patchset-Upstream: fork-only the fork's own wording\n")]
    proj = make_project(tmp_path, up, cache_dir, patches=patches)
    return proj, _history(proj)


def test_canary_finds_each_patch_s_first_breaking_commit_as_a_linear_scan_does(
        ranged: tuple[Proj, list[str]], capsys: pytest.CaptureFixture[str]) -> None:
    proj, ids = ranged
    names = proj.series()
    status = git(proj.root, "status", "--porcelain", check=False)

    report = canary(proj.project)
    scan = canary(proj.project, scan=True)

    got = [(p.patch, p.broken_at.id if p.broken_at else None, p.kind, p.depends_on) for p in report.patches]
    assert got == [
        (names[0], ids[FIXED - 1], KIND_UPSTREAM, ""),
        (names[1], ids[LOST - 1], KIND_RENAME, ""),
        (names[2], ids[CONFLICTS - 1], KIND_CONFLICT, ""),
        (names[3], ids[CONFLICTS - 1], KIND_DEPENDS, names[2]),
    ]
    # the linear scan names the same commits; the bisection tries each patch far fewer times
    assert [(p.patch, p.broken_at, p.kind) for p in scan.patches] == \
        [(p.patch, p.broken_at, p.kind) for p in report.patches]
    bound = 2 * math.ceil(math.log2(COMMITS))
    assert all(p.tries <= bound for p in report.patches), [p.tries for p in report.patches]
    assert all(p.tries >= FIXED for p in scan.patches)
    # the parent of each first breaking commit applies (step 1: the last good commit tried is the parent)
    for p in report.patches:
        assert p.broken_at and p.last_good == git(proj.upstream.src, "rev-parse", f"{p.broken_at.id}^")
    assert report.newest_whole == ids[FIXED - 2]
    assert report.patches[2].broken_at and report.patches[2].broken_at.files == ("tests/test-x.c",)
    assert report.patches[2].broken_at.subject == f"upstream change {CONFLICTS}"
    # patch 2 applied through the first move because its path was followed
    assert report.patches[1].renamed == ("src/b.c -> lib/b.c",)
    assert (report.old, report.new, report.commits) == (proj.upstream.commit, ids[-1], COMMITS)
    assert git(proj.root, "status", "--porcelain", check=False) == status

    # the command: the same report as JSON (tries counted), exit 3 because patches break
    capsys.readouterr()
    md = proj.root / "canary.md"
    assert main(["--project", str(proj.root), "canary", "--json", "--markdown", str(md)]) == 3
    data = json_document(capsys.readouterr().out)
    assert data == jsonout.document("canary", report.as_json(), code=3)
    assert [p["tries"] for p in data["patches"]] == [p.tries for p in report.patches]
    assert f"`{ids[FIXED - 1][:12]}`" in md.read_text()

    # up to a commit before any break: the whole series applies at NEW, patch 2 by a followed rename
    before = canary(proj.project, ids[FIXED - 2])
    assert before.broken == () and before.newest_whole == ids[FIXED - 2]
    assert before.as_json()["patches"][1]["class"] == FOLLOWED
    # from OLD, every 4th commit: the commit found is the first one tried that breaks
    stepped = canary(proj.project, ids[-1], ids[RENAME - 1], step=4)
    assert stepped.commits == COMMITS - RENAME
    first = stepped.patches[0].broken_at
    assert first and first.id == ids[RENAME + 4 * math.ceil((FIXED - RENAME) / 4) - 1]


def test_canary_bad_input_is_one_line_and_exit_2(proj: Proj, capsys: pytest.CaptureFixture[str]) -> None:
    for args, words in ((["--step", "0"], "--step 0"), (["--range", "main"], "expected OLD..NEW"),
                        (["--range", f"..{proj.upstream.commit}"], "nothing to try")):
        capsys.readouterr()
        assert main(["--project", str(proj.root), "canary", *args]) == 2
        errors = [ln for ln in capsys.readouterr().err.splitlines() if ln.startswith("error:")]
        assert len(errors) == 1 and words in errors[0], errors


SIDE_BREAKS = 6
"""The commit (1-based, of 9 after the side series' pin) where its upstream rewrites the line its patch changes."""


def _side_series(proj: Proj, tmp_path: Path) -> tuple[str, str, list[str]]:
    """A second series `side` (patches-side/, upstream/side.toml) of one patch on an upstream of its own
    with 9 commits after its pin: (the pin's commit, the patch's name, the commits)."""
    (tmp_path / "side").mkdir()
    side = make_upstream(tmp_path / "side")
    (proj.root / "upstream" / "side.toml").write_text(
        pin_toml(side.commit, side.tree, [{"kind": "git", "url": side.url}]))
    scratch = tmp_path / "side-scratch"
    git(tmp_path, "clone", "--quiet", str(side.bare), str(scratch))
    (proj.root / "patches-side").mkdir()
    name, = write_patches(proj.root / "patches-side", scratch, [commit(scratch, {"src/a.c": PATCH1_A_C}, PATCH1_MSG)])
    ids = [side.advance({f"notes/n{i}.txt": f"note {i}\n"} | (
        {"src/a.c": A_C.replace("    return x + y;", "    return x + y + 0;")} if i == SIDE_BREAKS else {}),
        f"side {i}\n") for i in range(1, 10)]
    return side.commit, name, ids


def test_canary_maps_a_second_series_over_its_own_upstream(proj: Proj, tmp_path: Path,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    """`--series NAME`: patches-NAME/ over the history of its own pin (upstream/NAME.toml), text checks;
    the main series and its pin are not read. --build/--test build llama.cpp's tree: refused with it."""
    pinned, name, ids = _side_series(proj, tmp_path)
    breaks = SIDE_BREAKS
    # the main series' pin has no commit after it: canary on it would have nothing to try
    before = proj.snapshot()
    capsys.readouterr()
    assert main(["--project", str(proj.root), "--series", "side", "canary", "--json"]) == 3
    report = json_document(capsys.readouterr().out)
    assert report["old"] == pinned and report["new"] == ids[-1] and report["commits"] == len(ids)
    row, = report["patches"]
    assert row["patch"] == name and row["class"] == KIND_CONFLICT
    assert row["broken_at"]["commit"] == ids[breaks - 1] and row["last_good"] == ids[breaks - 2]
    assert row["broken_at"]["files"] == ["src/a.c"] and report["newest_whole"]["commit"] == ids[breaks - 2]
    assert proj.snapshot() == before
    assert main(["--project", str(proj.root), "--series", "side", "canary", "--test"]) == 2
    err = capsys.readouterr().err
    assert "--series side" in err and "--test" in err and len(err.strip().splitlines()) == 1


def test_rebase_moves_a_second_series_and_leaves_the_main_one(proj: Proj, tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    """`--series NAME rebase`: the second series moves on its own upstream (its pin and patches-NAME/
    rewritten, its work repository moved), the main series' pin and patches/ stay as they are; the dry
    run names the conflict canary found; --fixed-upstream (it builds llama.cpp's tree) is refused."""
    _pinned, name, ids = _side_series(proj, tmp_path)
    main_files = {f: (proj.root / f).read_bytes() for f in ("upstream/llama.cpp.toml", *(
        f"patches/{n}" for n in proj.series()))}
    cli = ["--project", str(proj.root), "--series", "side"]
    assert main([*cli, "apply"]) == 0
    capsys.readouterr()
    assert main([*cli, "rebase", "--dry-run", "--json", "--onto", ids[SIDE_BREAKS - 1]]) == 3
    row, = json_document(capsys.readouterr().out)["patches"]
    assert row["patch"] == name and row["outcome"] == KIND_CONFLICT
    good = ids[SIDE_BREAKS - 2]
    assert main([*cli, "rebase", "--onto", good]) == 0
    assert f'commit = "{good}"' in (proj.root / "upstream" / "side.toml").read_text()
    assert git(proj.root / ".patchset" / "work" / "side", "rev-parse", "upstream") == good
    assert "return (long)x + y;" in (proj.root / "patches-side" / name).read_text()
    assert {f: (proj.root / f).read_bytes() for f in main_files} == main_files
    assert main([*cli, "rebase", "--onto", ids[-1], "--fixed-upstream"]) == 2
    err = capsys.readouterr().err
    assert "--series side" in err and "--fixed-upstream" in err

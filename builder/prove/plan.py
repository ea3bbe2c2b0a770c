"""The plan of a proof run, known before anything is built.

Every tree it will build and test, why, what each waits for, and the critical path (`verify
--plan`, `all --plan`).

A node is one tree of one patch on one backend (after, hunks, mutation, before, parent), or a step
of `all` (the patched tree's build and tests). The trees of one patch on one backend form a chain
and run in order in one lane (they differ least); chains are independent. Costs are estimates, in
seconds, and say where they come from:

- `evidence`: the build and test times the earlier evidence of this patch recorded for that tree;
- `ninja log`: the compile times of the test programs in an earlier build folder's `.ninja_log`,
  plus a second per test run;
- `estimate`: no earlier run: one unit per test program, and a big file weighs its size in units of
  BIG_FILE_BYTES (test-backend-ops.cpp, ~400 kB, is the big one), at UNIT_S seconds a unit; a
  program whose source is the same as in the lane's tree before is not compiled again (one unit for
  what else changed), and one second per test run. The library's first build in a lane is not
  counted (the compiler cache shares it between lanes).

The critical path is the longest chain; with fewer lanes than chains a run takes at least the sum
of the chains over the lanes (the `bound`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from builder.gitrepo import GitRepo
from builder.prove import evidence as ev
from builder.prove.trees import Trees
from builder.series.model import Patch, TestSpec

BIG_FILE_BYTES = 40_000
UNIT_S = 2.0

WHY = {
    "build": "the patched tree (the whole series) built for its tests",
    "test": "the series' declared tests on the patched tree",
    "after": "with the fix: every test must pass (else regressed)",
    "hunks": "each hunk of the fix reverted on its own: the tests must fail (--hunks)",
    "mutation": "the known-bad variant {label}: the tests must fail (the test catches it)",
    "before": "without the fix (only its test paths applied): a case must fail that passes with it",
    "parent": "the tree the patch applies on, where it changes a test program: which cases the patch adds "
              "(run only when the before tree fails)",
    "after-only": "the patch's proof needs {needs}; its tests on this backend must still pass with the fix",
}
"""Why each kind of node is needed (what the plan prints)."""


@dataclass(frozen=True)
class Node:
    id: str
    """`<patch>:<backend>:<tree>` (a step of `all`: `all:<backend>:build`)."""
    patch: str
    backend: str
    tree: str
    commit: str
    waits_for: tuple[str, ...]
    why: str
    cost_s: float
    cost_from: str
    """evidence | ninja log | estimate"""

    def to_json(self) -> dict:
        return {"id": self.id, "patch": self.patch, "backend": self.backend, "tree": self.tree,
                "commit": self.commit, "waits_for": list(self.waits_for), "why": self.why,
                "cost_s": round(self.cost_s, 1), "cost_from": self.cost_from}


@dataclass(frozen=True)
class Chain:
    """The nodes of one patch on one backend, in the order they run, in one lane."""

    patch: str
    backend: str
    nodes: tuple[Node, ...]

    @property
    def cost_s(self) -> float:
        return sum(n.cost_s for n in self.nodes)


@dataclass(frozen=True)
class Settled:
    """A patch and backend the plan builds nothing for, and why."""

    patch: str
    backend: str
    why: str


@dataclass(frozen=True)
class Plan:
    command: str
    lanes: int
    slots: int
    chains: tuple[Chain, ...]
    """Longest first: the order lanes take them in."""
    settled: tuple[Settled, ...] = ()
    steps: tuple[Node, ...] = ()
    """`all`'s steps (build, test): before the proofs, every chain waiting for them; or `beside` them."""
    notes: tuple[str, ...] = field(default=())
    beside: bool = False
    """The steps run beside the chains (`all` with lanes): only a chain that reuses the build waits for them."""

    @property
    def nodes(self) -> tuple[Node, ...]:
        return self.steps + tuple(n for c in self.chains for n in c.nodes)

    @property
    def critical_path(self) -> tuple[Node, ...]:
        """The longest path through what each node waits for."""
        finish: dict[str, float] = {}
        came: dict[str, str | None] = {}
        for n in self.nodes:  # every node comes after what it waits for
            before = max(n.waits_for, key=lambda w: finish.get(w, 0.0), default=None)
            finish[n.id] = n.cost_s + (finish.get(before, 0.0) if before else 0.0)
            came[n.id] = before
        last = max(finish, key=lambda k: finish[k], default=None)
        path: list[Node] = []
        by_id = {n.id: n for n in self.nodes}
        while last is not None:
            path.append(by_id[last])
            last = came[last]
        return tuple(reversed(path))

    @property
    def critical_s(self) -> float:
        return sum(n.cost_s for n in self.critical_path)

    @property
    def bound_s(self) -> float:
        """The least wall time the estimates allow in `lanes` lanes: the critical path, or the chains'
        sum over the lanes where that is more."""
        steps = sum(n.cost_s for n in self.steps)
        chains = [c.cost_s for c in self.chains]
        if self.beside:
            return max(self.critical_s, (steps + sum(chains)) / (max(1, self.lanes) + 1))
        return steps + max(max(chains, default=0.0), sum(chains) / max(1, self.lanes))

    def matrix(self) -> list[dict[str, str]]:
        """One job per chain, by backend and patch: GitHub Actions' `strategy.matrix.include`."""
        return [{"backend": c.backend, "patch": c.patch} for c in self.chains]

    def to_json(self) -> dict:
        return {"command": self.command, "lanes": self.lanes,
                "slots": self.slots, "nodes": [n.to_json() for n in self.nodes],
                "chains": [{"patch": c.patch, "backend": c.backend, "nodes": [n.id for n in c.nodes],
                            "cost_s": round(c.cost_s, 1)} for c in self.chains],
                "settled": [{"patch": s.patch, "backend": s.backend, "why": s.why} for s in self.settled],
                "critical_path": {"nodes": [n.id for n in self.critical_path], "cost_s": round(self.critical_s, 1)},
                "bound_s": round(self.bound_s, 1), "matrix": {"include": self.matrix()}, "notes": list(self.notes),
                "steps_beside": self.beside}


class Costs:
    """Estimated seconds of a tree's build and test run (see the module docstring)."""

    def __init__(self, git: GitRepo, evidence_dir: Path, build_root: Path) -> None:
        self.git = git
        self.evidence_dir = evidence_dir
        self.build_root = build_root
        self._logs: dict[str, dict[str, float]] = {}

    def of(self, patch: Patch, backend: str, tree: str, commit: str, tests: list[TestSpec],
           previous: str | None = None) -> tuple[float, str]:
        """The cost of `commit`'s tree, built in a lane whose last tree was `previous` (a program whose
        source is the same there is not compiled again: it costs one unit, for what else changed)."""
        old = ev.load(self.evidence_dir, patch.name, backend)
        step = next((s for s in old.steps if s.tree == tree), None) if old else None
        if step is not None and not old.reused:  # type: ignore[union-attr]
            return step.build_duration_s + sum(float(t.get("duration_s", 0)) for t in step.tests), "evidence"
        programs = tuple(dict.fromkeys(t.program for t in tests))
        if previous is not None:
            same = [p for p in programs if self.git.blob(commit, f"tests/{p}.cpp") == self.git.blob(
                previous, f"tests/{p}.cpp")]
            programs = tuple(p for p in programs if p not in same)
            if not programs:
                return UNIT_S + len(tests), "estimate"
        logged = self._ninja_log(backend)
        if programs and all(p in logged for p in programs):
            return sum(logged[p] for p in programs) + len(tests), "ninja log"
        units = 0.0
        for p in programs:
            size = self.git.run("cat-file", "-s", f"{commit}:tests/{p}.cpp", check=False).stdout.strip()
            units += 1 + (int(size) / BIG_FILE_BYTES if size.isdigit() else 0)
        return units * UNIT_S, "estimate"

    def _ninja_log(self, backend: str) -> dict[str, float]:
        """The longest compile time of each test program's source in the earlier build folders of `backend`."""
        if backend not in self._logs:
            found: dict[str, float] = {}
            for log in sorted(self.build_root.glob(f"*{backend}-minimal*/.ninja_log")):
                for line in log.read_text(errors="replace").splitlines()[1:]:
                    parts = line.split("\t")
                    if len(parts) < 4 or not parts[3].endswith(".cpp.o") or not parts[0].isdigit():
                        continue
                    name = Path(parts[3]).name.removesuffix(".cpp.o")
                    found[name] = max(found.get(name, 0.0), (int(parts[1]) - int(parts[0])) / 1000)
            self._logs[backend] = found
        return self._logs[backend]


def chain(patch: Patch, trees: Trees, backend: str, tests: list[TestSpec], *, proves: bool, needs: str,
          hunks: bool, costs: Costs, after_steps: tuple[str, ...] = ()) -> Chain:
    """The nodes verify runs for `patch` on `backend` (Verifier.prove_patch's order): only the after
    tree where the proof runs elsewhere (`proves=False`), else after, hunks, mutations, before and
    the parent tree where the patch changes a test program's source."""
    kinds: list[tuple[str, str, str]] = [("after", trees.after, WHY["after"] if proves
                                          else WHY["after-only"].format(needs=needs))]
    if proves:
        if hunks:
            kinds.append(("hunks", trees.after, WHY["hunks"]))
        for i, (label, commit) in enumerate(zip(patch.meta.mutation, trees.mutations, strict=True), 1):
            kinds.append(("mutation" if i == 1 else f"mutation-{i}", commit, WHY["mutation"].format(label=label)))
        kinds.append(("before", trees.before, WHY["before"]))
        if trees.parent and trees.before != trees.parent and _changes_a_test(costs.git, trees, tests):
            kinds.append(("parent", trees.parent, WHY["parent"]))
    nodes: list[Node] = []
    waits = after_steps
    previous: str | None = None
    for kind, commit, why in kinds:
        cost, source = costs.of(patch, backend, kind.split("-")[0] if kind.startswith("mutation") else kind,
                                commit, tests, previous)
        previous = commit
        node = Node(f"{patch.name}:{backend}:{kind}", patch.name, backend, kind, commit, waits, why, cost, source)
        nodes.append(node)
        waits = (node.id,)
    return Chain(patch.name, backend, tuple(nodes))


def _changes_a_test(git: GitRepo, trees: Trees, tests: list[TestSpec]) -> bool:
    """The patch changes the source of a test program the parent tree has (Verifier._case_table then
    may run the parent tree)."""
    changed = set(git.out("diff", "--name-only", trees.parent, trees.before).split())
    return any(f"tests/{t.program}.cpp" in changed and git.blob(trees.parent, f"tests/{t.program}.cpp")
               for t in tests) or any(not (c.startswith("tests/") and c.endswith(".cpp")) for c in changed)


def render(plan: Plan) -> list[str]:
    """The plan as lines of text: each chain with its nodes, the settled ones, the critical path."""
    lines = [f"plan of `patchset {plan.command}`: {len(plan.nodes)} node(s) in {len(plan.chains)} chain(s), "
             f"{plan.lanes} lane(s) on {plan.slots} job slot(s)"]
    for n in plan.steps:
        lines.append(f"  {n.id}  ~{n.cost_s:.0f}s ({n.cost_from}): {n.why}")
    if plan.steps and plan.chains:
        lines.append("  the chains start " + (
            "at once with the steps (each lane's first build after the patched tree's libraries; a chain that "
            "reuses its build after that build and its tests)" if plan.beside else "after the steps"))
    for c in plan.chains:
        waits = c.nodes[0].waits_for if plan.beside and c.nodes else ()
        lines.append(f"  chain {c.patch} [{c.backend}]  ~{c.cost_s:.0f}s" + (
            f" (after {', '.join(waits)})" if waits else ""))
        for n in c.nodes:
            lines.append(f"    {n.tree:<10} {n.commit[:12]}  ~{n.cost_s:.0f}s ({n.cost_from}): {n.why}")
    for s in plan.settled:
        lines.append(f"  {s.patch} [{s.backend}]: nothing to build: {s.why}")
    path = " -> ".join(n.id for n in plan.critical_path) or "none"
    lines.append(f"critical path ~{plan.critical_s:.0f}s: {path}")
    lines.append(f"at least ~{plan.bound_s:.0f}s in {plan.lanes} lane(s) (estimates)")
    lines += [f"note: {n}" for n in plan.notes]
    return lines

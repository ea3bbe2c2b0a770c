"""What a verdict in an evidence file must carry to be taken as one `patchset verify` made.

`patchset evidence update --from DIR` commits the verify.json of a device run; a file edited by
hand could claim anything ("outcome": "proven" and nothing else). A record is taken only when
it has verify's shape (builder.prove.evidence) and every rule here finds it consistent with
itself and with the series as it is now (`Expected`):

- each step's verdict is what its build and test runs say (a step that passes ran tests and
  every one passed, with its log named; a failed build ran nothing);
- `proven` has one before and one after step, the after passing, the before failing as the
  patch's `Patchset-Before` says (a failing before tree with a proof case, or with `crash` a
  program killed by a signal; a run stopped at its time limit is no proof), each
  `Patchset-Mutation` caught, no unguarded hunk, on a backend the patch declares, made on the
  pin now and for these bytes of the patch (its `patch_sha256`, or its after tree, is the
  patch's now) and of its mutations;
- every record is made for the tests, before kind, backends and mutations the patch declares now
  (`declared`; older records: the test commands of the after tree's runs);
- `regressed` and `build failed` have the step that shows it.

Weaker words (not proven, needs X) claim nothing that a run must back, and need only the shape.
A new record in verify's evidence (per test case, say) gets its rule here: a function of the
record and `Expected` that returns what is wrong, or None, added to RULES.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field

from builder.compile import backends as backendmod
from builder.compile import testrun
from builder.fsutil import sha256_file
from builder.prove import cases
from builder.prove import evidence as ev
from builder.series.model import Patch
from builder.words import BUILD_FAILED, PROVEN, REGRESSED
from builder.words import STEP_VERDICTS as _STEP_VERDICTS


@dataclass(frozen=True)
class Expected:
    """The series now, as far as one patch's record on one backend must agree with it."""

    patch: Patch
    backend: str
    """The backend the file holds the record under."""
    patch_sha256: str
    mutation_sha256: dict[str, str] = field(default_factory=dict)
    """Mutation file (as `Patchset-Mutation` names it) -> sha256 of its bytes now."""
    after_tree: str = ""
    """The patch's after tree now (the pin plus the patches up to it), when known."""
    pin_commit: str = ""

    @property
    def declared(self) -> dict:
        """What the patch's trailers declare for its proof on this backend now (`declared`)."""
        return declared(self.patch, self.backend)


def declared(patch: Patch, backend: str) -> dict:
    """What a verdict of `patch` on `backend` answers for, from its trailers and mutation files: the
    test commands that run there (as the evidence's runs name them, less the backend's `-b`), the
    `Patchset-Before` kind, the backends of the proof, and each mutation's sha256 ("" when missing).
    Recorded as the evidence's `declared`; the patch's bytes alone do not say it (a mutation file is
    not in them) and its tree does not either (trailers are not in the tree)."""
    meta = patch.meta
    return {"tests": [" ".join([t.program, *t.args]) for t in meta.tests if t.runs_on(backend, meta.backends)],
            "before": meta.before, "backends": list(meta.backends),
            "mutations": {m: sha256_file(patch.path.parent / m) if (patch.path.parent / m).is_file() else ""
                          for m in meta.mutation}}


def declared_differs(record: dict, now: dict, backend: str) -> str | None:
    """Why an evidence record (a verify.json object) answers for other declared tests than `now`
    (declared()), or None. A record made before `declared` existed is compared by the test commands
    of its after tree's runs."""
    said = record.get("declared")
    if isinstance(said, dict) and said:
        if said.get("tests") != now["tests"]:
            return f"made for other declared tests ({_commands(said.get('tests'))}; the patch declares " \
                   f"{_commands(now['tests'])} now)"
        for k, what in (("before", "Patchset-Before"), ("backends", "Patchset-Backends"),
                        ("mutations", "mutation files")):
            if said.get(k) != now[k]:
                return f"made for other {what} than the patch's now"
        return None
    after = next((s for s in record.get("steps") or () if isinstance(s, dict) and s.get("tree") == "after"), None)
    if after is None or not after.get("tests"):
        return None
    device = f" -b {backendmod.profile(backend).device}" if backend in backendmod.PROFILES else ""
    ran = [str(t.get("command", "")) for t in after["tests"] if isinstance(t, dict)]
    if [c if c in now["tests"] else c.removesuffix(device) for c in ran] != now["tests"]:
        return f"made for other declared tests ({_commands(ran)}; the patch declares {_commands(now['tests'])} now)"
    return None


def _commands(tests: object) -> str:
    return ", ".join(f"`{t}`" for t in tests) if isinstance(tests, list) and tests else "none"


Rule = Callable[[ev.Evidence, Expected], "str | None"]


def _required(cls: type) -> list[str]:
    return [f.name for f in dataclasses.fields(cls)
            if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING]


def problems(data: object, expected: Expected, rules: list[Rule] | None = None) -> list[str]:
    """What is wrong with one patch's evidence record (an object of a verify.json), most telling first;
    `rules`: those to apply (default RULES, every one)."""
    if not isinstance(data, dict):
        return ["not an evidence record of `patchset verify` (not a JSON object)"]
    missing = [f for f in _required(ev.Evidence) if f not in data]
    if missing:
        return [f"not an evidence record of `patchset verify`: no {', '.join(missing)}"]
    steps = data.get("steps")
    if not isinstance(steps, list) or not all(isinstance(s, dict) for s in steps):
        return ["not an evidence record of `patchset verify`: its steps are not a list of objects"]
    for n, s in enumerate(steps, 1):
        gone = [f for f in _required(ev.Step) if f not in s]
        if gone:
            return [f"step {n} ({s.get('tree', '?')}) is not a step of `patchset verify`: no {', '.join(gone)}"]
    try:
        record = ev.from_dict(data)
    except (TypeError, KeyError, ValueError) as e:
        return [f"not an evidence record of `patchset verify` ({e})"]
    return [why for rule in (RULES if rules is None else rules) if (why := rule(record, expected))]


# -- the rules -----------------------------------------------------------------------------------
def identity(e: ev.Evidence, x: Expected) -> str | None:
    if e.patch != x.patch.name:
        return f"the record is of {e.patch}, filed under {x.patch.name}"
    if e.backend != x.backend:
        return f"the record is of backend {e.backend}, filed under {x.backend}"
    return None


def _test_problem(t: dict) -> str | None:
    for key in ("command", "verdict", "log"):
        if not t.get(key):
            return f"a test run with no {key}"
    verdict = t["verdict"]
    broke = bool(t.get("failed")) or t.get("returncode") not in (0, None) or bool(t.get("signal"))
    if verdict == testrun.PASSED and broke:
        return f"`{t['command']}` passed with failures, a non-zero exit or a signal"
    if verdict in (testrun.FAILED, testrun.CRASHED) and not broke:
        return f"`{t['command']}` {verdict} with no failure, exit code or signal"
    return None


def steps_consistent(e: ev.Evidence, x: Expected) -> str | None:
    """Each step's verdict is what its build and test runs say (as TreeBuilder.run_tree decides it)."""
    del x
    for s in e.steps:
        where = f"the {s.tree} tree" + (f" ({s.label})" if s.label else "")
        if not s.commit or not s.tree_id or not s.build_command:
            return f"{where}: no commit, tree or build command"
        if not s.build_ok:
            if s.tests:
                return f"{where}: tests ran although the build failed"
            if s.verdict not in ("build-fails", "build-failed"):
                return f"{where}: the build failed but the verdict is {s.verdict!r}"
            if s.verdict == "build-fails" and not (s.build_errors and s.errors_only_in_test_paths):
                return f"{where}: build-fails with no compiler error in the test files"
            continue
        if s.verdict in ("build-fails", "build-failed"):
            return f"{where}: {s.verdict} although the build succeeded"
        for t in s.tests:
            why = _test_problem(t)
            if why:
                return f"{where}: {why}"
        if s.verdict not in _STEP_VERDICTS:
            continue  # a word of a later verify: what a proof needs of it is checked by proven_has_its_runs
        verdicts = [t["verdict"] for t in s.tests]
        made = ("fails" if any(v in (testrun.FAILED, testrun.CRASHED) for v in verdicts) else
                "passes" if verdicts and all(v == testrun.PASSED for v in verdicts) else "nothing checked")
        if s.verdict != made:
            return f"{where}: verdict {s.verdict!r} but its test runs say {made!r}"
    return None


def _one(e: ev.Evidence, tree: str) -> ev.Step | None:
    found = [s for s in e.steps if s.tree == tree]
    return found[0] if len(found) == 1 else None


def proven_has_its_runs(e: ev.Evidence, x: Expected) -> str | None:
    """A proof: the before tree fails as Patchset-Before says, the after passes, every mutation is caught."""
    if e.outcome != PROVEN:
        return None
    meta = x.patch.meta
    if x.backend not in meta.backends:
        return f"proven on {x.backend}, a backend the patch does not declare (Patchset-Backends: " \
               f"{' '.join(meta.backends) or 'none'})"
    before, after = _one(e, "before"), _one(e, "after")
    if before is None or after is None:
        return "proven without exactly one before and one after step"
    if after.verdict != "passes":
        return f"proven, but the after tree (with the fix) {after.verdict}"
    allowed = ("fails", "build-fails") if meta.before == "build-fails" else ("fails",)
    if before.verdict not in allowed:
        return f"proven, but the before tree {before.verdict} where Patchset-Before is {meta.before}"
    if before.verdict == "fails" and not _proof_case(e, meta.before, before):
        stopped = [t for t in before.tests if timed_out(t)]
        why = f" ({', '.join(str(t.get('command')) for t in stopped)} stopped at its time limit)" if stopped else ""
        return f"proven with no proof case and no crash that Patchset-Before: crash declares{why}: verify says " \
               "cannot tell or not proven"
    caught = {s.label: s.verdict for s in e.steps if s.tree == "mutation"}
    for m in meta.mutation:
        if m not in caught:
            return f"proven without a run of the mutation {m}"
        if caught[m] != "fails":
            return f"proven, but the mutation {m} is not caught (the test {caught[m]})"
    if any(h.get("outcome") == "unguarded" for h in e.hunks if isinstance(h, dict)):
        return "proven with an unguarded hunk"
    return None


def timed_out(t: dict) -> bool:
    """A test run stopped at its time limit: `timed_out`, or in evidence made before that field, killed
    (-9) with no signal named (the time limit kills the process group; a crash names its signal)."""
    if "timed_out" in t:
        return bool(t["timed_out"])
    return t.get("returncode") == -9 and not t.get("signal")


def _proof_case(e: ev.Evidence, declared_before: str, before: ev.Step) -> bool:
    """What makes a failing before tree proof, as verify decides it: a case that fails there and passes
    after (the case table's `proof` role), or with `Patchset-Before: crash` a program killed by a signal
    (not stopped at its time limit)."""
    if any(isinstance(c, dict) and c.get("role") == cases.PROOF for c in e.cases):
        return True
    return declared_before == "crash" and any(t.get("signal") and not timed_out(t) for t in before.tests)


def proven_for_these_bytes(e: ev.Evidence, x: Expected) -> str | None:
    """A proof of the series now: the patch's bytes (or its after tree), its mutations, the pin."""
    if e.outcome != PROVEN:
        return None
    recorded = e.depends.get("patch_sha256")
    after = _one(e, "after")
    trees = {after.tree_id if after else "", str(e.holds.get("trees", {}).get("after", ""))}
    if recorded != x.patch_sha256 and not (x.after_tree and x.after_tree in trees):
        said = f"sha256 {str(recorded)[:12]}" if recorded else "no patch sha256"
        return f"proven for other bytes of the patch ({said}; the series has {x.patch_sha256[:12]})"
    mutations = e.depends.get("mutations", {})
    for m, sha in x.mutation_sha256.items():
        if mutations.get(m) != sha:
            return f"proven with other bytes of the mutation {m}"
    if x.pin_commit and x.pin_commit not in (e.pin.get("commit"), e.holds.get("pin")):
        return f"proven on another pin ({str(e.pin.get('commit'))[:12]}; the pin is {x.pin_commit[:12]})"
    return None


def declared_as_now(e: ev.Evidence, x: Expected) -> str | None:
    """A verdict answers for the tests, mutations and before kind the patch declares now."""
    return declared_differs(dataclasses.asdict(e), x.declared, x.backend)


def failure_has_its_step(e: ev.Evidence, x: Expected) -> str | None:
    """`regressed` and `build failed` name a failure: the step that shows it is there."""
    del x
    if e.outcome == REGRESSED and not any(s.tree == "after" and s.verdict != "passes" for s in e.steps):
        return "regressed with no after step that fails"
    if e.outcome == BUILD_FAILED and not any(not s.build_ok for s in e.steps):
        return "build failed with no step whose build failed"
    return None


RULES: list[Rule] = [identity, steps_consistent, proven_has_its_runs, proven_for_these_bytes, declared_as_now,
                     failure_has_its_step]
"""Every rule, in the order their findings are reported."""

SELF_CONSISTENT: list[Rule] = [r for r in RULES if r is not proven_for_these_bytes]
"""The rules `evidence check` applies to a committed record of the patch's bytes now: all but the
bytes (a proof of older bytes is stale, which check reports on its own, not forged)."""

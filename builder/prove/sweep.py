"""Regression sweep: the same test programs on the pin and on the patched tree, compared case by case.

`patchset test --against upstream` builds the other tree (default: branch `upstream` of the work
repository, the pin) in one extra worktree (`.patchset/against/<ref>`, like verify's), reuses the
patched tree's own build (`patchset build`'s folder), runs the same invocations on both, and
sorts every case into: newly failing (a regression), newly passing, failing in both (upstream's
own, listed and not blamed on the series), newly skipped, and only in one tree. A test program of
the series' own (not test-opt or test-backend-ops) is built and run on the other tree only when
the series leaves its source as it is there: otherwise it is a different test, run on the patched
tree alone.

A test-backend-ops run that crashes (the pin's `grad` mode aborts on REGLU's backward pass)
hides every case after the crash. A run of every op is made one run per first letter of the op
names (`^A`, `^B`, ..., and `^[^AB...]` for names no known op starts with). When a run crashes in
op X, X's cases up to the crash are kept and the same selection less X is run again
(`^R` less REGLU is `^R$,^R[^E],^RE$,^RE[^G],...,^REGLU.`), so one abort costs only X's later
cases and one more run. A crash between cases (no op to name) is split by name prefix instead.
test-backend-ops reads an entry with `^` as a regex matched against the op name; the entries have
no parentheses, which it would read as a full case string.
"""

from __future__ import annotations

import re
import sys
import time
import xml.etree.ElementTree as ET
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path

from builder import proc, words
from builder.compile import backends as backendmod
from builder.compile import cmakebuild as buildmod
from builder.compile import testrun
from builder.compile.testrun import CRASH, FAIL, PASS, SKIP, CaseResult, Invocation, ProgramResult
from builder.errors import BuildError, InputError, ProcessError
from builder.pipeline import build_dir, declared_tests, ensure_patched, programs_for, run_build
from builder.progress import NullProgress, ProgressSink
from builder.project import Project
from builder.prove.trees import checkout_detached
from builder.series.load import load_series
from builder.series.workbase import PATCHED, UPSTREAM

TBO = "test-backend-ops"
FAILING = (FAIL, CRASH)

# categories of the comparison, in report order
NEWLY_FAILING = "newly failing"
NEW_FAILING = "new case failing"
NEWLY_PASSING = "newly passing"
FAILING_IN_BOTH = "failing in both"
NEWLY_SKIPPED = "newly skipped"
ONLY_OTHER = "only in the other tree"
ONLY_PATCHED = "only in the patched tree"
FLAKY = words.FLAKY
"""Changed between the trees, but re-runs of the case disagree within one tree (random inputs)."""
REGRESSION_CATEGORIES = (NEWLY_FAILING, NEW_FAILING)
CATEGORIES = (NEWLY_FAILING, NEW_FAILING, NEWLY_PASSING, FLAKY, FAILING_IN_BOTH, NEWLY_SKIPPED, ONLY_OTHER,
              ONLY_PATCHED)
CONFIRMED = (NEWLY_FAILING, NEW_FAILING, NEWLY_PASSING)


@dataclass(frozen=True)
class SweepOptions:
    backend: str = "cpu"
    mode: str | None = None
    """test-backend-ops mode; None: the backend's default (grad on the CPU, test elsewhere)."""
    ops: tuple[str, ...] | None = None
    """`-o` entries (op names or regexes); None: every op."""
    against: str = UPSTREAM
    """The work repository's ref to compare the patched tree with."""
    jobs: int | None = None
    """Parallel compile jobs."""
    cuda_arch: str | None = None
    workers: int = 1
    """test-backend-ops `-j`: parallel workers (test mode only)."""
    timeout_s: float | None = 3600
    """Per program run."""
    confirm: int = 3
    """Re-runs, on both trees, of each test-backend-ops case that changed, before it counts (0: none)."""


@dataclass(frozen=True)
class TreeRun:
    """One tree's build and the program runs the sweep made on it."""

    label: str
    """'upstream' (or the --against ref) or 'patched'."""
    commit: str
    tree_id: str
    build_dir: Path
    build_s: float
    build_steps: int
    programs: tuple[ProgramResult, ...]
    split_runs: int = 0
    """Runs made to split crashed test-backend-ops runs."""
    crashes: tuple[str, ...] = ()
    """Ops whose run crashed (their later cases did not run), or `-o` entries when no op was named."""

    def cases(self) -> dict[tuple, CaseResult]:
        return keyed_cases(self.programs)


@dataclass(frozen=True)
class Change:
    category: str
    program: str
    case: str
    backend: str
    before: str | None
    """Status on the other tree (None: no such case there)."""
    after: str | None
    detail: str = ""
    name: str = ""
    params: str = ""
    reruns: str = ""
    """What the confirmation re-runs saw, per tree (`upstream F F F, patched F F F`)."""


@dataclass(frozen=True)
class SweepReport:
    backend: str
    mode: str
    ops: tuple[str, ...] | None
    against: str
    other: TreeRun
    patched: TreeRun
    changes: tuple[Change, ...]
    counts: dict[str, int] = field(default_factory=dict)
    """Cases per status in each tree and per category."""
    duration_s: float = 0.0
    confirm: int = 0

    def of(self, category: str) -> list[Change]:
        return [c for c in self.changes if c.category == category]

    @property
    def regressions(self) -> list[Change]:
        return [c for c in self.changes if c.category in REGRESSION_CATEGORIES]

    @property
    def compared(self) -> int:
        return self.counts.get("compared", 0)


# -- case identity ------------------------------------------------------------------------------------
def keyed_cases(programs: tuple[ProgramResult, ...]) -> dict[tuple, CaseResult]:
    """Every case under a key that is the same in both trees: program, backend, variant, name,
    params, and which occurrence of that name it is (a few test cases are listed twice)."""
    out: dict[tuple, CaseResult] = {}
    seen: Counter[tuple] = Counter()
    for p in programs:
        for c in p.cases:
            base = (p.program, c.backend, c.variant, c.name, c.params)
            seen[base] += 1
            out[(*base, seen[base])] = c
    return out


def _case_label(key: tuple) -> str:
    _program, _backend, variant, name, params, n = key
    return f"{name}({params})" + (f" [{variant}]" if variant else "") + (f" #{n}" if n > 1 else "")


def compare(other: TreeRun, patched: TreeRun) -> tuple[list[Change], dict[str, int]]:
    a, b = other.cases(), patched.cases()
    changes: list[Change] = []
    counts: Counter[str] = Counter()
    for key in [*a, *[k for k in b if k not in a]]:
        before, after = a.get(key), b.get(key)
        sb, sa = (before.status if before else None), (after.status if after else None)
        if before and after:
            counts["compared"] += 1
        if before is None:
            cat = NEW_FAILING if sa in FAILING else ONLY_PATCHED
        elif after is None:
            cat = ONLY_OTHER
        elif sa in FAILING and sb in FAILING:
            cat = FAILING_IN_BOTH
        elif sa in FAILING:
            cat = NEWLY_FAILING
        elif sb in FAILING and sa == PASS:
            cat = NEWLY_PASSING
        elif sb == PASS and sa == SKIP:
            cat = NEWLY_SKIPPED
        else:
            continue
        counts[cat] += 1
        shown = after if after is not None else before
        assert shown is not None
        changes.append(Change(cat, key[0], _case_label(key), key[1], sb, sa, shown.detail, key[3], key[4]))
    for label, cases in (("other", a), ("patched", b)):
        for c in cases.values():
            counts[f"{label}.{c.status}"] += 1
    return changes, dict(counts)


# -- splitting a crashed test-backend-ops run ---------------------------------------------------------
_PLAIN = re.compile(r"^[A-Z0-9_]+$")
_PREFIX = re.compile(r"^\^([A-Z0-9_]*)$")


def split_entries(entries: tuple[str, ...] | None, known: set[str]) -> list[tuple[str, ...]]:
    """The `-o` filters that together select exactly what `entries` selects, each smaller.

    Empty when it cannot be split any further (one op name, an exact `^NAME$`, or a regex of the
    user's own).
    """
    if entries is not None and len(entries) > 1:
        return [(e,) for e in entries]
    if entries is None:
        prefix = ""
    else:
        m = _PREFIX.match(entries[0])
        if not m:
            return []
        prefix = m.group(1)
    nxt = sorted({n[len(prefix)] for n in known if n.startswith(prefix) and len(n) > len(prefix)})
    parts: list[tuple[str, ...]] = [(f"^{prefix}$",)] if prefix else []
    parts += [(f"^{prefix}{c}",) for c in nxt]
    parts.append((f"^{prefix}[^{''.join(nxt)}]",) if nxt else (f"^{prefix}.",))
    return parts


def list_ops(bin_dir: Path) -> set[str]:
    """The op names test-backend-ops knows (`--list-ops`); empty when it cannot say."""
    try:
        out = proc.run([str(bin_dir / TBO), "--list-ops"], timeout=120, cwd=bin_dir).stdout
    except ProcessError:
        return set()
    return {m.group(1) for m in re.finditer(r"^  ([A-Z0-9_]+)$", out, re.MULTILINE)}


def _crashed(r: ProgramResult) -> bool:
    return r.signal_name is not None or any(c.status == CRASH for c in r.cases)


def _with_filter(args: tuple[str, ...], entries: tuple[str, ...] | None) -> tuple[str, ...]:
    out: list[str] = []
    skip = False
    for i, a in enumerate(args):
        if skip:
            skip = False
            continue
        if a == "-o" and i + 1 < len(args):
            skip = True
            continue
        out.append(a)
    if entries:
        out[1:1] = ["-o", ",".join(entries)]
    return tuple(out)


def _filter_of(args: tuple[str, ...]) -> tuple[str, ...] | None:
    for i, a in enumerate(args):
        if a == "-o" and i + 1 < len(args):
            return tuple(args[i + 1].split(","))
    return None


def _crash_marker(r: ProgramResult, op: str | None = None) -> ProgramResult:
    """A crashed run whose output ended between cases gets one case that says so, so that the crash
    is compared like any other failing case (keyed by the op that crashed, else the filter run)."""
    if any(c.status == CRASH for c in r.cases):
        return r
    how = r.signal_name or f"exit {r.returncode}"
    marker = CaseResult(r.program, "", "(crashed)", op or " ".join(r.args), CRASH,
                        f"killed by {how} after its last case")
    return replace(r, cases=(*r.cases, marker))


def _exit_marker(r: ProgramResult) -> ProgramResult:
    """A run that exits non-zero with no failing case (e.g. a failed check outside the case list)."""
    if r.returncode == 0 or r.signal_name or r.failed:
        return r
    marker = CaseResult(r.program, "", "(exit status)", " ".join(r.args), FAIL, f"exit {r.returncode}, no case failed")
    return replace(r, cases=(*r.cases, marker))


class TreeRunner:
    """Runs the sweep's invocations on one built tree, splitting crashed test-backend-ops runs."""

    def __init__(self, bin_dir: Path, log_dir: Path, known: set[str], timeout_s: float | None,
                 progress: ProgressSink) -> None:
        self.bin_dir = bin_dir
        self.log_dir = log_dir
        self.known = known
        self.timeout_s = timeout_s
        self.progress = progress
        self.runs = 0
        self.split_runs = 0
        self.crashes: list[str] = []

    def run(self, inv: Invocation) -> list[ProgramResult]:
        if inv.program == TBO and _filter_of(inv.args) is None:
            # every op: one run per first letter from the start, so that a crash costs a re-run of
            # its letter's ops only (grad mode on the CPU crashes in about 24 ops at the pin)
            self.known.update(list_ops(self.bin_dir))
            return [r for part in split_entries(None, self.known) for r in self._run(inv, part, frozenset())]
        if inv.program != TBO:
            return [_exit_marker(self._once(inv))]
        return self._run(inv, _filter_of(inv.args), frozenset())

    def _once(self, inv: Invocation) -> ProgramResult:
        self.runs += 1
        self.progress.begin(f"{inv.program} {' '.join(inv.args)[:60]}", None)
        r = testrun.run_program(self.bin_dir, inv, self.log_dir / f"{self.runs:04d}-{inv.program}.log",
                                timeout=self.timeout_s)
        self.progress.end()
        self.known.update(c.name for c in r.cases if _PLAIN.match(c.name))
        return r

    def _run(self, inv: Invocation, base: tuple[str, ...] | None, excluded: frozenset[str]) -> list[ProgramResult]:
        """Run the ops `base` selects less `excluded`; after a crash in op X, keep X's cases up to the
        crash and run the rest again without X: one more run per crashing op."""
        entries = expand(base, excluded) if base is not None else None
        if entries == ():
            return []
        r = self._once(replace(inv, args=_with_filter(inv.args, entries)))
        if not _crashed(r):
            return [_exit_marker(r)]
        crash = next((c.name for c in r.cases if c.status == CRASH), None)
        if crash is None and r.cases and not inv.sql:
            # grad mode prints a case's line before it builds the backward graph, where the
            # unsupported ops abort: the last line printed is the case that crashed
            crash = r.cases[-1].name
        if crash and base is not None and crash not in excluded and excludable(base, crash):
            self.crashes.append(crash)
            self.split_runs += 1
            mine = _crash_marker(replace(r, cases=tuple(c for c in r.cases if c.name == crash)), crash)
            if len(base) > 1:
                # one entry at a time from here, so that the next crash re-runs only its own entry
                return [mine, *(x for e in base for x in self._run(inv, (e,), excluded | {crash}))]
            return [mine, *self._run(inv, base, excluded | {crash})]
        # the crash named no op (it came between cases): split by name instead
        if not self.known:
            self.known.update(list_ops(self.bin_dir))
        parts = split_entries(entries, self.known) if not excluded else []
        if not parts:
            self.crashes.append(",".join(entries or ("(all)",)))
            return [_crash_marker(r)]
        out: list[ProgramResult] = []
        for part in parts:
            self.split_runs += 1
            out += self._run(inv, part, frozenset())
        return out


def complement(prefix: str, excluded: set[str] | frozenset[str]) -> list[str]:
    """`-o` entries for every op name that starts with `prefix`, except the `excluded` ones.

    Regex classes only (`^RE[^G]`, `^REG$`, ...): test-backend-ops reads an entry with a
    parenthesis as a full case string, so there is no `(?!...)`.
    """
    under = {n for n in excluded if n.startswith(prefix)}
    if not under:
        return [f"^{prefix}"]
    nxt = sorted({n[len(prefix)] for n in under if len(n) > len(prefix)})
    out = [f"^{prefix}$"] if prefix and prefix not in under else []
    out.append(f"^{prefix}[^{''.join(nxt)}]" if nxt else f"^{prefix}.")
    for c in nxt:
        out += complement(prefix + c, under)
    return out


def expand(base: tuple[str, ...], excluded: frozenset[str]) -> tuple[str, ...]:
    """The `-o` entries of `base` less the ops in `excluded`."""
    out: list[str] = []
    for e in base:
        m = _PREFIX.match(e)
        if e in excluded or (e.startswith("^") and e.endswith("$") and e[1:-1] in excluded):
            continue
        out += complement(m.group(1), excluded) if m else [e]
    return tuple(out)


def excludable(base: tuple[str, ...], name: str) -> bool:
    """Whether `expand` can leave op `name` out of `base` (not when only a regex of the user's selects it)."""
    for e in base:
        m = _PREFIX.match(e)
        if e in (name, f"^{name}$") or (m and name.startswith(m.group(1))):
            return True
    return False


# -- the trees ----------------------------------------------------------------------------------------
def tree_invocations(opts: SweepOptions, mode: str, declared: list[tuple[str, tuple[str, ...]]],
                     built: set[str]) -> list[Invocation]:
    """What the sweep runs on one tree: `patchset test`'s plan for the backend (only the programs its
    profile can run, with its trace), and of the series' own programs those in `built`."""
    prof = backendmod.profile(opts.backend)
    extra = [(prog, args) for prog, args in declared if prog not in buildmod.DEFAULT_PROGRAMS and prog in built]
    invs = testrun.plan(prof.device, opts.backend, mode, list(opts.ops) if opts.ops else None, extra,
                        prof.programs, prof.trace_env)
    if opts.workers > 1:
        invs = [replace(i, args=(*i.args, "-j", str(opts.workers))) if i.program == TBO else i for i in invs]
    return invs


def sweep(project: Project, opts: SweepOptions, progress: ProgressSink | None = None) -> SweepReport:
    progress = progress or NullProgress()
    start = time.monotonic()
    prof = backendmod.profile(opts.backend)
    if sys.platform not in prof.platforms:
        raise InputError(f"{opts.backend} tests cannot run on {sys.platform}: not run here")
    mode = opts.mode or testrun.default_mode(opts.backend)
    if mode not in testrun.MODES:
        raise InputError(f"unknown mode '{mode}' (known: {', '.join(testrun.MODES)})")
    if opts.workers > 1 and mode != "test":
        raise InputError("--workers: test-backend-ops runs parallel workers in test mode only")
    work, _ = ensure_patched(project, progress)
    git = work.git
    other_commit = git.rev(opts.against) or git.rev(f"refs/heads/{opts.against}")
    if other_commit is None:
        raise InputError(f"--against {opts.against}: no such ref in the work repository {work.path}")
    series = load_series(project.patches_dir)
    declared = declared_tests(series, opts.backend)

    patched_build = run_build(project, opts.backend, "minimal", opts.jobs, cuda_arch=opts.cuda_arch,
                              progress=progress)
    if not patched_build.ok:
        raise _build_error("patched", patched_build)
    safe = re.sub(r"[^A-Za-z0-9._-]", "_", opts.against)
    src = project.state_dir / "against" / safe
    checkout_detached(git, src, other_commit)
    patched_commit = git.rev(PATCHED) or ""
    # a program of the series' own is the same test in both trees only when the series leaves its
    # source alone: a pin without the option a patch added (test-llama-archs --opt) would only fail
    same = tuple(prog for prog in programs_for(src, series, opts.backend) if prog in buildmod.DEFAULT_PROGRAMS
                 or git.blob(other_commit, f"tests/{prog}.cpp") == git.blob(patched_commit, f"tests/{prog}.cpp"))
    other_spec = buildmod.BuildSpec(
        source=src, build_dir=build_dir(project, opts.backend, f"against-{safe}"), backend=opts.backend,
        programs=same, jobs=opts.jobs, cuda_arch=opts.cuda_arch, platform_cache=project.platform_cache,
    )
    other_build = buildmod.build(other_spec, progress)
    if not other_build.ok:
        raise _build_error(opts.against, other_build)

    tbo_inv: dict[str, Invocation] = {}

    def run_tree(label: str, commit: str, result: buildmod.BuildResult, sink: ProgressSink) -> TreeRun:
        built = {prog for prog, _ in declared if (result.bin_dir / prog).exists()
                 and (label == "patched" or prog in same)}
        invs = tree_invocations(opts, mode, declared, built)
        log_dir = project.state_dir / "sweep" / f"{opts.backend}-{mode}" / ("patched" if label == "patched" else
                                                                          f"against-{safe}")
        runner = TreeRunner(result.bin_dir, log_dir, set(), opts.timeout_s, sink)
        tbo_inv[label] = next(i for i in invs if i.program == TBO)
        programs = [r for inv in invs for r in runner.run(inv)]
        return TreeRun(label, commit, git.tree_of(commit), result.build_dir, round(result.duration_s, 1),
                       result.steps, tuple(programs), runner.split_runs, tuple(runner.crashes))

    # the two trees run side by side: their programs are independent, and each run of a test
    # program is mostly one thread (a whole grad-mode sweep on the CPU takes tens of minutes)
    with ThreadPoolExecutor(max_workers=2) as pool:
        mine = pool.submit(run_tree, "patched", patched_commit, patched_build, progress)
        theirs = pool.submit(run_tree, opts.against, other_commit, other_build, NullProgress())
        runs = {"patched": mine.result(), opts.against: theirs.result()}
    changes, counts = compare(runs[opts.against], runs["patched"])
    if opts.confirm:
        changes, counts = _confirm(changes, counts, runs, tbo_inv, opts, project.state_dir / "sweep" /
                                   f"{opts.backend}-{mode}" / "confirm")
    return SweepReport(opts.backend, mode, opts.ops, opts.against, runs[opts.against], runs["patched"],
                       tuple(changes), counts, round(time.monotonic() - start, 1), opts.confirm)


def _confirm(changes: list[Change], counts: dict[str, int], runs: dict[str, TreeRun], invs: dict[str, Invocation],
             opts: SweepOptions, log_dir: Path) -> tuple[list[Change], dict[str, int]]:
    """Re-run every test-backend-ops case that changed between the trees `opts.confirm` times on
    each tree (by its full case string, one process per tree and round); a case whose outcome
    varies within a tree is flaky (grad mode's finite differences on random inputs are), not a
    regression or a fix."""
    todo = [c for c in changes if c.category in CONFIRMED and c.program == TBO and c.name and
            not c.name.startswith("(")]
    if not todo:
        return changes, counts
    cases = list(dict.fromkeys(f"{c.name}({c.params})" for c in todo))

    def rounds(label: str) -> list[dict[str, str]]:
        t = runs[label]
        seen: list[dict[str, str]] = []
        for i in range(opts.confirm):
            inv = replace(invs[label], args=_with_filter(invs[label].args, tuple(cases)))
            r = testrun.run_program(t.build_dir / "bin", inv, log_dir / label / f"{i + 1:02d}.log",
                                    timeout=opts.timeout_s)
            out: dict[str, str] = {}
            for c in r.cases:
                k = f"{c.name}({c.params})"
                if c.status in FAILING or out.get(k) in FAILING:
                    out[k] = FAIL
                elif c.status == PASS or out.get(k) == PASS:
                    out[k] = PASS
                else:
                    out[k] = c.status
            seen.append(out)
        return seen

    with ThreadPoolExecutor(max_workers=2) as pool:
        futures = {label: pool.submit(rounds, label) for label in runs}
        seen = {label: f.result() for label, f in futures.items()}
    other = next(label for label in runs if label != "patched")
    counts = dict(counts)
    out: list[Change] = []
    for c in changes:
        if c not in todo:
            out.append(c)
            continue
        k = f"{c.name}({c.params})"
        per_tree = {label: [rnd.get(k, "none") for rnd in seen[label]] for label in runs}
        note = ", ".join(f"{label} {' '.join(v[:1].upper() for v in per_tree[label])}" for label in (other, "patched"))
        fails = {label: {v in FAILING for v in per_tree[label] if v != "none"} for label in runs}
        steady = all(len(f) <= 1 for f in fails.values())
        agrees = ((c.category == NEWLY_PASSING and fails[other] <= {True} and fails["patched"] <= {False}) or
                  (c.category != NEWLY_PASSING and fails["patched"] <= {True} and fails[other] <= {False}))
        if steady and agrees:
            out.append(replace(c, reruns=note))
        else:
            counts[c.category] -= 1
            counts[FLAKY] = counts.get(FLAKY, 0) + 1
            out.append(replace(c, category=FLAKY, reruns=note))
    return out, counts


def _build_error(label: str, r: buildmod.BuildResult) -> BuildError:
    where = f": {r.failure}" if r.failure else ""
    return BuildError(f"the {label} tree failed to build{where} (log {r.log})")


# -- files other tools read ----------------------------------------------------------------------------
def _run_dict(p: ProgramResult) -> dict:
    return {"program": p.program, "args": list(p.args), "returncode": p.returncode, "signal": p.signal_name,
            "verdict": p.verdict, "passed": p.passed, "failed": p.failed, "skipped": p.skipped,
            "duration_s": round(p.duration_s, 3), "log": str(p.log)}


def _tree_dict(t: TreeRun) -> dict:
    return {"label": t.label, "commit": t.commit, "tree": t.tree_id, "build_dir": str(t.build_dir),
            "build_s": t.build_s, "build_steps": t.build_steps, "split_runs": t.split_runs,
            "unsplittable_crashes": list(t.crashes), "runs": [_run_dict(p) for p in t.programs]}


def sweep_dict(r: SweepReport) -> dict:
    """The sweep as JSON: counts, every case that is not passing-in-both-unchanged, and each run."""
    return {
        "format": "patchset-sweep/1", "backend": r.backend, "mode": r.mode,
        "ops": list(r.ops) if r.ops else None, "against": r.against, "duration_s": r.duration_s,
        "regressions": len(r.regressions), "counts": r.counts,
        "confirm_runs": r.confirm,
        "changes": {cat: [{"program": c.program, "case": c.case, "backend": c.backend, "before": c.before,
                           "after": c.after, "detail": c.detail[:300], **({"reruns": c.reruns} if c.reruns else {})}
                          for c in r.of(cat)] for cat in CATEGORIES},
        "trees": {"other": _tree_dict(r.other), "patched": _tree_dict(r.patched)},
    }


def sweep_junit(r: SweepReport) -> bytes:
    """JUnit XML: one test case per case of the patched tree (and per case that vanished from it).

    Only a regression is a failure; a case failing in both trees is reported as skipped with the
    reason, so that upstream's own failures do not turn a CI dashboard red.
    """
    by_key = {(c.program, c.case, c.backend): c for c in r.changes}
    suites = ET.Element("testsuites", name=f"patchset sweep {r.backend} {r.mode} against {r.against}")
    groups: dict[str, list[tuple[tuple, CaseResult]]] = {}
    for key, case in r.patched.cases().items():
        groups.setdefault(key[0], []).append((key, case))
    for key, case in r.other.cases().items():
        if key not in r.patched.cases():
            groups.setdefault(key[0], []).append((key, case))
    for program, items in groups.items():
        suite = ET.SubElement(suites, "testsuite", name=program, tests=str(len(items)))
        failures = skipped = 0
        for key, case in items:
            label = _case_label(key)
            tc = ET.SubElement(suite, "testcase", classname=f"{program}.{case.backend or 'all'}", name=label)
            ch = by_key.get((program, label, key[1]))
            if ch is None:
                if case.status == SKIP:
                    ET.SubElement(tc, "skipped", message=case.detail or "skipped")
                    skipped += 1
                continue
            if ch.category in REGRESSION_CATEGORIES:
                ET.SubElement(tc, "failure", message=f"{ch.category}: {ch.before} -> {ch.after}").text = ch.detail
                failures += 1
            elif ch.category in (FAILING_IN_BOTH, ONLY_OTHER, NEWLY_SKIPPED) or case.status == SKIP:
                ET.SubElement(tc, "skipped", message=f"{ch.category} ({ch.before} -> {ch.after})")
                skipped += 1
        suite.set("failures", str(failures))
        suite.set("skipped", str(skipped))
    ET.indent(suites)
    return ET.tostring(suites, encoding="utf-8", xml_declaration=True) + b"\n"

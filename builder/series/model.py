"""The patch series' data model: `Series`, `Patch`, `PatchMeta`, `Finding` and the words they use.

The series is `patches/series` (quilt/Debian format) and the format-patch mails it lists (`load`).

Per-patch metadata lives in the commit message as git trailers (`Patchset-*`), so it travels
with the commit through apply, refresh and rebase. `docs/series-format.md` documents them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from builder.errors import SeriesError

BACKENDS = ("cpu", "cuda", "metal", "metal-replay", "metal-linux")
STATUSES = ("pending", "submitted", "merged", "fork-only")
"""The words of `Patchset-Status`, which `Patchset-Upstream` replaces (still read; `check` prints a
deprecation line)."""
UPSTREAM_STATES = ("not-sent", "sent", "merged", "rejected", "not-needed", "fork-only")
"""The words of `Patchset-Upstream`: where the patch stands upstream. `fork-only WHY`: kept in the fork and
never to be sent (export never packages it); proven, rebased, bumped and canaried like any other."""
FORK_ONLY = "fork-only"
BEFORE_KINDS = ("test-fails", "build-fails", "crash")
DEFAULT_TEST_PATHS = ("tests",)
"""A patch's test part when it names none (`PatchMeta.test_part`)."""


@dataclass(frozen=True)
class TestSpec:
    """One test command a patch declares: `tests/<program>.cpp` run with `args`."""

    __test__ = False  # not a pytest test class, whatever its name says

    program: str
    args: tuple[str, ...] = ()
    backends: tuple[str, ...] | None = None
    """Where this command runs; None: on every backend the patch declares."""

    def runs_on(self, backend: str, declared: tuple[str, ...]) -> bool:
        return backend in (self.backends if self.backends is not None else declared)

    def __str__(self) -> str:
        prefix = f"[{','.join(self.backends)}] " if self.backends is not None else ""
        return prefix + " ".join([self.program, *self.args])


@dataclass(frozen=True)
class NotInCI:
    """A `Patchset-Not-In-CI: PROGRAM ARGS: REASON` trailer: a test command of the patch that no
    CTest entry of upstream's tree runs, and why that is acceptable."""

    program: str
    args: tuple[str, ...]
    reason: str

    def matches(self, test: TestSpec) -> bool:
        return (self.program, self.args) == (test.program, test.args)


@dataclass(frozen=True)
class HunkRule:
    """A `Patchset-Hunk` trailer: a line range of a file (after the patch) that is its own unit for
    `verify --hunks`, or a range or function whose changes need no test (`exempt`, with the reason)."""

    file: str
    start: int = 0
    end: int = 0
    function: str = ""
    reason: str = ""
    """Why the changes need no test; empty for a split that is tested like any hunk."""

    @property
    def exempt(self) -> bool:
        return bool(self.reason)

    @property
    def location(self) -> str:
        """FILE:START-END, FILE:LINE or FILE:FUNCTION(), as the trailer writes it."""
        if self.function:
            return f"{self.file}:{self.function}()"
        return f"{self.file}:{self.start}" + (f"-{self.end}" if self.end != self.start else "")

    def __str__(self) -> str:
        return self.location + (f" exempt: {self.reason}" if self.reason else "")


@dataclass(frozen=True)
class GuardRule:
    """A `Patchset-Guard` trailer: `PROGRAM CASE-PATTERN: REASON`. The test cases of PROGRAM whose
    `NAME(PARAMS)` the pattern matches (`*` matches any run of characters; everything else, `[` and
    `?` included, is itself) are regression guards: they pass without the fix too, on purpose."""

    program: str
    pattern: str
    reason: str

    def matches(self, program: str, case: str) -> bool:
        """Whether this rule declares `case` (`NAME(PARAMS)`) of `program` (a name or a command line)."""
        if program.split(" ", 1)[0] != self.program:
            return False
        return re.fullmatch(".*".join(re.escape(part) for part in self.pattern.split("*")), case) is not None

    def __str__(self) -> str:
        return f"{self.program} {self.pattern}: {self.reason}"


@dataclass(frozen=True)
class PatchMeta:
    """What a patch's trailers say about it."""

    upstream: str = "not-sent"
    """Where the patch stands upstream: one of UPSTREAM_STATES (`Patchset-Upstream`)."""
    upstream_ref: str = ""
    """What follows the word: the pull-request URL (sent, rejected), the upstream commit or URL
    (merged), the reason (not-needed), or a note."""
    upstream_from: str = ""
    """The trailer that said it: `Patchset-Upstream`, the deprecated `Patchset-Status`, or '' (neither)."""
    backends: tuple[str, ...] = ()
    """Backends on which the known-positive proof can run."""
    tests: tuple[TestSpec, ...] = ()
    test_paths: tuple[str, ...] = ()
    """`Patchset-Test-Paths` as written (empty when absent); read `test_part` for the paths that apply."""
    test_in_tree: bool = False
    """`Patchset-Test-Paths: none`: the patch has no test part of its own (it fixes the test program
    itself), so its before tree is the tree it applies on."""
    before: str = "test-fails"
    mutation: tuple[str, ...] = ()
    """Paths of known-bad variants of the fix, relative to `patches/`; the test must catch each."""
    hunks: tuple[HunkRule, ...] = ()
    """`Patchset-Hunk` rules: finer splits of the fix's hunks and exemptions, for `verify --hunks`."""
    origin: str = ""
    """Where the patch came from: a pull-request URL (the fork's or upstream's) or a commit id."""
    effects: tuple[str, ...] = ()
    """The measured effect of the fix, or the test that shows it, one line each."""
    depends: tuple[str, ...] = ()
    """`Patchset-Depends`: file names of earlier patches of the series whose code this one needs (to apply
    or to build): export's branch carries them."""
    test_depends: tuple[str, ...] = ()
    """`Patchset-Test-Depends`: file names of earlier patches that only this patch's test needs (its code
    applies and builds without them): export names them in the facts and leaves them off the branch."""
    not_in_ci: tuple[NotInCI, ...] = ()
    """`Patchset-Not-In-CI`: test commands upstream's CI does not run, each with the reason."""
    guards: tuple[GuardRule, ...] = ()
    """`Patchset-Guard` rules: added test cases that pass without the fix too, declared as regression guards."""

    @property
    def fork_only(self) -> bool:
        """`Patchset-Upstream: fork-only WHY`: the fork keeps the patch and never sends it upstream."""
        return self.upstream == FORK_ONLY

    @property
    def status(self) -> str:
        """The former name of `upstream`, for readers written before `Patchset-Upstream`."""
        return self.upstream

    @property
    def test_part(self) -> tuple[str, ...]:
        """The paths of the patch's test part, the one answer every module uses: `Patchset-Test-Paths`,
        else DEFAULT_TEST_PATHS; none for `Patchset-Test-Paths: none` (the test is in the tree)."""
        return () if self.test_in_tree else (self.test_paths or DEFAULT_TEST_PATHS)

    @property
    def status_ref(self) -> str:
        """The former name of `upstream_ref`."""
        return self.upstream_ref

    def backends_for_tests(self) -> tuple[str, ...]:
        """Every backend on which at least one declared test runs."""
        found: list[str] = list(self.backends)
        for t in self.tests:
            for b in t.backends or ():
                if b not in found:
                    found.append(b)
        return tuple(found)


@dataclass(frozen=True)
class Patch:
    """One patch file of the series."""

    index: int
    name: str
    path: Path
    subject: str
    author: str
    date: str
    message: str
    """Subject and body as git am will commit them, trailers included."""
    files: tuple[str, ...]
    meta: PatchMeta


@dataclass(frozen=True)
class Finding:
    """One lint problem, located."""

    file: Path
    line: int
    message: str

    def __str__(self) -> str:
        return f"{self.file}:{self.line}: {self.message}" if self.line else f"{self.file}: {self.message}"


@dataclass(frozen=True)
class SeriesEntry:
    name: str
    line: int


@dataclass(frozen=True)
class Series:
    series_file: Path
    patches: tuple[Patch, ...] = field(default_factory=tuple)

    def by_name(self, name: str) -> Patch:
        for p in self.patches:
            if name in (p.name, str(p.index), f"{p.index:04d}") or p.name.startswith(f"{name}-"):
                return p
        raise SeriesError(f"{self.series_file}: no patch named '{name}'")



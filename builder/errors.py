"""Every error patchset raises, under one root, each kind with its exit code.

The CLI turns these into one line and an exit code in one place (`builder.cli`); the library
never exits or prints verdicts.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence

EXIT_OK = 0
EXIT_FAILED = 1  # a check, test or proof failed
EXIT_USAGE = 2  # bad input or usage
EXIT_CONFLICT = 3  # stopped on a conflict; resume with --continue or --abort
EXIT_NOT_PROVEN = 4  # verify, all, bump: nothing regressed, but a patch that ran is not proven
EXIT_FIXED_UPSTREAM = 5  # bump: upstream fixed a patch's bug (all or part of it); nothing was changed
EXIT_NOT_PROVEN_HERE = 6  # verify, all, bump: nothing worse, but a patch is proven on no backend of the run
EXIT_LOCKED = 7  # the project (or cache) lock is held by another command past the time we wait for it
EXIT_INTERNAL = 70  # a bug in patchset (EX_SOFTWARE): an exception that is not a PatchsetError

EXIT_CODES: dict[int, str] = {
    EXIT_OK: "ok; for verify, all and bump: every patch is proven on at least one backend of the run (a proof on a "
             "stand-in, metal-replay or metal-linux, counts and is printed as `on a stand-in`)",
    EXIT_FAILED: "a check, test or build failed, or a patch regressed or its tree failed to build",
    EXIT_USAGE: "bad input or usage (the file, line or patch is named)",
    EXIT_CONFLICT: "stopped on a conflict (resume with --continue, --skip or --abort), or a dry run found one",
    EXIT_NOT_PROVEN: "verify, all, bump: nothing regressed, but a patch that ran is not proven (or cannot tell)",
    EXIT_FIXED_UPSTREAM: "bump: upstream fixed a patch's bug, all or part of it; nothing was changed",
    EXIT_NOT_PROVEN_HERE: "verify, all, bump: nothing worse, but a patch is proven on no backend of the run: it needs "
                          "one this machine lacks (printed as `not proven on this machine`)",
    EXIT_LOCKED: "another command held the project lock (or a fetch the cache's) past the wait: run it again later",
    EXIT_INTERNAL: "a bug in patchset (one line; --debug shows the traceback)",
}
"""What each exit code means: `patchset --help` lists it and docs/verify.md's exit table is made from it
(exit_table). A command's result is the worst code that applies, in the order of Outcome.worst."""

ANY_COMMAND = (EXIT_USAGE, EXIT_INTERNAL)
"""The codes every command can return: bad input, and a bug. Each command's module declares the others it
returns (EXITS); `patchset COMMAND --help` lists both, with the meanings above (tests/test_command_help.py)."""

EXIT_BEGIN = "<!-- BEGIN generated from builder/errors.py EXIT_CODES: edit there -->"
EXIT_END = "<!-- END generated from builder/errors.py EXIT_CODES -->"


def exit_table() -> str:
    """The Markdown table of EXIT_CODES between its markers (docs/verify.md)."""
    rows = [f"| {code} | {what} |" for code, what in EXIT_CODES.items()]
    return "\n".join([EXIT_BEGIN, "| exit | meaning |", "| --- | --- |", *rows, EXIT_END]) + "\n"


class Outcome(enum.Enum):
    """What a command's result amounts to; the CLI turns it into the exit code, nowhere else."""

    OK = EXIT_OK
    FAILED = EXIT_FAILED
    """A check, test or build failed, or verify saw a patch regress."""
    NOT_PROVEN = EXIT_NOT_PROVEN
    """verify, all, bump: nothing regressed, but a patch is not proven."""
    CONFLICT = EXIT_CONFLICT
    """rebase --dry-run: some patch would not apply on the new base (nothing was changed)."""
    FIXED_UPSTREAM = EXIT_FIXED_UPSTREAM
    """bump: upstream fixed a patch's bug (`--drop-fixed` drops it) or part of it (the patch needs a
    person); nothing was changed."""
    NOT_PROVEN_HERE = EXIT_NOT_PROVEN_HERE
    """verify, all, bump: nothing worse happened, but a patch is proven on no backend of the run (`needs
    X`: its proof runs only on a backend this machine lacks)."""

    @classmethod
    def worst(cls, *outcomes: Outcome) -> Outcome:
        """FAILED over NOT_PROVEN over NOT_PROVEN_HERE over OK (what `all` reports for its steps together)."""
        order = (cls.FAILED, cls.CONFLICT, cls.FIXED_UPSTREAM, cls.NOT_PROVEN, cls.NOT_PROVEN_HERE, cls.OK)
        return next((o for o in order if o in outcomes), cls.OK)


class PatchsetError(Exception):
    """Root of every error patchset raises on purpose."""

    exit_code = EXIT_USAGE
    patch: str | None = None
    """The patch the error is about, where it is about one (a --json document's problem names it)."""


class InputError(PatchsetError):
    """Bad input: a malformed pin, series, patch or argument. Names the file, line or patch."""


class PinError(InputError):
    """The pin file is missing or malformed."""


class SeriesError(InputError):
    """The series or a patch file is malformed."""


class SourceError(PatchsetError):
    """No source gave verified upstream content (download failed, checksum or tree mismatch)."""

    exit_code = EXIT_FAILED


class WorkTreeError(PatchsetError):
    """The work repository is in a state we refuse to touch (uncommitted work, unsaved commits)."""


class ConflictError(PatchsetError):
    """A patch did not apply; the operation stopped and can be continued or aborted."""

    exit_code = EXIT_CONFLICT


class BuildError(PatchsetError):
    """Configure or compile failed."""

    exit_code = EXIT_FAILED


class TestRunError(PatchsetError):
    """A test program could not be run at all (missing binary, unreadable output)."""

    __test__ = False  # not a pytest test class, whatever its name says

    exit_code = EXIT_FAILED


class DriftError(PatchsetError):
    """`patchset wheel --strict`: the bindings declare a function the series changed differently."""

    exit_code = EXIT_FAILED


class StateError(PatchsetError):
    """A file patchset wrote itself (state, build record) is unreadable: damaged or from another version."""

    exit_code = EXIT_FAILED


class LockError(PatchsetError):
    """Another patchset process holds the project (or cache) lock past the time we wait for it: not
    bad input (the same command succeeds once the other is done), so a code of its own."""

    exit_code = EXIT_LOCKED


class ProcessError(PatchsetError):
    """A subprocess exited non-zero. Carries the command, exit code and captured output."""

    exit_code = EXIT_FAILED

    def __init__(self, cmd: Sequence[str], returncode: int, stdout: str = "", stderr: str = "") -> None:
        self.cmd = list(cmd)
        self.returncode = returncode
        self.stdout = stdout
        self.stderr = stderr
        tail = (stderr or stdout).strip().splitlines()[-1:] or [""]
        super().__init__(f"command failed with exit code {returncode}: {' '.join(self.cmd)}: {tail[0]}")


class ProcessTimeout(ProcessError):
    """A subprocess ran past its time limit and was killed with its process group."""

    def __init__(self, cmd: Sequence[str], timeout_s: float, stdout: str = "", stderr: str = "") -> None:
        self.timeout_s = timeout_s
        super().__init__(cmd, -9, stdout, stderr)
        last = (stderr or stdout).strip().splitlines()[-1:]
        Exception.__init__(self, f"command timed out after {timeout_s:g}s and was killed: {' '.join(self.cmd)}"
                           + (f": {last[0]}" if last else ""))

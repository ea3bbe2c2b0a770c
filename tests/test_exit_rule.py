"""One exit rule for verify, all and bump (issue 47 point 8), decided by one function over every
verdict of the run, and documented once: docs/verify.md's table is made from builder/errors.py."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from builder.commands import all_cmd, bump_cmd, verify_cmd
from builder.errors import EXIT_CODES, Outcome, exit_table
from builder.orchestrate.bump_plan import FAILED, NOT_PROVEN, BumpResult
from builder.prove.verdicts import PatchVerdict, VerifyReport
from builder.upstream.pin import Pin
from builder.words import PROVEN, REGRESSED

ROOT = Path(__file__).resolve().parent.parent


def verdict(patch: str, backend: str, outcome: str) -> PatchVerdict:
    return PatchVerdict(patch, backend, outcome, "", False, None, None)


# on Linux, `all --backend cpu`: patches 1 and 5 need metal on the CPU and are proven on its stand-in
CPU = VerifyReport((verdict("1", "cpu", "needs metal"), verdict("2", "cpu", PROVEN),
                    verdict("5", "cpu", "needs metal")))
REPLAY = VerifyReport((verdict("1", "metal-replay", PROVEN), verdict("5", "metal-replay", PROVEN)))
CASES = [
    ("proven on a stand-in", (CPU, REPLAY), Outcome.OK),
    ("needs a backend this machine lacks", (CPU, VerifyReport(REPLAY.verdicts[:1])), Outcome.NOT_PROVEN_HERE),
    ("not proven on the stand-in", (CPU, VerifyReport((*REPLAY.verdicts[:1], verdict("5", "metal-replay",
                                                                                      "not proven")))),
     Outcome.NOT_PROVEN),
    ("regressed", (CPU, VerifyReport((verdict("1", "metal-replay", REGRESSED), REPLAY.verdicts[1]))), Outcome.FAILED),
]


def _pin() -> Pin:
    return Pin(name="llama.cpp", repository="https://example.invalid/llama.cpp", commit="0" * 40, tree="1" * 40)


@pytest.mark.parametrize(("case", "reports", "code"), CASES, ids=[c[0] for c in CASES])
def test_verify_all_and_bump_give_one_exit_code_for_the_same_verdicts(case: str, reports: tuple[VerifyReport, ...],
                                                                       code: Outcome) -> None:
    one = VerifyReport(tuple(v for r in reports for v in r.verdicts))
    assert verify_cmd.outcome(one) == code, case
    assert all_cmd.outcome(Outcome.OK, reports) == code, case  # `all` exited 6 for the stand-in's proofs
    result = BumpResult(_pin(), _pin(), verify=one)
    if code in (Outcome.OK, Outcome.NOT_PROVEN_HERE):  # a bump whose verify did not pass stopped at its stage
        assert bump_cmd.outcome(result) == code, case
    else:
        failed = dataclasses.replace(result, failed_stage="verify",
                                     failure=NOT_PROVEN if code == Outcome.NOT_PROVEN else FAILED)
        assert bump_cmd.outcome(failed) == code, case


def test_a_proof_on_a_stand_in_is_printed_as_one(capsys: pytest.CaptureFixture[str]) -> None:
    verify_cmd.print_not_here(VerifyReport((*CPU.verdicts, *REPLAY.verdicts)))
    out = " ".join(capsys.readouterr().out.split())
    assert "proven on a stand-in: 1 (on metal-replay, patchset's stand-in, not the real backend; needs metal)" in out
    assert "not proven on this machine" not in out


def test_the_exit_table_of_docs_verify_is_the_one_of_the_code() -> None:
    text = (ROOT / "docs" / "verify.md").read_text(encoding="utf-8")
    # (`patchset --help` lists the same EXIT_CODES: tests/test_docs_facts.py)
    assert exit_table() in text, "docs/verify.md: paste builder.errors.exit_table() between its markers"
    for code in EXIT_CODES:
        assert f"| {code} |" in exit_table()

"""Test results as files other tools read: JSON, and JUnit XML for CI systems."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

from builder.compile.testrun import CRASH, FAIL, SKIP, ProgramResult, TestReport
from builder.fsutil import atomic_write


def program_dict(p: ProgramResult) -> dict:
    return {
        "program": p.program, "args": list(p.args), "returncode": p.returncode, "signal": p.signal_name,
        "verdict": p.verdict, "passed": p.passed, "failed": p.failed, "skipped": p.skipped,
        "program_totals": list(p.totals_line) if p.totals_line else None, "totals_mismatch": p.totals_mismatch,
        "skipped_backends": list(p.skipped_backends), "duration_s": round(p.duration_s, 3), "log": str(p.log),
        "timed_out": p.timed_out, "last_lines": list(p.last_lines),
        **({"notes": list(p.notes), "trace": str(p.trace) if p.trace else None} if p.notes else {}),
        "cases": [
            {"backend": c.backend, "name": c.name, "params": c.params, "status": c.status, "detail": c.detail,
             "error": c.error, **({"variant": c.variant} if c.variant else {})}
            for c in p.cases
        ],
    }


def report_dict(report: TestReport) -> dict:
    return {"backend": report.backend, "mode": report.mode, "ops": list(report.ops) if report.ops else None,
            "source": {"commit": report.source_commit, "tree": report.source_tree},
            "failed": report.failed, "nothing_checked": report.nothing_checked,
            "programs": [program_dict(p) for p in report.programs]}


def junit_xml(report: TestReport) -> bytes:
    suites = ET.Element("testsuites", name=f"patchset test {report.backend} {report.mode}")
    for p in report.programs:
        suite = ET.SubElement(
            suites, "testsuite", name=f"{p.program} {' '.join(p.args)}".strip(), tests=str(len(p.cases) or 1),
            failures=str(p.failed), skipped=str(p.skipped), errors="1" if p.signal_name else "0",
            time=f"{p.duration_s:.3f}",
        )
        props = ET.SubElement(suite, "properties")
        ET.SubElement(props, "property", name="verdict", value=p.verdict)
        ET.SubElement(props, "property", name="returncode", value=str(p.returncode))
        # which tree was tested: a report must never pass for another build's
        ET.SubElement(props, "property", name="source_commit", value=report.source_commit)
        ET.SubElement(props, "property", name="source_tree", value=report.source_tree)
        if p.timed_out:
            ET.SubElement(props, "property", name="timed_out", value="true")
        for c in p.cases:
            name = c.case_id + (f" [{c.variant}]" if c.variant else "")
            tc = ET.SubElement(suite, "testcase", classname=f"{p.program}.{c.backend or 'all'}", name=name)
            if c.status == FAIL:
                ET.SubElement(tc, "failure", message=c.detail or "FAIL").text = c.detail
            elif c.status == CRASH:
                how = p.signal_name or f"exit {p.returncode}"
                ET.SubElement(tc, "error", message=f"crashed ({how})").text = c.detail
            elif c.status == SKIP:
                ET.SubElement(tc, "skipped", message=c.detail or "skipped")
        if not p.cases or p.verdict in ("nothing checked", "crashed") or (p.returncode != 0 and not p.failed):
            # a run that checked nothing, or died, must not look green in a CI dashboard
            tc = ET.SubElement(suite, "testcase", classname=p.program, name="program")
            if p.verdict == "nothing checked":
                ET.SubElement(tc, "skipped", message="nothing checked: the program ran no case on this backend")
            elif p.signal_name:
                ET.SubElement(tc, "error", message=f"killed by {p.signal_name}")
            elif p.returncode != 0:
                ET.SubElement(tc, "failure", message=f"exit code {p.returncode}")
        if p.totals_mismatch:
            tc = ET.SubElement(suite, "testcase", classname=p.program, name="totals")
            ET.SubElement(tc, "failure", message=p.totals_mismatch)
    ET.indent(suites)
    return ET.tostring(suites, encoding="utf-8", xml_declaration=True) + b"\n"


def write_junit(report: TestReport, path: Path) -> None:
    atomic_write(path, junit_xml(report))

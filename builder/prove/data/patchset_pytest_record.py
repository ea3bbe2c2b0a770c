"""A pytest plugin that records each test's outcome as JSON lines, for patchset verify's `python` tests.

verify loads it with `-p patchset_pytest_record` in the interpreter that runs a patch's Python test
(an environment that need not have patchset installed: this file imports nothing of patchset) and
reads the file `PATCHSET_PYTEST_RECORD` names, never pytest's printed summary. Each line is one
event: the session's start, a test's start (so a test the interpreter crashed in is known), a
report (collection or a test phase), or the exception behind a failure, with `missing_api` set when
it says that the code under test lacks a name the test uses (an ImportError, a NameError, or an
AttributeError of a module): the Python form of a test that does not compile without the fix.
"""

from __future__ import annotations

import json
import os
import types
from typing import Any

_PATH = os.environ.get("PATCHSET_PYTEST_RECORD", "")


def _write(event: dict[str, Any]) -> None:
    if not _PATH:
        return
    # appended and closed at once: a crash of the interpreter keeps every line written before it
    with open(_PATH, "a", encoding="utf-8") as fh:
        fh.write(json.dumps(event) + "\n")


def _missing_api(exc: BaseException) -> bool:
    if isinstance(exc, ImportError):
        return True
    if isinstance(exc, NameError) and not isinstance(exc, UnboundLocalError):
        return True
    return isinstance(exc, AttributeError) and isinstance(getattr(exc, "obj", None), types.ModuleType)


def pytest_sessionstart(session: Any) -> None:
    _write({"event": "session"})


def pytest_runtest_logstart(nodeid: str, location: Any) -> None:
    _write({"event": "start", "nodeid": nodeid})


def pytest_runtest_logreport(report: Any) -> None:
    _write({"event": "report", "nodeid": report.nodeid, "when": report.when, "outcome": report.outcome,
            "xfail": bool(getattr(report, "wasxfail", False))})


def pytest_collectreport(report: Any) -> None:
    if report.failed:
        _write({"event": "report", "nodeid": report.nodeid, "when": "collect", "outcome": "failed", "xfail": False})


def pytest_exception_interact(node: Any, call: Any, report: Any) -> None:
    exc = call.excinfo.value if call.excinfo is not None else None
    if exc is None:
        return
    # pytest raises its own CollectError from the ImportError of a test module that does not import
    cause: BaseException | None = exc
    while cause is not None and not _missing_api(cause):
        cause = cause.__cause__
    shown = cause or exc
    text = f"{type(shown).__name__}: {shown}".splitlines()[0][:300]
    _write({"event": "exception", "nodeid": node.nodeid, "when": call.when, "type": type(shown).__name__,
            "text": text, "missing_api": cause is not None})

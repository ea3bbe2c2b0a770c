"""How the library reports progress without printing: the CLI passes a sink, tests pass none."""

from __future__ import annotations

from typing import Protocol


class ProgressSink(Protocol):
    """Receives progress of one long step at a time."""

    def begin(self, label: str, total: int | None = None) -> None: ...

    def update(self, completed: int, total: int | None = None, detail: str = "") -> None: ...

    def note(self, text: str) -> None:
        """One line about the step now running, shown at once (a download's size and rate)."""

    def end(self) -> None: ...

    def lane(self) -> ProgressSink:
        """A sink for one of several steps that run at once (verify's lanes): one that reports nothing where
        their reports would garble each other."""


class NullProgress:
    """Reports nothing: the default for library callers and tests."""

    def begin(self, label: str, total: int | None = None) -> None:
        pass

    def update(self, completed: int, total: int | None = None, detail: str = "") -> None:
        pass

    def note(self, text: str) -> None:
        pass

    def end(self) -> None:
        pass

    def lane(self) -> ProgressSink:
        return self


class Within:
    """The steps of a part reported as the progress of the step around it: a build inside verify's
    "building" step moves that step's count (one bar on a terminal, one step begun and ended)."""

    def __init__(self, outer: ProgressSink) -> None:
        self.outer = outer

    def begin(self, label: str, total: int | None = None) -> None:
        self.outer.update(0, total, label)

    def update(self, completed: int, total: int | None = None, detail: str = "") -> None:
        self.outer.update(completed, total, detail)

    def note(self, text: str) -> None:
        self.outer.note(text)

    def end(self) -> None:
        pass

    def lane(self) -> ProgressSink:
        return self.outer.lane()

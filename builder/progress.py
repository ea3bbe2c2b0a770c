"""How the library reports progress without printing: the CLI passes a sink, tests pass none."""

from __future__ import annotations

from typing import Protocol


class ProgressSink(Protocol):
    """Receives progress of one long step at a time."""

    def begin(self, label: str, total: int | None = None) -> None: ...

    def update(self, completed: int, total: int | None = None, detail: str = "") -> None: ...

    def end(self) -> None: ...


class NullProgress:
    """Reports nothing: the default for library callers and tests."""

    def begin(self, label: str, total: int | None = None) -> None:
        pass

    def update(self, completed: int, total: int | None = None, detail: str = "") -> None:
        pass

    def end(self) -> None:
        pass

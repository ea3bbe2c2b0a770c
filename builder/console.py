"""Terminal output for the CLI: one rich console, progress only on a terminal, NO_COLOR respected."""

from __future__ import annotations

import logging
import os
import sys
import time
from typing import TYPE_CHECKING

from rich.console import Console
from rich.markup import escape

if TYPE_CHECKING:  # the progress bar and the log handler are imported only on a terminal
    from rich.progress import Progress, TaskID

console = Console(stderr=False, no_color=bool(os.environ.get("NO_COLOR")), highlight=False, soft_wrap=True)
err_console = Console(stderr=True, no_color=bool(os.environ.get("NO_COLOR")), highlight=False, soft_wrap=True)


def interactive() -> bool:
    return sys.stdout.isatty() and not os.environ.get("CI")


def setup_logging(debug: bool) -> None:
    logger = logging.getLogger("patchset")
    logger.handlers.clear()
    handler: logging.Handler
    if interactive():
        from rich.logging import RichHandler  # noqa: PLC0415 (a terminal only; a verb starts faster)

        handler = RichHandler(console=err_console, show_time=False, show_path=False)
    else:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(levelname)s: %(message)s"))
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG if debug else logging.INFO)
    logger.propagate = False


class CliProgress:
    """A rich progress bar on a terminal; a plain line every few seconds in CI logs."""

    def __init__(self, plain_every_s: float = 10.0) -> None:
        self._bar: Progress | None = None
        self._task: TaskID | None = None
        self._label = ""
        self._last = 0.0
        self._every = plain_every_s

    def begin(self, label: str, total: int | None = None) -> None:
        # labels carry names like "[cpu]": text, never rich markup
        self._label = escape(label)
        if interactive():
            from rich.progress import (  # noqa: PLC0415 (a terminal only; a verb starts faster)
                BarColumn,
                MofNCompleteColumn,
                Progress,
                SpinnerColumn,
                TextColumn,
                TimeElapsedColumn,
            )

            self._bar = Progress(SpinnerColumn(), TextColumn("{task.description}"), BarColumn(),
                                 MofNCompleteColumn(), TimeElapsedColumn(), console=console, transient=True)
            self._bar.start()
            self._task = self._bar.add_task(label, total=total)
        else:
            console.print(f"{self._label} ...")
            self._last = time.monotonic()

    def update(self, completed: int, total: int | None = None, detail: str = "") -> None:
        if self._bar is not None and self._task is not None:
            self._bar.update(self._task, completed=completed, total=total if total is not None else None,
                             description=f"{self._label} {detail}".strip())
        elif time.monotonic() - self._last >= self._every:
            of = f"/{total}" if total else ""
            console.print(f"  {self._label}: {completed}{of} {detail}".rstrip())
            self._last = time.monotonic()

    def end(self) -> None:
        if self._bar is not None:
            self._bar.stop()
            self._bar = None

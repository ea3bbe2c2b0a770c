"""Terminal output for the CLI: one rich console, progress only on a terminal, NO_COLOR respected."""

from __future__ import annotations

import logging
import os
import sys
import threading
import time
from typing import TYPE_CHECKING

from rich.console import Console
from rich.markup import escape

from builder.progress import NullProgress, ProgressSink

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
    """A rich progress bar on a terminal. Off a terminal (CI logs, a pipe) plain lines: a count such as
    ninja's `[N/M]` at each tenth of the total or every `plain_every_s`, and always the last; a line
    every `heartbeat_s` while a step runs with nothing else to say."""

    _lock = threading.Lock()
    """One line at a time from every sink (verify's lanes, the heartbeats)."""

    def __init__(self, plain_every_s: float = 10.0, heartbeat_s: float = 30.0) -> None:
        self._bar: Progress | None = None
        self._task: TaskID | None = None
        self._label = ""
        self._every = plain_every_s
        self._heartbeat = heartbeat_s
        self._last = 0.0
        """When the last plain line was printed."""
        self._started = 0.0
        self._tenth = -1
        """The tenth of the total the last count line reached."""
        self._stop: threading.Event | None = None

    def begin(self, label: str, total: int | None = None) -> None:
        self.end()
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
            return
        self._started = time.monotonic()
        self._tenth = -1
        self._line(f"{self._label} ...")
        self._stop = threading.Event()
        threading.Thread(target=self._beat, args=(self._stop, self._label), daemon=True).start()

    def update(self, completed: int, total: int | None = None, detail: str = "") -> None:
        if self._bar is not None and self._task is not None:
            self._bar.update(self._task, completed=completed, total=total if total is not None else None,
                             description=f"{self._label} {escape(detail)}".strip())
            return
        now = time.monotonic()
        if total:
            tenth = min(10, completed * 10 // total)
            if tenth > self._tenth or completed >= total or now - self._last >= self._every:
                self._tenth = tenth
                self._line(f"  {self._label}: [{completed}/{total}] {escape(detail)}".rstrip())
        elif now - self._last >= self._every:
            self._line(f"  {self._label}: {completed} {escape(detail)}".rstrip())

    def note(self, text: str) -> None:
        self._line(f"  {self._label}: {escape(text)}")

    def lane(self) -> ProgressSink:
        # bars of lanes at once would garble each other; lines, each naming its patch, do not
        return NullProgress() if interactive() else CliProgress(self._every, self._heartbeat)

    def end(self) -> None:
        if self._bar is not None:
            self._bar.stop()
            self._bar = None
        if self._stop is not None:
            self._stop.set()
            self._stop = None

    def _line(self, text: str) -> None:
        with self._lock:
            console.print(text)
            self._last = time.monotonic()

    def _beat(self, stop: threading.Event, label: str) -> None:
        """Off a terminal: say the step still runs when nothing was printed for `heartbeat_s`."""
        while not stop.wait(min(1.0, self._heartbeat / 4)):
            with self._lock:
                now = time.monotonic()
                if stop.is_set() or now - self._last < self._heartbeat:
                    continue
                console.print(f"  {label}: still running, {now - self._started:.0f} s")
                self._last = now

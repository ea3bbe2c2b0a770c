"""One pool of job slots for every build and test run of a command: a GNU make jobserver.

ninja 1.13 is a jobserver client: given `MAKEFLAGS=--jobserver-auth=fifo:PATH` and no `-j` of
its own (an explicit `-j` wins over the jobserver), it runs one job on its implicit slot and takes
a token from the fifo for each further one. One pool of N slots (N-1 tokens in the fifo, and the
implicit slot this process holds) bounds every ninja of a run together, however many trees build
at once. A lane of the scheduler takes a slot (`slot()`) for as long as it builds or tests a tree:
its ninja's implicit job runs on that slot, and so does a test program shown a few cores
(backends.cores_shown). A test program whose threads use every core (a GPU backend's: ggml's spin while
they wait for each other) runs one at a time (`alone()`), and while it runs it holds every token the
other lanes' builds give back, so their ninjas start no further job beside it (each keeps its
implicit one).
"""

from __future__ import annotations

import os
import select
import shutil
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

TOKEN = b"+"


class Jobserver:
    """A fifo jobserver of `slots` slots (at least 1) shared by `lanes` lanes; close() removes the fifo."""

    def __init__(self, slots: int, lanes: int = 1) -> None:
        self.slots = max(1, slots)
        self.spare = max(0, self.slots - max(1, lanes))
        """The tokens beyond the lanes' own slots: what their builds' further jobs run on, and all a test
        program holds (a lane giving its slot back between two chains finds it in the pool)."""
        self._dir = Path(tempfile.mkdtemp(prefix="patchset-jobserver-"))
        self.fifo = self._dir / "fifo"
        os.mkfifo(self.fifo, 0o600)
        # read and write ends in one: the tokens stay in the fifo while no client has it open
        self._fd = os.open(self.fifo, os.O_RDWR | os.O_NONBLOCK)
        os.write(self._fd, TOKEN * (self.slots - 1))
        self._implicit = threading.Lock()
        self._alone = threading.Lock()
        self._closed = False
        self._held: dict[int, list[bool]] = {}
        """Per thread, the slots it holds (`slot()`), innermost last: whether each is the implicit one (`lend()`
        gives the innermost back)."""

    @property
    def makeflags(self) -> str:
        """The MAKEFLAGS a client (ninja) joins the pool with."""
        return f"-j{self.slots} --jobserver-auth=fifo:{self.fifo}"

    def _take(self) -> bool:
        """One slot, waiting for it: True for the implicit one, False for a token read from the fifo."""
        while True:
            if self._implicit.acquire(blocking=False):
                return True
            ready, _, _ = select.select([self._fd], [], [], 0.1)
            if ready:
                try:
                    if os.read(self._fd, 1):
                        return False
                except BlockingIOError:  # another reader took it first
                    continue

    def _give(self, implicit: bool) -> None:
        if implicit:
            self._implicit.release()
        elif not self._closed:
            os.write(self._fd, TOKEN)

    @contextmanager
    def slot(self) -> Iterator[None]:
        """Hold one slot of the pool for the block (a lane building and testing a tree)."""
        mine = self._held.setdefault(threading.get_ident(), [])
        mine.append(self._take())
        try:
            yield
        finally:
            self._give(mine.pop())

    @contextmanager
    def lend(self) -> Iterator[None]:
        """Inside `slot()`: this thread's slot back in the pool for the block, and a slot again after it (a
        lane that waits for another's build lets the builds run on its slot meanwhile). Outside: nothing."""
        mine = self._held.get(threading.get_ident())
        if not mine:
            yield
            return
        self._give(mine.pop())
        try:
            yield
        finally:
            mine.append(self._take())

    @contextmanager
    def alone(self) -> Iterator[None]:
        """One test program that sees every core at a time among the lanes, each on its lane's slot: its
        threads use every core and ggml's spin while they wait for each other, so two at once run
        many times slower (measured on 16 cores). Builds of other lanes go on meanwhile, each on its
        lane's slot alone: the tokens in the pool, and those their jobs give back while the program
        runs, are held until it ends (taken as they come, never waited for)."""
        with self._alone:
            held = [0]
            done = threading.Event()
            drainer = threading.Thread(target=self._hold_tokens, args=(held, done), daemon=True,
                                       name="patchset-jobserver-test")
            drainer.start()
            try:
                yield
            finally:
                done.set()
                drainer.join()
                if held[0] and not self._closed:
                    os.write(self._fd, TOKEN * held[0])

    def _hold_tokens(self, held: list[int], done: threading.Event) -> None:
        """Read tokens from the fifo as they come, into `held[0]` (at most `spare`), until `done`."""
        while not done.is_set():
            ready, _, _ = select.select([self._fd], [], [], 0.05)
            if not ready:
                continue
            if held[0] >= self.spare:
                done.wait(0.05)
                continue
            try:
                held[0] += len(os.read(self._fd, self.spare - held[0]))
            except BlockingIOError:  # another reader took it first
                continue

    def free_tokens(self) -> int:
        """The tokens in the pool now (read and put back: for tests and diagnostics)."""
        try:
            got = os.read(self._fd, self.slots)
        except BlockingIOError:
            return 0
        os.write(self._fd, got)
        return len(got)

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            os.close(self._fd)
            shutil.rmtree(self._dir, ignore_errors=True)

    def __enter__(self) -> Jobserver:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

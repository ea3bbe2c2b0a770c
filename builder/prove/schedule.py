"""Running independent chains of work at once, in lanes, on one pool of job slots.

A chain is the work of one patch on one backend: its trees in order (after, hunks, mutations,
before, parent), which differ least from each other and so stay in one lane, one after another,
in that lane's own worktree and build folder. Chains are independent: lanes take them longest
first (the critical path starts first), each lane holding one slot of the jobserver while it
works, so that its builds' ninja (which joins the same jobserver for its further jobs) and its test
programs never make the machine run more jobs than it has slots.

A chain that raises stops only itself: the others run to their end, and the first error is raised
after them. An interrupt of the caller (Ctrl-C) cancels every lane (builder.proc.cancel): their
running programs are killed and nothing they would write after that is written.
"""

from __future__ import annotations

import os
import queue
import threading
from collections.abc import Callable, Hashable, Iterable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from typing import Any, Generic, TypeVar

from builder import proc
from builder.compile.jobserver import Jobserver

C = TypeVar("C")
R = TypeVar("R")
K = TypeVar("K", bound=Hashable)

LANE_MEMORY_BYTES = 2 << 30
"""What one lane may need at once (a compiler on test-backend-ops.cpp and a linker): lanes beyond
the memory available at this rate are not started."""


def available_memory() -> int | None:
    """MemAvailable of /proc/meminfo in bytes (None where there is none)."""
    try:
        with open("/proc/meminfo", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def lanes_for(chains: int, jobs: int | None, lanes: int | None = None, *, shared_objects: bool = True,
              with_tests: bool = False) -> int:
    """How many lanes to run `chains` in: `lanes` when given, else one per chain, at most one per two
    job slots and per LANE_MEMORY_BYTES available; `jobs` of 3 or less is one lane. With `with_tests`
    (verify: a tree's test programs run between its builds, on one thread, backends.cores_shown) two or
    three slots give two lanes: one lane builds while the other's test runs. A cold `all` on 2 cores
    took 283 s (406 CPU-s) in one lane and 230 s (415 CPU-s) in two (benchmarks/first_run.py --lanes 2,
    2026-12-06), where 339 CPU-s in one lane had been 393 in two
    before the lanes shared their first builds and every tree compiled the head's comments (the
    compiler cache now finds a lane's objects in another's). A canary round (builds of different
    commits, no tests between) keeps one lane there. Without `shared_objects` (no compiler cache) each
    lane compiles the whole library in its own folder: one lane (a cold `all` on 16 cores without
    ccache did not finish its lanes in the time the sequential run took)."""
    if chains <= 1:
        return 1
    if lanes is not None:
        return max(1, min(lanes, chains))
    if not shared_objects:
        return 1
    slots = jobs or os.cpu_count() or 1
    mem = available_memory()
    by_memory = max(1, mem // LANE_MEMORY_BYTES) if mem is not None else slots
    by_slots = max(2, slots // 2) if with_tests and slots >= 2 else slots // 2
    return max(1, min(chains, by_slots, by_memory))


BESIDE_MIN_SLOTS = 8
"""The least job slots on which `all` builds and tests the patched tree beside the proofs (`Beside`), not before
them. That build alone keeps some ten cores busy (on 16 cores: 212 CPU-s in 20 s), and every build beside it
compiles the objects it shares with it at the same time: on 2 cores a cold `all` took 300.2 s (516.2 CPU-s)
beside against 248.4 s (474.4 CPU-s) one after the other, on 16 cores 68.3 s against 87.6 s (2026-12-06,
benchmarks/first_run.py, each pair on one machine). Between the two it was not measured."""


class FirstBuilds:
    """One first build per library at a time: a lane whose first tree compiles the same library sources
    (the key) as the tree another lane is building first waits until that build is done, and then finds
    its objects in the compiler cache, instead of compiling them at the same time in its own folder (the
    two lanes of `verify --backend cuda 3 4` each compiled all of ggml-cuda at once).

    A build beside the lanes (`all`'s patched tree) may go ahead of every lane's first build on its
    backend (`ahead`): the trees of a series share most of their library objects with the patched one, so
    each lane waits until its libraries are built and takes those objects from the compiler cache. That build
    is the first of its own library keys: lanes with one of them do not take turns after it (on 16 cores two
    lanes of the patched tree's CPU libraries waited 5 to 20 s each for the other's test program). A lane
    that waits gives its job slot to the builds meanwhile (`idle`)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._built: dict[Hashable, threading.Event] = {}
        self._ahead: dict[str, threading.Event] = {}
        self._claimed: set[Hashable] = set()

    def ahead(self, backend: str, keys: Iterable[Hashable] = ()) -> Callable[[], None]:
        """Every first build on `backend` from now waits until the returned function is called; it is the first
        build of the libraries of `keys`, which are then in the compiler cache."""
        done = threading.Event()
        with self._lock:
            self._ahead[backend] = done
            for key in keys:
                self._built.setdefault(key, done)
        return done.set

    def _pending(self, backend: str | None) -> threading.Event | None:
        """The build `ahead` on `backend` while it has not released the first builds; else None."""
        with self._lock:
            before = self._ahead.get(backend) if backend is not None else None
        return before if before is not None and not before.is_set() else None

    def waits_ahead(self, backend: str) -> bool:
        """Whether a first build on `backend` would wait now for a build `ahead` of it."""
        return self._pending(backend) is not None

    def claim(self, key: Hashable) -> bool:
        """True for the first caller with `key` (an object one lane compiles for all: `TreeBuilder.compile_ahead`)."""
        with self._lock:
            if key in self._claimed:
                return False
            self._claimed.add(key)
            return True

    @contextmanager
    def first(self, key: Hashable, backend: str | None = None,
              idle: Callable[[], AbstractContextManager[object]] = nullcontext) -> Iterator[bool]:
        """Around a lane's first build of a tree with library `key` on `backend`: true for the lane that builds it
        first; any other waits here for that build's end (whether it built or not) before it yields false. Each
        first waits for a build `ahead` of it on its backend. `idle` is held while it waits."""
        before = self._pending(backend)
        if before is not None:
            with idle():
                _wait(before, "waiting for the patched tree's libraries")
        with self._lock:
            done = self._built.get(key)
            mine = done is None
            if done is None:
                done = self._built[key] = threading.Event()
        try:
            if not mine:
                with idle():
                    _wait(done, "waiting for another lane's build")
            yield mine
        finally:
            if mine:
                done.set()


def _wait(event: threading.Event, what: str) -> None:
    while not event.wait(0.2):
        proc.raise_if_cancelled(what)


class Beside(Generic[R]):
    """Work a command runs beside the lanes, in a thread of its own that holds one job slot of their pool
    (`all`: the patched tree's build and tests, at once with verify's proofs). It calls `libraries_built` once
    the libraries of its build are built (the lanes' first builds on `backend` wait for that: `FirstBuilds.ahead`);
    `built` comes when the work has ended, and a lane whose tree is the work tree's waits for it (it builds in
    the same folder). Its result, or the error it raised, is `outcome()` after the lanes."""

    def __init__(self, backend: str, work: Callable[[Beside[R], Jobserver], R]) -> None:
        self.backend = backend
        self._work = work
        self._built = threading.Event()
        self._release: Callable[[], None] | None = None
        self._result: R | None = None
        self._error: BaseException | None = None

    def attach(self, first_builds: FirstBuilds, keys: Iterable[Hashable] = ()) -> None:
        """Before the lanes start: their first builds on this backend wait for `libraries_built`, which builds the
        libraries of `keys` (TreeBuilder.library_key)."""
        self._release = first_builds.ahead(self.backend, keys)

    def libraries_built(self) -> None:
        if self._release is not None:
            self._release()

    def built(self) -> None:
        self.libraries_built()
        self._built.set()

    def wait_built(self, idle: Callable[[], AbstractContextManager[object]] = nullcontext) -> None:
        """Until the build has ended (whether it built or not); `idle` is held while waiting."""
        if not self._built.is_set():
            with idle():
                _wait(self._built, "waiting for the patched tree's build")

    def run(self, pool: Jobserver) -> None:
        """The work, in the calling thread (the lanes' runner starts one for it), on a slot of `pool`."""
        try:
            with pool.slot():
                self._result = self._work(self, pool)
        except BaseException as e:
            self._error = e
        finally:
            self.built()

    def outcome(self) -> R:
        """What the work returned; the error it raised, raised here."""
        if self._error is not None:
            raise self._error
        if self._result is None:
            raise RuntimeError("the work beside the lanes has not run")
        return self._result


class InOrder(Generic[K, R]):
    """Hands results on in a fixed order as soon as all those before them are in (a proof is
    reported when it finishes, and the patches still come in series order)."""

    def __init__(self, order: Sequence[K], emit: Callable[[R], None] | None) -> None:
        self._order = list(order)
        self._emit = emit
        self._have: dict[K, R] = {}
        self._next = 0

    def add(self, key: K, result: R) -> None:
        self._have[key] = result
        while self._next < len(self._order) and self._order[self._next] in self._have:
            if self._emit is not None:
                self._emit(self._have[self._order[self._next]])
            self._next += 1


def run_lanes(chains: Sequence[C], lanes: int, work: Callable[[int, C], R], *, pool: Jobserver | None = None,
              done: Callable[[int, R], None] | None = None, beside: Beside[Any] | None = None) -> list[R]:
    """`work(lane, chain)` for every chain, in `lanes` threads, each chain taken in the given order by
    the next free lane; `done(index, result)` in this thread as each finishes; `beside` in a thread of its
    own meanwhile (its end awaited too; an interrupt cancels it with the lanes). The results in the
    order of `chains`. Raises the first error of a chain once every other chain has finished."""
    todo: queue.Queue[int] = queue.Queue()
    for i in range(len(chains)):
        todo.put(i)
    finished: queue.Queue[tuple[int, R | None, BaseException | None]] = queue.Queue()
    stop = threading.Event()

    def slot() -> AbstractContextManager[None]:
        return pool.slot() if pool is not None else nullcontext()

    def lane_loop(lane: int) -> None:
        while not stop.is_set():
            try:
                i = todo.get_nowait()
            except queue.Empty:
                return
            try:
                with slot():
                    result = work(lane, chains[i])
            except BaseException as e:
                finished.put((i, None, e))
            else:
                finished.put((i, result, None))

    threads = [threading.Thread(target=lane_loop, args=(n,), name=f"patchset-lane-{n}", daemon=True)
               for n in range(max(1, lanes))]
    if beside is not None:
        if pool is None:
            raise ValueError("work beside the lanes runs on their jobserver: give the pool")
        threads.append(threading.Thread(target=beside.run, args=(pool,), name="patchset-beside", daemon=True))
    results: dict[int, R] = {}
    errors: list[BaseException] = []
    try:
        for t in threads:
            t.start()
        for _ in range(len(chains)):
            i, result, error = _next(finished)
            if error is not None:
                errors.append(error)
                continue
            results[i] = result  # type: ignore[assignment]
            if done is not None:
                done(i, result)  # type: ignore[arg-type]
        for t in threads:
            while t.is_alive():  # a short wait in a loop, as in _next: Ctrl-C reaches this thread
                t.join(0.2)
    except BaseException:
        stop.set()
        proc.cancel()
        for t in threads:
            t.join()
        proc.uncancel()
        raise
    real = [e for e in errors if not isinstance(e, proc.Cancelled)]
    if real or errors:
        raise (real or errors)[0]
    return [results[i] for i in range(len(chains))]


def _next(finished: queue.Queue[tuple[int, R | None, BaseException | None]]) -> tuple[int, R | None,
                                                                                         BaseException | None]:
    # a short wait in a loop: the main thread stays interruptible (Ctrl-C) while the lanes work
    while True:
        try:
            return finished.get(timeout=0.2)
        except queue.Empty:
            continue


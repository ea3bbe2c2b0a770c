"""The run's jobserver: one pool of job slots for every lane's builds, and a test program that holds the spare
tokens while it runs (issue 44: test runs take tokens from the same pool), on a real fifo with threads."""

from __future__ import annotations

import os
import threading
import time

from builder.compile.jobserver import TOKEN, Jobserver


def settle(pool: Jobserver, want: int, limit: float = 5.0) -> int:
    """The pool's free tokens once they reach `want` (or whatever they are after `limit` seconds)."""
    end = time.monotonic() + limit
    while (got := pool.free_tokens()) != want and time.monotonic() < end:
        time.sleep(0.02)
    return got


def test_a_test_program_holds_the_spare_tokens_and_gives_them_back() -> None:
    with Jobserver(6, lanes=2) as pool:
        assert (pool.spare, pool.free_tokens()) == (4, 5)
        with pool.slot(), pool.slot():  # two lanes on their slots: the implicit one and a token
            assert pool.free_tokens() == 4
            # a ninja of another lane takes a token for a further job, as a client does (a byte from the fifo)
            client = os.open(pool.fifo, os.O_RDWR | os.O_NONBLOCK)
            try:
                assert os.read(client, 1) == TOKEN
                with pool.alone():
                    # the pool's spare tokens go to the test program; the job's token, given back, goes too
                    assert settle(pool, 0) == 0
                    os.write(client, TOKEN)
                    time.sleep(0.2)
                    assert settle(pool, 0) == 0
                # all back once it ends, none lost
                assert pool.free_tokens() == 4
            finally:
                os.close(client)
        assert pool.free_tokens() == 5


def test_a_lane_giving_its_slot_back_during_a_test_run_can_take_it_again() -> None:
    """The test program holds the spare tokens only: a lane between two chains finds its slot in the pool."""
    with Jobserver(4, lanes=2) as pool, pool.slot():  # lane 1 on the implicit slot
        lane2 = pool._take()  # lane 2 on a token, as `slot()` takes it
        assert lane2 is False and pool.free_tokens() == 2
        with pool.alone():  # lane 1's test program
            assert settle(pool, 0) == 0
            pool._give(lane2)  # lane 2 ends its chain: its token back to the pool
            time.sleep(0.2)
            took = threading.Event()

            def next_chain() -> None:
                with pool.slot():
                    took.set()

            t = threading.Thread(target=next_chain)
            t.start()
            assert took.wait(5.0), "a lane could not take its slot back while a test program ran"
            t.join()
        assert pool.free_tokens() == 3


def test_a_lane_that_waits_lends_its_slot_and_takes_one_again_after() -> None:
    """`lend()`: a lane waiting for another's build gives its slot to the pool meanwhile (on 2 slots, the build
    beside it would otherwise run on one core), and holds one again when its wait ends."""
    with Jobserver(2, lanes=2) as pool:
        with pool.slot(), pool.slot():  # the build beside the lanes, and a lane: every slot held
            assert pool.free_tokens() == 0
            client = os.open(pool.fifo, os.O_RDWR | os.O_NONBLOCK)
            gave_back = threading.Event()

            def give_back_later() -> None:
                time.sleep(0.3)
                gave_back.set()
                os.write(client, TOKEN)

            job = threading.Thread(target=give_back_later)
            try:
                with pool.lend():
                    # this thread's slot is back in the pool: a job of the build takes it
                    assert settle(pool, 1) == 1
                    assert os.read(client, 1) == TOKEN
                    job.start()
                # the lend ended only once a slot was free again: when the job gave its token back
                assert gave_back.is_set()
                assert pool.free_tokens() == 0
            finally:
                job.join()
                os.close(client)
        assert pool.free_tokens() == 1
    # outside a slot it lends nothing
    with Jobserver(2) as pool, pool.lend():
        assert pool.free_tokens() == 1

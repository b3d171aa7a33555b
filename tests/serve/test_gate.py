"""ComputeGate: at most `workers` computations at once, at most `max_waiting` in line, first
come first served, each waiting at most `wait_s`; everyone else is told to come back."""

from __future__ import annotations

import os
import threading
import time
from typing import Callable

import pytest

from tb_reduce_plugin.serve.gate import ComputeGate, ServerBusy, default_workers

MB = 1024 * 1024


def wait_for(condition: Callable[[], bool], what: str) -> None:
    """Wait until another thread has reached a state (a hang detector bounds it, not a timing)."""
    deadline = time.monotonic() + 30
    while not condition():
        assert time.monotonic() < deadline, f"never happened: {what}"
        time.sleep(0.001)


def join_all(threads: list[threading.Thread]) -> None:
    for t in threads:
        t.join(30)
    assert not any(t.is_alive() for t in threads)


class Holder:
    """A thread inside a slot until told to leave."""

    def __init__(self, gate: ComputeGate) -> None:
        self.inside = threading.Event()
        self.leave = threading.Event()
        self.thread = threading.Thread(target=self._run, args=(gate,))
        self.thread.start()
        assert self.inside.wait(30)

    def _run(self, gate: ComputeGate) -> None:
        with gate.slot():
            self.inside.set()
            self.leave.wait(30)

    def release(self) -> None:
        self.leave.set()
        join_all([self.thread])


class Waiter:
    """A thread that asks for a slot and records what happened."""

    def __init__(self, gate: ComputeGate, name: str, entered: list[str], lock: threading.Lock) -> None:
        self.error: BaseException | None = None
        self.failed = threading.Event()
        self.thread = threading.Thread(target=self._run, args=(gate, name, entered, lock))
        self.thread.start()

    def _run(self, gate: ComputeGate, name: str, entered: list[str], lock: threading.Lock) -> None:
        try:
            with gate.slot():
                with lock:
                    entered.append(name)
        except ServerBusy as exc:
            self.error = exc
            self.failed.set()


def test_never_more_than_workers_computations_run_at_once() -> None:
    workers, n = 3, 21
    gate = ComputeGate(workers, max_waiting=n, wait_s=60)
    lock = threading.Lock()
    inside = [0]
    most = [0]
    together = threading.Barrier(workers)  # every slot is used: each batch of `workers` meets inside
    errors: list[BaseException] = []

    def compute() -> None:
        try:
            with gate.slot():
                with lock:
                    inside[0] += 1
                    most[0] = max(most[0], inside[0])
                together.wait(30)
                with lock:
                    inside[0] -= 1
        except BaseException as exc:  # noqa: B036 - reported below, not lost in a thread
            errors.append(exc)

    threads = [threading.Thread(target=compute) for _ in range(n)]
    for t in threads:
        t.start()
    join_all(threads)
    assert errors == [] and most[0] == workers and inside[0] == 0
    assert gate.completed == n and gate.running == 0 and gate.waiting == 0 and gate.turned_away == 0


def test_beyond_max_waiting_a_caller_is_turned_away_at_once_with_a_retry_after() -> None:
    gate = ComputeGate(1, max_waiting=2, wait_s=60)
    holder = Holder(gate)
    entered: list[str] = []
    lock = threading.Lock()
    waiters = []
    for i in range(2):
        waiters.append(Waiter(gate, f"w{i}", entered, lock))
        wait_for(lambda i=i: gate.waiting == i + 1, f"waiter {i} in line")
    with pytest.raises(ServerBusy) as err:
        with gate.slot():
            pytest.fail("a third waiter got in")
    busy = err.value
    assert isinstance(busy.retry_after_s, int) and 1 <= busy.retry_after_s <= 60
    assert "\n" not in str(busy) and "busy" in str(busy)
    assert gate.turned_away == 1 and gate.waiting == 2 and gate.running == 1
    holder.release()
    join_all([w.thread for w in waiters])
    assert sorted(entered) == ["w0", "w1"] and all(w.error is None for w in waiters)
    assert gate.running == 0 and gate.waiting == 0 and gate.completed == 3


def test_with_no_room_to_wait_a_caller_is_turned_away_as_soon_as_every_worker_is_busy() -> None:
    gate = ComputeGate(2, max_waiting=0, wait_s=60)
    holders = [Holder(gate), Holder(gate)]
    with pytest.raises(ServerBusy):
        with gate.slot():
            pass
    holders[0].release()
    with gate.slot():  # a free worker: in at once
        assert gate.running == 2
    holders[1].release()
    assert gate.running == 0


def test_the_retry_after_grows_with_the_line_ahead() -> None:
    gate = ComputeGate(1, max_waiting=5, wait_s=60)
    assert gate.retry_after() == 1  # nobody ahead: a mean computation
    holder = Holder(gate)
    entered: list[str] = []
    lock = threading.Lock()
    waiters = []
    for i in range(3):
        waiters.append(Waiter(gate, f"w{i}", entered, lock))
        wait_for(lambda i=i: gate.waiting == i + 1, f"waiter {i} in line")
    assert gate.retry_after() == 5  # 1 running + 3 waiting + itself, a second each (the starting mean)
    holder.release()
    join_all([w.thread for w in waiters])


def test_waiters_are_served_first_come_first_served() -> None:
    gate = ComputeGate(1, max_waiting=10, wait_s=60)
    holder = Holder(gate)
    entered: list[str] = []
    lock = threading.Lock()
    names = [f"w{i}" for i in range(6)]
    waiters = []
    for i, name in enumerate(names):
        waiters.append(Waiter(gate, name, entered, lock))
        wait_for(lambda i=i: gate.waiting == i + 1, f"{name} in line")
    holder.release()
    join_all([w.thread for w in waiters])
    assert entered == names and gate.waiting == 0 and gate.running == 0


def test_a_waiter_at_the_head_that_times_out_is_busy_and_does_not_block_the_line() -> None:
    gate = ComputeGate(1, max_waiting=10, wait_s=0.2)
    holder = Holder(gate)
    entered: list[str] = []
    lock = threading.Lock()
    impatient = Waiter(gate, "impatient", entered, lock)  # waits 0.2 s at the head of the line
    wait_for(lambda: gate.waiting == 1 or impatient.failed.is_set(), "the impatient waiter in line")
    gate.wait_s = 60  # the ones behind it are patient
    patient = Waiter(gate, "patient", entered, lock)
    assert impatient.failed.wait(30)
    busy = impatient.error
    assert isinstance(busy, ServerBusy) and busy.retry_after_s >= 1 and "\n" not in str(busy)
    wait_for(lambda: gate.waiting == 1, "only the patient waiter in line")
    holder.release()
    join_all([impatient.thread, patient.thread])
    assert entered == ["patient"] and patient.error is None
    assert gate.turned_away == 1 and gate.waiting == 0 and gate.running == 0


def test_a_waiter_in_the_middle_that_times_out_does_not_block_the_ones_behind_it() -> None:
    gate = ComputeGate(1, max_waiting=10, wait_s=60)
    holder = Holder(gate)
    entered: list[str] = []
    lock = threading.Lock()
    first = Waiter(gate, "first", entered, lock)
    wait_for(lambda: gate.waiting == 1, "first in line")
    gate.wait_s = 0.2
    impatient = Waiter(gate, "impatient", entered, lock)
    wait_for(lambda: gate.waiting == 2 or impatient.failed.is_set(), "the impatient waiter in line")
    gate.wait_s = 60
    last = Waiter(gate, "last", entered, lock)
    assert impatient.failed.wait(30)
    wait_for(lambda: gate.waiting == 2, "first and last in line, the impatient one gone")
    holder.release()
    join_all([first.thread, impatient.thread, last.thread])
    assert entered == ["first", "last"] and isinstance(impatient.error, ServerBusy)
    assert gate.waiting == 0 and gate.running == 0 and gate.completed == 3


def test_an_exception_inside_the_slot_frees_it() -> None:
    gate = ComputeGate(1, max_waiting=0, wait_s=60)
    with pytest.raises(ValueError, match="reduction failed"):
        with gate.slot():
            raise ValueError("reduction failed")
    assert gate.running == 0 and gate.completed == 1
    with gate.slot():  # with no room to wait, a slot still held would be ServerBusy here
        assert gate.running == 1
    assert gate.running == 0 and gate.turned_away == 0


def test_a_waiter_gets_the_slot_an_exception_freed() -> None:
    gate = ComputeGate(1, max_waiting=1, wait_s=60)
    inside, fail = threading.Event(), threading.Event()

    def failing() -> None:
        try:
            with gate.slot():
                inside.set()
                fail.wait(30)
                raise ValueError("reduction failed")
        except ValueError:
            pass

    t = threading.Thread(target=failing)
    t.start()
    assert inside.wait(30)
    entered: list[str] = []
    waiter = Waiter(gate, "next", entered, threading.Lock())
    wait_for(lambda: gate.waiting == 1, "next in line")
    fail.set()
    join_all([t, waiter.thread])
    assert entered == ["next"] and gate.running == 0


# ---- how many workers -----------------------------------------------------------------


def test_default_workers_is_at_least_one_even_with_tiny_memory() -> None:
    assert default_workers(0) == 1
    assert default_workers(1, cores=8) == 1
    assert default_workers(100 * MB, per_worker_bytes=128 * MB, cores=8) == 1
    assert default_workers(10 * MB, per_worker_bytes=0, cores=1) == 1


def test_default_workers_gives_each_worker_its_share_of_memory_but_no_more_than_the_cores() -> None:
    assert default_workers(512 * MB, per_worker_bytes=128 * MB, cores=16) == 4
    assert default_workers(1 << 40, cores=4) == 4
    assert 1 <= default_workers(1 << 40) <= (os.cpu_count() or 1)

"""MemoryBudget and Account: a ledger of bytes promised, given back whatever happens,
never exceeded, with OverBudget (can never fit) told apart from BudgetBusy (others hold it)."""

from __future__ import annotations

import gc
import random
import threading

import pytest

from tb_reduce_plugin.budget import MB, BudgetBusy, MemoryBudget, OverBudget, Unlimited, machine_memory_bytes
from tb_reduce_plugin.errors import TraceError


class Owner:
    """Something a result's memory is tied to (a parsed index, a body held in memory)."""


def run_threads(threads: list[threading.Thread]) -> None:
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)  # a hang detector, not a timing
    assert not any(t.is_alive() for t in threads)


# ---- charging and giving back ------------------------------------------------------


def test_charges_of_several_accounts_add_up_and_each_close_gives_back_only_its_own() -> None:
    budget = MemoryBudget(100 * MB)
    a, b = budget.account("parse a"), budget.account("parse b")
    a.charge(10 * MB)
    a.charge(5 * MB)
    b.charge(20 * MB)
    assert (a.total, b.total, budget.used, budget.free) == (15 * MB, 20 * MB, 35 * MB, 65 * MB)
    a.close()
    assert (a.total, b.total, budget.used) == (0, 20 * MB, 20 * MB)
    b.close()
    assert budget.used == 0 and budget.peak == 35 * MB


def test_leaving_the_with_block_gives_everything_back_even_on_an_exception() -> None:
    budget = MemoryBudget(100 * MB)
    with pytest.raises(RuntimeError, match="parser crashed"):
        with budget.account("parse x") as acct:
            acct.charge(40 * MB)
            assert budget.used == 40 * MB
            raise RuntimeError("parser crashed")
    assert budget.used == 0 and acct.total == 0


def test_closing_an_account_twice_gives_its_bytes_back_once() -> None:
    budget = MemoryBudget(100)
    other = budget.account("other")
    other.charge(30)
    acct = budget.account("x")
    acct.charge(50)
    acct.close()
    acct.close()
    assert budget.used == 30 and other.total == 30


def test_zero_and_negative_charges_hold_nothing() -> None:
    budget = MemoryBudget(100)
    acct = budget.account("x")
    acct.charge(0)
    acct.charge(-50)
    assert acct.total == 0 and budget.used == 0


def test_releasing_more_than_held_gives_back_only_what_the_account_held() -> None:
    budget = MemoryBudget(100)
    other = budget.account("other")
    other.charge(40)
    acct = budget.account("x")
    acct.charge(30)
    acct.release(10)
    assert acct.total == 20 and budget.used == 60
    acct.release(1000)  # must not give back the other account's bytes
    assert acct.total == 0 and budget.used == 40


def test_settle_raises_and_lowers_the_charge_to_exactly_what_the_task_keeps() -> None:
    budget = MemoryBudget(100)
    acct = budget.account("parse x")
    acct.charge(30)
    acct.settle(70, "the parsed trace")
    assert acct.total == 70 and budget.used == 70
    acct.settle(25)
    assert acct.total == 25 and budget.used == 25
    acct.settle(25)
    assert acct.total == 25 and budget.used == 25
    acct.settle(0)
    assert acct.total == 0 and budget.used == 0


def test_settling_above_the_limit_is_over_budget_and_keeps_the_earlier_charge() -> None:
    budget = MemoryBudget(100)
    acct = budget.account("parse x")
    acct.charge(30)
    with pytest.raises(OverBudget):
        acct.settle(101)
    assert acct.total == 30 and budget.used == 30


# ---- OverBudget versus BudgetBusy ----------------------------------------------------


def test_a_charge_that_does_not_fit_the_limit_alone_is_over_budget_and_holds_nothing() -> None:
    budget = MemoryBudget(100 * MB)
    acct = budget.account("reading big.json")
    acct.charge(60 * MB)
    with pytest.raises(OverBudget) as err:
        acct.charge(50 * MB, "its events")
    assert isinstance(err.value, TraceError)  # the surfaces turn it into a one-line message
    assert acct.total == 60 * MB and budget.used == 60 * MB and budget.refused == 1
    message = str(err.value)
    assert "\n" not in message and "--tb_reduce_memory_mb" in message and "reading big.json" in message
    assert "its events" in message and "100 MB" in message and "110 MB" in message


def test_a_charge_bigger_than_the_whole_limit_is_over_budget_even_when_nothing_else_is_held() -> None:
    budget = MemoryBudget(10 * MB)
    with pytest.raises(OverBudget):
        budget.account("x").charge(10 * MB + 1)
    assert budget.used == 0 and budget.peak == 0


def test_a_charge_that_fits_exactly_succeeds() -> None:
    budget = MemoryBudget(10 * MB)
    acct = budget.account("x")
    acct.charge(10 * MB)
    assert budget.used == budget.limit and budget.free == 0


def test_a_charge_that_would_fit_if_others_released_is_busy_and_holds_nothing() -> None:
    budget = MemoryBudget(100 * MB)
    others = budget.account("another request")
    others.charge(80 * MB)
    acct = budget.account("reducing x")
    acct.charge(10 * MB)
    with pytest.raises(BudgetBusy) as err:
        acct.charge(30 * MB)
    assert not isinstance(err.value, OverBudget)
    assert acct.total == 10 * MB and budget.used == 90 * MB and budget.refused == 1
    message = str(err.value)
    assert "\n" not in message and "--tb_reduce_memory_mb" in message and "100 MB" in message


def test_bytes_others_hold_for_the_task_count_towards_over_budget() -> None:
    """A reduction of an index that already holds 60 MB can never get 50 MB more from 100 MB:
    told so (OverBudget), not asked to come back (BudgetBusy)."""
    budget = MemoryBudget(100 * MB)
    index = budget.account("the index")
    index.charge(60 * MB)
    reducing = budget.account("reducing x")
    with pytest.raises(OverBudget, match="110 MB"):
        reducing.charge(50 * MB, "planning", alongside=60 * MB)
    with pytest.raises(BudgetBusy):
        reducing.charge(50 * MB, "planning")  # without alongside it looks like a busy server
    assert reducing.total == 0 and budget.used == 60 * MB


def test_the_flag_named_in_messages_is_the_one_the_budget_was_given() -> None:
    budget = MemoryBudget(4 * MB, flag="--max-memory-mb")
    holder = budget.account("holder")
    holder.charge(3 * MB)
    with pytest.raises(OverBudget, match="--max-memory-mb 4.0 MB"):
        budget.account("cli").charge(5 * MB)
    with pytest.raises(BudgetBusy, match="--max-memory-mb 4.0 MB"):
        budget.account("cli").charge(2 * MB)


def test_a_busy_charge_with_a_wait_gives_up_when_nobody_releases() -> None:
    budget = MemoryBudget(100)
    budget.account("holder").charge(90)
    acct = budget.account("x")
    with pytest.raises(BudgetBusy):
        acct.charge(20, wait_s=0.2)
    assert acct.total == 0 and budget.used == 90


def test_a_busy_charge_with_a_wait_succeeds_once_another_thread_closes_its_account() -> None:
    budget = MemoryBudget(100)
    holder = budget.account("another request")
    holder.charge(90)
    asked = []
    waited = threading.Event()

    def note_the_wait(n: int) -> None:
        asked.append(n)
        if len(asked) == 2:  # asked again: the charge has been waiting once already
            waited.set()

    budget.add_reclaimer(note_the_wait)

    def close_when_waited() -> None:
        if waited.wait(30):
            holder.close()

    closer = threading.Thread(target=close_when_waited)
    closer.start()
    acct = budget.account("reducing x")
    acct.charge(50, wait_s=60)  # a hang detector: the closer frees it well before
    closer.join(30)
    assert not closer.is_alive()
    assert acct.total == 50 and budget.used == 50 and budget.refused == 0
    assert asked[:2] == [50, 50]


# ---- reclaimers ---------------------------------------------------------------------


def test_a_charge_that_does_not_fit_asks_the_reclaimers_for_the_bytes_needed_and_then_succeeds() -> None:
    budget = MemoryBudget(100)
    cached = budget.account("an idle index")
    cached.charge(70)
    asked: list[int] = []

    def drop_the_idle_index(n: int) -> None:
        asked.append(n)
        cached.close()

    budget.add_reclaimer(drop_the_idle_index)
    acct = budget.account("reducing x")
    acct.charge(20)  # fits: the reclaimer is not asked
    assert asked == []
    acct.charge(40)
    assert asked == [40] and acct.total == 60 and budget.used == 60 and budget.refused == 0


def test_later_reclaimers_are_asked_only_when_the_earlier_did_not_free_enough() -> None:
    budget = MemoryBudget(100)
    first, second = budget.account("first cache"), budget.account("second cache")
    first.charge(30)
    second.charge(60)
    calls: list[str] = []

    def reclaim_first(n: int) -> None:
        calls.append("first")
        first.close()

    def reclaim_second(n: int) -> None:
        calls.append("second")
        second.close()

    budget.add_reclaimer(reclaim_first)
    budget.add_reclaimer(reclaim_second)
    budget.account("a").charge(30)  # 10 free: the first frees 30, enough
    assert calls == ["first"] and second.total == 60
    budget.account("b").charge(20)  # 10 free again (30 + 60 held): the first has nothing left to free
    assert calls == ["first", "first", "second"] and budget.used == 50


def test_a_charge_that_can_never_fit_does_not_make_the_reclaimers_drop_anything() -> None:
    budget = MemoryBudget(100)
    cached = budget.account("an idle index")
    cached.charge(70)
    asked: list[int] = []
    budget.add_reclaimer(lambda n: (asked.append(n), cached.close()))
    with pytest.raises(OverBudget):
        budget.account("x").charge(200)
    assert asked == [] and cached.total == 70


def test_a_reclaimer_that_frees_too_little_leaves_the_charge_busy() -> None:
    budget = MemoryBudget(100)
    cached, held = budget.account("an idle index"), budget.account("in use")
    cached.charge(10)
    held.charge(80)
    budget.add_reclaimer(lambda n: cached.close())
    with pytest.raises(BudgetBusy):
        budget.account("x").charge(50)
    assert budget.used == 80


# ---- results that outlive their task -------------------------------------------------------


def test_keep_until_collected_gives_the_bytes_back_only_when_the_owner_is_garbage() -> None:
    budget = MemoryBudget(100)
    owner = Owner()
    acct = budget.account("parse x")
    acct.charge(60)
    acct.keep_until_collected(owner)
    gc.collect()
    assert budget.used == 60  # still referenced: still counted
    del owner
    gc.collect()
    assert budget.used == 0 and acct.total == 0


def test_an_owner_in_a_reference_cycle_is_counted_until_the_collector_frees_it() -> None:
    budget = MemoryBudget(100)
    owner = Owner()
    owner.me = owner  # type: ignore[attr-defined]
    acct = budget.account("parse x")
    acct.charge(60)
    acct.keep_until_collected(owner)
    gc.disable()
    try:
        del owner
        assert budget.used == 60  # unreachable but not yet freed: the memory is still there
    finally:
        gc.enable()
    gc.collect()
    assert budget.used == 0


def test_an_account_closed_before_its_owner_is_collected_gives_back_once() -> None:
    budget = MemoryBudget(100)
    other = budget.account("other")
    other.charge(30)
    owner = Owner()
    acct = budget.account("x")
    acct.charge(50)
    acct.keep_until_collected(owner)
    acct.close()
    assert budget.used == 30
    del owner
    gc.collect()
    assert budget.used == 30 and other.total == 30


# ---- many threads -------------------------------------------------------------------------


def test_concurrent_charges_from_many_threads_never_exceed_the_limit_and_all_come_back() -> None:
    limit = 1000
    budget = MemoryBudget(limit)
    start = threading.Barrier(16)
    outcomes: list[str] = []
    lock = threading.Lock()

    def task(seed: int) -> None:
        rng = random.Random(seed)
        start.wait(30)
        for _ in range(300):
            with budget.account(f"task {seed}") as acct:
                try:
                    for _ in range(rng.randint(1, 4)):
                        acct.charge(rng.randint(1, 300))
                    acct.settle(rng.randint(0, 200))
                    outcome = "held"
                except OverBudget:
                    outcome = "over"
                except BudgetBusy:
                    outcome = "busy"
            with lock:
                outcomes.append(outcome)

    run_threads([threading.Thread(target=task, args=(i,)) for i in range(16)])
    assert len(outcomes) == 16 * 300 and "held" in outcomes
    assert 0 < budget.peak <= limit
    assert budget.used == 0


def test_many_threads_waiting_for_memory_all_get_it_in_the_end() -> None:
    budget = MemoryBudget(100)
    got: list[tuple[int, int]] = []
    lock = threading.Lock()

    def task(i: int) -> None:
        with budget.account(f"task {i}") as acct:
            acct.charge(60, wait_s=60)  # only one fits at a time: the rest wait their turn
            with lock:
                got.append((i, budget.used))

    run_threads([threading.Thread(target=task, args=(i,)) for i in range(8)])
    assert sorted(got) == [(i, 60) for i in range(8)] and budget.used == 0 and budget.peak == 60


# ---- no limit, the machine ---------------------------------------------------------------------


def test_unlimited_accepts_any_realistic_charge() -> None:
    budget = Unlimited()
    with budget.account("library caller") as acct:
        acct.charge(1 << 50)
        acct.charge(1 << 50)
        assert budget.used == 1 << 51
    assert budget.used == 0


def test_machine_memory_is_a_positive_int_no_more_than_meminfo_says() -> None:
    with open("/proc/meminfo") as f:
        total_kb = next(int(line.split()[1]) for line in f if line.startswith("MemTotal:"))
    found = machine_memory_bytes()
    assert isinstance(found, int) and 0 < found <= total_kb * 1024

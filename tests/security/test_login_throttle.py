"""Throttling that a stranger cannot turn against the owner (issue 25), in login_guard itself: per (account,
address) the lock, per account and per address only a slower rate; admitted and counted in one step.

The same rules against a running server (logins from 127.0.0.2 and 127.0.0.3, the password change) are in
test_server_hardening.py.
"""
from __future__ import annotations

import threading

import pytest

from labeler.services.data.login_guard import LoginThrottle, ThrottlePolicy

pytestmark = pytest.mark.reliability


class Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _guess(throttle: LoginThrottle, username: str, address: str) -> bool:
    """One wrong password as the server tries it: admitted (True) and failed, or refused (False)."""
    if throttle.acquire(username, address) > 0:
        return False
    throttle.failed(username, address)
    return True


def test_wrong_passwords_from_one_address_do_not_lock_the_owner_out_from_another():
    throttle = LoginThrottle(ThrottlePolicy(free_failures=5, base_delay_s=2.0, max_delay_s=900.0), Clock())
    admitted = [_guess(throttle, "owner", "127.0.0.2") for _ in range(8)]
    assert admitted == [True] * 5 + [False] * 3
    assert throttle.retry_after("owner", "127.0.0.2") == 2.0
    assert throttle.acquire("owner", "127.0.0.3") == 0.0  # the owner's own try is checked


def test_the_account_ceiling_is_a_rate_not_a_lock():
    clock = Clock()
    policy = ThrottlePolicy(free_failures=5, base_delay_s=2.0, max_delay_s=900.0, account_free_failures=20)
    throttle = LoginThrottle(policy, clock)
    # Guesses from ever new addresses (a botnet): 20 go at full speed, then one per base_delay_s, however many.
    for k in range(20):
        assert _guess(throttle, "owner", f"10.1.0.{k}")
    waits = []
    for k in range(100):
        waits.append(throttle.retry_after("owner", f"10.2.0.{k}"))
        clock.now += waits[-1]
        assert _guess(throttle, "owner", f"10.2.0.{k}")
    assert waits[0] == 2.0 and max(waits) == 2.0  # 120 failures on the account: the owner waits 2 s at most
    clock.now += 2.0
    assert throttle.acquire("owner", "127.0.0.3") == 0.0


def test_parallel_attempts_get_exactly_the_allowance():
    # 14 parallel wrong logins got 10 password checks against an allowance of 5: the check and the count were
    # two steps. acquire() is one.
    throttle = LoginThrottle(ThrottlePolicy(free_failures=5))
    start = threading.Barrier(14)
    admitted = []

    def attempt():
        start.wait()
        admitted.append(throttle.acquire("owner", "127.0.0.2") == 0.0)

    threads = [threading.Thread(target=attempt) for _ in range(14)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert admitted.count(True) == 5 and admitted.count(False) == 9


def test_right_passwords_never_slow_an_address_and_an_unchecked_attempt_counts_for_nothing():
    clock = Clock()
    throttle = LoginThrottle(ThrottlePolicy(free_failures=2, address_free_failures=2, base_delay_s=5.0), clock)
    # 30 people behind one proxy address logging in at the same moment: every one admitted.
    for k in range(30):
        assert throttle.acquire(f"user{k}", "10.0.0.9") == 0.0
    for k in range(30):
        throttle.succeeded(f"user{k}", "10.0.0.9")
    assert throttle.acquire("alice", "10.0.0.9") == 0.0
    throttle.cancelled("alice", "10.0.0.9")  # the server was too busy to check it
    assert _guess(throttle, "alice", "10.0.0.9") and _guess(throttle, "alice", "10.0.0.9")
    assert throttle.retry_after("alice", "10.0.0.9") == 5.0  # two real failures: now the pair waits


def test_strangers_fill_their_own_lane_and_the_owners_successes_reset_no_one_elses_count():
    clock = Clock()
    policy = ThrottlePolicy(free_failures=5, base_delay_s=2.0, account_free_failures=20)
    throttle = LoginThrottle(policy, clock)
    assert throttle.acquire("owner", "10.0.0.1", "laptop") == 0.0
    throttle.succeeded("owner", "10.0.0.1", "laptop")  # the owner's address and browser are now known
    assert throttle.is_known("owner", "10.0.0.1") and throttle.is_known("owner", "10.9.9.9", "laptop")
    assert not throttle.is_known("owner", "10.9.9.9", "other") and not throttle.is_known("someone", "10.0.0.1")
    # 60 stranger addresses, 5 guesses each as fast as allowed: 20 checked, then the strangers' lane waits.
    checked = sum(_guess(throttle, "owner", f"10.1.0.{k}") for k in range(60) for _ in range(5))
    assert checked == 20
    assert throttle.retry_after("owner", "10.2.0.1") == 2.0  # any new address: the strangers' rate
    # The owner, from the known address or with the known browser elsewhere: no wait, at any moment.
    assert throttle.retry_after("owner", "10.0.0.1") == 0.0
    assert throttle.retry_after("owner", "10.3.0.1", "laptop") == 0.0
    # The owner logging in every second does not give the strangers fresh free guesses (it reset the account's
    # count before: 462 checked guesses in 40 s). Over 40 s they get one check per 2 s.
    for second in range(40):
        assert throttle.acquire("owner", "10.0.0.1", "laptop") == 0.0
        throttle.succeeded("owner", "10.0.0.1", "laptop")
        checked += sum(_guess(throttle, "owner", f"10.4.{second}.{k}") for k in range(10))
        clock.now += 1.0
    assert checked == 20 + 19  # at seconds 2, 4, ..., 38


def test_a_success_clears_its_own_pair_but_not_the_account_lanes():
    clock = Clock()
    throttle = LoginThrottle(ThrottlePolicy(free_failures=2, base_delay_s=2.0, account_free_failures=3), clock)
    for address in ("10.0.0.1", "10.0.0.2", "10.0.0.3"):
        assert _guess(throttle, "alice", address)
    assert throttle.retry_after("alice", "10.0.0.4") == 2.0  # 3 failures: the strangers' lane is at its rate
    assert _guess(throttle, "alice", "10.0.0.5") is False
    clock.now += 2.0
    assert throttle.acquire("alice", "10.0.0.5") == 0.0
    throttle.succeeded("alice", "10.0.0.5")  # alice herself, from a new address
    assert throttle.retry_after("alice", "10.0.0.6") == 2.0  # still the rate for other new addresses
    assert throttle.retry_after("alice", "10.0.0.5") == 0.0  # her address is known now: the other lane

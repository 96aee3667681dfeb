"""Throttling that a stranger cannot turn against the owner (issue 25), in login_guard itself: per (account,
address) the lock, per account and per address only a slower rate; admitted and counted in one step.

The same rules against a running server (logins from 127.0.0.2 and 127.0.0.3, the password change) are in
test_server_hardening.py.
"""
from __future__ import annotations

import threading

import pytest

from labeler.services.login_guard import LoginThrottle, ThrottlePolicy

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

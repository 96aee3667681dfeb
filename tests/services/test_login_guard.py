"""Throttling wrong passwords: the penalty schedule, per account and per address, forgetting."""
from __future__ import annotations

import pytest

from labeler.services.data.login_guard import LoginThrottle, ThrottlePolicy


class Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_penalty_schedule_doubles_from_the_fifth_failure_up_to_the_cap():
    policy = ThrottlePolicy(free_failures=5, base_delay_s=2.0, max_delay_s=10.0)
    # 4 failures: free; 5th: 2 s; 6th: 2*2 = 4 s; 7th: 2*4 = 8 s; 8th: 16 s capped at 10 s.
    assert [policy.penalty_s(n) for n in range(4, 9)] == [0.0, 2.0, 4.0, 8.0, 10.0]


@pytest.mark.parametrize("kwargs", [{"free_failures": 0}, {"base_delay_s": 0}, {"base_delay_s": 5, "max_delay_s": 1}])
def test_bad_policies_name_the_field(kwargs):
    with pytest.raises(ValueError, match=next(iter(kwargs))):
        ThrottlePolicy(**kwargs)


def test_an_account_from_one_address_is_refused_after_five_failures_until_the_penalty_passes():
    clock = Clock()
    throttle = LoginThrottle(ThrottlePolicy(free_failures=5, base_delay_s=2.0), clock)
    for _ in range(5):
        assert throttle.acquire("alice", "10.0.0.1") == 0.0  # admitted...
        throttle.failed("alice", "10.0.0.1")  # ...and the password was wrong
    assert throttle.retry_after("alice", "10.0.0.1") == 2.0
    assert throttle.retry_after("ALICE ", "10.0.0.1") == 2.0  # the same account however it is typed
    assert throttle.retry_after("bob", "10.0.0.1") == 0.0
    assert throttle.retry_after("alice", "10.0.0.2") == 0.0  # the owner elsewhere: not affected (issue 25)
    clock.now += 2.0
    assert throttle.acquire("alice", "10.0.0.1") == 0.0  # 6th failure: 2 * 2 = 4 s
    throttle.failed("alice", "10.0.0.1")
    assert throttle.retry_after("alice", "10.0.0.1") == 4.0
    clock.now += 4.0
    assert throttle.acquire("alice", "10.0.0.1") == 0.0
    throttle.succeeded("alice", "10.0.0.1")  # the right password: counting starts again
    assert throttle.acquire("alice", "10.0.0.1") == 0.0
    throttle.failed("alice", "10.0.0.1")
    assert throttle.retry_after("alice", "10.0.0.1") == 0.0


def test_an_address_guessing_many_names_is_slowed_to_one_try_per_base_delay_and_a_success_does_not_clear_it():
    clock = Clock()
    throttle = LoginThrottle(ThrottlePolicy(address_free_failures=5, base_delay_s=3.0), clock)
    for k in range(5):
        throttle.record_failure(f"user{k}", "10.0.0.1")
    assert throttle.retry_after("someone-else", "10.0.0.1") == 3.0
    assert throttle.retry_after("someone-else", "10.0.0.2") == 0.0
    clock.now += 3.0
    assert throttle.acquire("mallory", "10.0.0.1") == 0.0  # the one try of these 3 s
    assert throttle.retry_after("user10", "10.0.0.1") == 3.0
    throttle.succeeded("mallory", "10.0.0.1")  # her own valid account does not clear the address
    clock.now += 3.0
    throttle.record_failure("user9", "10.0.0.1")
    assert throttle.retry_after("user10", "10.0.0.1") == 3.0  # a rate, never a growing lock


def test_unknown_and_known_names_are_throttled_alike_and_old_failures_are_forgotten():
    clock = Clock()
    throttle = LoginThrottle(ThrottlePolicy(free_failures=2, base_delay_s=1.0, forget_after_s=60.0), clock)
    for name in ("alice", "no-such-user"):
        throttle.record_failure(name, None)
        throttle.record_failure(name, None)
    assert throttle.retry_after("alice", None) == throttle.retry_after("no-such-user", None) == 1.0
    clock.now += 61.0
    throttle.record_failure("alice", None)  # the old two are forgotten: this is the first again
    assert throttle.retry_after("alice", None) == 0.0


def test_memory_is_bounded_by_max_keys():
    throttle = LoginThrottle(ThrottlePolicy(max_keys=10), Clock())
    for k in range(50):
        throttle.record_failure(f"random-{k}", None)
    assert len(throttle._failures) == 10

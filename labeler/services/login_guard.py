"""Throttling password guesses so that a stranger cannot turn it against the owner. No gradio, no database: state
in memory.

Three counters of wrong passwords, each attempt checked against all three:
- per (account, address): after `free_failures` failures, attempts from that address for that account wait a
  penalty, base_delay_s doubled with every further failure, capped at max_delay_s (OWASP's exponential
  back-off). This is the lock, and it only ever locks the address that guessed: the owner, elsewhere, is not
  affected (issue 25: 8 wrong passwords from one address answered the owner's right one from another with 429).
- per account, from every address: after `account_free_failures`, at most one attempt per base_delay_s. A
  ceiling on the rate, never a growing lock: guesses spread over many addresses stay slow, and the owner waits
  seconds at most.
- per address, over every account: after `address_free_failures`, at most one attempt per base_delay_s as
  well (slows guessing many names from one address). A rate, not a lock, because behind a proxy that does not
  pass the client address on every user shares one address.

An attempt is counted as a failure when it is admitted (`acquire`), before the password is checked, in one
locked step: 14 parallel wrong logins used to get 10 checks against an allowance of 5. A right password then
takes its count back and clears its account's counters (`succeeded`); an attempt that was not checked at all
(the server too busy) takes its count back (`cancelled`). Accounts are keyed by the name as typed (case-folded),
so an unknown name is throttled exactly like a real one. An address's counter is never cleared by a success,
or one valid account would let its owner reset it between guesses at other accounts; it fades
(forget_after_s).

Owned by the app (one per `launch`), never a module global; the login form and the password change share it.
"""
from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Callable

from labeler.services.errors import PermissionDenied


@dataclass(frozen=True)
class ThrottlePolicy:
    free_failures: int = field(default=5, metadata={
        "help": "wrong passwords for one account from one address before that pair waits a penalty"})
    base_delay_s: float = field(default=2.0, metadata={
        "help": "first penalty in seconds (doubled per further failure); also the interval of the soft ceilings"})
    max_delay_s: float = field(default=900.0, metadata={"help": "longest penalty in seconds"})
    account_free_failures: int = field(default=20, metadata={
        "help": "wrong passwords for one account, from any address, before its attempts are held to one per "
                "base_delay_s (a rate, not a lock)"})
    address_free_failures: int = field(default=20, metadata={
        "help": "wrong passwords from one address, for any account, before its attempts are held to one per "
                "base_delay_s (a rate, not a lock)"})
    forget_after_s: float = field(default=3600.0, metadata={
        "help": "a counter with no failure for this long starts again from zero"})
    max_keys: int = field(default=100_000, metadata={
        "help": "counters kept at most (the stalest are dropped), so guessing random names cannot fill memory"})

    def __post_init__(self):
        for name in ("free_failures", "account_free_failures", "address_free_failures"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name}={getattr(self, name)!r}: must be at least 1")
        if self.base_delay_s <= 0 or self.max_delay_s < self.base_delay_s:
            raise ValueError(
                f"base_delay_s={self.base_delay_s!r}, max_delay_s={self.max_delay_s!r}: need 0 < base <= max"
            )

    def penalty_s(self, failures: int) -> float:
        """Seconds to refuse attempts from one address for one account after its `failures`-th consecutive
        failure (0 while under the limit)."""
        if failures < self.free_failures:
            return 0.0
        return min(self.base_delay_s * 2.0 ** (failures - self.free_failures), self.max_delay_s)

    def ceiling_s(self, failures: int, free: int) -> float:
        """The soft ceilings' wait after the last failure: base_delay_s once `free` failures are used, else 0."""
        return self.base_delay_s if failures >= free else 0.0


Key = tuple[str, ...]


class LoginThrottle:
    def __init__(self, policy: ThrottlePolicy = ThrottlePolicy(), clock: Callable[[], float] = time.monotonic):
        self.policy = policy
        self._clock = clock
        # key -> (count, time of the last failure, time of the one before: what a taken-back count restores)
        self._failures: dict[Key, tuple[int, float, float]] = {}
        self._lock = threading.Lock()

    @staticmethod
    def _keys(username: str, address: str | None) -> dict[str, Key]:
        account = (username or "").strip().casefold()
        keys = {"pair": ("pair", account, address or ""), "account": ("account", account)}
        if address:
            keys["address"] = ("address", address)
        return keys

    def _entry(self, key: Key, now: float) -> tuple[int, float]:
        count, last, _ = self._failures.get(key, (0, now, now))
        if now - last > self.policy.forget_after_s:
            self._failures.pop(key, None)
            return 0, now
        return count, last

    def _wait(self, keys: dict[str, Key], now: float) -> float:
        policy, waits = self.policy, [0.0]
        for kind, key in keys.items():
            count, last = self._entry(key, now)
            if kind == "pair":
                delay = policy.penalty_s(count)
            else:
                delay = policy.ceiling_s(count, policy.account_free_failures if kind == "account"
                                         else policy.address_free_failures)
            waits.append(last + delay - now)
        return max(waits)

    def retry_after(self, username: str, address: str | None) -> float:
        """Seconds until an attempt for this account from this address is allowed again (0: allowed now)."""
        now = self._clock()
        with self._lock:
            return self._wait(self._keys(username, address), now)

    def acquire(self, username: str, address: str | None) -> float:
        """Admit one attempt, counted as a failure at once (0.0), or refuse it: the seconds to wait. Check and
        count are one step, so parallel attempts cannot all pass the check before any of them is counted."""
        now = self._clock()
        with self._lock:
            keys = self._keys(username, address)
            wait = self._wait(keys, now)
            if wait > 0:
                return wait
            self._count(keys.values(), now)
            return 0.0

    def record_failure(self, username: str, address: str | None) -> None:
        """Count a failure without admitting an attempt first (acquire counts its own)."""
        now = self._clock()
        with self._lock:
            self._count(self._keys(username, address).values(), now)

    def succeeded(self, username: str, address: str | None) -> None:
        """An admitted attempt had the right password: the account's counters start again, and the address
        takes back the failure counted for it (it keeps the others)."""
        with self._lock:
            keys = self._keys(username, address)
            self._failures.pop(keys["pair"], None)
            self._failures.pop(keys["account"], None)
            self._uncount([keys["address"]] if "address" in keys else [])

    def cancelled(self, username: str, address: str | None) -> None:
        """An admitted attempt was never checked (the server was busy): it counts for nothing."""
        with self._lock:
            self._uncount(self._keys(username, address).values())

    def _count(self, keys, now: float) -> None:
        for key in keys:
            count, last = self._entry(key, now)
            self._failures[key] = (count + 1, now, last)
        if len(self._failures) > self.policy.max_keys:
            stalest = sorted(self._failures, key=lambda k: self._failures[k][1])
            for key in stalest[: len(self._failures) - self.policy.max_keys]:
                del self._failures[key]

    def _uncount(self, keys) -> None:
        for key in keys:
            count, _, before = self._failures.get(key, (0, 0.0, 0.0))
            if count <= 1:
                self._failures.pop(key, None)
            else:
                self._failures[key] = (count - 1, before, before)


class Throttled(PermissionDenied):
    """An attempt refused by the throttle before its password was checked; `retry_after` whole seconds (>= 1)."""

    def __init__(self, retry_after: float):
        import math

        self.retry_after = max(1, math.ceil(retry_after))
        super().__init__(f"Too many wrong passwords: try again in {self.retry_after} s.")

"""Throttling wrong passwords, per account and per client address. No gradio, no database: state in memory.

After `free_failures` wrong passwords for an account (or from an address), further attempts are refused
without checking the password until a penalty has passed: base_delay_s, doubled with every further failure,
capped at max_delay_s (OWASP's "exponential back-off" lockout, which slows guessing without letting anyone
lock an account out for long). Accounts are keyed by the name as typed, so an unknown name is throttled
exactly like a real one and a refusal does not reveal which names exist. A successful login clears the
account's counter; an address's counter only fades (forget_after_s), or one valid account would let its
owner reset the address's counter between guesses at other accounts.

Owned by the app (one per `launch`), never a module global.
"""
from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Callable


@dataclass(frozen=True)
class ThrottlePolicy:
    free_failures: int = 5
    base_delay_s: float = 2.0
    max_delay_s: float = 900.0
    # A key with no failure for this long starts again from zero.
    forget_after_s: float = 3600.0
    # Beyond this many tracked keys the stalest are dropped, so guessing random names cannot fill memory.
    max_keys: int = 100_000

    def __post_init__(self):
        if self.free_failures < 1:
            raise ValueError(f"free_failures={self.free_failures!r}: must be at least 1")
        if self.base_delay_s <= 0 or self.max_delay_s < self.base_delay_s:
            raise ValueError(
                f"base_delay_s={self.base_delay_s!r}, max_delay_s={self.max_delay_s!r}: need 0 < base <= max"
            )

    def penalty_s(self, failures: int) -> float:
        """Seconds to refuse attempts after the `failures`-th consecutive failure (0 while under the limit)."""
        if failures < self.free_failures:
            return 0.0
        return min(self.base_delay_s * 2.0 ** (failures - self.free_failures), self.max_delay_s)


class LoginThrottle:
    def __init__(self, policy: ThrottlePolicy = ThrottlePolicy(), clock: Callable[[], float] = time.monotonic):
        self.policy = policy
        self._clock = clock
        self._failures: dict[tuple[str, str], tuple[int, float]] = {}  # key -> (count, time of the last one)
        self._lock = threading.Lock()

    @staticmethod
    def _keys(username: str, address: str | None) -> list[tuple[str, str]]:
        keys = [("account", (username or "").strip().casefold())]
        if address:
            keys.append(("address", address))
        return keys

    def _entry(self, key: tuple[str, str], now: float) -> tuple[int, float]:
        count, last = self._failures.get(key, (0, now))
        if now - last > self.policy.forget_after_s:
            self._failures.pop(key, None)
            return 0, now
        return count, last

    def retry_after(self, username: str, address: str | None) -> float:
        """Seconds until an attempt for this account from this address is allowed again (0: allowed now)."""
        now = self._clock()
        with self._lock:
            waits = []
            for key in self._keys(username, address):
                count, last = self._entry(key, now)
                waits.append(last + self.policy.penalty_s(count) - now)
        return max(0.0, *waits)

    def record_failure(self, username: str, address: str | None) -> None:
        now = self._clock()
        with self._lock:
            for key in self._keys(username, address):
                count, _ = self._entry(key, now)
                self._failures[key] = (count + 1, now)
            if len(self._failures) > self.policy.max_keys:
                stalest = sorted(self._failures, key=lambda k: self._failures[k][1])
                for key in stalest[: len(self._failures) - self.policy.max_keys]:
                    del self._failures[key]

    def record_success(self, username: str, address: str | None) -> None:
        with self._lock:
            self._failures.pop(self._keys(username, address)[0], None)

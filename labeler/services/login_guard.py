"""Throttling password guesses so that a stranger cannot turn it against the owner. No gradio, no database: state
in memory.

Three counters of wrong passwords, each attempt checked against all three:
- per (account, address): after `free_failures` failures, attempts from that address for that account wait a
  penalty, base_delay_s doubled with every further failure, capped at max_delay_s (OWASP's exponential
  back-off). This is the lock, and it only ever locks the address that guessed: the owner, elsewhere, is not
  affected (a lock per account once let 8 wrong passwords from one address turn the owner's right one from
  another away with 429).
- per account, from every address: after `account_free_failures`, at most one attempt per base_delay_s. A
  ceiling on the rate, never a growing lock: guesses spread over many addresses stay slow, and the owner waits
  seconds at most.
- per address, over every account: after `address_free_failures`, at most one attempt per base_delay_s as
  well (slows guessing many names from one address). A rate, not a lock, because behind a proxy that does not
  pass the client address on every user shares one address.

An attempt is admitted (`acquire`) in one locked step with the check: it counts against its (account, address)
allowance while its password is checked, so 14 parallel wrong logins get 5 checks (they got 10 against an
allowance of 5). A wrong password then counts on all three counters (`failed`); a right one clears its account's
(`succeeded`) and never counts against its address, so people logging in at once behind one proxy address are
not slowed; an attempt that was never checked (the server too busy) counts for nothing (`cancelled`). Accounts
are keyed by the name as typed (case-folded), so an unknown name is throttled exactly like a real one. An
address's counter is never cleared by a success, or one valid account would let its owner reset it between
guesses at other accounts; it fades (forget_after_s).

Owned by the app (one per `launch`), never a module global; the login form and the password change share it.
"""
from __future__ import annotations

import math
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
    """The three counters of the module docstring. An attempt is `acquire`d, then ends `failed`, `succeeded` or
    `cancelled` (never checked); `record_failure` counts a failure that was not acquired."""

    def __init__(self, policy: ThrottlePolicy = ThrottlePolicy(), clock: Callable[[], float] = time.monotonic):
        self.policy = policy
        self._clock = clock
        self._failures: dict[Key, tuple[int, float]] = {}  # key -> (failures, time of the last one)
        # Attempts admitted and not ended yet, per (account, address): they count against its allowance at once.
        self._pending: dict[Key, int] = {}
        # Per account and per address under its ceiling: when the last attempt was admitted (one per base_delay_s).
        self._admitted: dict[Key, float] = {}
        self._lock = threading.Lock()

    @staticmethod
    def _keys(username: str, address: str | None) -> dict[str, Key]:
        account = (username or "").strip().casefold()
        keys = {"pair": ("pair", account, address or ""), "account": ("account", account)}
        if address:
            keys["address"] = ("address", address)
        return keys

    def _entry(self, key: Key, now: float) -> tuple[int, float]:
        count, last = self._failures.get(key, (0, now))
        if now - last > self.policy.forget_after_s:
            self._failures.pop(key, None)
            return 0, now
        return count, last

    def _free(self, kind: str) -> int:
        return self.policy.account_free_failures if kind == "account" else self.policy.address_free_failures

    def _wait(self, keys: dict[str, Key], now: float) -> float:
        policy, waits = self.policy, [0.0]
        for kind, key in keys.items():
            count, last = self._entry(key, now)
            if kind == "pair":
                # Failures and attempts still being checked: the 6th of 14 parallel guesses waits.
                waits.append(last + policy.penalty_s(count + self._pending.get(key, 0)) - now)
            elif count >= self._free(kind):
                waits.append(max(last, self._admitted.get(key, last)) + policy.base_delay_s - now)
        return max(waits)

    def retry_after(self, username: str, address: str | None) -> float:
        """Seconds until an attempt for this account from this address is allowed again (0: allowed now)."""
        now = self._clock()
        with self._lock:
            return self._wait(self._keys(username, address), now)

    def acquire(self, username: str, address: str | None) -> float:
        """Admit one attempt (0.0) or refuse it: the seconds to wait. Check and admission are one locked step:
        an admitted attempt counts against its (account, address) allowance, and takes its account's and its
        address's one slot per base_delay_s when they are at their ceiling, before its password is checked."""
        now = self._clock()
        with self._lock:
            keys = self._keys(username, address)
            wait = self._wait(keys, now)
            if wait > 0:
                return wait
            self._pending[keys["pair"]] = self._pending.get(keys["pair"], 0) + 1
            for kind, key in keys.items():
                if kind != "pair" and self._entry(key, now)[0] >= self._free(kind):
                    self._admitted[key] = now
            self._trim()
            return 0.0

    def failed(self, username: str, address: str | None) -> None:
        """An admitted attempt had a wrong password: a failure on all three counters."""
        now = self._clock()
        with self._lock:
            keys = self._keys(username, address)
            self._end(keys["pair"])
            self._count(keys.values(), now)

    def succeeded(self, username: str, address: str | None) -> None:
        """An admitted attempt had the right password: the account's counters start again. The address keeps
        its failures (one valid account must not reset an address guessing at others); a right password never
        counted against it, so any number of people logging in at once from one proxy address get in."""
        with self._lock:
            keys = self._keys(username, address)
            self._end(keys["pair"])
            for key in (keys["pair"], keys["account"]):
                self._failures.pop(key, None)
                self._admitted.pop(key, None)

    def cancelled(self, username: str, address: str | None) -> None:
        """An admitted attempt was never checked (the server was busy): it counts for nothing."""
        with self._lock:
            self._end(self._keys(username, address)["pair"])

    def record_failure(self, username: str, address: str | None) -> None:
        """Count a failure that was not admitted through acquire."""
        now = self._clock()
        with self._lock:
            self._count(self._keys(username, address).values(), now)

    def _end(self, pair: Key) -> None:
        left = self._pending.get(pair, 0) - 1
        if left > 0:
            self._pending[pair] = left
        else:
            self._pending.pop(pair, None)

    def _count(self, keys, now: float) -> None:
        for key in keys:
            count, _ = self._entry(key, now)
            self._failures[key] = (count + 1, now)
        self._trim()

    def _trim(self) -> None:
        if len(self._failures) > self.policy.max_keys:
            stalest = sorted(self._failures, key=lambda k: self._failures[k][1])
            for key in stalest[: len(self._failures) - self.policy.max_keys]:
                del self._failures[key]
                self._admitted.pop(key, None)
        if len(self._admitted) > self.policy.max_keys:  # ceilings of keys whose failures were dropped
            for key in [k for k in self._admitted if k not in self._failures]:
                del self._admitted[key]


class Throttled(PermissionDenied):
    """An attempt refused by the throttle before its password was checked; `retry_after` whole seconds (>= 1)."""

    def __init__(self, retry_after: float):
        self.retry_after = max(1, math.ceil(retry_after))
        super().__init__(f"Too many wrong passwords: try again in {self.retry_after} s.")

"""Throttling password guesses so that a stranger cannot turn it against the owner. No gradio, no database: state
in memory.

Three counters of wrong passwords, each attempt checked against all three:
- per (account, address): after `free_failures` failures, attempts from that address for that account wait a
  penalty, base_delay_s doubled with every further failure, capped at max_delay_s (OWASP's exponential
  back-off). This is the lock, and it only ever locks the address that guessed.
- per account, in two lanes: clients that have logged in to this account before (an address it logged in from,
  or a browser carrying a device id it logged in with: OWASP's "device cookies") and everyone else. Past
  `account_free_failures` in a lane, that lane gets one attempt per base_delay_s. A ceiling on the rate, never a
  growing lock. Guesses from ever new addresses all land in the strangers' lane, so they cannot take the owner's
  turns: 4 threads guessing from 60 addresses once held the one shared turn every 2 s and the owner got 0 of 12.
- per address, over every account: after `address_free_failures`, at most one attempt per base_delay_s as
  well (slows guessing many names from one address). A rate, not a lock, because behind a proxy that does not
  pass the client address on every user shares one address.

An attempt is admitted (`acquire`) in one locked step with the check: it counts against its (account, address)
allowance while its password is checked, so 14 parallel wrong logins get 5 checks. A wrong password then counts
on its pair, its account lane and its address (`failed`); a right one clears only its own pair and makes its
address and device known to the account (`succeeded`). It never clears the account's lanes: an owner logging
in every second once reset the count for everyone, and 462 guesses were checked in 40 s. An attempt that was
never checked (the server too busy) counts for nothing (`cancelled`). Accounts are keyed by the name as typed
(case-folded), so an unknown name is throttled exactly like a real one. Counters fade (forget_after_s).

Owned by the app (one per `launch`), never a module global; the login form and the password change share it.
"""
from __future__ import annotations

import math
import threading
import time
from dataclasses import dataclass, field
from typing import Callable

from labeler.errors import PermissionDenied


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
KNOWN_PER_ACCOUNT = 32  # addresses and devices remembered per account (the most recent successful logins)


class LoginThrottle:
    """The counters of the module docstring. An attempt is `acquire`d, then ends `failed`, `succeeded` or
    `cancelled` (never checked); `record_failure` counts a failure that was not acquired. `device` is the
    browser's device id (the guard's cookie), None for a client without one."""

    def __init__(self, policy: ThrottlePolicy = ThrottlePolicy(), clock: Callable[[], float] = time.monotonic):
        self.policy = policy
        self._clock = clock
        self._failures: dict[Key, tuple[int, float]] = {}  # key -> (failures, time of the last one)
        # Attempts admitted and not ended yet, per (account, address): they count against its allowance at once.
        self._pending: dict[Key, int] = {}
        # Per account lane and per address under its ceiling: when the last attempt was admitted.
        self._admitted: dict[Key, float] = {}
        # account -> {"address:<ip>" or "device:<id>": time of its last successful login}
        self._known: dict[str, dict[str, float]] = {}
        self._lock = threading.Lock()

    @staticmethod
    def _account(username: str) -> str:
        return (username or "").strip().casefold()

    def is_known(self, username: str, address: str | None, device: str | None = None) -> bool:
        """Whether this address or device has logged in to this account before (the owner's lane)."""
        known = self._known.get(self._account(username), {})
        return (bool(address) and f"address:{address}" in known) or (bool(device) and f"device:{device}" in known)

    def _keys(self, username: str, address: str | None, device: str | None) -> dict[str, Key]:
        account = self._account(username)
        lane = "known" if self.is_known(username, address, device) else "new"
        keys = {"pair": ("pair", account, address or ""), "account": ("account", account, lane)}
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

    def retry_after(self, username: str, address: str | None, device: str | None = None) -> float:
        """Seconds until an attempt for this account from this client is allowed again (0: allowed now)."""
        now = self._clock()
        with self._lock:
            return self._wait(self._keys(username, address, device), now)

    def acquire(self, username: str, address: str | None, device: str | None = None) -> float:
        """Admit one attempt (0.0) or refuse it: the seconds to wait. Check and admission are one locked step:
        an admitted attempt counts against its (account, address) allowance, and takes its account lane's and
        its address's one slot per base_delay_s when they are at their ceiling, before its password is checked."""
        now = self._clock()
        with self._lock:
            keys = self._keys(username, address, device)
            wait = self._wait(keys, now)
            if wait > 0:
                return wait
            self._pending[keys["pair"]] = self._pending.get(keys["pair"], 0) + 1
            for kind, key in keys.items():
                if kind != "pair" and self._entry(key, now)[0] >= self._free(kind):
                    self._admitted[key] = now
            self._trim()
            return 0.0

    def failed(self, username: str, address: str | None, device: str | None = None) -> None:
        """An admitted attempt had a wrong password: a failure on its pair, its account lane and its address."""
        now = self._clock()
        with self._lock:
            keys = self._keys(username, address, device)
            self._end(keys["pair"])
            self._count(keys.values(), now)

    def succeeded(self, username: str, address: str | None, device: str | None = None) -> None:
        """An admitted attempt had the right password: its own pair starts again, and its address and device
        join the account's known clients. The account's lanes and the address keep their failures (a success
        must not reset them for others); a right password never counted against the address, so any number of
        people logging in at once from one proxy address get in."""
        now = self._clock()
        with self._lock:
            keys = self._keys(username, address, device)
            self._end(keys["pair"])
            self._failures.pop(keys["pair"], None)
            known = self._known.setdefault(self._account(username), {})
            for client in ([f"address:{address}"] if address else []) + ([f"device:{device}"] if device else []):
                known.pop(client, None)
                known[client] = now  # most recent last
            while len(known) > KNOWN_PER_ACCOUNT:
                known.pop(next(iter(known)))
            self._trim()

    def cancelled(self, username: str, address: str | None, device: str | None = None) -> None:
        """An admitted attempt was never checked (the server was busy): it counts for nothing."""
        with self._lock:
            self._end(self._keys(username, address, device)["pair"])

    def record_failure(self, username: str, address: str | None, device: str | None = None) -> None:
        """Count a failure that was not admitted through acquire."""
        now = self._clock()
        with self._lock:
            self._count(self._keys(username, address, device).values(), now)

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
        if len(self._known) > self.policy.max_keys:  # accounts whose last known login is the oldest go first
            by_age = sorted(self._known, key=lambda a: max(self._known[a].values(), default=0.0))
            for account in by_age[: len(self._known) - self.policy.max_keys]:
                del self._known[account]


class Throttled(PermissionDenied):
    """An attempt refused by the throttle before its password was checked; `retry_after` whole seconds (>= 1)."""

    def __init__(self, retry_after: float):
        self.retry_after = max(1, math.ceil(retry_after))
        super().__init__(f"Too many wrong passwords: try again in {self.retry_after} s (logins to this account "
                         f"from this address must wait).")

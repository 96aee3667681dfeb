"""Logins under attack and under load (issue 36, items 1-4), against one running server:

1. a stranger guessing from 60 addresses (set in the ASGI scope, as uvicorn sets it) must not keep the owner
   out (before: 0 of 12 owner logins got in over 33 s), and the owner's own logins must not reset the count
   of the stranger's guesses (before: 462 guesses checked in 40 s);
2. 20 logins at once on a machine kept busy by CPU hogs all get in (before: 10-20 of 20 answered 503);
3. a wrong password costs the same work for a known and an unknown user name (before: two scrypt hashes
   against one, 107 ms against 54 ms);
4. X-Forwarded-For is believed from no one unless named (before: from 127.0.0.1, so a local process could make
   its wrong passwords count against the owner's address).
"""
from __future__ import annotations

import asyncio
import hashlib
import math
import multiprocessing
import os
import statistics
import threading
import time

import httpx
import pytest
import requests
from helpers import free_port, session_from

from labeler.services.data import accounts
from labeler.services.data.login_guard import ThrottlePolicy

pytestmark = pytest.mark.reliability

OWNER = ("olga", "olga-password-1")
BURST = [(f"user{k:02d}", f"user{k:02d}-password") for k in range(20)]
VICTIM = ("vera", "vera-password-1")  # the forged X-Forwarded-For test
# The defaults but for the longest penalty, so that nothing outlives a test by minutes.
POLICY = ThrottlePolicy(free_failures=5, base_delay_s=2.0, max_delay_s=60.0, account_free_failures=20,
                        address_free_failures=20)
ATTACK_ADDRESSES = [f"127.0.0.{k}" for k in range(10, 70)]


@pytest.fixture(scope="module")
def server(tmp_path_factory, tiny_model_dir):
    from labeler.services.serving import models
    from labeler.ui.app import build_app, launch
    from labeler.ui.context import ServeSettings
    from storage import open_db

    root = tmp_path_factory.mktemp("login-under-attack")
    db_path = str(root / "studio.db")
    db = open_db(db_path)
    try:
        accounts.create_user(db, "root", "root-password-1", role="admin")
        for user in (OWNER, VICTIM, *BURST):
            accounts.create_user(db, *user)
        models.register_model(db, "tiny", str(tiny_model_dir), "policy")
    finally:
        db.conn.close()
    port = free_port()
    settings = ServeSettings(db_path=db_path, port=port, model="tiny", runs_dir=str(root / "runs"),
                             login_throttle=POLICY)  # no trusted proxy: the default
    blocks = build_app(settings)
    launch(blocks, settings, prevent_thread_lock=True, quiet=True)
    try:
        yield {"url": f"http://127.0.0.1:{port}", "blocks": blocks}
    finally:
        blocks.close()


def asgi_client(server, address: str) -> httpx.AsyncClient:
    """A client whose requests reach the server's app with `address` as scope["client"], as if from it."""
    transport = httpx.ASGITransport(app=server["blocks"].server_app, client=(address, 40000))
    return httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1")


async def asgi_login(client: httpx.AsyncClient, username: str, password: str) -> httpx.Response:
    return await client.post("/login", data={"username": username, "password": password})


def test_a_stranger_with_60_addresses_neither_keeps_the_owner_out_nor_is_reset_by_the_owners_logins(server):
    async def scenario():
        owner = asgi_client(server, "127.0.0.3")
        first = await asgi_login(owner, *OWNER)  # the owner's browser has logged in from here before
        assert first.status_code == 200, first.text
        laptop_cookie = owner.cookies.get("rlhf-studio-device")  # the browser's device id, set with the answer
        clients = [asgi_client(server, address) for address in ATTACK_ADDRESSES]
        checked, refused, stop = [0], [0], asyncio.Event()

        async def attacker(offset: int):
            k = offset
            while not stop.is_set():
                client = clients[k % len(clients)]
                answer = await asgi_login(client, OWNER[0], f"guess-{k}")
                if answer.status_code == 400:
                    checked[0] += 1  # the password was checked (and wrong)
                else:
                    assert answer.status_code == 429, answer.text
                    refused[0] += 1
                k += 4
                await asyncio.sleep(0.005)

        attack = [asyncio.ensure_future(attacker(k)) for k in range(4)]
        start = time.monotonic()
        await asyncio.sleep(3.0)  # the stranger's free guesses are spent: the account is at its ceiling
        waits = []
        # The owner, every second, from the known address and from a new one with the known browser (a laptop
        # that moved): each gets in at the first try, while the stranger keeps guessing.
        for k in range(10):
            moved = asgi_client(server, f"127.0.1.{k}")
            moved.cookies.set("rlhf-studio-device", laptop_cookie or "none")
            for client in (owner, moved):
                began = time.monotonic()
                answer = await asgi_login(client, *OWNER)
                waits.append(time.monotonic() - began)
                assert answer.status_code == 200, (k, answer.status_code, answer.text)
            await asyncio.sleep(1.0)
        stop.set()
        await asyncio.gather(*attack)
        seconds = time.monotonic() - start
        return waits, checked[0], refused[0], seconds

    waits, checked, refused, seconds = asyncio.run(scenario())
    print(f"owner logins: {len(waits)}, longest {max(waits):.2f} s; stranger: {checked} checked, {refused} refused "
          f"in {seconds:.0f} s; load {os.getloadavg()[0]:.1f}")  # shown with -s: the figures of the README
    assert max(waits) < 5.0, waits
    # The stranger's guesses: 20 free for the account, then one per 2 s, whatever the owner's 20 logins did
    # (a success reset the count before: 462 guesses were checked in 40 s).
    assert refused > checked
    # one guess in each started window of base_delay_s (a window begun 0.1 s before the end still gets its guess)
    assert checked <= 20 + math.ceil(seconds / POLICY.base_delay_s) + 2, (checked, seconds)


def test_a_new_device_of_a_stranger_is_in_the_slow_lane_and_the_penalty_says_how_long(server):
    async def scenario():
        stranger = asgi_client(server, "127.0.2.1")
        codes = [(await asgi_login(stranger, VICTIM[0], f"wrong-{k}")).status_code for k in range(5)]
        refused = await asgi_login(stranger, *VICTIM)  # the right password, but from the locked address
        return codes, refused

    codes, refused = asyncio.run(scenario())
    assert codes == [400] * 5
    assert refused.status_code == 429 and refused.headers["Retry-After"] == "2"
    assert refused.json()["detail"] == ("Too many wrong passwords: try again in 2 s (logins to this account from "
                                        "this address must wait).")


def test_x_forwarded_for_from_loopback_is_not_believed(server):
    url = server["url"]
    forger = requests.Session()  # 127.0.0.1, claiming to forward for the owner's address
    codes = [forger.post(f"{url}/login", data={"username": VICTIM[0], "password": f"wrong-{k}"},
                         headers={"X-Forwarded-For": "127.0.0.77"}, timeout=60).status_code for k in range(7)]
    assert codes == [400] * 5 + [429] * 2  # counted against 127.0.0.1, the forger's own address
    owner = session_from("127.0.0.77").post(f"{url}/login", data={"username": VICTIM[0], "password": VICTIM[1]},
                                            timeout=60)
    assert owner.status_code == 200, owner.text  # 429 before: the forged address was believed


def _hog(stop_at: float) -> None:
    while time.monotonic() < stop_at:
        pass


def test_twenty_logins_at_once_on_a_busy_machine_all_get_in(server):
    url = server["url"]
    # Busy-looping processes bring the machine to a load of about 8 (the figure): 6 on an idle machine,
    # fewer where other work already runs (at least 2, so that the logins always compete for the CPU).
    count = min(6, max(2, round(8 - os.getloadavg()[0])))
    hogs = [multiprocessing.Process(target=_hog, args=(time.monotonic() + 20.0,), daemon=True) for _ in range(count)]
    for hog in hogs:
        hog.start()
    try:
        time.sleep(0.5)
        load = os.getloadavg()[0]
        start = threading.Barrier(len(BURST))
        results: dict[str, tuple[int, float]] = {}

        def log_in(k: int, user: tuple[str, str]):
            session = session_from(f"127.0.3.{k + 1}")
            start.wait()
            began = time.monotonic()
            answer = session.post(f"{url}/login", data={"username": user[0], "password": user[1]}, timeout=60)
            results[user[0]] = (answer.status_code, time.monotonic() - began)

        threads = [threading.Thread(target=log_in, args=(k, user)) for k, user in enumerate(BURST)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    finally:
        for hog in hogs:
            hog.terminate()
            hog.join()
    codes = sorted(code for code, _ in results.values())
    print(f"20 logins at once at load {load:.1f}: {codes.count(200)} got in, the slowest in "
          f"{max(seconds for _, seconds in results.values()):.2f} s")
    # Before: 2 checks at a time, 8 waiting, 1.5 s each at most: 10-20 of 20 answered 503 under load.
    assert codes == [200] * len(BURST), (codes, load)
    # The target is 10 s (measured 2.3-3.4 s at load ~8 on an otherwise idle machine; printed above). The
    # bound here is looser, since a test shares the machine with whatever else runs: what it guards is that
    # nobody is turned away or left waiting for the 30 s queue limit.
    assert max(seconds for _, seconds in results.values()) < 20.0, (results, load)


def test_a_known_and_an_unknown_name_cost_one_scrypt_each_and_the_same_time(db, monkeypatch):
    accounts.create_user(db, "known", "known-password-1")
    calls = []
    real_scrypt = hashlib.scrypt

    def counting(*args, **kwargs):
        calls.append(1)
        return real_scrypt(*args, **kwargs)

    accounts.authenticate(db, "nobody-yet", "wrong-password")  # anything computed once per process is done
    monkeypatch.setattr(hashlib, "scrypt", counting)
    assert accounts.authenticate(db, "known", "wrong-password") is None
    assert len(calls) == 1
    assert accounts.authenticate(db, "nobody-here", "wrong-password") is None
    assert len(calls) == 2  # two for an unknown name before (its dummy hash, then the check)
    # And in time: interleaved, CPU time of this thread (wall time on a shared machine is others' noise).
    known, unknown = [], []
    for _ in range(15):
        for name, times in (("known", known), ("nobody-here", unknown)):
            began = time.thread_time()
            accounts.authenticate(db, name, "wrong-password")
            times.append(time.thread_time() - began)
    ratio = statistics.median(unknown) / statistics.median(known)
    assert 0.8 <= ratio <= 1.2, (ratio, statistics.median(known), statistics.median(unknown))


def test_serve_takes_trusted_proxies_as_addresses_or_networks_only():
    from labeler.commands.serve import proxy_addresses
    from labeler.errors import InputError

    assert proxy_addresses(["127.0.0.1", "10.0.0.0/8, ::1"]) == ("127.0.0.1", "10.0.0.0/8", "::1")
    assert proxy_addresses([]) == ()
    with pytest.raises(InputError, match="'proxy.example' is not an IP address or network") as error:
        proxy_addresses(["127.0.0.1,proxy.example"])
    assert error.value.field == "--forwarded-allow-ips"


def test_the_launch_trusts_exactly_the_named_proxies(server, monkeypatch):
    from labeler.ui.gradio_internals import trusted_proxies, trusted_proxies_of

    assert trusted_proxies_of(server["blocks"]) == []  # uvicorn's default was 127.0.0.1 and ::1
    monkeypatch.setenv("FORWARDED_ALLOW_IPS", "*")
    with trusted_proxies(("10.0.0.0/8", "::1")):
        assert os.environ["FORWARDED_ALLOW_IPS"] == "10.0.0.0/8,::1"
    assert os.environ["FORWARDED_ALLOW_IPS"] == "*"  # the process's own value is back

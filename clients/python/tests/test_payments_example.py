"""examples/payments (seed 001's payments worker on this client), run twice in a row against one real
`idem serve`: the worker is killed with SIGKILL mid-charge, restarted and run a third time, and the
provider's ledger shows every order charged exactly once."""

import os
import re
import subprocess
import sys
from pathlib import Path

from conftest import IdemServer

DEMO = Path(__file__).resolve().parents[3] / "examples" / "payments" / "demo.py"


def test_each_order_is_charged_once_across_a_kill_and_two_reruns(server: IdemServer) -> None:
    runs = set()
    for attempt in (1, 2):
        done = subprocess.run(
            [sys.executable, str(DEMO)],
            env=dict(os.environ, IDEM_URL=server.url),
            capture_output=True,
            text=True,
            timeout=60,
        )
        out = f"demo run {attempt}:\n{done.stdout}\n{done.stderr}"
        assert done.returncode == 0, out
        run = re.search(r"^run (\w+): 6 orders", done.stdout, re.M)
        assert run, out
        runs.add(run.group(1))
        killed = f"order-{run.group(1)}-3"
        assert f"run 1: killed with SIGKILL while the provider was executing {killed}'s charge" in done.stdout, out
        assert re.search(rf"run 2: {killed} \(1003 cents\): charged ch_3 \(the provider had executed it", done.stdout), out
        third = [line for line in done.stdout.splitlines() if line.startswith("  run 3: ")]
        assert len(third) == 6 and all(": already charged ch_" in line for line in third), out
        assert re.search(r"^run 3: [\d.]+ s, 0 requests to the provider$", done.stdout, re.M), out
        assert (
            f"summary: 6 orders, 7 requests to the provider, 6 charges executed ({killed}: 2 requests, 1 charge): "
            "each order charged exactly once"
        ) in done.stdout, out
        assert done.stdout.rstrip().endswith("ok"), out
    assert len(runs) == 2  # each run its own order ids, against the same idem


def test_says_what_it_needs_when_idem_is_not_reachable() -> None:
    done = subprocess.run(
        [sys.executable, str(DEMO)],
        env=dict(os.environ, IDEM_URL="http://127.0.0.1:9"),
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.returncode != 0
    assert "idem is not reachable at http://127.0.0.1:9" in done.stderr and "idem serve" in done.stderr, done.stderr


def test_says_what_it_needs_when_idem_wants_a_token(auth_server: IdemServer) -> None:
    def demo(**env: str) -> "subprocess.CompletedProcess[str]":
        base = {k: v for k, v in os.environ.items() if k != "IDEM_TOKEN"}
        return subprocess.run(
            [sys.executable, str(DEMO)], env=dict(base, IDEM_URL=auth_server.url, **env),
            capture_output=True, text=True, timeout=30,
        )

    done = demo()
    assert done.returncode != 0
    assert f"idem at {auth_server.url} wants a token: set IDEM_TOKEN" in done.stderr, done.stderr
    assert "Traceback" not in done.stderr, done.stderr
    wrong = demo(IDEM_TOKEN="not-it")
    assert "does not know the token in IDEM_TOKEN" in wrong.stderr and "Traceback" not in wrong.stderr, wrong.stderr
    reader = demo(IDEM_TOKEN="v13w")
    assert "refused the token in IDEM_TOKEN" in reader.stderr and "Traceback" not in reader.stderr, reader.stderr

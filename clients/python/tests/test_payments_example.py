"""examples/payments (seed 001's payments worker on this client), run twice in a row against a real
`idem serve`: the worker is killed with SIGKILL mid-charge, restarted and run again, and the
provider's ledger shows every order charged exactly once."""

import os
import subprocess
import sys
from pathlib import Path

from conftest import IdemServer

DEMO = Path(__file__).resolve().parents[3] / "examples" / "payments" / "demo.py"


def test_each_order_is_charged_once_across_a_kill_and_two_reruns(server: IdemServer) -> None:
    for round in (1, 2):
        done = subprocess.run(
            [sys.executable, str(DEMO)],
            env=dict(os.environ, IDEM_URL=server.url),
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, f"round {round}:\n{done.stdout}\n{done.stderr}"
        assert "each order charged exactly once" in done.stdout, done.stdout
        assert "run 1 killed mid-charge" in done.stdout, done.stdout

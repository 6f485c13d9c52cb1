"""CI's fault run: the short schedule (a control run, then each fault once) on a real primary and
synchronous standby, and the checker's verdict on contract §10.

Needs root (PostgreSQL runs as `postgres`, clusters are made with `pg_createcluster`), Debian's
PostgreSQL 15, and the idem binary (`cargo build -p idem-server`; `IDEM_TEST_BIN` names another).
`IDEM_TEST_FAULTS_KIND=patroni` (Debian's `patroni` and `etcd-server`) or `both` runs Patroni too;
`IDEM_TEST_FAULTS_SEED` picks the schedule (default 1). Results stay in /tmp/idem-faults/.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
BIN = os.environ.get("IDEM_TEST_BIN", str(REPO / "target" / "debug" / "idem"))
SEED = os.environ.get("IDEM_TEST_FAULTS_SEED", "1")
KINDS = {"both": ["streaming", "patroni"]}.get(os.environ.get("IDEM_TEST_FAULTS_KIND", "streaming"),
                                               [os.environ.get("IDEM_TEST_FAULTS_KIND", "streaming")])


def missing() -> str:
    if os.geteuid() != 0:
        return "the fault suite runs as root (PostgreSQL clusters of its own, run as postgres)"
    if not shutil.which("pg_createcluster") or not Path("/usr/lib/postgresql/15/bin/postgres").exists():
        return "Debian's PostgreSQL 15 (postgresql-15) is not installed"
    if not Path(BIN).exists():
        return f"no idem binary at {BIN} (cargo build -p idem-server)"
    return ""


def needs(kind: str) -> str:
    if kind == "patroni" and not (shutil.which("patroni") and shutil.which("etcd")):
        return "Patroni runs need Debian's patroni and etcd-server"
    return ""


@pytest.fixture(scope="module", params=KINDS)
def schedule(request):
    why = missing() or needs(request.param)
    if why:
        pytest.skip(why)
    out = Path(f"/tmp/idem-faults/ci-{request.param}-{SEED}-{time.strftime('%Y%m%d-%H%M%S')}")
    t0 = time.time()
    p = subprocess.run([sys.executable, str(HERE / "run.py"), "--schedule", "short", "--seed", SEED,
                        "--kind", request.param, "--idem-bin", BIN, "--out", str(out)],
                       capture_output=True, text=True, timeout=3600)
    print(p.stdout)
    print(p.stderr[-4000:], file=sys.stderr)
    summary = json.loads((out / "summary.json").read_text()) if (out / "summary.json").exists() else None
    return {"rc": p.returncode, "out": out, "summary": summary, "stdout": p.stdout,
            "seconds": time.time() - t0, "kind": request.param}


def test_the_harness_ran_every_fault(schedule):
    """The schedule ran to its end: every fault was injected and healed under load."""
    assert schedule["rc"] in (0, 1), f"the harness failed (exit {schedule['rc']}); see {schedule['out']}"
    s = schedule["summary"]
    planned = json.loads((schedule["out"] / "schedule.json").read_text())
    assert s["summary"]["runs"] == len(planned)
    for r in s["runs"]:
        assert r["attempts"] > 100, f"{r['run']}: too little load to judge ({r['attempts']} attempts)"
        assert not r.get("harness_error"), f"{r['run']}: {r['harness_error']}"


def test_contract_section_10_holds(schedule):
    """No 500, nothing acknowledged lost, one winner per claim, no key executed twice (but the
    documented case: its node away from the store past its lease, then a takeover elsewhere), every answer
    of a gateway key the same and stored, completed stays completed, bounded answers, recovery in
    time (contract §10). The table of what was found is in the output. The checker itself is
    checked in test_checker.py."""
    assert schedule["summary"], f"no summary; see {schedule['out']}"
    violations = schedule["summary"]["summary"]["violations"]
    assert not violations, f"contract §10 violated: {violations}\n{schedule['stdout'][-6000:]}"


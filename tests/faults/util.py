"""Small helpers shared by the harness: running commands (as `postgres` where PostgreSQL needs
it), querying a server with psql, waiting for a condition, and finding and ending only the
processes this suite started (by their pid, recognised by the suite's own directories in their
command line)."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Callable, List, Optional, Sequence

PG_BIN = Path("/usr/lib/postgresql/15/bin")
_print_lock = threading.Lock()
VERBOSE = True


def say(*args: object) -> None:
    if VERBOSE:
        with _print_lock:
            print(time.strftime("%H:%M:%S"), *args, flush=True, file=sys.stderr)


def run(cmd: Sequence[str], check: bool = True, timeout: float = 120, as_postgres: bool = False,
        env: Optional[dict] = None, quiet: bool = False) -> subprocess.CompletedProcess:
    full = list(cmd)
    if as_postgres:
        full = ["runuser", "-u", "postgres", "--"] + full
    e = dict(os.environ)
    if env:
        e.update(env)
    p = subprocess.run(full, capture_output=True, text=True, timeout=timeout, env=e)
    if check and p.returncode != 0:
        raise RuntimeError(f"command failed ({p.returncode}): {' '.join(full)}\n{p.stdout}\n{p.stderr}")
    if not quiet and p.returncode != 0:
        say("command", " ".join(full), "exited", p.returncode, p.stderr.strip()[-300:])
    return p


def psql(port: int, sql: str, db: str = "postgres", timeout: float = 10, check: bool = True) -> str:
    """One statement through psql over TCP; returns its unaligned, tuples-only output."""
    p = run(
        [str(PG_BIN / "psql"), "-h", "127.0.0.1", "-p", str(port), "-U", "postgres", "-d", db, "-XAtq",
         "-v", "ON_ERROR_STOP=1", "-c", sql],
        check=check, timeout=timeout, env={"PGCONNECT_TIMEOUT": "2"}, quiet=not check,
    )
    return p.stdout.strip()


def try_psql(port: int, sql: str, db: str = "postgres", timeout: float = 5) -> Optional[str]:
    try:
        p = run([str(PG_BIN / "psql"), "-h", "127.0.0.1", "-p", str(port), "-U", "postgres", "-d", db, "-XAtq",
                 "-v", "ON_ERROR_STOP=1", "-c", sql], check=False, timeout=timeout,
                env={"PGCONNECT_TIMEOUT": "2"}, quiet=True)
    except subprocess.TimeoutExpired:
        return None
    return p.stdout.strip() if p.returncode == 0 else None


def wait_for(what: str, cond: Callable[[], object], timeout: float, interval: float = 0.2) -> object:
    deadline = time.time() + timeout
    while True:
        v = cond()
        if v:
            return v
        if time.time() > deadline:
            raise TimeoutError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(interval)


def port_open(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", port)) == 0


def pids_matching(fragment: str) -> List[int]:
    """Pids whose command line contains `fragment` (a path of this suite's own)."""
    out = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit() or int(d.name) == os.getpid():
            continue
        try:
            cmd = (d / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if fragment in cmd:
            out.append(int(d.name))
    return out


def kill_pid(pid: int, sig: int = signal.SIGKILL) -> None:
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass


class EventLog:
    """events.jsonl: what the harness did and when (the checker reads it)."""

    def __init__(self, path: Path) -> None:
        self.file = open(path, "a", buffering=1)
        self.lock = threading.Lock()

    def __call__(self, event: str, **fields: object) -> dict:
        entry = {"t": time.time(), "event": event, **fields}
        with self.lock:
            self.file.write(json.dumps(entry) + "\n")
        say("event", event, json.dumps(fields)[:200])
        return entry

"""The Redis-protocol tests' fixtures: a real `idem serve` on the embedded store with `[resp]`
listening, open (no tokens, loopback) and with tokens. `IDEM_TEST_BIN` names the binary (default
`<repo>/target/debug/idem`)."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Iterator, NamedTuple, Optional

import pytest

REPO = Path(__file__).resolve().parents[2]
WRITER = "writer-s3cret"
READER = "reader-s3cret"


class Idem(NamedTuple):
    http: str
    port: int


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start(tokens: bool, database_url: Optional[str] = None) -> Iterator[Idem]:
    binary = os.environ.get("IDEM_TEST_BIN", str(REPO / "target" / "debug" / "idem"))
    with tempfile.TemporaryDirectory() as tmp:
        api, resp = free_port(), free_port()
        config = f'listen = "127.0.0.1:{api}"\ndata_dir = "{tmp}/data"\n'
        if database_url:
            config += f'\n[store]\ntype = "postgres"\nurl = "{database_url}"\n'
        config += f'\n[resp]\nlisten = "127.0.0.1:{resp}"\n'
        if tokens:
            config += (
                f'\n[[auth.token]]\nname = "writer"\ntoken = "{WRITER}"\ncan = "write"\n'
                f'\n[[auth.token]]\nname = "reader"\ntoken = "{READER}"\ncan = "read"\n'
            )
        Path(tmp, "idem.toml").write_text(config)
        log = open(Path(tmp, "idem.log"), "w")
        process = subprocess.Popen([binary, "serve", "--config", f"{tmp}/idem.toml"], stdout=log, stderr=log)
        try:
            wait_for(resp, process, Path(tmp, "idem.log"))
            yield Idem(f"http://127.0.0.1:{api}", resp)
        finally:
            process.terminate()
            process.wait(timeout=30)
            log.close()


def wait_for(port: int, process: "subprocess.Popen[bytes]", log: Path) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"idem exited: {log.read_text()}")
        try:
            socket.create_connection(("127.0.0.1", port), 0.2).close()
            return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"idem's [resp] did not listen within 30 s: {log.read_text()}")


@pytest.fixture(scope="module")
def idem() -> Iterator[Idem]:
    yield from start(tokens=False)


def postgres_schema(name: str) -> Iterator[str]:
    """A schema of its own in IDEM_TEST_DATABASE_URL's database, dropped after; its URL."""
    base = os.environ["IDEM_TEST_DATABASE_URL"]
    schema = f"{name}_{os.getpid()}"
    quiet = {**os.environ, "PGOPTIONS": "-c client_min_messages=warning"}
    subprocess.run(
        ["psql", base, "-qc", f"DROP SCHEMA IF EXISTS {schema} CASCADE; CREATE SCHEMA {schema}"], check=True, env=quiet
    )
    try:
        sep = "&" if "?" in base else "?"
        yield f"{base}{sep}options=-c%20search_path%3D{schema}"
    finally:
        subprocess.run(["psql", base, "-qc", f"DROP SCHEMA IF EXISTS {schema} CASCADE"], check=False, env=quiet)


@pytest.fixture(scope="module", params=["embedded", "postgres"])
def idem_on_each_store(request: pytest.FixtureRequest) -> Iterator[Idem]:
    """idem on the embedded store, then on PostgreSQL (skipped, and counted so, without
    IDEM_TEST_DATABASE_URL or psql)."""
    if request.param == "embedded":
        yield from start(tokens=False)
        return
    if not os.environ.get("IDEM_TEST_DATABASE_URL") or not shutil.which("psql"):
        pytest.skip("IDEM_TEST_DATABASE_URL (and psql) not set: not run on PostgreSQL")
    for url in postgres_schema("redis_py"):
        yield from start(tokens=False, database_url=url)


@pytest.fixture(scope="module")
def idem_with_tokens() -> Iterator[Idem]:
    yield from start(tokens=True)


@pytest.fixture(params=[2, 3], ids=["RESP2", "RESP3"])
def protocol(request: pytest.FixtureRequest) -> int:
    return int(request.param)


def unique(prefix: str, suffix: Optional[object] = None) -> str:
    return f"{prefix}:{time.time_ns()}:{suffix if suffix is not None else ''}"

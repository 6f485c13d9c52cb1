"""Shared fixtures: a real `idem serve` on a free port with a temporary data dir.

`IDEM_TEST_BIN` names the binary; it defaults to `<repo>/target/debug/idem` (built by
`cargo build -p idem-server` or `cargo test --workspace`).
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
import uuid
from pathlib import Path
from typing import Iterator, List, Optional

import httpx
import pytest

# The client reads IDEM_URL and IDEM_TOKEN when none is given: the tests give theirs, and a
# developer's own settings must not reach them.
os.environ.pop("IDEM_URL", None)
os.environ.pop("IDEM_TOKEN", None)

REPO = Path(__file__).resolve().parents[3]
DEFAULT_BIN = REPO / "target" / "debug" / "idem"


@pytest.fixture
def anyio_backend() -> str:
    # AsyncIdem is built on asyncio.
    return "asyncio"


def idem_bin() -> Path:
    path = Path(os.environ.get("IDEM_TEST_BIN") or DEFAULT_BIN)
    if not path.is_file():
        pytest.fail(
            f"the idem binary is missing at {path}: build it (cargo build -p idem-server) "
            "or point IDEM_TEST_BIN at one",
            pytrace=False,
        )
    return path


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class IdemServer:
    """One `idem serve` process; `url` once it answers /healthz."""

    def __init__(self, config: Optional[str] = None) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="idem-py-"))
        self.config = config
        self.proc: Optional[subprocess.Popen[bytes]] = None
        self.url = ""
        self.log_path = self.dir / "idem.log"

    def start(self) -> "IdemServer":
        binary = idem_bin()
        # Child processes get no IDEM_* settings from the environment of the test run.
        env = {k: v for k, v in os.environ.items() if not k.startswith("IDEM_")}
        env.setdefault("RUST_BACKTRACE", "1")
        last_log = ""
        for _ in range(3):  # a free port can be taken between probe and bind: try another
            port = free_port()
            args: List[str] = [
                str(binary),
                "serve",
                "--listen",
                f"127.0.0.1:{port}",
                "--data-dir",
                str(self.dir / "data"),
            ]
            if self.config is not None:
                cfg = self.dir / "idem.toml"
                cfg.write_text(self.config)
                args += ["--config", str(cfg)]
            log = open(self.log_path, "wb")
            self.proc = subprocess.Popen(
                args, cwd=self.dir, env=env, stdout=log, stderr=subprocess.STDOUT
            )
            log.close()
            self.url = f"http://127.0.0.1:{port}"
            if self._wait_healthy():
                return self
            last_log = self.log_path.read_text(errors="replace")[-2000:]
            self.stop()
        self.close()
        raise RuntimeError(f"idem serve did not become healthy:\n{last_log}")

    def _wait_healthy(self, timeout: float = 30.0) -> bool:
        assert self.proc is not None
        deadline = time.monotonic() + timeout
        with httpx.Client(timeout=1.0) as http:
            while time.monotonic() < deadline:
                if self.proc.poll() is not None:
                    return False
                try:
                    if http.get(f"{self.url}/healthz").status_code == 200:
                        return True
                except httpx.TransportError:
                    pass
                time.sleep(0.02)  # polling interval, not a fixed wait
        return False

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None

    def close(self) -> None:
        """Stop the server and delete its data dir."""
        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)


@pytest.fixture(scope="session")
def server() -> Iterator[IdemServer]:
    """An idem with no auth and default config."""
    s = IdemServer().start()
    yield s
    s.close()


@pytest.fixture(scope="session")
def auth_server() -> Iterator[IdemServer]:
    """An idem requiring the bearer token `t0k` (admin), or `v13w` (read only)."""
    s = IdemServer('[auth]\ntokens = ["t0k"]\n[[auth.token]]\nname = "viewer"\ntoken = "v13w"\ncan = "read"\n').start()
    yield s
    s.close()


@pytest.fixture
def ns() -> str:
    """A namespace of this test's own."""
    return "py-" + uuid.uuid4().hex[:16]

"""Everything a run starts, and the nemeses that break it.

Layout (every port from `--port-base`, default 5440; never 5432):

    base+1..3    PostgreSQL members (m1, m2 / p1, p2, p3)
    base+11..    the proxies: node i's path to member j listens on base + 10 + 3*(i-1) + j
    base+21..    idem nodes' APIs;   base+31.. their gateways
    base+40      the upstream;       base+41 the proxy's control port
    base+3000+   Patroni REST (8441..);  etcd on 23790/23800

Each idem node reaches PostgreSQL only through its own proxies, with a multi-host URL
(`…@127.0.0.1:P1,127.0.0.1:P2/idem?target_session_attrs=read-write&connect_timeout=5`), so a
nemesis can black-hole, reset or re-point one node's path without touching the other's.
"""

from __future__ import annotations

import json
import os
import random
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Dict, List, Optional

from cluster import Cluster, PatroniCluster, StreamingCluster
from load import Node
from util import EventLog, kill_pid, pids_matching, port_open, run, say, wait_for

HERE = Path(__file__).resolve().parent

GATEWAY_ROUTE = "/orders"
GATEWAY_LEASE = 6.0        # the /orders route's lease (s)
GATEWAY_UPSTREAM_TIMEOUT = 3.0
OP_LEASE = 5               # operations' lease_seconds


class ProxyControl:
    def __init__(self, port: int) -> None:
        self.port = port
        self.lock = threading.Lock()
        self.sock: Optional[socket.socket] = None
        self.file = None

    def __call__(self, cmd: str, **kw: object) -> dict:
        with self.lock:
            if self.sock is None:
                self.sock = socket.create_connection(("127.0.0.1", self.port), timeout=10)
                self.file = self.sock.makefile("rwb")
            self.file.write((json.dumps({"cmd": cmd, **kw}) + "\n").encode())
            self.file.flush()
            reply = json.loads(self.file.readline())
        if not reply.get("ok"):
            raise RuntimeError(f"proxy {cmd} {kw}: {reply}")
        return reply


class IdemNode:
    def __init__(self, h: "Harness", i: int) -> None:
        self.h = h
        self.name = f"n{i}"
        self.i = i
        self.api = h.port_base + 20 + i
        self.gateway = h.port_base + 30 + i
        self.proc: Optional[subprocess.Popen] = None
        self.log = h.dir / f"idem-{self.name}.log"
        # Under a path of the suite's own whatever --out says, so that a later run finds and ends
        # a node an earlier (crashed) run left behind by its command line.
        conf_dir = Path(f"/tmp/idem-faults/.nodes-{h.port_base}")
        conf_dir.mkdir(parents=True, exist_ok=True)
        self.config = conf_dir / f"idem-{self.name}.toml"
        self.paused = False

    def proxy(self, member: str) -> str:
        return f"{self.name}-{member}"

    def proxy_port(self, member: str) -> int:
        return self.h.port_base + 10 + 3 * (self.i - 1) + self.h.cluster.members.index(member) + 1

    def url(self, order: Optional[List[str]] = None) -> str:
        hosts = ",".join(f"127.0.0.1:{self.proxy_port(m)}" for m in (order or self.h.cluster.members))
        return f"postgres://postgres@{hosts}/idem?target_session_attrs=read-write&connect_timeout=5"

    def write_config(self, order: Optional[List[str]] = None) -> None:
        store_timeouts = ""
        if self.h.store_timeouts:
            store_timeouts = f'connect_timeout = "{self.h.call_timeout:g}s"\ncall_timeout = "{self.h.call_timeout:g}s"\n'
        text = f"""# written by tests/faults
listen = "127.0.0.1:{self.api}"

[store]
type = "postgres"
url = "{self.url(order)}"
pool_size = 8
{store_timeouts}
[gateway]
listen = "127.0.0.1:{self.gateway}"
upstream = "http://127.0.0.1:{self.h.upstream_port}/{self.name}"

[[gateway.routes]]
path = "{GATEWAY_ROUTE}"
methods = ["POST"]
key = "required"
lease = "{GATEWAY_LEASE:g}s"
upstream_timeout = "{GATEWAY_UPSTREAM_TIMEOUT:g}s"
"""
        self.config.write_text(text)
        (self.h.dir / self.config.name).write_text(text)  # a copy beside the run's results

    def healthy(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.api), timeout=1) as s:
                s.settimeout(2)
                s.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
                return s.recv(64).startswith(b"HTTP/1.1 200")
        except OSError:
            return False

    def start(self, tries: int = 5, first: Optional[List[str]] = None) -> Dict[str, object]:
        """Starts the node (with the URL's hosts in `first`'s order, when given); a start that exits
        (today: a standby first in the URL) is retried, then the URL is reordered primary-first so
        that the run can go on. Says what happened."""
        failures = 0
        for attempt in range(tries + 1):
            order = first
            if attempt == tries:
                primary = self.h.cluster_primary()
                order = [primary] + [m for m in self.h.cluster.members if m != primary] if primary else None
            self.write_config(order)
            with open(self.log, "a") as log:
                log.write(f"\n==== start {time.strftime('%H:%M:%S')} (try {attempt}) ====\n")
                log.flush()
                self.proc = subprocess.Popen([self.h.idem_bin, "serve", "--config", str(self.config)],
                                             stdout=log, stderr=subprocess.STDOUT, env=self.h.idem_env())
            deadline = time.time() + 30
            while time.time() < deadline:
                if self.proc.poll() is not None:
                    break
                if self.healthy():
                    self.paused = False
                    return {"node": self.name, "start_failures": failures, "first": (order or [None])[0],
                            "reordered_primary_first": attempt == tries}
                time.sleep(0.1)
            failures += 1
            tail = self.log.read_text(errors="replace").strip().splitlines()[-3:]
            self.h.events("start_failed", node=self.name, attempt=attempt, rc=self.proc.poll(), log=tail)
            if self.proc.poll() is None:
                kill_pid(self.proc.pid)
                self.proc.wait()
            time.sleep(1)
        raise RuntimeError(f"idem node {self.name} would not start; see {self.log}")

    def kill9(self) -> None:
        if self.proc and self.proc.poll() is None:
            kill_pid(self.proc.pid, signal.SIGKILL)
            self.proc.wait()

    def pause(self) -> None:
        assert self.proc
        kill_pid(self.proc.pid, signal.SIGSTOP)
        self.paused = True

    def resume(self) -> None:
        if self.proc:
            kill_pid(self.proc.pid, signal.SIGCONT)
        self.paused = False

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            kill_pid(self.proc.pid, signal.SIGCONT)
            kill_pid(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                kill_pid(self.proc.pid)
                self.proc.wait()


class Harness:
    def __init__(self, kind: str, run_dir: Path, idem_bin: str, port_base: int = 5440, nodes: int = 2,
                 members: int = 2, strict: bool = False, call_timeout: float = 5.0,
                 upstream_delay: float = 0.1) -> None:
        self.upstream_delay = upstream_delay
        self.kind = kind
        self.dir = run_dir
        self.dir.mkdir(parents=True, exist_ok=True)
        self.idem_bin = idem_bin
        self.port_base = port_base
        self.upstream_port = port_base + 40
        self.control_port = port_base + 41
        self.call_timeout = call_timeout
        self.events = EventLog(self.dir / "events.jsonl")
        if kind == "streaming":
            self.cluster: Cluster = StreamingCluster.at(port_base, members)
        else:
            self.cluster = PatroniCluster.at(port_base, members, strict=strict, run_dir=self.dir)
        self.nodes = [IdemNode(self, i + 1) for i in range(nodes)]
        self.proxy_proc: Optional[subprocess.Popen] = None
        self.upstream_proc: Optional[subprocess.Popen] = None
        self.proxy: Optional[ProxyControl] = None
        self.store_timeouts = False
        self.client_token = False

    # ---- setup and teardown -----------------------------------------------------------------

    def idem_env(self) -> Dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("IDEM_")}
        env["RUST_LOG"] = env.get("RUST_LOG", "info")
        return env

    def cleanup_leftovers(self) -> None:
        """Whatever an earlier (crashed) run of this suite left: its proxy, upstream and idem
        nodes (found by the suite's own paths in their command lines, ended by pid), and its
        clusters (PostgreSQL, Patroni and etcd under their own directories)."""
        for frag in (f"{HERE / 'proxy.py'} --control {self.control_port}", f"{HERE / 'upstream.py'} --port {self.upstream_port}",
                     f"/tmp/idem-faults/.nodes-{self.port_base}/"):
            for pid in pids_matching(frag):
                kill_pid(pid)
        StreamingCluster.at(self.port_base).cleanup()
        PatroniCluster.at(self.port_base, 3).cleanup()

    def start_helpers(self) -> None:
        py = sys.executable
        self.proxy_proc = subprocess.Popen([py, str(HERE / "proxy.py"), "--control", str(self.control_port)],
                                           stdout=open(self.dir / "proxy.log", "a"), stderr=subprocess.STDOUT)
        self.upstream_proc = subprocess.Popen(
            [py, str(HERE / "upstream.py"), "--port", str(self.upstream_port), "--log", str(self.dir / "upstream.jsonl"),
             "--max-delay", str(self.upstream_delay)],
            stdout=open(self.dir / "upstream.log", "a"), stderr=subprocess.STDOUT)
        wait_for("the proxy", lambda: port_open(self.control_port), 20)
        wait_for("the upstream", lambda: port_open(self.upstream_port), 20)
        self.proxy = ProxyControl(self.control_port)
        for node in self.nodes:
            for m in self.cluster.members:
                self.proxy("add", name=node.proxy(m), listen=node.proxy_port(m), backend=self.cluster.port(m))

    def detect_features(self) -> None:
        """Does this binary know `[store] call_timeout`? (The coming server does.)"""
        node = self.nodes[0]
        self.store_timeouts = True
        node.write_config()
        p = run([self.idem_bin, "config", "check", "--config", str(node.config)], check=False, quiet=True,
                env={"RUST_LOG": "error"})
        if p.returncode != 0:
            self.store_timeouts = False
        self.events("features", store_timeouts=self.store_timeouts)

    def setup(self) -> None:
        self.cleanup_leftovers()
        t0 = time.time()
        self.cluster.setup()
        self.events("cluster_ready", kind=self.kind, seconds=round(time.time() - t0, 1),
                    primary=self.cluster_primary())
        self.start_helpers()
        primary = self.cluster_primary()
        run([self.idem_bin, "migrate", "--database-url",
             f"postgres://postgres@127.0.0.1:{self.cluster.port(primary)}/idem"], timeout=60)
        self.detect_features()
        for node in self.nodes:
            node.start()
        self.events("nodes_ready", nodes=[n.name for n in self.nodes])

    def teardown(self) -> None:
        for node in self.nodes:
            try:
                node.stop()
            except Exception as e:
                say("stopping", node.name, e)
        for p in (self.proxy_proc, self.upstream_proc):
            if p and p.poll() is None:
                p.terminate()
                try:
                    p.wait(5)
                except subprocess.TimeoutExpired:
                    kill_pid(p.pid)
        try:
            self.cluster.teardown()
        except Exception as e:
            say("cluster teardown", e)

    def load_nodes(self) -> List[Node]:
        return [Node(n.name, n.api, n.gateway) for n in self.nodes]

    def cluster_primary(self) -> Optional[str]:
        return self.cluster.primary  # type: ignore[attr-defined]

    def query(self, sql: str) -> str:
        """A query on the current primary (the checker's look at the rows)."""
        primary = self.cluster.wait_primary(timeout=120)
        proc = subprocess.run(
            ["/usr/lib/postgresql/15/bin/psql", "-h", "127.0.0.1", "-p", str(self.cluster.port(primary)), "-U",
             "postgres", "-d", "idem", "-XAtq", "-v", "ON_ERROR_STOP=1", "-f", "-"],
            input=sql, capture_output=True, text=True, timeout=120, env={**os.environ, "PGCONNECT_TIMEOUT": "5"})
        if proc.returncode != 0:
            raise RuntimeError(f"query failed: {proc.stderr[-500:]}")
        return proc.stdout

    def make_healthy(self, timeout: float = 180) -> None:
        """Between runs: every proxy forwarding to its own member, every node up and running,
        the cluster with a primary and a synchronous standby."""
        assert self.proxy
        for node in self.nodes:
            for m in self.cluster.members:
                self.proxy("point", name=node.proxy(m), backend=self.cluster.port(m))
                self.proxy("forward", name=node.proxy(m))
            if node.paused:
                node.resume()
        c = self.cluster
        wait_for("the cluster healthy", c.healthy, timeout, interval=0.5)
        for node in self.nodes:
            if node.proc is None or node.proc.poll() is not None:
                self.events("node_restart", node=node.name, why="found down between runs")
                node.start()


# ---- the nemeses ------------------------------------------------------------------------------

FAULTS_STREAMING = ["failover", "switchover", "demote", "readonly", "repoint", "blackhole", "partition",
                    "standby-loss", "idem-kill", "idem-pause", "standby-first"]
FAULTS_PATRONI = ["failover", "switchover", "readonly", "repoint", "blackhole", "partition", "standby-loss",
                  "idem-kill", "idem-pause", "standby-first"]


def inject(h: Harness, kind: str, rng: random.Random, run_id: str) -> None:
    """Runs one fault from start to heal (blocking); what it did goes to events.jsonl. A `heal`
    event marks the moment from which recovery is measured (a promotion, a path back)."""
    ev = h.events
    c = h.cluster
    node = rng.choice(h.nodes)
    common = {"run": run_id, "fault": kind}
    if kind == "control":
        ev("fault_start", **common)
        time.sleep(rng.uniform(5, 8))
        ev("heal", **common, what="nothing happened")
    elif kind in ("failover", "switchover", "demote"):
        ev("fault_start", **common, primary=h.cluster_primary())
        if kind == "failover":
            info = c.failover(detect_delay=rng.uniform(0.5, 3.0))
        elif kind == "switchover":
            info = c.switchover()
        else:
            assert isinstance(c, StreamingCluster)
            info = c.demote(detect_delay=rng.uniform(1.0, 3.0))
        ev("heal", **common, what="promoted", at=info["promoted_at"], **{k: v for k, v in info.items()})
        # The old primary stays away a while (a demoted one stays up, read-only), then rejoins.
        time.sleep(rng.uniform(8, 14) if kind == "demote" else rng.uniform(3, 8))
        t = time.time()
        rejoin = c.rejoin(info["old"])
        ev("rejoin", **common, started=t, **rejoin)
    elif kind == "readonly":
        primary = h.cluster_primary()
        ev("fault_start", **common, member=primary)
        c.set_readonly(primary, True)
        time.sleep(rng.uniform(5, 12))
        c.set_readonly(primary, False)
        ev("heal", **common, what="read-write again", member=primary)
    elif kind == "repoint":
        primary = h.cluster_primary()
        standby = next(m for m in c.members if m != primary)
        assert h.proxy
        ev("fault_start", **common, node=node.name, member=primary, to=standby)
        h.proxy("point", name=node.proxy(primary), backend=c.port(standby))
        h.proxy("reset", name=node.proxy(primary))
        time.sleep(rng.uniform(5, 10))
        h.proxy("point", name=node.proxy(primary), backend=c.port(primary))
        ev("heal", **common, what="proxy points at the primary again", node=node.name)
    elif kind in ("blackhole", "partition"):
        primary = h.cluster_primary()
        assert h.proxy
        members = [primary] if kind == "blackhole" else list(c.members)
        dur = rng.uniform(5, 12) if kind == "blackhole" else GATEWAY_LEASE + rng.uniform(3, 8)
        ev("fault_start", **common, node=node.name, members=members, seconds=round(dur, 1))
        for m in members:
            h.proxy("blackhole", name=node.proxy(m))
        time.sleep(dur)
        for m in members:
            h.proxy("forward", name=node.proxy(m))
        ev("heal", **common, what="path back", node=node.name)
    elif kind == "standby-loss":
        ev("fault_start", **common)
        s = c.lose_standby()
        ev("standby_stopped", **common, member=s)
        time.sleep(rng.uniform(5, 10))
        t = time.time()
        ev("heal", **common, what="standby starting", member=s, at=t)
        c.restore_standby(s)
        ev("standby_back", **common, member=s)
    elif kind == "idem-kill":
        ev("fault_start", **common, node=node.name)
        node.kill9()
        time.sleep(rng.uniform(0.5, 3))
        info = node.start()
        ev("heal", **common, what="node restarted", **info)
    elif kind == "standby-first":
        # §10: idem starts against a multi-host URL whose first host is a standby (it moves on).
        primary = h.cluster_primary()
        order = [m for m in c.members if m != primary] + [primary]
        ev("fault_start", **common, node=node.name, order=order)
        node.kill9()
        info = node.start(first=order)
        ev("heal", **common, what="node restarted", **info)
    elif kind == "idem-pause":
        dur = GATEWAY_LEASE + rng.uniform(2, 6)
        ev("fault_start", **common, node=node.name, seconds=round(dur, 1))
        node.pause()
        time.sleep(dur)
        node.resume()
        ev("heal", **common, what="SIGCONT", node=node.name)
    else:
        raise ValueError(f"unknown fault {kind}")
    ev("fault_end", **common)

"""The HA PostgreSQL under test, in two kinds with one interface:

- `StreamingCluster`: Debian clusters made with `pg_createcluster` (`faults-m1`, `faults-m2`): a
  primary and a synchronous standby (`synchronous_standby_names = 'FIRST 1 (m1, m2)'`,
  `pg_basebackup`), promotion with `pg_ctlcluster 15 NAME promote`, the old primary brought back
  as a standby with `pg_rewind` (or a fresh base backup when rewinding fails). No failover manager:
  the harness is one, so after a promotion it drops `synchronous_standby_names` on the new
  primary until the old one has rejoined (as Patroni's non-strict `synchronous_mode` does).
- `PatroniCluster`: Patroni (Debian's `patroni`) with one etcd (`etcd-server`), two or three
  members, `synchronous_mode: true` (optionally strict), short ttl/loop_wait; failover by
  `kill -9` of the primary's postmaster, switchover with `patronictl switchover`; Patroni brings
  the old primary back itself (`use_pg_rewind`).

Every port is the suite's own (never 5432), and `cleanup()` removes whatever an earlier run left.
"""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import time
import urllib.request
from pathlib import Path
from typing import Dict, List, Optional

from util import PG_BIN, kill_pid, pids_matching, psql, run, say, try_psql, wait_for

# The suite's ports start here unless --port-base says otherwise (never 5432).
DEFAULT_PORT_BASE = 5440

HBA = """# written by tests/faults: trust on loopback, for a throw-away test cluster only
local   all             all                                     trust
host    all             all             127.0.0.1/32            trust
host    replication     all             127.0.0.1/32            trust
"""


def _postmaster_pid(data: Path) -> Optional[int]:
    try:
        return int((data / "postmaster.pid").read_text().split("\n")[0])
    except (OSError, ValueError):
        return None


class Cluster:
    """What the nemeses need of a cluster."""

    kind = "?"
    members: List[str]

    def port(self, member: str) -> int:
        raise NotImplementedError

    def is_primary(self, member: str) -> Optional[bool]:
        r = try_psql(self.port(member), "SELECT pg_is_in_recovery()", timeout=4)
        if r is None:
            return None
        return r == "f"

    def writable(self, member: str) -> bool:
        r = try_psql(self.port(member), "SHOW transaction_read_only", timeout=4)
        return r == "off" and self.is_primary(member) is True

    def committable(self, member: str) -> bool:
        """Whether a write commits there now (with synchronous replication, strict mode or a
        synchronous standby not yet following, a writable primary may still make commits wait)."""
        r = try_psql(self.port(member), "SET statement_timeout = '2s'; INSERT INTO faults_probe VALUES (now()); SELECT 1",
                     timeout=4)
        return r is not None and r.endswith("1")

    def find_primary(self) -> Optional[str]:
        for m in self.members:
            if self.is_primary(m):
                return m
        return None

    def wait_primary(self, timeout: float = 60, exclude: Optional[str] = None) -> str:
        return wait_for(
            "a primary that commits",
            lambda: next((m for m in self.members if m != exclude and self.writable(m) and self.committable(m)), None),
            timeout,
        )

    def set_readonly(self, member: str, on: bool) -> None:
        """The demoted-endpoint fault: the server turns read-only while its connections stay."""
        if on:
            psql(self.port(member), "ALTER SYSTEM SET default_transaction_read_only = on")
        else:
            psql(self.port(member), "ALTER SYSTEM RESET default_transaction_read_only")
        psql(self.port(member), "SELECT pg_reload_conf()")

    def replication(self, primary: str) -> List[Dict[str, str]]:
        out = try_psql(self.port(primary), "SELECT application_name, state, sync_state FROM pg_stat_replication") or ""
        rows = []
        for line in out.splitlines():
            name, state, sync = line.split("|")
            rows.append({"name": name, "state": state, "sync": sync})
        return rows


class StreamingCluster(Cluster):
    kind = "streaming"

    def __init__(self, base_port: int, n: int = 2, prefix: str = "faults") -> None:
        self.members = [f"m{i + 1}" for i in range(n)]
        self.base_port = base_port
        self.prefix = prefix
        self.primary: str = self.members[0]

    @classmethod
    def at(cls, port_base: int, n: int = 2) -> "StreamingCluster":
        """The suite's cluster for a `--port-base`: `faults-m1`… for the default 5440, and
        `faults-<port_base>-m1`… for any other, so that two suites can run side by side."""
        return cls(port_base, n, "faults" if port_base == DEFAULT_PORT_BASE else f"faults-{port_base}")

    def cname(self, m: str) -> str:
        return f"{self.prefix}-{m}"

    def port(self, m: str) -> int:
        return self.base_port + self.members.index(m) + 1

    def data(self, m: str) -> Path:
        return Path(f"/var/lib/postgresql/15/{self.cname(m)}")

    def etc(self, m: str) -> Path:
        return Path(f"/etc/postgresql/15/{self.cname(m)}")

    # ---- lifecycle -------------------------------------------------------------------------

    def cleanup(self) -> None:
        for m in self.members:
            if self.etc(m).exists() or self.data(m).exists():
                run(["pg_ctlcluster", "15", self.cname(m), "stop", "-m", "immediate"], check=False, quiet=True)
                for pid in pids_matching(str(self.data(m))):
                    kill_pid(pid)
                run(["pg_dropcluster", "15", self.cname(m)], check=False, quiet=True)
                shutil.rmtree(self.etc(m), ignore_errors=True)
                shutil.rmtree(self.data(m), ignore_errors=True)

    def setup(self) -> None:
        self.cleanup()
        for m in self.members:
            run(["pg_createcluster", "15", self.cname(m), "-p", str(self.port(m)), "--start-conf", "manual",
                 "--", "--data-checksums"], timeout=120)
            (self.etc(m) / "pg_hba.conf").write_text(HBA)
            names = ", ".join(self.members)
            (self.etc(m) / "conf.d" / "faults.conf").write_text(
                f"""# tests/faults: a primary and a synchronous standby
listen_addresses = '127.0.0.1'
cluster_name = '{m}'
wal_level = replica
max_wal_senders = 10
max_replication_slots = 10
wal_log_hints = on
hot_standby = on
wal_keep_size = '512MB'
synchronous_standby_names = 'FIRST 1 ({names})'
synchronous_commit = on
shared_buffers = '64MB'
max_connections = 120
fsync = off
wal_receiver_status_interval = '1s'
wal_sender_timeout = '10s'
wal_receiver_timeout = '10s'
"""
            )
        first = self.members[0]
        run(["pg_ctlcluster", "15", self.cname(first), "start"])
        wait_for("the first primary", lambda: try_psql(self.port(first), "SELECT 1") == "1", 30)
        for m in self.members[1:]:
            self.base_backup(m, first)
            self.start(m)
        self.primary = first
        wait_for("synchronous standbys", lambda: self.in_sync(first), 60)
        psql(self.port(first), "CREATE DATABASE idem")
        psql(self.port(first), "CREATE TABLE faults_probe (t timestamptz)")

    def start(self, m: str) -> None:
        run(["pg_ctlcluster", "15", self.cname(m), "start"], timeout=120)

    def stop(self, m: str, mode: str = "immediate") -> None:
        run(["pg_ctlcluster", "15", self.cname(m), "stop", "-m", mode], check=False, timeout=120)

    def kill9(self, m: str) -> Optional[int]:
        pid = _postmaster_pid(self.data(m))
        if pid:
            kill_pid(pid, signal.SIGKILL)
            wait_for(f"{m}'s postmaster to die", lambda: not Path(f"/proc/{pid}").exists(), 10)
        return pid

    def kill9_all(self, m: str) -> None:
        """kill -9 the postmaster, then its orphans (a crashed machine keeps no backend)."""
        self.kill9(m)
        for pid in pids_matching(str(self.data(m))):
            kill_pid(pid)
        # Backends do not carry the data dir in their command line: they exit once the
        # postmaster is gone, at their next check; wait for the port to close.
        wait_for(f"{m}'s port to close", lambda: try_psql(self.port(m), "SELECT 1", timeout=2) is None, 20)

    def standby_conf(self, m: str, primary: str) -> None:
        auto = self.data(m) / "postgresql.auto.conf"
        auto.write_text(
            "# written by tests/faults\n"
            f"primary_conninfo = 'host=127.0.0.1 port={self.port(primary)} user=postgres application_name={m}'\n"
        )
        (self.data(m) / "standby.signal").touch()
        run(["chown", "postgres:postgres", str(auto), str(self.data(m) / "standby.signal")])

    def base_backup(self, m: str, primary: str) -> None:
        self.stop(m)
        shutil.rmtree(self.data(m), ignore_errors=True)
        self.data(m).mkdir(mode=0o700)
        run(["chown", "postgres:postgres", str(self.data(m))])
        run([str(PG_BIN / "pg_basebackup"), "-h", "127.0.0.1", "-p", str(self.port(primary)), "-U", "postgres",
             "-D", str(self.data(m)), "-X", "stream", "-c", "fast"], as_postgres=True, timeout=300)
        self.standby_conf(m, primary)

    def rewind(self, m: str, primary: str) -> str:
        """Brings a stopped old primary back as a standby of `primary`: pg_rewind, else a base backup."""
        self.stop(m)
        # A promoted server writes its new timeline to its control file at its next checkpoint;
        # until then pg_rewind sees one timeline and says no rewind is required.
        psql(self.port(primary), "CHECKPOINT")
        src = f"host=127.0.0.1 port={self.port(primary)} user=postgres dbname=postgres"
        p = run([str(PG_BIN / "pg_rewind"), "-D", str(self.data(m)), f"--source-server={src}",
                 f"--config-file={self.etc(m) / 'postgresql.conf'}"], as_postgres=True, check=False, timeout=300)
        how = "pg_rewind"
        say(f"pg_rewind of {m}: rc={p.returncode} {(p.stdout + p.stderr).strip()[-400:]}")
        if p.returncode != 0:
            say(f"pg_rewind of {m} failed ({p.stderr.strip()[-200:]}); a fresh base backup instead")
            self.base_backup(m, primary)
            how = "base backup"
        else:
            self.standby_conf(m, primary)
        self.start(m)
        return how

    def in_sync(self, primary: str) -> bool:
        rows = self.replication(primary)
        others = [m for m in self.members if m != primary]
        return all(any(r["name"] == o and r["state"] == "streaming" for r in rows) for o in others) and any(
            r["sync"] == "sync" for r in rows
        )

    def teardown(self) -> None:
        self.cleanup()

    # ---- faults ----------------------------------------------------------------------------

    def standby(self) -> str:
        return next(m for m in self.members if m != self.primary)

    def promote(self, m: str) -> None:
        run(["pg_ctlcluster", "15", self.cname(m), "promote"], timeout=120)
        wait_for(f"{m} promoted", lambda: self.is_primary(m), 60)
        # No standby is connected yet: a synchronous primary would make every commit wait for
        # the rejoin. Drop the requirement until then (Patroni's non-strict synchronous_mode).
        psql(self.port(m), "ALTER SYSTEM SET synchronous_standby_names = ''")
        psql(self.port(m), "SELECT pg_reload_conf()")
        wait_for(f"{m} writable", lambda: self.writable(m), 30)

    def failover(self, detect_delay: float) -> Dict[str, object]:
        old, new = self.primary, self.standby()
        self.kill9_all(old)
        killed = time.time()
        time.sleep(detect_delay)
        self.promote(new)
        self.primary = new
        return {"old": old, "new": new, "killed_at": killed, "promoted_at": time.time()}

    def switchover(self) -> Dict[str, object]:
        old, new = self.primary, self.standby()
        # A clean switchover: the old primary shuts down (its last WAL reaches the standby), the
        # standby is promoted, the old primary follows it.
        t0 = time.time()
        self.stop(old, mode="fast")
        self.promote(new)
        self.primary = new
        return {"old": old, "new": new, "stopped_at": t0, "promoted_at": time.time()}

    def rejoin(self, old: str) -> Dict[str, object]:
        how = self.rewind(old, self.primary)
        wait_for(f"{old} streaming from {self.primary}", lambda: any(
            r["name"] == old and r["state"] == "streaming" for r in self.replication(self.primary)), 120)
        psql(self.port(self.primary), "ALTER SYSTEM RESET synchronous_standby_names")
        psql(self.port(self.primary), "SELECT pg_reload_conf()")
        wait_for("synchronous standby", lambda: self.in_sync(self.primary), 60)
        return {"member": old, "how": how, "primary": self.primary}

    def demote(self, detect_delay: float) -> Dict[str, object]:
        """The old primary turns read-only with its connections open; the standby is promoted."""
        old, new = self.primary, self.standby()
        self.set_readonly(old, True)
        t0 = time.time()
        time.sleep(detect_delay)
        self.promote(new)
        self.primary = new
        return {"old": old, "new": new, "readonly_at": t0, "promoted_at": time.time()}

    def lose_standby(self) -> str:
        s = self.standby()
        self.stop(s, mode="immediate")
        return s

    def restore_standby(self, s: str) -> None:
        self.start(s)
        wait_for("synchronous standby back", lambda: self.in_sync(self.primary), 120)

    def healthy(self) -> bool:
        return self.writable(self.primary) and self.in_sync(self.primary)


class PatroniCluster(Cluster):
    kind = "patroni"

    def __init__(self, base_port: int, n: int = 2, rest_base: int = 8440, etcd_client: int = 23790,
                 etcd_peer: int = 23800, strict: bool = False, base_dir: Path = Path("/var/lib/postgresql/idem-faults-patroni"),
                 run_dir: Optional[Path] = None) -> None:
        self.members = [f"p{i + 1}" for i in range(n)]
        self.base_port = base_port
        self.rest_base = rest_base
        self.etcd_client, self.etcd_peer = etcd_client, etcd_peer
        self.strict = strict
        self.base = base_dir
        self.logs = run_dir or base_dir
        self.procs: Dict[str, subprocess.Popen] = {}
        self.etcd: Optional[subprocess.Popen] = None
        self.scope = "idem-faults"

    @classmethod
    def at(cls, port_base: int, n: int = 2, strict: bool = False, run_dir: Optional[Path] = None) -> "PatroniCluster":
        """The suite's Patroni cluster for a `--port-base`: REST API on port_base + 3000 + i, etcd on
        port_base + 18350 (client) and + 18360 (peer), files under idem-faults-patroni for the
        default 5440 and idem-faults-<port_base>-patroni for any other (no path is a prefix of
        another's: clean-up finds processes by their paths)."""
        name = "idem-faults-patroni" if port_base == DEFAULT_PORT_BASE else f"idem-faults-{port_base}-patroni"
        return cls(port_base, n, rest_base=port_base + 3000, etcd_client=port_base + 18350, etcd_peer=port_base + 18360,
                   strict=strict, base_dir=Path("/var/lib/postgresql") / name, run_dir=run_dir)

    def port(self, m: str) -> int:
        return self.base_port + self.members.index(m) + 1

    def rest(self, m: str) -> int:
        return self.rest_base + self.members.index(m) + 1

    def data(self, m: str) -> Path:
        return self.base / m / "data"

    def conf(self, m: str) -> Path:
        return self.base / m / "patroni.yml"

    def cleanup(self) -> None:
        for p in list(self.procs.values()) + ([self.etcd] if self.etcd else []):
            if p.poll() is None:
                kill_pid(p.pid)
        for pid in pids_matching(str(self.base)):
            kill_pid(pid)
        time.sleep(0.5)
        for pid in pids_matching(str(self.base)):
            kill_pid(pid)
        shutil.rmtree(self.base, ignore_errors=True)

    def teardown(self) -> None:
        self.cleanup()

    def _yaml(self, m: str) -> str:
        # JSON is YAML: Patroni reads this file as YAML.
        members = {
            "scope": self.scope,
            "name": m,
            "restapi": {"listen": f"127.0.0.1:{self.rest(m)}", "connect_address": f"127.0.0.1:{self.rest(m)}"},
            "etcd3": {"hosts": [f"127.0.0.1:{self.etcd_client}"]},
            "bootstrap": {
                "dcs": {
                    "ttl": 10,
                    "loop_wait": 1,
                    "retry_timeout": 3,
                    "maximum_lag_on_failover": 1048576,
                    "synchronous_mode": True,
                    "synchronous_mode_strict": self.strict,
                    "postgresql": {
                        "use_pg_rewind": True,
                        "use_slots": True,
                        "parameters": {
                            "wal_level": "replica",
                            "hot_standby": "on",
                            "wal_log_hints": "on",
                            "max_wal_senders": 10,
                            "max_replication_slots": 10,
                            "wal_keep_size": "512MB",
                            "synchronous_commit": "on",
                            "max_connections": 120,
                            "shared_buffers": "64MB",
                            "fsync": "off",
                            "wal_receiver_status_interval": "1s",
                            "wal_sender_timeout": "10s",
                            "wal_receiver_timeout": "10s",
                        },
                    },
                },
                "initdb": [{"encoding": "UTF8"}, "data-checksums"],
            },
            "postgresql": {
                "listen": f"127.0.0.1:{self.port(m)}",
                "connect_address": f"127.0.0.1:{self.port(m)}",
                "data_dir": str(self.data(m)),
                "bin_dir": str(PG_BIN),
                "pgpass": str(self.base / m / "pgpass"),
                "authentication": {
                    "superuser": {"username": "postgres"},
                    "replication": {"username": "postgres"},
                    "rewind": {"username": "postgres"},
                },
                "pg_hba": [
                    "local all all trust",
                    "host all all 127.0.0.1/32 trust",
                    "host replication all 127.0.0.1/32 trust",
                ],
                "parameters": {"unix_socket_directories": str(self.base / m)},
            },
            "tags": {"nofailover": False, "noloadbalance": False, "clonefrom": False, "nosync": False},
        }
        return json.dumps(members, indent=1)

    def setup(self) -> None:
        self.cleanup()
        self.base.mkdir(parents=True)
        run(["chown", "postgres:postgres", str(self.base)])
        etcd_dir = self.base / "etcd"
        etcd_dir.mkdir()
        run(["chown", "postgres:postgres", str(etcd_dir)])
        self.etcd = subprocess.Popen(
            ["runuser", "-u", "postgres", "--", "etcd", "--name", "faults", "--data-dir", str(etcd_dir),
             "--listen-client-urls", f"http://127.0.0.1:{self.etcd_client}",
             "--advertise-client-urls", f"http://127.0.0.1:{self.etcd_client}",
             "--listen-peer-urls", f"http://127.0.0.1:{self.etcd_peer}",
             "--initial-advertise-peer-urls", f"http://127.0.0.1:{self.etcd_peer}",
             "--initial-cluster", f"faults=http://127.0.0.1:{self.etcd_peer}",
             "--enable-v2=true"],
            stdout=open(self.logs / "etcd.log", "a"), stderr=subprocess.STDOUT,
        )
        wait_for("etcd", lambda: self._http(f"http://127.0.0.1:{self.etcd_client}/health") is not None, 30)
        for m in self.members:
            (self.base / m).mkdir()
            self.conf(m).write_text(self._yaml(m))
            run(["chown", "-R", "postgres:postgres", str(self.base / m)])
        for i, m in enumerate(self.members):
            self.start(m)
            if i == 0:
                wait_for("the first Patroni leader", lambda: self.writable(self.members[0]), 90)
        wait_for("every member streaming, one synchronous", self.healthy, 120)
        primary = self.find_primary()
        assert primary
        psql(self.port(primary), "CREATE DATABASE idem")
        psql(self.port(primary), "CREATE TABLE faults_probe (t timestamptz)")

    def start(self, m: str) -> None:
        self.procs[m] = subprocess.Popen(
            ["runuser", "-u", "postgres", "--", "patroni", str(self.conf(m))],
            stdout=open(self.logs / f"patroni-{m}.log", "a"), stderr=subprocess.STDOUT,
        )

    def _http(self, url: str, timeout: float = 2) -> Optional[dict]:
        try:
            with urllib.request.urlopen(url, timeout=timeout) as r:
                return json.loads(r.read() or b"{}")
        except Exception:
            return None

    def cluster_state(self) -> Optional[dict]:
        for m in self.members:
            s = self._http(f"http://127.0.0.1:{self.rest(m)}/cluster")
            if s:
                return s
        return None

    def healthy(self) -> bool:
        s = self.cluster_state()
        if not s:
            return False
        roles = [x.get("role") for x in s.get("members", [])]
        states = [x.get("state") for x in s.get("members", [])]
        leader = next((x["name"] for x in s["members"] if x.get("role") == "leader"), None)
        return (
            len(roles) == len(self.members)
            and leader is not None
            and "sync_standby" in roles
            and all(st in ("running", "streaming") for st in states)
            and self.writable(leader)
        )

    @property
    def primary(self) -> Optional[str]:
        s = self.cluster_state()
        if s:
            return next((x["name"] for x in s["members"] if x.get("role") == "leader"), None)
        return self.find_primary()

    def sync_standby(self) -> Optional[str]:
        s = self.cluster_state()
        if s:
            return next((x["name"] for x in s["members"] if x.get("role") == "sync_standby"), None)
        return None

    def kill9_postmaster(self, m: str) -> Optional[int]:
        pid = _postmaster_pid(self.data(m))
        if pid:
            kill_pid(pid, signal.SIGKILL)
        return pid

    def failover(self, detect_delay: float = 0) -> Dict[str, object]:
        """kill -9 the leader's Patroni and postmaster (a crashed machine); Patroni elects another."""
        old = self.primary
        assert old
        # Patroni first (runuser and its child, found by the member's config path), whatever the
        # harness believes of its Popen: a surviving Patroni would restart its postmaster and keep
        # the leader key.
        for pid in pids_matching(str(self.conf(old))):
            kill_pid(pid)
        self.kill9_postmaster(old)
        for pid in pids_matching(str(self.data(old))):
            kill_pid(pid)
        killed = time.time()
        new = self.wait_primary(timeout=90, exclude=old)
        promoted = time.time()
        return {"old": old, "new": new, "killed_at": killed, "promoted_at": promoted}

    def rejoin(self, old: str) -> Dict[str, object]:
        self.start(old)
        wait_for("the cluster healthy again", self.healthy, 180, interval=0.5)
        return {"member": old, "how": "patroni", "primary": self.primary}

    def switchover(self) -> Dict[str, object]:
        old = self.primary
        cand = self.sync_standby() or next(m for m in self.members if m != old)
        t0 = time.time()
        run(["patronictl", "-c", str(self.conf(old)), "switchover", self.scope, "--leader", old,
             "--candidate", cand, "--force"], timeout=120)
        new = self.wait_primary(timeout=90, exclude=old)
        promoted = time.time()
        return {"old": old, "new": new, "started_at": t0, "promoted_at": promoted}

    def lose_standby(self) -> str:
        s = self.sync_standby() or next(m for m in self.members if m != self.primary)
        for pid in pids_matching(str(self.conf(s))):
            kill_pid(pid, signal.SIGSTOP)
        self.kill9_postmaster(s)
        for pid in pids_matching(str(self.data(s))):
            kill_pid(pid)
        self._stopped_patroni = s
        return s

    def restore_standby(self, s: str) -> None:
        for pid in pids_matching(str(self.conf(s))):
            kill_pid(pid, signal.SIGKILL)
        self.start(s)
        wait_for("the cluster healthy again", self.healthy, 180, interval=0.5)

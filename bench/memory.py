#!/usr/bin/env python3
"""The embedded store's memory per claim, while claims are stored and after `kill -9` and recovery.

  bench/memory.py [--claims 2000000] [--parts 3] [--ttl SECONDS] [--idem target/release/idem]

Starts `idem serve` on a fresh data dir, stores the claims through 500-key batches (three parts:
`scenario-{i%5}`, `user-{i//15}`, `node-{i%3}`, a survey's shape: five first parts, one second-level
prefix per three claims; one part: those three joined), reads the heap (RssAnon of
/proc/PID/status) beside the one at start, kills idem with SIGKILL, starts it on the same data dir
and reads the heap again once it is ready. The environment is idem's: MIMALLOC_PURGE_DELAY=0 (as the
container image and the systemd unit set it) gives freed memory back at once.
"""
import argparse, http.client, json, os, shutil, signal, socket, subprocess, tempfile, time


def rss_anon(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("RssAnon:"):
                return int(line.split()[1]) * 1024
    raise SystemExit("no RssAnon")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start(binary, data, port, log):
    env = dict(os.environ, IDEM_LOG__LEVEL="warn")
    p = subprocess.Popen([binary, "serve", "--listen", f"127.0.0.1:{port}", "--data-dir", data], env=env, stderr=log)
    for _ in range(1200):
        try:
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
            c.request("GET", "/readyz")
            r = c.getresponse(); r.read()
            if r.status == 200:
                return p
        except OSError:
            pass
        if p.poll() is not None:
            raise SystemExit(f"idem exited with {p.returncode}")
        time.sleep(0.1)
    raise SystemExit("idem did not become ready in 120 s")


def parts(i, n):
    three = [f"scenario-{i % 5}", f"user-{i // 15}", f"node-{i % 3}"]
    return three if n == 3 else ["-".join(three)]


def main():
    a = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    a.add_argument("--claims", type=int, default=2_000_000)
    a.add_argument("--parts", type=int, choices=[1, 3], default=3)
    a.add_argument("--ttl", type=int, help="every claim with this TTL (seconds); default none")
    a.add_argument("--idem", default="target/release/idem")
    args = a.parse_args()
    tmp = tempfile.mkdtemp(prefix="idem-memory-")
    data, port = os.path.join(tmp, "data"), free_port()
    with open(os.path.join(tmp, "log"), "a") as log:
        p = start(args.idem, data, port, log)
        time.sleep(1)
        base = rss_anon(p.pid)
        c = http.client.HTTPConnection("127.0.0.1", port)
        started = time.monotonic()
        for first in range(0, args.claims, 500):
            items = [dict({"parts": parts(i, args.parts)}, **({"ttl_seconds": args.ttl} if args.ttl else {}))
                     for i in range(first, min(first + 500, args.claims))]
            c.request("POST", "/v1/claims/survey/batch", json.dumps({"items": items}), {"Content-Type": "application/json"})
            r = c.getresponse(); body = r.read()
            if r.status != 200:
                raise SystemExit(f"batch answered {r.status}: {body[:200]!r}")
        took = time.monotonic() - started
        time.sleep(2)
        stored = rss_anon(p.pid)
        p.send_signal(signal.SIGKILL); p.wait()
        started = time.monotonic()
        p = start(args.idem, data, port, log)
        ready = time.monotonic() - started
        time.sleep(2)
        recovered = rss_anon(p.pid)
        p.send_signal(signal.SIGTERM); p.wait()
    shutil.rmtree(tmp)
    purge = os.environ.get("MIMALLOC_PURGE_DELAY", "mimalloc's default")
    shape = f"{args.claims:,} claims of {args.parts} part{'s' if args.parts > 1 else ''}" + (f", TTL {args.ttl} s" if args.ttl else "")
    print(f"{shape} (MIMALLOC_PURGE_DELAY={purge}), stored at {args.claims / took:,.0f}/s:")
    print(f"  heap {base / 2**20:.0f} MiB at start, {stored / 2**20:.0f} MiB stored: {(stored - base) / args.claims:.1f} B/claim")
    print(f"  after kill -9, ready in {ready:.1f} s: {recovered / 2**20:.0f} MiB: {(recovered - base) / args.claims:.1f} B/claim")


if __name__ == "__main__":
    main()

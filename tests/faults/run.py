#!/usr/bin/env python3
"""idem's fault-injection suite (contract §10): idem nodes under load on a real HA PostgreSQL,
faults injected on a seeded schedule, and a checker over every recorded answer and the database.

    python3 tests/faults/run.py --schedule short --seed 1                 # a few minutes
    python3 tests/faults/run.py --schedule long --seed 7 --kind patroni   # hours: 20 of each fault

Exit status: 0 when the checker found no violation, 1 when it did, 2 when the harness failed.
See tests/faults/README.md.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import signal
import sys
import time
import traceback
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import checker  # noqa: E402
from harness import (FAULTS_PATRONI, FAULTS_STREAMING, GATEWAY_LEASE, GATEWAY_ROUTE,  # noqa: E402
                     GATEWAY_UPSTREAM_TIMEOUT, OP_LEASE, Harness, inject)
from load import AUTHORIZATION, Load, LoadConfig, Recorder, supports_client_token  # noqa: E402
from util import say  # noqa: E402

REPO = HERE.parents[1]


def schedule(kind: str, name: str, seed: int, rounds: int, faults: list) -> list:
    """The faults in order: seeded, so the same seed gives the same schedule (and the same
    choices within each fault: which node, how long)."""
    all_faults = faults or (FAULTS_STREAMING if kind == "streaming" else FAULTS_PATRONI)
    rng = random.Random(seed)
    if name == "short":
        order = list(all_faults)
        rng.shuffle(order)
        return ["control"] + order
    out = ["control"]
    for _ in range(rounds):
        order = list(all_faults)
        rng.shuffle(order)
        out += order
    return out + ["control"]


async def one_run(h: Harness, i: int, fault: str, args, out: Path, seed: int) -> dict:
    run_id = f"r{i:03d}-{fault}"
    ns = f"f{seed}-r{i:03d}"
    run_dir = out / "runs" / run_id
    run_dir.mkdir(parents=True, exist_ok=True)
    loop = asyncio.get_running_loop()
    await loop.run_in_executor(None, h.make_healthy)
    meta = {"run": run_id, "ns": ns, "fault": fault, "nodes": [n.name for n in h.nodes],
            "call_timeout": args.call_timeout, "gateway_lease": GATEWAY_LEASE, "op_lease": OP_LEASE,
            "gateway_upstream_timeout": GATEWAY_UPSTREAM_TIMEOUT, "gateway_route": GATEWAY_ROUTE,
            "gateway_scope": [AUTHORIZATION], "slow_share": args.slow_share,
            "client_token": h.client_token, "store_timeouts": h.store_timeouts, "kind": h.kind, "seed": seed}
    (run_dir / "meta.json").write_text(json.dumps(meta, indent=1))
    rec = Recorder(str(run_dir / "attempts.jsonl"))
    rng = random.Random(f"{seed}-{i}-load")
    cfg = LoadConfig(ns=ns, prefix=run_id, workers=args.workers, gw_workers=args.gw_workers, request_timeout=args.request_timeout,
                     call_deadline=args.call_deadline, op_lease=OP_LEASE, client_token=h.client_token,
                     slow_share=args.slow_share, seed=f"{seed}-{i}")
    load = Load(h.load_nodes(), cfg, rec, rng)
    h.events("run_start", run=run_id, fault=fault)
    task = asyncio.ensure_future(load.run())
    try:
        await asyncio.sleep(args.warmup)
        fault_rng = random.Random(f"{seed}-{i}-{fault}")
        try:
            await loop.run_in_executor(None, inject, h, fault, fault_rng, run_id)
        except Exception as e:
            h.events("harness_error", run=run_id, error=f"{type(e).__name__}: {e}")
            say(traceback.format_exc())
        # The slow calls already running carry on across the heal; new ones would only make
        # the drain wait, with no fault left to meet.
        load.slow_calls = False
        await asyncio.sleep(args.cooldown)
    finally:
        load.stopping.set()
        try:
            await asyncio.wait_for(task, args.call_deadline + args.request_timeout + 15)
        except asyncio.TimeoutError:
            h.events("harness_error", run=run_id, error="load did not drain")
        rec.close()
    with open(run_dir / "outcomes.jsonl", "w") as f:
        for o in load.outcomes:
            f.write(json.dumps(o) + "\n")
    h.events("run_end", run=run_id)
    await loop.run_in_executor(None, h.make_healthy)
    op_keys = {o["key"] for o in load.outcomes if o.get("kind") == "op"}
    gw_keys = {o["key"] for o in load.outcomes if o.get("kind") == "gw"}
    db = await loop.run_in_executor(None, checker.snapshot_db, h.query, ns, op_keys, gw_keys,
                                    GATEWAY_ROUTE, [AUTHORIZATION])
    (run_dir / "db.json").write_text(json.dumps(db))
    events = checker.read_jsonl(out / "events.jsonl")
    upstream = checker.read_jsonl(out / "upstream.jsonl")
    result = checker.check_run(run_dir, events, upstream, meta)
    (run_dir / "result.json").write_text(json.dumps(result, indent=1))
    say(f"{run_id}: {result['attempts']} attempts, violations {result['violations'] or 'none'}")
    return result


async def main_async(args, out: Path) -> int:
    h = Harness(args.kind, out, args.idem_bin, port_base=args.port_base, nodes=args.nodes,
                members=args.members, strict=args.strict, call_timeout=args.call_timeout,
                upstream_delay=args.upstream_delay)
    results = []
    t_start = time.time()
    try:
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(None, h.setup)
        if args.client_token == "auto":
            h.client_token = await supports_client_token(h.load_nodes()[0])
        else:
            h.client_token = args.client_token == "on"
        h.events("features", client_token=h.client_token)
        plan = schedule(args.kind, args.schedule, args.seed, args.rounds, args.faults)
        (out / "schedule.json").write_text(json.dumps(plan))
        say(f"schedule ({len(plan)} runs): {' '.join(plan)}")
        for i, fault in enumerate(plan):
            if args.duration and time.time() - t_start > args.duration:
                say(f"--duration reached after {i} runs")
                break
            results.append(await one_run(h, i, fault, args, out, args.seed))
    except Exception:
        say(traceback.format_exc())
        h.events("harness_error", run=None, error=traceback.format_exc()[-800:])
        rc_harness = 2
    else:
        rc_harness = 0
    finally:
        if not args.keep:
            await asyncio.get_running_loop().run_in_executor(None, h.teardown)
    summary = checker.summarize(results)
    summary["seconds"] = round(time.time() - t_start, 1)
    summary["kind"] = args.kind
    summary["seed"] = args.seed
    summary["client_token"] = h.client_token
    summary["store_timeouts"] = h.store_timeouts
    (out / "summary.json").write_text(json.dumps({"summary": summary, "runs": results}, indent=1))
    print(checker.report(results, summary))
    print(f"\n{len(results)} runs in {summary['seconds']:.0f}s ({args.kind}, seed {args.seed}, "
          f"client_token {'on' if h.client_token else 'off'}, store timeouts "
          f"{'configured' if h.store_timeouts else 'unknown to this binary'}); results in {out}")
    if rc_harness:
        return rc_harness
    return 1 if summary["violations"] else 0


def parse(argv=None):
    ap = argparse.ArgumentParser(description="idem's fault-injection suite (contract §10)")
    ap.add_argument("--schedule", choices=["short", "long"], default="short")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--kind", choices=["streaming", "patroni"], default="streaming")
    ap.add_argument("--duration", type=float, default=0, help="stop starting runs after this many seconds")
    ap.add_argument("--rounds", type=int, default=20, help="long schedule: each fault this many times")
    ap.add_argument("--faults", type=lambda s: [x for x in s.split(",") if x], default=[],
                    help="comma-separated fault kinds (default: all of the cluster kind)")
    ap.add_argument("--idem-bin", default=str(REPO / "target" / "debug" / "idem"))
    ap.add_argument("--out", default=None, help="results directory (default /tmp/idem-faults/<kind>-<seed>-<time>)")
    ap.add_argument("--port-base", type=int, default=5440)
    ap.add_argument("--nodes", type=int, default=2)
    ap.add_argument("--members", type=int, default=2)
    ap.add_argument("--strict", action="store_true", help="Patroni: synchronous_mode_strict")
    ap.add_argument("--client-token", choices=["auto", "on", "off"], default="auto")
    ap.add_argument("--call-timeout", type=float, default=5.0, help="the servers' [store] call_timeout (s)")
    ap.add_argument("--request-timeout", type=float, default=30.0, help="the load's client timeout (s)")
    ap.add_argument("--call-deadline", type=float, default=60.0, help="a logical call gives up after (s)")
    ap.add_argument("--workers", type=int, default=3, help="workers per kind of call")
    ap.add_argument("--upstream-delay", type=float, default=0.1,
                    help="the upstream's work per execution of a key that is not slow: up to (s)")
    ap.add_argument("--slow-share", type=float, default=0.2,
                    help="share of gateway keys whose upstream call takes 0.5-20 s (seeded); 0: none")
    ap.add_argument("--gw-workers", type=int, default=10, help="workers making gateway calls")
    ap.add_argument("--warmup", type=float, default=3.0)
    ap.add_argument("--cooldown", type=float, default=10.0)
    ap.add_argument("--keep", action="store_true", help="leave everything running at the end (debugging)")
    return ap.parse_args(argv)


def main(argv=None) -> int:
    args = parse(argv)
    out = Path(args.out or f"/tmp/idem-faults/{args.kind}-{args.seed}-{time.strftime('%Y%m%d-%H%M%S')}")
    out.mkdir(parents=True, exist_ok=True)
    if not Path(args.idem_bin).exists():
        print(f"no idem binary at {args.idem_bin}: cargo build -p idem-server", file=sys.stderr)
        return 2
    # SIGTERM/SIGINT end the run through the same teardown as a normal end.
    signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt()))
    try:
        return asyncio.run(main_async(args, out))
    except KeyboardInterrupt:
        print("interrupted: cleaning up", file=sys.stderr)
        h = Harness(args.kind, out, args.idem_bin, port_base=args.port_base)
        h.cleanup_leftovers()
        return 2


if __name__ == "__main__":
    sys.exit(main())

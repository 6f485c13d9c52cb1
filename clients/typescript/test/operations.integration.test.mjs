// Integration: the Operations API (docs/reference/api.md#operations) and operations.run against a
// real `idem serve`.
// Run on its own with `npm run test:operations` (not part of `npm test` until the server has the API).
// IDEM_TEST_URL=http://… runs it against a server that is already running instead of starting one.

import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";

import { Idem, IdemError, InProgressError, LeaseLostError, MismatchError, claimId } from "../dist/index.js";
import { STORE_UNAVAILABLE, losingFetch, proxy, sleep, startIdem } from "./helpers.mjs";

// Namespaces unique to this run, so it can repeat against a long-running server (IDEM_TEST_URL).
const RUN = Math.random().toString(36).slice(2, 8);
const ns = (name) => `${name}-${RUN}`;

describe("operations against a real idem", () => {
  let server;
  let idem;
  before(async () => {
    server = process.env.IDEM_TEST_URL ? { url: process.env.IDEM_TEST_URL, stop: async () => {} } : await startIdem();
    idem = new Idem({ url: server.url, retries: 2 });
  });
  after(async () => {
    await server?.stop();
  });

  test("run: started → fn runs, result stored; again → stored result, fn not called", async () => {
    let runs = 0;
    const fn = async () => {
      runs++;
      return { orderId: 42, items: ["a", "b"] };
    };
    const first = await idem.operations.run(ns("orders"), { key: "order-1", request: { sku: "x", qty: 1 } }, fn);
    assert.deepEqual(first, { orderId: 42, items: ["a", "b"] });
    const second = await idem.operations.run(ns("orders"), { key: "order-1", request: { qty: 1, sku: "x" } }, fn);
    assert.deepEqual(second, first);
    assert.equal(runs, 1);

    const rec = await idem.operations.get(ns("orders"), { key: "order-1" });
    assert.equal(rec.status, "completed");
    assert.deepEqual(rec.result, first);
    assert.ok(!("token" in rec), "GET never shows the token");
    assert.equal(rec.id, claimId("order-1"), "operation ids are computed like claim ids");
  });

  test("thin calls: begin, in progress, complete, completed, complete twice, delete", async () => {
    const b = await idem.operations.begin(ns("thin"), { parts: ["user-1", "job-1"], leaseSeconds: 30 });
    assert.equal(b.status, "started");
    assert.equal(b.id, claimId(["user-1", "job-1"]));
    assert.equal(typeof b.token, "string");
    assert.ok(!Number.isNaN(Date.parse(b.lease_expires_at)));

    const busy = await idem.operations.begin(ns("thin"), { parts: ["user-1", "job-1"] }).catch((e) => e);
    assert.ok(busy instanceof InProgressError, String(busy));
    assert.equal(busy.status, 409);
    assert.equal(busy.type, "urn:idem:problem:in-progress");
    assert.ok(busy.retryAfterSeconds !== undefined, "409 in-progress carries Retry-After");
    assert.equal((await idem.operations.get(ns("thin"), b.id)).status, "in_progress");
    const delHeld = await idem.operations.delete(ns("thin"), b.id).catch((e) => e);
    assert.ok(delHeld instanceof InProgressError, `DELETE of a held key: ${delHeld}`);

    const ext = await idem.operations.extend(ns("thin"), b.id, b.token, 60);
    assert.ok(Date.parse(ext.lease_expires_at) > Date.parse(b.lease_expires_at));

    const done = await idem.operations.complete(ns("thin"), b.id, b.token, { ok: true });
    assert.equal(done.status, "completed");
    const again = await idem.operations.complete(ns("thin"), b.id, b.token, { ok: "other" });
    assert.deepEqual(again.result, { ok: true }, "a second complete returns the stored result unchanged");

    const c = await idem.operations.begin(ns("thin"), { parts: ["user-1", "job-1"] });
    assert.equal(c.status, "completed");
    assert.deepEqual(c.result, { ok: true });
    assert.ok(c.completed_at);

    assert.equal(await idem.operations.delete(ns("thin"), { parts: ["user-1", "job-1"] }), true);
    assert.equal(await idem.operations.get(ns("thin"), b.id), null);
    assert.equal(await idem.operations.delete(ns("thin"), b.id), false);
    assert.equal((await idem.operations.begin(ns("thin"), { parts: ["user-1", "job-1"] })).status, "started");
  });

  test("a begin whose answer was lost gets its lease back on the retry: the same token and fence", async () => {
    const { fetch, sent, lost } = losingFetch(1);
    const lossy = new Idem({ url: server.url, fetch, retries: 1, retryBaseDelayMs: 10 });
    const b = await lossy.operations.begin(ns("tokens"), { key: "lost", request: { n: 1 } });
    assert.equal(lost[0].status, 201, "the first attempt took the key");
    assert.equal(b.status, "started", "and its retry is handed the lease, not a 409");
    assert.equal(b.token, lost[0].body.token);
    assert.equal(b.fence, lost[0].body.fence);
    assert.ok(Number.isSafeInteger(b.fence) && b.fence > 0, String(b.fence));
    assert.equal(sent[1].client_token, sent[0].client_token);
    const other = await idem.operations.begin(ns("tokens"), { key: "lost", request: { n: 1 } }).catch((e) => e);
    assert.ok(other instanceof InProgressError, `another call: ${other}`);
    await idem.operations.complete(ns("tokens"), b.id, b.token, "done");
  });

  test("begin with a client token: the same token gets the same lease, renewed; another waits; the next holder a greater fence", async () => {
    const key = { key: "mine", clientToken: "worker-7/job-42" };
    const b = await idem.operations.begin(ns("tokens"), key);
    const again = await idem.operations.begin(ns("tokens"), key);
    assert.equal(again.status, "started");
    assert.equal(again.token, b.token);
    assert.equal(again.fence, b.fence);
    // the retry renews the lease from its own ask (a retry that comes late still gets a whole lease)
    assert.ok(Date.parse(again.lease_expires_at) >= Date.parse(b.lease_expires_at), `${b.lease_expires_at} then ${again.lease_expires_at}`);
    const other = await idem.operations.begin(ns("tokens"), { key: "mine", clientToken: "worker-8" }).catch((e) => e);
    assert.ok(other instanceof InProgressError, String(other));
    await idem.operations.release(ns("tokens"), b.id, b.token);
    const next = await idem.operations.begin(ns("tokens"), { key: "mine", clientToken: "worker-8" });
    assert.equal(next.status, "started");
    assert.ok(next.fence > b.fence, `fences grow with each take: ${b.fence} then ${next.fence}`);
    await idem.operations.complete(ns("tokens"), next.id, next.token, 1);
    assert.equal((await idem.operations.begin(ns("tokens"), key)).status, "completed", "completed is never started again");
  });

  test("run whose begin's answer was lost: fn runs once, on the lease it was handed", async () => {
    const { fetch, lost } = losingFetch(1);
    const lossy = new Idem({ url: server.url, fetch, retries: 1, retryBaseDelayMs: 10 });
    let runs = 0;
    const out = await lossy.operations.run(ns("tokens"), { key: "run-lost" }, () => ++runs);
    assert.equal(out, 1);
    assert.equal(runs, 1);
    assert.equal(lost[0].body.status, "started");
    assert.equal((await idem.operations.get(ns("tokens"), { key: "run-lost" })).status, "completed");
  });

  test("fn throws: released and re-thrown; the next run runs again", async () => {
    const boom = new Error("card declined");
    await assert.rejects(
      idem.operations.run(ns("pay"), { key: "charge-1" }, async () => {
        throw boom;
      }),
      (e) => e === boom,
    );
    assert.equal(await idem.operations.get(ns("pay"), { key: "charge-1" }), null, "released: absent");
    assert.equal(await idem.operations.run(ns("pay"), { key: "charge-1" }, () => "charged"), "charged");
  });

  test("another request for the same key: MismatchError, held or completed", async () => {
    const b = await idem.operations.begin(ns("mm"), { key: "k", request: { a: 1 } });
    const held = await idem.operations.begin(ns("mm"), { key: "k", request: { a: 2 } }).catch((e) => e);
    assert.ok(held instanceof MismatchError, String(held));
    assert.equal(held.status, 422);
    assert.equal(held.type, "urn:idem:problem:fingerprint-mismatch");
    await idem.operations.complete(ns("mm"), b.id, b.token, 1);
    let called = false;
    await assert.rejects(
      idem.operations.run(ns("mm"), { key: "k", request: { a: 2 } }, () => {
        called = true;
      }),
      MismatchError,
    );
    assert.equal(called, false);
    // no request matches any
    assert.equal(await idem.operations.run(ns("mm"), { key: "k" }, () => 2), 1);
  });

  test("an ended lease: the key free, and the old token worthless (LeaseLostError) once another begin took it", async () => {
    const b = await idem.operations.begin(ns("lease"), { key: "short", leaseSeconds: 1 });
    await sleep(2200);
    const c = await idem.operations.begin(ns("lease"), { key: "short" });
    assert.equal(c.status, "started");
    assert.ok(c.fence > b.fence, `a greater fence for the next holder: ${b.fence} → ${c.fence}`);
    const ext = await idem.operations.extend(ns("lease"), b.id, b.token, 5).catch((e) => e);
    assert.ok(ext instanceof LeaseLostError, String(ext));
    const late = await idem.operations.complete(ns("lease"), b.id, b.token, "late").catch((e) => e);
    assert.ok(late instanceof LeaseLostError, String(late));
    assert.ok(late instanceof IdemError);
    assert.equal(late.status, 409);
    assert.equal(late.type, "urn:idem:problem:lease-lost");
    const rel = await idem.operations.release(ns("lease"), b.id, b.token).catch((e) => e);
    assert.ok(rel instanceof LeaseLostError, String(rel));
    await idem.operations.complete(ns("lease"), c.id, c.token, "new");
  });

  test("a long fn keeps its key by heartbeat (1 s lease, 2.5 s of work)", async () => {
    let probe;
    const out = await idem.operations.run(ns("beat"), { key: "long", leaseSeconds: 1 }, async () => {
      await sleep(1600);
      probe = await idem.operations.begin(ns("beat"), { key: "long" }).catch((e) => e);
      await sleep(900);
      return "finished";
    });
    assert.equal(out, "finished");
    assert.ok(probe instanceof InProgressError, `still held after 1.6 s of a 1 s lease: ${probe}`);
    assert.equal((await idem.operations.get(ns("beat"), { key: "long" })).status, "completed");
  });

  test("a heartbeat across a 3 s store outage at the beat keeps its lease (6 s lease, 9 s of work)", async () => {
    // From just before the first beat is due (a third of the lease after the begin was sent) and
    // for 3 s, every extend is answered 503 store-unavailable with Retry-After: 1. The beat is
    // tried again every 250 ms and gets through as soon as the outage ends, 1 s before the lease
    // would have run out; the work completes, once.
    let beganAt;
    const px = await proxy(server.url, (entry) => {
      if (entry.path.endsWith("/begin")) beganAt ??= entry.at;
      const t = entry.at - (beganAt ?? Infinity);
      if (entry.path.endsWith("/extend") && t >= 1800 && t < 4800) return { answer: STORE_UNAVAILABLE };
      return undefined;
    });
    try {
      const client = new Idem({ url: px.url, retries: 2 });
      let runs = 0;
      let aborted = false;
      const out = await client.operations.run(ns("outage"), { key: "k", leaseSeconds: 6 }, async (ctx) => {
        runs++;
        await sleep(9000);
        aborted = ctx.signal.aborted;
        return "done";
      });
      assert.equal(out, "done");
      assert.equal(runs, 1);
      assert.equal(aborted, false);
      const record = await idem.operations.get(ns("outage"), { key: "k" });
      assert.equal(record.status, "completed");
      assert.equal(record.result, "done");

      const beats = px.log.filter((e) => e.path.endsWith("/extend")).map((e) => ({ t: e.at - beganAt, status: e.status }));
      const refused = beats.filter((b) => b.status === 503);
      const shown = JSON.stringify(beats);
      assert.ok(refused.length >= 8, `the refused beat was tried again every 250 ms: ${shown}`);
      assert.ok(refused[0].t < 2500, `the first beat is due a third of the lease after the begin was sent: ${shown}`);
      for (let i = 1; i < refused.length; i++) assert.ok(refused[i].t - refused[i - 1].t < 700, `no whole interval (nor Retry-After) between tries: ${shown}`);
      const through = beats.find((b) => b.status === 200 && b.t >= 4800);
      assert.ok(through && through.t < 5500, `the first beat after the outage got through at once: ${shown}`);
      assert.ok(beats.filter((b) => b.status === 200).length >= 2, `beats went on every 2 s after: ${shown}`);
    } finally {
      await px.close();
    }
  });

  test("the lease counts from before the begin was sent: a begin answered late is extended sooner", async () => {
    // A 3 s lease whose begin's answer is held back 750 ms: the first beat is due 1 s after the
    // begin was sent (not 1 s after its answer).
    let beganAt;
    const px = await proxy(server.url, (entry) => {
      if (!entry.path.endsWith("/begin")) return undefined;
      beganAt ??= entry.at;
      return { delayMs: 750 };
    });
    try {
      const client = new Idem({ url: px.url });
      const out = await client.operations.run(ns("latebegin"), { key: "k", leaseSeconds: 3 }, () => sleep(1300).then(() => "ok"));
      assert.equal(out, "ok");
      const first = px.log.find((e) => e.path.endsWith("/extend"));
      assert.ok(first, "a beat was sent");
      const t = first.at - beganAt;
      assert.ok(t >= 800 && t < 1450, `the first beat ${t} ms after the begin was sent, want a third of the lease (1000 ms)`);
      assert.equal(first.status, 200);
    } finally {
      await px.close();
    }
  });

  test("a waiter gets the holder's result as soon as it completes (server-side wait)", async () => {
    const b = await idem.operations.begin(ns("wait"), { key: "w" });
    let called = false;
    const started = Date.now();
    const waiter = idem.operations.run(ns("wait"), { key: "w", waitSeconds: 20 }, () => {
      called = true;
    });
    await sleep(300);
    await idem.operations.complete(ns("wait"), b.id, b.token, { by: "holder" });
    assert.deepEqual(await waiter, { by: "holder" });
    assert.equal(called, false);
    assert.ok(Date.now() - started < 5000, "woken, not polled for long");
  });

  test("a waiter takes the key when the holder releases", async () => {
    const b = await idem.operations.begin(ns("wait"), { key: "r" });
    const waiter = idem.operations.run(ns("wait"), { key: "r", waitSeconds: 20 }, () => "mine");
    await sleep(300);
    await idem.operations.release(ns("wait"), b.id, b.token);
    assert.equal(await waiter, "mine");
  });

  test("in progress past run's waitSeconds: InProgressError", async () => {
    await idem.operations.begin(ns("wait"), { key: "stuck", leaseSeconds: 60 });
    const started = Date.now();
    await assert.rejects(idem.operations.run(ns("wait"), { key: "stuck", waitSeconds: 2 }, () => 1), InProgressError);
    const took = Date.now() - started;
    assert.ok(took >= 1500 && took < 6000, String(took));
  });

  test("200 concurrent runs of one key: fn runs once, all return its result", async () => {
    let runs = 0;
    const fn = async () => {
      runs++;
      await sleep(300);
      return { order: "created", n: runs };
    };
    const many = new Idem({ url: server.url, retries: 3 });
    const results = await Promise.all(
      Array.from({ length: 200 }, () => many.operations.run(ns("race"), { key: "order-200", request: { total: 10 } }, fn)),
    );
    assert.equal(runs, 1);
    assert.equal(results.length, 200);
    for (const r of results) assert.deepEqual(r, { order: "created", n: 1 });
  });

  test("operations and claims with the same key do not see each other", async () => {
    await idem.claims.claim(ns("shared"), { key: "same" });
    assert.equal(await idem.operations.get(ns("shared"), { key: "same" }), null);
    assert.equal((await idem.operations.begin(ns("shared"), { key: "same" })).status, "started");
  });

  test("bad input: 400 naming the field", async () => {
    const lease = await idem.operations.begin(ns("bad"), { key: "k", leaseSeconds: 0 }).catch((e) => e);
    assert.equal(lease.status, 400);
    assert.equal(lease.field, "lease_seconds");
    const wait = await idem.operations.begin(ns("bad"), { key: "k", waitSeconds: 31 }).catch((e) => e);
    assert.equal(wait.status, 400);
    assert.equal(wait.field, "wait_seconds");
    const part = await idem.operations.begin(ns("bad"), { parts: ["ok", ""] }).catch((e) => e);
    assert.equal(part.field, "parts[1]");
  });
});

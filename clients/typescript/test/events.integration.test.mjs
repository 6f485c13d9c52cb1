// Integration: events delivered by a real `idem serve` to a handler in this test. Every delivery
// (and result webhook) idem signs is verified with verifyWebhook and with the reference
// implementation; then receipts.list / get / replay.

import assert from "node:assert/strict";
import { createServer } from "node:http";
import { after, before, describe, test } from "node:test";

import { Webhook } from "standardwebhooks";

import { Idem, IdemError, WebhookVerificationError, verifyWebhook } from "../dist/index.js";
import { makeSecret, sleep, startIdem } from "./helpers.mjs";

const SECRET = makeSecret(32, 3);

/** A handler that records every request; `failing` event ids answer 500. */
async function startHandler() {
  const deliveries = [];
  const results = [];
  const failing = new Set();
  const waiters = [];
  const server = createServer((req, res) => {
    const chunks = [];
    req.on("data", (c) => chunks.push(c));
    req.on("end", () => {
      const raw = Buffer.concat(chunks);
      const entry = { path: req.url, headers: req.headers, raw, at: Date.now() };
      let status = 200;
      if (req.url === "/results") {
        results.push(entry);
      } else {
        deliveries.push(entry);
        const id = JSON.parse(raw.toString("utf8")).external_event_id;
        if (failing.has(id)) status = 500;
      }
      res.writeHead(status, { "content-type": "text/plain" }).end(status === 200 ? "ok" : "not now");
      for (const w of waiters.splice(0)) w();
    });
  });
  await new Promise((r) => server.listen(0, "127.0.0.1", r));
  const changed = () => new Promise((r) => waiters.push(r));
  /** Resolves with `pick()`'s answer once it is truthy, waking on every request (not a fixed sleep). */
  const until = async (pick, what, timeoutMs = 15_000) => {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const found = pick();
      if (found) return found;
      const left = deadline - Date.now();
      if (left <= 0) throw new Error(`timed out waiting for ${what}`);
      await Promise.race([changed(), sleep(Math.min(left, 250))]);
    }
  };
  return { port: server.address().port, deliveries, results, failing, until, close: () => new Promise((r) => server.close(r)) };
}

async function receiptUntil(idem, id, predicate, what, timeoutMs = 15_000) {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const r = await idem.receipts.get(id);
    if (r && predicate(r)) return r;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}: ${JSON.stringify(r)}`);
    await sleep(50);
  }
}

describe("events and receipts against a real idem", () => {
  let handler;
  let server;
  let idem;
  const send = (body, headers = {}) =>
    fetch(`${server.url}/v1/sources/partner/events`, {
      method: "POST",
      headers: { "content-type": "application/json", ...headers },
      body: typeof body === "string" ? body : JSON.stringify(body),
    }).then(async (res) => ({ status: res.status, body: await res.json() }));

  before(async () => {
    handler = await startHandler();
    server = await startIdem({
      config: [
        "[[sources]]",
        'name = "partner"',
        `handler_url = "http://127.0.0.1:${handler.port}/handle"`,
        'event_id = "/external_event_id"',
        "max_attempts = 2",
        'attempt_timeout = "5s"',
        'backoff = ["100ms"]',
        `signing_secret = "${SECRET}"`,
        `result_webhook_url = "http://127.0.0.1:${handler.port}/results"`,
        'result_backoff = ["100ms"]',
        "",
      ].join("\n"),
    });
    idem = new Idem({ url: server.url, retries: 1 });
  });
  after(async () => {
    await server?.stop();
    await handler?.close();
  });

  test("a delivery verifies with verifyWebhook and the configured secret", async () => {
    const event = { external_event_id: "evt-ok-1", amount: 1200, text: "日本語 ✓" };
    const rawBody = JSON.stringify(event);
    const accepted = await send(rawBody);
    assert.equal(accepted.status, 202);
    assert.equal(accepted.body.status, "accepted");
    const rid = accepted.body.receipt_id;

    const delivery = await handler.until(() => handler.deliveries.find((d) => d.headers["webhook-id"] === rid), "the delivery");
    assert.equal(delivery.raw.toString("utf8"), rawBody);
    assert.equal(delivery.headers["idem-attempt"], "1");

    // what idem signs, ours accepts: plain Node headers + Buffer body, Headers + string body
    assert.deepEqual(verifyWebhook(SECRET, delivery.headers, delivery.raw), event);
    const headers = new Headers(Object.entries(delivery.headers).filter(([, v]) => typeof v === "string"));
    assert.deepEqual(verifyWebhook(SECRET, headers, delivery.raw.toString("utf8")), event);
    // and the reference implementation agrees
    assert.deepEqual(new Webhook(SECRET).verify(delivery.raw.toString("utf8"), delivery.headers), event);
    // a wrong secret, or a tampered body, is refused
    assert.throws(() => verifyWebhook(makeSecret(32, 4), delivery.headers, delivery.raw), WebhookVerificationError);
    assert.throws(() => verifyWebhook(SECRET, delivery.headers, rawBody.replace("1200", "9999")), WebhookVerificationError);

    // the receipt completes; get shows its attempts
    const receipt = await receiptUntil(idem, rid, (r) => r.status === "completed", "completed");
    assert.equal(receipt.id, rid);
    assert.equal(receipt.source, "partner");
    assert.equal(receipt.event_id, "evt-ok-1");
    assert.equal(receipt.round, 1);
    assert.equal(receipt.attempts.length, 1);
    assert.equal(receipt.attempts[0].n, 1);
    assert.equal(receipt.attempts[0].status_code, 200);

    // the result webhook is signed the same way
    const result = await handler.until(
      () => handler.results.find((d) => JSON.parse(d.raw.toString("utf8")).receipt_id === rid),
      "the result webhook",
    );
    const payload = verifyWebhook(SECRET, result.headers, result.raw);
    assert.equal(payload.type, "receipt.completed");
    assert.equal(payload.event_id, "evt-ok-1");

    // a resend of the same event is a replay, nothing new is delivered
    const resend = await send(rawBody);
    assert.equal(resend.status, 200);
    assert.equal(resend.body.receipt_id, rid);
    assert.equal(resend.body.replay, true);
  });

  test("dead letters: list({status: 'dead'}), get, replay with the same webhook-id", async () => {
    handler.failing.add("evt-dead-1");
    const accepted = await send({ external_event_id: "evt-dead-1" });
    assert.equal(accepted.status, 202);
    const rid = accepted.body.receipt_id;

    const dead = await receiptUntil(idem, rid, (r) => r.status === "dead", "dead");
    assert.equal(dead.attempts.length, 2);
    assert.deepEqual(dead.attempts.map((a) => a.status_code), [500, 500]);
    // every failed attempt was signed too, with the same webhook-id
    const attempts = handler.deliveries.filter((d) => d.headers["webhook-id"] === rid);
    assert.equal(attempts.length, 2);
    for (const d of attempts) assert.deepEqual(verifyWebhook(SECRET, d.headers, d.raw), { external_event_id: "evt-dead-1" });

    const page = await idem.receipts.list({ status: "dead" });
    assert.deepEqual(Object.keys(page).sort(), ["items", "nextCursor"]);
    assert.deepEqual(page.items.map((r) => r.id), [rid]);
    assert.equal(page.items[0].status, "dead");
    assert.equal(page.nextCursor, null);
    assert.deepEqual((await idem.receipts.list({ status: "dead", source: "nobody" })).items, []);

    handler.failing.delete("evt-dead-1");
    const ack = await idem.receipts.replay(rid);
    assert.equal(ack.receipt_id, rid);

    const done = await receiptUntil(idem, rid, (r) => r.status === "completed", "completed after replay");
    assert.equal(done.round, 2);
    const redelivered = handler.deliveries.filter((d) => d.headers["webhook-id"] === rid);
    assert.equal(redelivered.length, 3);
    assert.equal(redelivered[2].headers["idem-attempt"], "1");
    assert.deepEqual(verifyWebhook(SECRET, redelivered[2].headers, redelivered[2].raw), { external_event_id: "evt-dead-1" });
    assert.deepEqual((await idem.receipts.list({ status: "dead" })).items, []);
  });

  test("list pages newest first with nextCursor; iterate walks them all", async () => {
    const ids = [];
    for (let i = 0; i < 5; i++) ids.push((await send({ external_event_id: `evt-page-${i}` })).body.receipt_id);
    const seen = [];
    let cursor;
    for (let pages = 0; pages < 20; pages++) {
      const page = await idem.receipts.list({ source: "partner", limit: 2, ...(cursor ? { cursor } : {}) });
      assert.ok(page.items.length <= 2);
      seen.push(...page.items.map((r) => r.id));
      if (page.nextCursor === null) break;
      cursor = page.nextCursor;
    }
    // newest first: the five just sent lead, in reverse order of sending
    assert.deepEqual(seen.slice(0, 5), [...ids].reverse());
    assert.equal(new Set(seen).size, seen.length, "no receipt twice");
    const all = [];
    for await (const r of idem.receipts.iterate({ source: "partner", limit: 3 })) all.push(r.id);
    assert.deepEqual(all, seen);
  });

  test("get of an unknown receipt is null; replay of one is a 404 IdemError; a bad filter a 400", async () => {
    assert.equal(await idem.receipts.get(`rcpt_${"0".repeat(36)}`), null);
    const replay = await idem.receipts.replay(`rcpt_${"0".repeat(36)}`).catch((e) => e);
    assert.ok(replay instanceof IdemError);
    assert.equal(replay.status, 404);
    const bad = await idem.receipts.list({ status: "sleeping" }).catch((e) => e);
    assert.equal(bad.status, 400);
    assert.equal(bad.field, "status");
  });

  test("bulk replay counts first and replays by filter; discard; get shows the event", async () => {
    const ids = [];
    for (const n of [1, 2]) {
      handler.failing.add(`evt-bulk-${n}`);
      ids.push((await send({ external_event_id: `evt-bulk-${n}`, n })).body.receipt_id);
    }
    for (const id of ids) await receiptUntil(idem, id, (r) => r.status === "dead", "dead");
    const got = await idem.receipts.get(ids[0]);
    assert.deepEqual(got.body, { external_event_id: "evt-bulk-1", n: 1 });
    assert.equal(got.content_type, "application/json");
    assert.equal((await idem.receipts.list({ eventId: "evt-bulk-2" })).items[0].id, ids[1]);

    assert.equal(await idem.receipts.countMatching({ eventId: "evt-bulk-1" }), 1);
    assert.equal(await idem.receipts.countMatching({ createdAfter: new Date(Date.now() + 60_000) }), 0);
    assert.equal(await idem.receipts.replayMatching({ eventId: "evt-bulk-1" }), 1);
    const again = await receiptUntil(idem, ids[0], (r) => r.status === "dead" && r.round === 2, "dead again");
    assert.equal(again.round, 2);

    const ack = await idem.receipts.discard(ids[1]);
    assert.deepEqual(ack, { receipt_id: ids[1], status: "discarded" });
    assert.equal(await idem.receipts.countMatching({ eventId: "evt-bulk-2" }), 0, "out of the dead letters");
    assert.equal(await idem.receipts.countMatching({ eventId: "evt-bulk-2", status: "discarded" }), 1);
    const notDead = await idem.receipts.discard(`rcpt_${"0".repeat(36)}`).catch((e) => e);
    assert.equal(notDead.status, 404);
    const bad = await idem.receipts.replayMatching({ status: "processing" }).catch((e) => e);
    assert.equal(bad.status, 400);
    for (const n of [1, 2]) handler.failing.delete(`evt-bulk-${n}`);
  });
});

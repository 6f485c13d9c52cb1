// Unit tests with an injected fake fetch: transport (retries, backoff, Retry-After, timeouts, auth),
// error mapping, claims, operations.run and receipts shapes. No server, no real waiting.

import assert from "node:assert/strict";
import { describe, test } from "node:test";

import {
  ConnectionError,
  Idem,
  IdemError,
  InProgressError,
  LeaseLostError,
  MismatchError,
  PROBLEM_OUTCOME_UNKNOWN,
  UnavailableError,
  claimId,
} from "../dist/index.js";
import { fakeFetch, problem, recordingSleep, reply } from "./helpers.mjs";

const URL_ = "http://idem.test:7070";
const UUID_V4 = /^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/;

/** A request body without its `client_token`, after checking that it carries a fresh UUID v4 one. */
function withoutToken(body) {
  const { client_token: token, ...rest } = body;
  assert.match(token, UUID_V4);
  return rest;
}
const ID_AB = "59b271ae1bbcb1d31d41929817f4b16fb439eb4f31520b5ad1d5ce98920a7138"; // sha256("a\0b")

function client(handler, options = {}) {
  const { fetch, calls } = fakeFetch(handler);
  const { sleep, waits } = recordingSleep();
  const idem = new Idem({ url: URL_, fetch, sleep, random: () => 0.5, ...options });
  return { idem, calls, waits };
}

const record = (over = {}) => ({
  namespace: "survey",
  id: ID_AB,
  parts: ["a", "b"],
  data: null,
  created_at: "2026-11-22T10:00:00.000Z",
  expires_at: null,
  ...over,
});

describe("construction and auth", () => {
  test("rejects a url that is not http(s) and bad numbers", () => {
    assert.throws(() => new Idem({ url: "127.0.0.1:7070" }), TypeError);
    assert.throws(() => new Idem({ url: "http://x", timeoutMs: -1 }), TypeError);
    assert.throws(() => new Idem({ url: "http://x", retries: Number.NaN }), TypeError);
  });

  test("a string is the url", async () => {
    const { fetch, calls } = fakeFetch(() => reply(200, { exists: true }));
    const saved = globalThis.fetch;
    globalThis.fetch = fetch;
    try {
      assert.equal(await new Idem(`${URL_}/`).claims.exists("ns", { prefix: ["a"] }), true);
    } finally {
      globalThis.fetch = saved;
    }
    assert.equal(calls[0].url, `${URL_}/v1/claims/ns/prefix`);
  });

  test("the token goes in Authorization only, never in the URL or an error", async () => {
    const token = "s3cret-t0ken";
    const { idem, calls } = client(() => problem(401, "urn:idem:problem:unauthorized", { title: "Unauthorized", detail: "a valid bearer token is required" }), { token });
    const err = await idem.claims.claim("ns", { key: "k" }).catch((e) => e);
    assert.ok(err instanceof IdemError);
    assert.equal(err.status, 401);
    assert.equal(calls[0].headers.authorization, `Bearer ${token}`);
    assert.ok(!calls[0].url.includes(token));
    assert.ok(!err.message.includes(token) && !err.stack.includes(token));
    assert.ok(!JSON.stringify(err).includes(token));
    const { inspect } = await import("node:util");
    assert.ok(!inspect(idem, { depth: 10, showHidden: true }).includes(token));
  });

  test("no token: no Authorization header", async () => {
    const { idem, calls } = client(() => reply(200, { exists: false }));
    await idem.claims.exists("ns", { prefix: ["a"] });
    assert.equal(calls[0].headers.authorization, undefined);
  });

  test("a base path in the url is kept", async () => {
    const { idem, calls } = client(() => reply(200, { exists: false }), { url: "https://h.test/idem/" });
    await idem.claims.exists("ns", { prefix: ["a"] });
    assert.equal(calls[0].url, "https://h.test/idem/v1/claims/ns/prefix");
  });

  test("no url: IDEM_URL, else http://127.0.0.1:7070; no token: IDEM_TOKEN; given ones win", async () => {
    const saved = { url: process.env.IDEM_URL, token: process.env.IDEM_TOKEN };
    const restore = (name, value) => (value === undefined ? delete process.env[name] : (process.env[name] = value));
    try {
      process.env.IDEM_URL = "http://from-env.test:9999/";
      process.env.IDEM_TOKEN = "env-t0ken";
      const { fetch, calls } = fakeFetch(() => reply(200, { exists: true }));
      await new Idem({ fetch }).claims.exists("ns", { prefix: ["a"] });
      assert.equal(calls[0].url, "http://from-env.test:9999/v1/claims/ns/prefix");
      assert.equal(calls[0].headers.authorization, "Bearer env-t0ken");
      await new Idem({ url: URL_, token: "given", fetch }).claims.exists("ns", { prefix: ["a"] });
      assert.equal(calls[1].url, `${URL_}/v1/claims/ns/prefix`);
      assert.equal(calls[1].headers.authorization, "Bearer given");
      await new Idem({ fetch, token: null }).claims.exists("ns", { prefix: ["a"] });
      assert.equal(calls[2].headers.authorization, undefined, "token: null sends none");
      process.env.IDEM_URL = "127.0.0.1:7070";
      assert.throws(() => new Idem({ fetch }), /url \(IDEM_URL\) must be an http:\/\/ or https:\/\/ URL/);
      delete process.env.IDEM_URL;
      delete process.env.IDEM_TOKEN;
      await new Idem({ fetch }).claims.exists("ns", { prefix: ["a"] });
      assert.equal(calls[3].url, "http://127.0.0.1:7070/v1/claims/ns/prefix");
      assert.equal(calls[3].headers.authorization, undefined);
    } finally {
      restore("IDEM_URL", saved.url);
      restore("IDEM_TOKEN", saved.token);
    }
  });
});

describe("retries", () => {
  test("503 then 502 then 200: retried, honouring Retry-After, else backoff", async () => {
    const { idem, calls, waits } = client((_, i) =>
      i === 0
        ? problem(503, "urn:idem:problem:store-unavailable", { headers: { "retry-after": "2" } })
        : i === 1
          ? reply(502, "<html>bad gateway</html>", { "content-type": "text/html" })
          : reply(200, { exists: true }),
    );
    assert.equal(await idem.claims.exists("ns", { prefix: ["a"] }), true);
    assert.equal(calls.length, 3);
    // 2 s from Retry-After; then backoff for retry 1: cap 400 ms, half fixed + half * 0.5
    assert.deepEqual(waits, [2000, 300]);
  });

  test("backoff grows exponentially with jitter and is capped", async () => {
    const { idem, waits } = client(() => reply(504, ""), { retries: 5, retryBaseDelayMs: 100, retryMaxDelayMs: 1000, random: () => 1 });
    const err = await idem.claims.get("ns", "x".repeat(64)).catch((e) => e);
    assert.equal(err.status, 504);
    assert.deepEqual(waits, [100, 200, 400, 800, 1000]);
    const low = client(() => reply(504, ""), { retries: 3, retryBaseDelayMs: 100, random: () => 0 });
    await low.idem.claims.get("ns", "x".repeat(64)).catch(() => {});
    assert.deepEqual(low.waits, [50, 100, 200]);
  });

  test("connection errors are retried, then ConnectionError (status 0) with the cause", async () => {
    const boom = new TypeError("fetch failed", { cause: Object.assign(new Error("connect ECONNREFUSED"), { code: "ECONNREFUSED" }) });
    const { idem, calls, waits } = client(() => boom, { retries: 2 });
    const err = await idem.claims.claim("ns", { key: "k" }).catch((e) => e);
    assert.ok(err instanceof ConnectionError);
    assert.ok(err instanceof IdemError);
    assert.equal(err.status, 0);
    assert.equal(err.type, "urn:idem:client:connection-error");
    assert.equal(err.cause, boom);
    assert.match(err.message, /ECONNREFUSED/);
    assert.match(err.message, /cannot reach idem at http:\/\/idem\.test:7070: connection refused \(is idem running there\?\)/);
    assert.match(err.message, /POST \/v1\/claims\/ns, 3 attempts\); to point the client elsewhere, give its `url` option or set IDEM_URL$/);
    assert.equal(calls.length, 3);
    assert.equal(waits.length, 2);
  });

  test("a connection error then success", async () => {
    const { idem, calls } = client((_, i) => (i === 0 ? new TypeError("fetch failed") : reply(201, { claimed: true, ...record() })));
    const r = await idem.claims.claim("survey", { parts: ["a", "b"] });
    assert.equal(r.claimed, true);
    assert.equal(calls.length, 2);
  });

  for (const status of [400, 401, 404, 409, 413, 415, 422, 500]) {
    test(`never retried: ${status}`, async () => {
      const { idem, calls, waits } = client(() => problem(status, "urn:idem:problem:x", { headers: { "retry-after": "1" } }));
      const err = await idem.claims.claim("ns", { key: "k" }).catch((e) => e);
      assert.ok(err instanceof IdemError);
      assert.equal(err.status, status);
      assert.equal(calls.length, 1);
      assert.deepEqual(waits, []);
    });
  }

  test("503 after every retry: UnavailableError with retryAfterSeconds", async () => {
    const { idem, calls } = client(() => problem(503, "urn:idem:problem:store-unavailable", { headers: { "retry-after": "1" } }), { retries: 1 });
    const err = await idem.claims.claim("ns", { key: "k" }).catch((e) => e);
    assert.ok(err instanceof UnavailableError);
    assert.equal(err.retryAfterSeconds, 1);
    assert.equal(calls.length, 2);
  });

  test("a Retry-After longer than retryMaxDelayMs is not waited for", async () => {
    const { idem, calls, waits } = client(() => problem(503, "urn:idem:problem:store-unavailable", { headers: { "retry-after": "120" } }));
    const err = await idem.claims.claim("ns", { key: "k" }).catch((e) => e);
    assert.ok(err instanceof UnavailableError);
    assert.equal(err.retryAfterSeconds, 120);
    assert.equal(calls.length, 1);
    assert.deepEqual(waits, []);
  });

  test("Retry-After as an HTTP date", async () => {
    const when = new Date(Date.now() + 3000).toUTCString();
    const { idem, waits } = client((_, i) => (i === 0 ? reply(503, "", { "retry-after": when }) : reply(200, { exists: true })));
    await idem.claims.exists("ns", { prefix: ["a"] });
    assert.equal(waits.length, 1);
    assert.ok(waits[0] >= 1000 && waits[0] <= 4000, String(waits[0]));
  });

  test("retries: 0 means one attempt", async () => {
    const { idem, calls } = client(() => reply(503, ""), { retries: 0 });
    await assert.rejects(idem.claims.exists("ns", { prefix: ["a"] }), UnavailableError);
    assert.equal(calls.length, 1);
  });

  test("each attempt has a timeout (AbortController); a timeout is retried, then ConnectionError", async () => {
    const hang = (call) =>
      new Promise((_, reject) => call.signal.addEventListener("abort", () => reject(new DOMException("aborted", "AbortError"))));
    const { idem, calls } = client(hang, { timeoutMs: 20, retries: 1 });
    const started = Date.now();
    const err = await idem.claims.get("ns", "x".repeat(64)).catch((e) => e);
    assert.ok(err instanceof ConnectionError, String(err));
    assert.equal(err.type, "urn:idem:client:timeout");
    assert.equal(calls.length, 2);
    assert.ok(Date.now() - started < 2000);
  });
});

describe("error mapping", () => {
  const cases = [
    [409, "urn:idem:problem:in-progress", InProgressError],
    [409, "urn:idem:problem:lease-lost", LeaseLostError],
    [409, "urn:idem:problem:conflict", IdemError],
    [422, "urn:idem:problem:fingerprint-mismatch", MismatchError],
    [503, "urn:idem:problem:store-unavailable", UnavailableError],
    [503, "urn:idem:problem:outcome-unknown", UnavailableError],
    [400, "urn:idem:problem:invalid-request", IdemError],
  ];
  for (const [status, type, cls] of cases) {
    test(`${status} ${type} → ${cls.name}`, async () => {
      const { idem } = client(() => problem(status, type, { title: "T", detail: "D", field: status === 400 ? "items[3].parts[0]" : undefined, headers: { "retry-after": "3" } }), { retries: 0 });
      const err = await idem.claims.claim("ns", { key: "k" }).catch((e) => e);
      assert.equal(err.constructor, cls);
      assert.ok(err instanceof IdemError && err instanceof Error);
      assert.equal(err.name, cls.name);
      assert.equal(err.status, status);
      assert.equal(err.type, type);
      assert.equal(err.title, "T");
      assert.equal(err.detail, "D");
      assert.equal(err.retryAfterSeconds, 3);
      assert.equal(err.field, status === 400 ? "items[3].parts[0]" : undefined);
    });
  }

  test("a body that is not a problem: status and statusText, and the URL does not look like idem", async () => {
    const { idem } = client(() => new Response("<h1>nope</h1>", { status: 500, statusText: "Internal Server Error", headers: { "content-type": "text/html" } }));
    const err = await idem.claims.claim("ns", { key: "k" }).catch((e) => e);
    assert.equal(err.constructor, IdemError);
    assert.equal(err.status, 500);
    assert.equal(err.type, "about:blank");
    assert.equal(err.title, "Internal Server Error");
    assert.equal(err.notIdem, true);
    assert.match(err.message, /http:\/\/idem\.test:7070 answered 500 to POST \/v1\/claims\/ns without an idem problem document: it does not look like idem/);
  });

  test("only problem+json with an urn:idem:problem: type is idem's own answer", async () => {
    const cases = [
      [() => problem(404, "urn:idem:problem:no-such-route"), false],
      [() => reply(404, { type: "urn:idem:problem:no-such-route", title: "T" }, { "content-type": "application/json" }), true],
      [() => problem(404, "https://example.com/probs/not-found", { detail: "theirs" }), true],
      [() => reply(404, "Not Found", { "content-type": "text/plain" }), true],
      [() => reply(502, "<html>Bad Gateway</html>", { "content-type": "text/html" }), true],
    ];
    for (const [answer, notIdem] of cases) {
      const { idem } = client(answer, { retries: 0 });
      const err = await idem.claims.get("ns", { key: "k" }).catch((e) => e);
      assert.ok(err instanceof IdemError, String(err));
      assert.equal(err.notIdem, notIdem, err.message);
      assert.equal(/does not look like idem/.test(err.message), notIdem, err.message);
    }
    const { idem } = client(() => problem(404, "https://example.com/probs/not-found", { detail: "theirs" }), { retries: 0 });
    assert.match((await idem.claims.get("ns", { key: "k" }).catch((e) => e)).message, /\[its detail: theirs\]/);
  });
});

describe("a 2xx answer without the fields a call needs", () => {
  // A server that answers 200 to anything (a catch-all route, a misconfigured proxy): its answer is
  // not idem's, so it is the not-idem error naming the URL, never a result (`claimed` missing is
  // not `claimed: false`).
  const calls = (idem) => [
    ["POST /v1/claims/survey", () => idem.claims.claim("survey", { key: "k" })],
    ["POST /v1/claims/survey/batch", () => idem.claims.claimBatch("survey", [{ key: "k" }])],
    ["POST /v1/claims/survey/lookup", () => idem.claims.lookup("survey", [{ key: "k" }])],
    ["POST /v1/claims/survey/lookup", () => idem.claims.exists("survey", { key: "k" })],
    ["POST /v1/claims/survey/prefix", () => idem.claims.exists("survey", { prefix: ["a"] })],
    ["GET /v1/claims/survey/", () => idem.claims.get("survey", { key: "k" })],
    ["GET /v1/claims/survey", () => idem.claims.list("survey", { prefix: ["a"] })],
    ["DELETE /v1/claims/survey", () => idem.claims.deletePrefix("survey", { prefix: ["a"] })],
    ["POST /v1/operations/orders/begin", () => idem.operations.begin("orders", { key: "k" })],
    ["POST /v1/operations/orders/begin", () => idem.operations.run("orders", { key: "k" }, () => "never")],
    ["POST /v1/operations/orders/op1/complete", () => idem.operations.complete("orders", "op1", "t", 1)],
    ["POST /v1/operations/orders/op1/extend", () => idem.operations.extend("orders", "op1", "t", 60)],
    ["GET /v1/operations/orders/", () => idem.operations.get("orders", { key: "k" })],
    ["GET /v1/receipts", () => idem.receipts.list()],
    ["GET /v1/receipts/rcpt_1", () => idem.receipts.get("rcpt_1")],
    ["POST /v1/receipts/rcpt_1/replay", () => idem.receipts.replay("rcpt_1")],
    ["POST /v1/receipts/rcpt_1/discard", () => idem.receipts.discard("rcpt_1")],
    ["POST /v1/receipts/replay", () => idem.receipts.countMatching()],
    ["POST /v1/receipts/replay", () => idem.receipts.replayMatching()],
  ];
  const answers = {
    "200 {}": () => reply(200, {}),
    "200 text/html": () => new Response("<html><body>Welcome</body></html>", { status: 200, headers: { "content-type": "text/html" } }),
    "200 with the wrong types": () => reply(200, { claimed: "yes", id: 7, results: [{}], exists: "no", status: "started", token: "", items: {}, deleted: "1", lease_expires_at: null, receipts: null, receipt_id: 1, matching: "2", queued: 1.5 }),
  };
  for (const [name, answer] of Object.entries(answers)) {
    test(name, async () => {
      let called = false;
      const { idem } = client(answer);
      for (const [what, call] of calls(idem)) {
        const err = await call().then((v) => ({ returned: v }), (e) => e);
        assert.ok(err instanceof IdemError, `${what}: ${JSON.stringify(err)}`);
        assert.equal(err.notIdem, true, err.message);
        assert.equal(err.status, 200, err.message);
        assert.ok(err.message.includes(`${URL_} answered 200 to ${what}`), err.message);
        assert.match(err.message, /it does not look like idem \(check the client's `url` option or IDEM_URL\)$/);
        called ||= /not JSON/.test(err.message);
      }
      assert.equal(called, name === "200 text/html");
    });
  }

  test("an empty object is not 'not claimed': claim throws instead of answering claimed: false", async () => {
    const { idem } = client(() => reply(200, { id: ID_AB, parts: ["a", "b"] }));
    const err = await idem.claims.claim("survey", { parts: ["a", "b"] }).catch((e) => e);
    assert.ok(err instanceof IdemError && err.notIdem, String(err));
    assert.match(err.message, /expected \{ claimed: boolean, id: string \}/);
  });
});

describe("claims", () => {
  test("claim: body in API names, record split from claimed", async () => {
    const { idem, calls } = client(() => reply(201, { claimed: true, ...record({ data: { answer: "A" }, expires_at: "2026-11-23T10:00:00.000Z" }) }));
    const r = await idem.claims.claim("survey", { parts: ["a", "b"], data: { answer: "A" }, ttlSeconds: 86400 });
    assert.deepEqual(withoutToken(calls[0].body), { parts: ["a", "b"], data: { answer: "A" }, ttl_seconds: 86400 });
    assert.equal(calls[0].method, "POST");
    assert.equal(calls[0].path, "/v1/claims/survey");
    assert.equal(calls[0].headers["content-type"], "application/json");
    assert.equal(r.claimed, true);
    assert.deepEqual(r.record, record({ data: { answer: "A" }, expires_at: "2026-11-23T10:00:00.000Z" }));
    assert.ok(!("claimed" in r.record));
  });

  test("claimBatch: items mapped, results in order", async () => {
    const { idem, calls } = client((call) =>
      reply(200, { results: call.body.items.map((it, i) => ({ claimed: i !== 1, ...record({ parts: [it.key], id: claimId(it.key) }) })) }),
    );
    const out = await idem.claims.claimBatch("articles", [{ key: "u1" }, { key: "u2", ttlSeconds: 5 }, { key: "u3", data: 1 }]);
    assert.deepEqual(withoutToken(calls[0].body), { items: [{ key: "u1" }, { key: "u2", ttl_seconds: 5 }, { key: "u3", data: 1 }] });
    assert.equal(calls[0].path, "/v1/claims/articles/batch");
    assert.deepEqual(out.map((r) => [r.claimed, r.record.parts[0]]), [[true, "u1"], [false, "u2"], [true, "u3"]]);
  });

  test("lookup and exists", async () => {
    const { idem, calls } = client((call) =>
      call.body.prefix ? reply(200, { exists: true }) : reply(200, { results: call.body.items.map((it) => ({ id: claimId(it.parts ?? it.key), exists: false })) }),
    );
    const res = await idem.claims.lookup("ns", [{ key: "x" }, { parts: ["a", "b"] }]);
    assert.deepEqual(res, [{ id: claimId("x"), exists: false }, { id: ID_AB, exists: false }]);
    assert.equal(await idem.claims.exists("ns", { prefix: ["a"] }), true);
    assert.deepEqual(calls[1].body, { prefix: ["a"] });
    assert.equal(await idem.claims.exists("ns", { parts: ["a", "b"] }), false);
    assert.deepEqual(calls[2].body, { items: [{ parts: ["a", "b"] }] });
  });

  test("get/delete by parts, key or id; null/false on 404", async () => {
    const { idem, calls } = client((call) =>
      call.path.endsWith(ID_AB) ? reply(call.method === "DELETE" ? 204 : 200, call.method === "DELETE" ? undefined : record()) : problem(404, "urn:idem:problem:not-found"),
    );
    assert.deepEqual(await idem.claims.get("survey", { parts: ["a", "b"] }), record());
    assert.deepEqual(await idem.claims.get("survey", ID_AB), record());
    assert.equal(await idem.claims.get("survey", { key: "nope" }), null);
    assert.equal(await idem.claims.delete("survey", { parts: ["a", "b"] }), true);
    assert.equal(await idem.claims.delete("survey", { key: "nope" }), false);
    assert.equal(calls[0].path, `/v1/claims/survey/${ID_AB}`);
    assert.equal(calls[3].method, "DELETE");
  });

  test("a 404 that is not idem's not-found (a wrong base URL, a proxy) throws instead of answering absent", async () => {
    for (const answer of [
      () => problem(404, "urn:idem:problem:no-such-route"),
      () => reply(404, "<html>Not Found</html>"),
    ]) {
      const { idem } = client(answer);
      for (const call of [() => idem.claims.get("survey", { key: "k" }), () => idem.claims.delete("survey", { key: "k" }),
        () => idem.operations.get("ops", { key: "k" }), () => idem.receipts.get("rcpt_1")]) {
        const err = await call().catch((e) => e);
        assert.ok(err instanceof IdemError, String(err));
        assert.equal(err.status, 404);
      }
    }
  });

  test("list: the prefix repeated in order, limit and after; { items, next } with the records as they are", async () => {
    const recs = [record(), record({ parts: ["a", "c"], created_at: "2026-11-22T10:00:04.9Z" }), record({ parts: ["a", "d"], created_at: "2026-11-22T10:00:05Z" })];
    const { idem, calls } = client(() => reply(200, { items: recs, next: "YQBjAA" }));
    const page = await idem.claims.list("survey", { prefix: ["a b", "c/d"], limit: 3, after: "YQBiAA" });
    assert.deepEqual(page, { items: recs, next: "YQBjAA" });
    assert.equal(calls[0].method, "GET");
    assert.equal(calls[0].url, `${URL_}/v1/claims/survey?prefix=a+b&prefix=c%2Fd&limit=3&after=YQBiAA`);
    assert.deepEqual(page.items.map((r) => r.created_at), ["2026-11-22T10:00:00.000Z", "2026-11-22T10:00:04.9Z", "2026-11-22T10:00:05Z"], "timestamps as the server wrote them, any precision");
    assert.deepEqual(page.items.map((r) => new Date(r.created_at).getTime() % 60_000), [0, 4_900, 5_000], "and Date reads each form");
    const last = client(() => reply(200, { items: [], next: null }));
    assert.deepEqual(await last.idem.claims.list("survey", { prefix: ["a"] }), { items: [], next: null });
    assert.equal(last.calls[0].url, `${URL_}/v1/claims/survey?prefix=a`);
    await assert.rejects(last.idem.claims.list("survey", { prefix: [] }), TypeError);
  });

  test("iterate follows next until null", async () => {
    const pages = { "": { items: [record({ parts: ["a", "1"] }), record({ parts: ["a", "2"] })], next: "c1" }, c1: { items: [record({ parts: ["a", "3"] })], next: null } };
    const { idem, calls } = client((call) => reply(200, pages[call.query.after ?? ""]));
    const seen = [];
    for await (const r of idem.claims.iterate("survey", { prefix: ["a"], pageSize: 2 })) seen.push(r.parts[1]);
    assert.deepEqual(seen, ["1", "2", "3"]);
    assert.deepEqual(calls.map((c) => c.url), [`${URL_}/v1/claims/survey?prefix=a&limit=2`, `${URL_}/v1/claims/survey?prefix=a&limit=2&after=c1`]);
  });

  test("deletePrefix: DELETE until more is false, the total deleted", async () => {
    const answers = [{ deleted: 100000, more: true }, { deleted: 7, more: false }];
    const { idem, calls } = client((_, i) => reply(200, answers[i]));
    assert.equal(await idem.claims.deletePrefix("survey", { prefix: ["scenario-1", "user-3"] }), 100007);
    assert.deepEqual(calls.map((c) => `${c.method} ${c.url}`), Array(2).fill(`DELETE ${URL_}/v1/claims/survey?prefix=scenario-1&prefix=user-3`));
    const stuck = client(() => reply(200, { deleted: 0, more: true }));
    assert.equal(await stuck.idem.claims.deletePrefix("survey", { prefix: ["x"] }), 0);
    assert.equal(stuck.calls.length, 1, "an answer that deleted nothing ends the loop");
    await assert.rejects(stuck.idem.claims.deletePrefix("survey", { prefix: [] }), TypeError);
    assert.equal(stuck.calls.length, 1, "nothing sent for an empty prefix");
    const html = client(() => new Response("<html>an app that answers 200 to anything</html>", { status: 200, headers: { "content-type": "text/html" } }));
    await assert.rejects(html.idem.claims.deletePrefix("survey", { prefix: ["x"] }), (e) => e instanceof IdemError && e.status === 200 && e.notIdem && /does not look like idem/.test(e.message));
    await assert.rejects(html.idem.claims.list("survey", { prefix: ["x"] }), (e) => e instanceof IdemError && e.notIdem && /answered 200 to GET \/v1\/claims\/survey with a body that is not JSON \(text\/html\)/.test(e.message));
  });

  test("namespaces and ids are URL-encoded", async () => {
    const { idem, calls } = client(() => problem(404, "urn:idem:problem:not-found"));
    await idem.claims.get("a/b", "c?d");
    assert.equal(calls[0].path, "/v1/claims/a%2Fb/c%3Fd");
  });
});

describe("claimId", () => {
  test("the SHA-256 of NUL-joined parts, lowercase hex", () => {
    assert.equal(claimId(["a", "b"]), ID_AB);
    assert.equal(claimId("a"), claimId(["a"]));
    assert.notEqual(claimId(["a_b", "c"]), claimId(["a", "b_c"]));
    assert.match(claimId(["日本語", "✓"]), /^[0-9a-f]{64}$/);
  });

  test("parts the server refuses throw a TypeError naming the part", () => {
    assert.throws(() => claimId([]), TypeError);
    assert.throws(() => claimId(["ok", ""]), /parts\[1\]/);
    assert.throws(() => claimId(["a\0b"]), /NUL/);
    assert.throws(() => claimId(Array(17).fill("x")), /16/);
    assert.throws(() => claimId(["é".repeat(513)]), /1024 bytes/);
    assert.doesNotThrow(() => claimId(["x".repeat(1024)]));
    assert.throws(() => claimId(""), /key/);
  });
});

// ---------------------------------------------------------------------------------------------
// Client tokens: one per logical call, the same on each of its retries

describe("client tokens", () => {
  const outcomeUnknown = () => problem(503, PROBLEM_OUTCOME_UNKNOWN, { title: "Outcome unknown", headers: { "retry-after": "1" } });
  const started = (token = "tok-1", fence = 17) => reply(201, { status: "started", id: "op1", token, lease_expires_at: "t", fence });
  /** Answers each logical call's first attempt 503 outcome-unknown and its retry with `answer`. */
  const firstLost = (answer) => (call, i) => (i % 2 === 0 ? outcomeUnknown() : answer(call));
  const tokens = (calls) => calls.map((c) => c.body.client_token);

  test("claim: a retry after 503 outcome-unknown sends the very same token; another claim a new one", async () => {
    const { idem, calls, waits } = client(firstLost(() => reply(201, { claimed: true, ...record() })));
    const first = await idem.claims.claim("survey", { parts: ["a", "b"] });
    assert.equal(first.claimed, true);
    await idem.claims.claim("survey", { parts: ["a", "b"] });
    assert.equal(calls.length, 4);
    assert.deepEqual(waits, [1000, 1000], "Retry-After honoured");
    const [a, aRetry, b, bRetry] = tokens(calls);
    assert.match(a, UUID_V4);
    assert.equal(aRetry, a, "the retry carries the first attempt's token");
    assert.equal(bRetry, b);
    assert.notEqual(b, a, "two logical calls, two tokens");
    assert.deepEqual(calls[1].body, calls[0].body, "the retry is the same request");
  });

  test("claimBatch: one token for the batch, the same on its retry", async () => {
    const { idem, calls } = client(firstLost((call) => reply(200, { results: call.body.items.map(() => ({ claimed: true, ...record() })) })));
    await idem.claims.claimBatch("articles", [{ key: "u1" }, { key: "u2" }]);
    await idem.claims.claimBatch("articles", [{ key: "u1" }, { key: "u2" }]);
    const [a, aRetry, b, bRetry] = tokens(calls);
    assert.match(a, UUID_V4);
    assert.equal(aRetry, a);
    assert.equal(bRetry, b);
    assert.notEqual(a, b);
    assert.ok(calls.every((c) => c.body.items.every((item) => !("client_token" in item))), "items carry none of their own");
  });

  test("begin: the same token on the retry; the answer's fence is there", async () => {
    const { idem, calls } = client(firstLost(() => started("tok-9", 42)));
    const b = await idem.operations.begin("ops", { key: "k" });
    assert.equal(b.status, "started");
    assert.equal(b.token, "tok-9");
    assert.equal(b.fence, 42);
    await idem.operations.begin("ops", { key: "k" });
    const [a, aRetry, c, cRetry] = tokens(calls);
    assert.match(a, UUID_V4);
    assert.equal(aRetry, a);
    assert.equal(cRetry, c);
    assert.notEqual(a, c);
  });

  test("run: every begin of one run (transport retries and waits for a holder) carries one token", async () => {
    const ops = opsServer({
      begin: (_, n) =>
        n === 0 ? outcomeUnknown() : n === 1 ? problem(409, "urn:idem:problem:in-progress", { headers: { "retry-after": "1" } }) : started(),
    });
    const { idem, calls } = client(ops.handler);
    assert.equal(await idem.operations.run("orders", { key: "k" }, () => "done"), "done");
    const begins = calls.filter((c) => c.path.endsWith("/begin"));
    assert.equal(begins.length, 3);
    assert.match(begins[0].body.client_token, UUID_V4);
    assert.ok(begins.every((c) => c.body.client_token === begins[0].body.client_token));
    await idem.operations.run("orders", { key: "k2" }, () => "again");
    const next = calls.filter((c) => c.path.endsWith("/begin"))[3];
    assert.notEqual(next.body.client_token, begins[0].body.client_token, "another run, another token");
  });

  test("a caller's own token is sent as given, on every attempt", async () => {
    const { idem, calls } = client((call, i) => {
      if (i % 2 === 0) return outcomeUnknown();
      if (call.path.endsWith("/begin")) return started();
      if (call.path.endsWith("/batch")) return reply(200, { results: [{ claimed: true, ...record() }] });
      return reply(201, { claimed: true, ...record() });
    });
    await idem.claims.claim("survey", { parts: ["a", "b"], clientToken: "order-7/attempt" });
    await idem.claims.claimBatch("survey", [{ parts: ["a", "b"] }], { clientToken: "batch 7" });
    await idem.operations.begin("ops", { key: "k", clientToken: "begin-7" });
    assert.deepEqual(tokens(calls), ["order-7/attempt", "order-7/attempt", "batch 7", "batch 7", "begin-7", "begin-7"]);
  });

  test("a token the server would refuse is a TypeError, and nothing is sent", async () => {
    const { idem, calls } = client(() => reply(201, { claimed: true, ...record() }));
    for (const bad of ["", "naïve", "tab\there", "x".repeat(256)]) {
      await assert.rejects(idem.claims.claim("survey", { key: "k", clientToken: bad }), TypeError);
      await assert.rejects(idem.operations.begin("ops", { key: "k", clientToken: bad }), TypeError);
    }
    assert.equal(calls.length, 0);
  });

  test("outcome-unknown after every retry: an UnavailableError whose type says so", async () => {
    const { idem, calls } = client(() => outcomeUnknown(), { retries: 2 });
    const err = await idem.claims.claim("survey", { key: "k" }).catch((e) => e);
    assert.ok(err instanceof UnavailableError);
    assert.equal(err.type, PROBLEM_OUTCOME_UNKNOWN);
    assert.equal(err.status, 503);
    assert.equal(err.retryAfterSeconds, 1);
    assert.equal(calls.length, 3);
    assert.equal(new Set(tokens(calls)).size, 1, "all three attempts carried one token");
  });
});

// ---------------------------------------------------------------------------------------------
// operations.run

/** A fake Operations API: `script.begin(call, n)` answers begins; the rest are recorded. */
function opsServer(script = {}) {
  const log = { begin: 0, complete: [], release: [], extend: [] };
  const handler = async (call) => {
    const m = call.path.match(/^\/v1\/operations\/([^/]+)\/(?:([^/]+)\/)?(begin|complete|release|extend)$/);
    if (!m) return problem(404, "urn:idem:problem:not-found");
    const action = m[3];
    if (action === "begin") {
      const n = log.begin++;
      if (script.begin) return script.begin(call, n);
      return reply(201, { status: "started", id: "op1", token: "tok-1", lease_expires_at: "2026-11-22T10:01:00Z" });
    }
    log[action].push(call.body);
    if (script[action]) return script[action](call);
    if (action === "complete") return reply(200, { status: "completed", id: "op1", result: call.body.result ?? null, completed_at: "t", expires_at: null });
    if (action === "release") return reply(204);
    return reply(200, { lease_expires_at: "2026-11-22T10:02:00Z" });
  };
  return { handler, log };
}

describe("operations.run", () => {
  test("started: runs fn once, completes with its result, returns the stored result", async () => {
    const ops = opsServer();
    const { idem, calls } = client(ops.handler);
    let runs = 0;
    const out = await idem.operations.run("orders", { key: "order-1", request: { sku: "x" }, leaseSeconds: 30, ttlSeconds: 3600 }, async (ctx) => {
      runs++;
      assert.equal(ctx.id, "op1");
      assert.equal(ctx.signal.aborted, false);
      return { orderId: 42, at: new Date(0) };
    });
    assert.equal(runs, 1);
    assert.deepEqual(out, { orderId: 42, at: "1970-01-01T00:00:00.000Z" });
    const begin = calls[0];
    assert.equal(begin.path, "/v1/operations/orders/begin");
    assert.deepEqual(
      { ...withoutToken(begin.body), wait_seconds: undefined },
      { key: "order-1", request: { sku: "x" }, lease_seconds: 30, ttl_seconds: 3600, wait_seconds: undefined },
    );
    assert.ok(begin.body.wait_seconds >= 0 && begin.body.wait_seconds <= 30);
    assert.deepEqual(ops.log.complete, [{ token: "tok-1", result: { orderId: 42, at: "1970-01-01T00:00:00.000Z" } }]);
    assert.equal(calls[1].path, "/v1/operations/orders/op1/complete");
    assert.deepEqual(ops.log.release, []);
  });

  test("completed: returns the stored result without calling fn", async () => {
    const ops = opsServer({ begin: () => reply(200, { status: "completed", id: "op1", result: { orderId: 7 }, completed_at: "t", expires_at: null }) });
    const { idem, calls } = client(ops.handler);
    let called = false;
    const out = await idem.operations.run("orders", { parts: ["u1", "order-1"] }, () => {
      called = true;
    });
    assert.equal(called, false);
    assert.deepEqual(out, { orderId: 7 });
    assert.equal(calls.length, 1);
    assert.deepEqual(calls[0].body.parts, ["u1", "order-1"]);
  });

  test("fn throws: releases, then re-throws the same error", async () => {
    const ops = opsServer();
    const { idem } = client(ops.handler);
    const boom = new Error("payment declined");
    await assert.rejects(
      idem.operations.run("orders", { key: "k" }, async () => {
        throw boom;
      }),
      (e) => e === boom,
    );
    assert.deepEqual(ops.log.release, [{ token: "tok-1" }]);
    assert.deepEqual(ops.log.complete, []);
  });

  test("fn throws and release fails: the fn's error still wins", async () => {
    const ops = opsServer({ release: () => problem(409, "urn:idem:problem:lease-lost") });
    const { idem } = client(ops.handler);
    const boom = new Error("x");
    await assert.rejects(idem.operations.run("orders", { key: "k" }, () => Promise.reject(boom)), (e) => e === boom);
  });

  test("in progress: waits (Retry-After) and returns the holder's result", async () => {
    const ops = opsServer({
      begin: (_, n) =>
        n < 2
          ? problem(409, "urn:idem:problem:in-progress", { headers: { "retry-after": "1" } })
          : reply(200, { status: "completed", id: "op1", result: "done-by-other", completed_at: "t", expires_at: null }),
    });
    const { idem, waits } = client(ops.handler);
    let called = false;
    const out = await idem.operations.run("orders", { key: "k" }, () => {
      called = true;
    });
    assert.equal(out, "done-by-other");
    assert.equal(called, false);
    assert.deepEqual(waits, [1000, 1000]);
    assert.equal(ops.log.begin, 3);
  });

  test("in progress, then the holder released: this caller runs fn", async () => {
    const ops = opsServer({
      begin: (_, n) =>
        n === 0
          ? problem(409, "urn:idem:problem:in-progress", { headers: { "retry-after": "1" } })
          : reply(201, { status: "started", id: "op1", token: "tok-2", lease_expires_at: "t" }),
    });
    const { idem } = client(ops.handler);
    assert.equal(await idem.operations.run("orders", { key: "k" }, () => 5), 5);
    assert.deepEqual(ops.log.complete, [{ token: "tok-2", result: 5 }]);
  });

  test("in progress past the deadline: InProgressError", async () => {
    const ops = opsServer({ begin: () => problem(409, "urn:idem:problem:in-progress", { headers: { "retry-after": "1" } }) });
    const { idem, calls } = client(ops.handler);
    await assert.rejects(idem.operations.run("orders", { key: "k", waitSeconds: 0 }, () => 1), InProgressError);
    assert.equal(calls.length, 1);
    assert.equal(calls[0].body.wait_seconds, 0);
  });

  test("asks the server to wait (wait_seconds ≤ 30) within the deadline", async () => {
    const ops = opsServer({ begin: () => reply(200, { status: "completed", id: "op1", result: 1, completed_at: "t", expires_at: null }) });
    const { idem, calls } = client(ops.handler);
    await idem.operations.run("orders", { key: "k", waitSeconds: 90 }, () => 1);
    assert.equal(calls[0].body.wait_seconds, 30);
    await idem.operations.run("orders", { key: "k", waitSeconds: 12 }, () => 1);
    assert.ok([11, 12].includes(calls[1].body.wait_seconds));
  });

  test("422: MismatchError, fn not called", async () => {
    const ops = opsServer({ begin: () => problem(422, "urn:idem:problem:fingerprint-mismatch") });
    const { idem } = client(ops.handler);
    let called = false;
    await assert.rejects(
      idem.operations.run("orders", { key: "k", request: { a: 1 } }, () => {
        called = true;
      }),
      MismatchError,
    );
    assert.equal(called, false);
  });

  test("long fn: the lease is extended every heartbeat while it runs, then stops", async () => {
    const ops = opsServer();
    const { idem } = client(ops.handler);
    const out = await idem.operations.run("orders", { key: "k", leaseSeconds: 1, heartbeatMs: 25 }, async () => {
      await new Promise((r) => setTimeout(r, 160));
      return "slow";
    });
    assert.equal(out, "slow");
    assert.ok(ops.log.extend.length >= 2, `extends: ${ops.log.extend.length}`);
    for (const body of ops.log.extend) assert.deepEqual(body, { token: "tok-1", lease_seconds: 1 });
    const after = ops.log.extend.length;
    await new Promise((r) => setTimeout(r, 80));
    assert.equal(ops.log.extend.length, after, "no heartbeat after completion");
  });

  test("the default heartbeat is a third of the lease", async () => {
    const ops = opsServer();
    const { idem } = client(ops.handler);
    // A 1.5 s lease: one extend after 500 ms, none before; the next 500 ms after that one.
    const out = await idem.operations.run("orders", { key: "k", leaseSeconds: 1.5 }, async () => {
      await new Promise((r) => setTimeout(r, 400));
      assert.equal(ops.log.extend.length, 0);
      await new Promise((r) => setTimeout(r, 250));
      assert.equal(ops.log.extend.length, 1);
      await new Promise((r) => setTimeout(r, 450));
      assert.equal(ops.log.extend.length, 2);
      return 1;
    });
    assert.equal(out, 1);
  });

  test("the lease counts from before the begin was sent: a slow begin's first beat comes sooner", async () => {
    // A 1.5 s lease whose begin took 400 ms to answer: the first beat is due 500 ms after the begin
    // was sent, so 100 ms after its answer (not a third of the lease after the answer).
    const ops = opsServer({ begin: () => new Promise((r) => setTimeout(() => r(reply(201, { status: "started", id: "op1", token: "tok-1", lease_expires_at: "t" })), 400)) });
    const times = [];
    const wrapped = async (call, n) => {
      times.push([call.path.split("/").pop(), Date.now()]);
      return ops.handler(call, n);
    };
    const { fetch } = fakeFetch(wrapped);
    const timed = new Idem({ url: URL_, fetch, random: () => 0.5 });
    await timed.operations.run("orders", { key: "k", leaseSeconds: 1.5 }, () => new Promise((r) => setTimeout(r, 300)));
    const sent = times.find(([what]) => what === "begin")[1];
    const beat = times.find(([what]) => what === "extend");
    assert.ok(beat, `one heartbeat, at most 500 ms after the begin was sent: ${JSON.stringify(times)}`);
    assert.ok(beat[1] - sent >= 450 && beat[1] - sent < 850, `the first beat ${beat[1] - sent} ms after the begin was sent`);
  });

  test("a failed heartbeat is tried again within 250 ms, one attempt each (no Retry-After wait), until it gets through", async () => {
    const at = [];
    const ops = opsServer({
      extend: () => {
        at.push(Date.now());
        return at.length <= 3 ? problem(503, "urn:idem:problem:store-unavailable", { headers: { "retry-after": "1" } }) : reply(200, { lease_expires_at: "t" });
      },
    });
    const { fetch } = fakeFetch(ops.handler);
    const idem = new Idem({ url: URL_, fetch, random: () => 0.5 }); // real sleeps: a transport retry would wait Retry-After
    const out = await idem.operations.run("orders", { key: "k", leaseSeconds: 1.5 }, () => new Promise((r) => setTimeout(() => r("kept"), 1350)));
    assert.equal(out, "kept");
    assert.ok(at.length >= 4, `extends: ${at.length}`);
    const gaps = at.slice(1, 4).map((t, i) => t - at[i]);
    for (const gap of gaps) assert.ok(gap >= 200 && gap < 550, `a failed beat was tried again after ${gap} ms: ${gaps}`);
    assert.deepEqual(ops.log.release, []);
    assert.equal(ops.log.complete.length, 1);
  });

  test("a heartbeat that cannot get through keeps trying past the lease's end, every 250 ms: a lease that ran out is still this caller's until another takes the key", async () => {
    const at = [];
    const ops = opsServer({
      extend: () => {
        at.push(Date.now());
        return at.length <= 6 ? new TypeError("fetch failed") : reply(200, { lease_expires_at: "t" });
      },
    });
    const { fetch } = fakeFetch(ops.handler);
    const idem = new Idem({ url: URL_, fetch, random: () => 0.5 });
    const started = Date.now();
    let aborted;
    const out = await idem.operations.run("orders", { key: "k", leaseSeconds: 1 }, async (ctx) => {
      await new Promise((r) => setTimeout(r, 2000));
      aborted = ctx.signal.aborted;
      return "late but kept";
    });
    assert.equal(out, "late but kept");
    assert.equal(aborted, false);
    assert.ok(at.length >= 7, `extends: ${at.length}`);
    assert.ok(at[6] - started > 1000, "the beat that got through came after the lease's end");
    for (let i = 1; i < 7; i++) assert.ok(at[i] - at[i - 1] < 550, `tried again every 250 ms: ${at.map((t) => t - started)}`);
    assert.deepEqual(ops.log.release, []);
  });

  test("complete refused (e.g. result too large): the key is released, the error thrown", async () => {
    const ops = opsServer({ complete: () => problem(400, "urn:idem:problem:invalid-request", { field: "result" }) });
    const { idem } = client(ops.handler);
    const err = await idem.operations.run("orders", { key: "k" }, () => "x").catch((e) => e);
    assert.equal(err.status, 400);
    assert.equal(err.field, "result");
    assert.deepEqual(ops.log.release, [{ token: "tok-1" }]);
  });

  test("a result that is not JSON: released, TypeError", async () => {
    const ops = opsServer();
    const { idem } = client(ops.handler);
    await assert.rejects(idem.operations.run("orders", { key: "k" }, () => 10n), TypeError);
    assert.deepEqual(ops.log.release, [{ token: "tok-1" }]);
  });

  test("fn returning undefined stores no result and returns null", async () => {
    const ops = opsServer();
    const { idem } = client(ops.handler);
    assert.equal(await idem.operations.run("orders", { key: "k" }, () => undefined), null);
    assert.deepEqual(ops.log.complete, [{ token: "tok-1" }]);
  });
});

describe("operations thin calls", () => {
  test("begin/complete/release/extend/get/delete paths and bodies", async () => {
    const { idem, calls } = client((call) => {
      if (call.path.endsWith("/begin")) return reply(201, { status: "started", id: "abc", token: "t", lease_expires_at: "x" });
      if (call.path.endsWith("/complete")) return reply(200, { status: "completed", id: "abc", result: 1, completed_at: "c", expires_at: null });
      if (call.path.endsWith("/release")) return reply(204);
      if (call.path.endsWith("/extend")) return reply(200, { lease_expires_at: "y" });
      if (call.method === "GET" && call.path.endsWith(ID_AB)) return reply(200, { status: "in_progress", id: ID_AB });
      if (call.method === "DELETE" && call.path.endsWith(ID_AB)) return reply(204);
      return problem(404, "urn:idem:problem:not-found");
    });
    const b = await idem.operations.begin("ops", { parts: ["a", "b"], waitSeconds: 5, leaseSeconds: 10 });
    assert.equal(b.status, "started");
    assert.deepEqual(withoutToken(calls[0].body), { parts: ["a", "b"], lease_seconds: 10, wait_seconds: 5 });
    assert.equal((await idem.operations.complete("ops", "abc", "t", 1)).result, 1);
    assert.deepEqual(calls[1].body, { token: "t", result: 1 });
    assert.equal(await idem.operations.release("ops", "abc", "t"), undefined);
    assert.deepEqual(calls[2].body, { token: "t" });
    assert.deepEqual(await idem.operations.extend("ops", "abc", "t", 30), { lease_expires_at: "y" });
    assert.deepEqual(calls[3].body, { token: "t", lease_seconds: 30 });
    assert.equal(calls[3].path, "/v1/operations/ops/abc/extend");
    assert.deepEqual(await idem.operations.get("ops", { parts: ["a", "b"] }), { status: "in_progress", id: ID_AB });
    assert.equal(await idem.operations.get("ops", { key: "zz" }), null);
    assert.equal(await idem.operations.delete("ops", ID_AB), true);
    assert.equal(await idem.operations.delete("ops", "f".repeat(64)), false);
  });

  test("a waiting begin gets a longer timeout than timeoutMs", async () => {
    const { idem } = client(
      (call) =>
        new Promise((resolve, reject) => {
          const t = setTimeout(() => resolve(reply(201, { status: "started", id: "a", token: "t", lease_expires_at: "x" })), 60);
          call.signal.addEventListener("abort", () => {
            clearTimeout(t);
            reject(new DOMException("aborted", "AbortError"));
          });
        }),
      { timeoutMs: 30, retries: 0 },
    );
    await assert.rejects(idem.operations.begin("ops", { key: "k" }), ConnectionError);
    assert.equal((await idem.operations.begin("ops", { key: "k", waitSeconds: 1 })).status, "started");
  });
});

describe("receipts", () => {
  const receipt = (id) => ({ id, source: "partner", event_id: `e-${id}`, status: "dead", created_at: "t", updated_at: "t", round: 1, result_webhook: null });

  test("list: { receipts, next_cursor } → { items, nextCursor }, filter as query", async () => {
    const { idem, calls } = client(() => reply(200, { receipts: [receipt("rcpt_2"), receipt("rcpt_1")], next_cursor: "rcpt_1" }));
    const page = await idem.receipts.list({ source: "partner", status: "dead", limit: 2 });
    assert.deepEqual(page, { items: [receipt("rcpt_2"), receipt("rcpt_1")], nextCursor: "rcpt_1" });
    assert.equal(calls[0].path, "/v1/receipts");
    assert.deepEqual(calls[0].query, { source: "partner", status: "dead", limit: "2" });
    const last = client(() => reply(200, { receipts: [], next_cursor: null }));
    assert.deepEqual(await last.idem.receipts.list(), { items: [], nextCursor: null });
    assert.equal(last.calls[0].url, `${URL_}/v1/receipts`);
  });

  test("iterate follows next_cursor", async () => {
    const pages = {
      "": { receipts: [receipt("r3"), receipt("r2")], next_cursor: "r2" },
      r2: { receipts: [receipt("r1")], next_cursor: null },
    };
    const { idem, calls } = client((call) => reply(200, pages[call.query.cursor ?? ""]));
    const ids = [];
    for await (const r of idem.receipts.iterate({ status: "dead", limit: 2 })) ids.push(r.id);
    assert.deepEqual(ids, ["r3", "r2", "r1"]);
    assert.deepEqual(calls[1].query, { status: "dead", limit: "2", cursor: "r2" });
  });

  test("get: receipt or null; replay: the ack", async () => {
    const { idem, calls } = client((call) => {
      if (call.method === "POST") return reply(202, { receipt_id: "rcpt_1", status: "accepted", replay: false });
      return call.path.endsWith("rcpt_1") ? reply(200, { ...receipt("rcpt_1"), attempts: [] }) : problem(404, "urn:idem:problem:not-found");
    });
    assert.equal((await idem.receipts.get("rcpt_1")).id, "rcpt_1");
    assert.equal(await idem.receipts.get("rcpt_0"), null);
    assert.deepEqual(await idem.receipts.replay("rcpt_1"), { receipt_id: "rcpt_1", status: "accepted", replay: false });
    assert.equal(calls[2].path, "/v1/receipts/rcpt_1/replay");
  });
});

describe("the README", () => {
  test("documents every public method of claims, operations and receipts, with the shapes they return", async () => {
    const { readFile } = await import("node:fs/promises");
    const readme = await readFile(new URL("../README.md", import.meta.url), "utf8");
    const idem = new Idem({ url: URL_, fetch: async () => reply(200, {}) });
    for (const [area, api] of [["claims", idem.claims], ["operations", idem.operations], ["receipts", idem.receipts]]) {
      const methods = Object.getOwnPropertyNames(Object.getPrototypeOf(api)).filter((m) => m !== "constructor");
      for (const method of methods) {
        assert.ok(readme.includes(`| \`${method}(`) || readme.includes(`### \`${method}(`), `the README's ${area} section lacks ${method}`);
      }
    }
    const replayRow = readme.split("\n").find((line) => line.startsWith("| `replay(id)`"));
    assert.match(replayRow ?? "", /replayed: true/, "replay answers `replayed`, as the server names it");
  });
});

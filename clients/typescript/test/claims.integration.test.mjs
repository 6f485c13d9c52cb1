// Integration: the client against a real `idem serve` ($IDEM_TEST_BIN, default ../../target/debug/idem)
// started on a free port with a temp data dir. Claims, ids, problems, auth.

import assert from "node:assert/strict";
import { readFile } from "node:fs/promises";
import { createServer } from "node:http";
import { after, before, describe, test } from "node:test";

import { ConnectionError, ForbiddenError, Idem, IdemError, claimId } from "../dist/index.js";
import { freePort, losingFetch, startIdem } from "./helpers.mjs";

// The id vectors shared by the server's tests and both clients'.
const vectors = JSON.parse(await readFile(new URL("../../testdata/claim_ids.json", import.meta.url), "utf8")).vectors;

describe("claims against a real idem", () => {
  let server;
  let idem;
  before(async () => {
    server = await startIdem();
    idem = new Idem({ url: server.url, retries: 1 });
  });
  after(async () => {
    await server?.stop();
  });

  test("claim: new, then existing (unchanged)", async () => {
    const first = await idem.claims.claim("survey", { parts: ["scenario-1", "user-3", "node-2"], data: { answer: "A" } });
    assert.equal(first.claimed, true);
    assert.deepEqual(Object.keys(first.record).sort(), ["created_at", "data", "expires_at", "id", "namespace", "parts"]);
    assert.equal(first.record.namespace, "survey");
    assert.deepEqual(first.record.parts, ["scenario-1", "user-3", "node-2"]);
    assert.deepEqual(first.record.data, { answer: "A" });
    assert.equal(first.record.expires_at, null);
    assert.equal(first.record.id, claimId(["scenario-1", "user-3", "node-2"]));

    const again = await idem.claims.claim("survey", { parts: ["scenario-1", "user-3", "node-2"], data: { answer: "B" } });
    assert.equal(again.claimed, false);
    assert.deepEqual(again.record, first.record);
  });

  test("claim with a key and a TTL", async () => {
    const r = await idem.claims.claim("articles", { key: "https://example.com/a", ttlSeconds: 3600 });
    assert.equal(r.claimed, true);
    assert.deepEqual(r.record.parts, ["https://example.com/a"]);
    assert.equal(r.record.data, null);
    const ttl = Date.parse(r.record.expires_at) - Date.parse(r.record.created_at);
    assert.ok(Math.abs(ttl - 3600_000) < 2000, String(ttl));
  });

  test("concurrent claims of one key: exactly one claimed", async () => {
    const results = await Promise.all(Array.from({ length: 50 }, () => idem.claims.claim("race", { key: "one" })));
    assert.equal(results.filter((r) => r.claimed).length, 1);
  });

  test("claimBatch: results in request order, the first of two equal keys wins", async () => {
    await idem.claims.claim("batch", { key: "u-existing" });
    const items = [{ key: "u-1" }, { key: "u-existing" }, { key: "u-2", data: { n: 2 } }, { key: "u-1", data: "dup" }, { parts: ["u", "3"], ttlSeconds: 60 }];
    const out = await idem.claims.claimBatch("batch", items);
    assert.deepEqual(
      out.map((r) => [r.claimed, r.record.parts.join("/")]),
      [[true, "u-1"], [false, "u-existing"], [true, "u-2"], [false, "u-1"], [true, "u/3"]],
    );
    assert.equal(out[3].record.data, null, "the duplicate got the first item's record");
    assert.ok(out[4].record.expires_at);

    const urls = Array.from({ length: 500 }, (_, i) => ({ key: `https://example.com/article/${i}` }));
    const big = await idem.claims.claimBatch("batch", urls);
    assert.equal(big.length, 500);
    big.forEach((r, i) => {
      assert.equal(r.claimed, true);
      assert.equal(r.record.id, claimId(urls[i].key));
    });
  });

  test("a claim whose answer was lost: its retry, with the same client token, is told claimed: true", async () => {
    const { fetch, sent, lost } = losingFetch(1);
    const lossy = new Idem({ url: server.url, fetch, retries: 1, retryBaseDelayMs: 10 });
    const r = await lossy.claims.claim("tokens", { key: "lost-answer", data: { n: 1 } });
    assert.equal(lost[0].status, 201, "the first attempt made the claim");
    assert.equal(r.claimed, true, "and its retry is told it won");
    assert.deepEqual(r.record, (({ claimed, ...rec }) => rec)(lost[0].body));
    assert.equal(sent.length, 2);
    assert.equal(sent[1].client_token, sent[0].client_token);
    // Another logical call of the same key (a fresh token) did not win.
    assert.equal((await idem.claims.claim("tokens", { key: "lost-answer" })).claimed, false);
  });

  test("claim with a client token: the same token is claimed: true again; another token or none, false", async () => {
    const first = await idem.claims.claim("tokens", { key: "k", data: "A", clientToken: "c7a1e5f0-retry" });
    assert.equal(first.claimed, true);
    const retry = await idem.claims.claim("tokens", { key: "k", data: "A", clientToken: "c7a1e5f0-retry" });
    assert.equal(retry.claimed, true);
    assert.deepEqual(retry.record, first.record);
    assert.equal((await idem.claims.claim("tokens", { key: "k", clientToken: "someone-else" })).claimed, false);
    assert.equal((await idem.claims.claim("tokens", { key: "k" })).claimed, false);
    const bad = await fetch(`${server.url}/v1/claims/tokens`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ key: "k2", client_token: "x".repeat(256) }),
    });
    assert.equal(bad.status, 400, "the server's limit is the client's: 255 characters");
  });

  test("claimBatch with a client token: a retry is told each item as first decided", async () => {
    await idem.claims.claim("tokens-batch", { key: "old" });
    const items = [{ key: "b-1" }, { key: "old" }, { key: "b-1" }, { key: "b-2" }];
    const first = await idem.claims.claimBatch("tokens-batch", items, { clientToken: "batch-1" });
    const decided = [true, false, false, true];
    assert.deepEqual(first.map((r) => r.claimed), decided);
    const retry = await idem.claims.claimBatch("tokens-batch", items, { clientToken: "batch-1" });
    assert.deepEqual(retry.map((r) => r.claimed), decided);
    const other = await idem.claims.claimBatch("tokens-batch", items, { clientToken: "batch-2" });
    assert.deepEqual(other.map((r) => r.claimed), [false, false, false, false]);
    assert.deepEqual((await idem.claims.claimBatch("tokens-batch", items)).map((r) => r.claimed), [false, false, false, false]);
  });

  test("lookup: in request order, record when it exists", async () => {
    await idem.claims.claim("look", { key: "present", data: [1, 2] });
    const res = await idem.claims.lookup("look", [{ key: "absent" }, { key: "present" }, { parts: ["p", "q"] }]);
    assert.deepEqual(res.map((r) => [r.id, r.exists]), [[claimId("absent"), false], [claimId("present"), true], [claimId(["p", "q"]), false]]);
    assert.equal(res[0].record, undefined);
    assert.deepEqual(res[1].record.data, [1, 2]);
  });

  test("exists by prefix (and by exact key)", async () => {
    await idem.claims.claim("prefix", { parts: ["scenario-1", "user-3", "node-2"] });
    assert.equal(await idem.claims.exists("prefix", { prefix: ["scenario-1", "user-3"] }), true);
    assert.equal(await idem.claims.exists("prefix", { prefix: ["scenario-1"] }), true);
    assert.equal(await idem.claims.exists("prefix", { prefix: ["scenario-1", "user-30"] }), false);
    assert.equal(await idem.claims.exists("prefix", { prefix: ["scenario-1", "user"] }), false, "parts, not characters");
    assert.equal(await idem.claims.exists("prefix", { parts: ["scenario-1", "user-3", "node-2"] }), true);
    assert.equal(await idem.claims.exists("prefix", { parts: ["scenario-1", "user-3"] }), false);
  });

  test("get and delete: by parts, key or id; null/false when absent", async () => {
    const { record } = await idem.claims.claim("gd", { parts: ["x", "y"], data: { v: 1 } });
    assert.deepEqual(await idem.claims.get("gd", { parts: ["x", "y"] }), record);
    assert.deepEqual(await idem.claims.get("gd", record.id), record);
    assert.equal(await idem.claims.get("gd", { key: "nothing" }), null);
    assert.equal(await idem.claims.get("other-ns", record.id), null);
    assert.equal(await idem.claims.delete("gd", { parts: ["x", "y"] }), true);
    assert.equal(await idem.claims.delete("gd", { parts: ["x", "y"] }), false);
    assert.equal(await idem.claims.get("gd", record.id), null);
    const { record: k } = await idem.claims.claim("gd", { key: "by-key" });
    assert.equal(await idem.claims.delete("gd", k.id), true);
    assert.equal(await idem.claims.delete("gd", { key: "by-key" }), false);
    // claimable again after delete
    assert.equal((await idem.claims.claim("gd", { parts: ["x", "y"] })).claimed, true);
  });

  test("claimId equals the server's id for every test vector", async () => {
    assert.ok(vectors.length >= 10);
    // A one-part entry also has its `key` form, which names the same id.
    const keyed = vectors.filter((v) => v.key !== undefined);
    assert.ok(keyed.length > 0, "no single-key vectors");
    const out = await idem.claims.claimBatch("vectors", [
      ...vectors.map((v) => ({ parts: v.parts })),
      ...keyed.map((v) => ({ key: v.key })),
    ]);
    assert.equal(out.length, vectors.length + keyed.length);
    vectors.forEach((v, i) => {
      assert.equal(claimId(v.parts), v.id, `local ${JSON.stringify(v.parts)}`);
      assert.equal(out[i].record.id, v.id, `server ${JSON.stringify(v.parts)}`);
    });
    keyed.forEach((v, i) => {
      assert.equal(claimId(v.key), v.id, `local key ${JSON.stringify(v.key)}`);
      assert.equal(out[vectors.length + i].record.id, v.id, `server key ${JSON.stringify(v.key)}`);
    });
  });

  test("problem+json → IdemError with status, type, title, detail and field", async () => {
    const err = await idem.claims.claim("survey", { parts: [""] }).catch((e) => e);
    assert.ok(err instanceof IdemError);
    assert.equal(err.status, 400);
    assert.equal(err.type, "urn:idem:problem:invalid-request");
    assert.equal(err.title, "Invalid request");
    assert.equal(err.field, "parts[0]");
    assert.ok(err.detail.length > 0);

    const batch = await idem.claims.claimBatch("survey", [{ key: "ok" }, { key: "ok2" }, { parts: ["a", "b\0c"] }]).catch((e) => e);
    assert.equal(batch.status, 400);
    assert.equal(batch.field, "items[2].parts[1]");
    assert.equal(await idem.claims.get("survey", { key: "ok" }), null, "a batch with a bad item changes nothing");

    const ns = await idem.claims.claim("Bad NS", { key: "k" }).catch((e) => e);
    assert.equal(ns.status, 400);
    assert.equal(ns.type, "urn:idem:problem:invalid-request");

    const both = await idem.claims.claim("survey", { key: "k", parts: ["k"] }).catch((e) => e);
    assert.equal(both.status, 400);

    const ttl = await idem.claims.claim("survey", { key: "k", ttlSeconds: 0 }).catch((e) => e);
    assert.equal(ttl.field, "ttl_seconds");

    const empty = await idem.claims.claimBatch("survey", []).catch((e) => e);
    assert.equal(empty.field, "items");

    const badId = await idem.claims.get("survey", "not-hex").catch((e) => e);
    assert.equal(badId.status, 400);
  });

  test("a server that is not there: ConnectionError after the retries, naming the URL and IDEM_URL", async () => {
    const port = await freePort();
    const nobody = new Idem({ url: `http://127.0.0.1:${port}`, retries: 2, retryBaseDelayMs: 5 });
    const err = await nobody.claims.claim("ns", { key: "k" }).catch((e) => e);
    assert.ok(err instanceof ConnectionError, String(err));
    assert.equal(err.status, 0);
    assert.match(err.message, new RegExp(`cannot reach idem at http://127\\.0\\.0\\.1:${port}: connection refused`));
    assert.match(err.message, /`url` option or set IDEM_URL/);
  });
});

/** Parts in the server's order: each part followed by NUL, compared byte by byte (ASCII here). */
const partsOrder = (a, b) => {
  const [x, y] = [a.map((p) => `${p}\0`).join(""), b.map((p) => `${p}\0`).join("")];
  return x < y ? -1 : x > y ? 1 : 0;
};

describe("listing and deleting a prefix against a real idem", () => {
  let server;
  let idem;
  // scenario-1: 5 users × 5 nodes (25 claims), claimed out of order; neighbours that must stay.
  const mine = [];
  for (const u of [4, 1, 5, 3, 2]) for (const n of [3, 5, 1, 4, 2]) mine.push(["scenario-1", `user-${u}`, `node-${n}`]);
  const neighbours = [["scenario-10", "user-1", "node-1"], ["scenario-2", "user-1", "node-1"], ["scenario-0", "user-9"]];
  before(async () => {
    server = await startIdem();
    idem = new Idem({ url: server.url, retries: 1 });
    await idem.claims.claimBatch("listing", [...mine, ...neighbours].map((parts, i) => ({ parts, data: { i } })));
    await idem.claims.claimBatch("listing-other", mine.map((parts) => ({ parts })));
  });
  after(async () => {
    await server?.stop();
  });

  test("list: pages in parts order, each next leading to the following page, null on the last", async () => {
    const pages = [];
    let after = null;
    do {
      const page = await idem.claims.list("listing", { prefix: ["scenario-1"], limit: 10, after });
      pages.push(page);
      after = page.next;
    } while (after !== null);
    assert.deepEqual(pages.map((p) => p.items.length), [10, 10, 5]);
    assert.equal(typeof pages[0].next, "string");
    const listed = pages.flatMap((p) => p.items);
    assert.deepEqual(listed.map((r) => r.parts), [...mine].sort(partsOrder));
    assert.ok(listed.every((r) => r.namespace === "listing" && r.id === claimId(r.parts) && typeof r.data.i === "number"));
    assert.match(listed[0].created_at, /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z$/);

    const user3 = await idem.claims.list("listing", { prefix: ["scenario-1", "user-3"] });
    assert.deepEqual(user3.items.map((r) => r.parts[2]), ["node-1", "node-2", "node-3", "node-4", "node-5"]);
    assert.equal(user3.next, null);
    assert.deepEqual(await idem.claims.list("listing", { prefix: ["scenario-1", "user-30"] }), { items: [], next: null });
    const bad = await idem.claims.list("listing", { prefix: ["scenario-1"], limit: 1001 }).catch((e) => e);
    assert.ok(bad instanceof IdemError && bad.status === 400 && bad.field === "limit" && !bad.notIdem, String(bad));
  });

  test("iterate: every claim under the prefix, in parts order, across pages", async () => {
    const seen = [];
    for await (const r of idem.claims.iterate("listing", { prefix: ["scenario-1"], pageSize: 7 })) seen.push(r.parts);
    assert.deepEqual(seen, [...mine].sort(partsOrder));
  });

  test("deletePrefix: 2 parts, then 1 part; other prefixes and namespaces untouched", async () => {
    assert.equal(await idem.claims.deletePrefix("listing", { prefix: ["scenario-1", "user-3"] }), 5);
    assert.equal(await idem.claims.exists("listing", { prefix: ["scenario-1", "user-3"] }), false);
    assert.equal(await idem.claims.exists("listing", { prefix: ["scenario-1", "user-2"] }), true);
    assert.equal(await idem.claims.deletePrefix("listing", { prefix: ["scenario-1"] }), 20);
    assert.equal(await idem.claims.deletePrefix("listing", { prefix: ["scenario-1"] }), 0);
    assert.deepEqual((await idem.claims.list("listing", { prefix: ["scenario-1"] })).items, []);
    for (const parts of neighbours) assert.equal(await idem.claims.exists("listing", { parts }), true, parts.join("/"));
    const other = [];
    for await (const r of idem.claims.iterate("listing-other", { prefix: ["scenario-1"] })) other.push(r);
    assert.equal(other.length, 25, "another namespace keeps its claims");
    // Claimable again once deleted.
    assert.equal((await idem.claims.claim("listing", { parts: mine[0] })).claimed, true);
    await assert.rejects(idem.claims.deletePrefix("listing", { prefix: [] }), TypeError);
  });
});

/**
 * A tiny HTTP server standing in for something that is not idem, or for idem's answers the real
 * one gives only past 100,000 claims. `answer(req, body)` returns `{ status, type?, body }`.
 */
async function tinyServer(answer) {
  const requests = [];
  const srv = createServer((req, res) => {
    requests.push({ method: req.method, url: req.url });
    const { status, type, body } = answer(req, requests.length - 1);
    res.writeHead(status, { "content-type": type ?? "application/json" });
    res.end(typeof body === "string" ? body : JSON.stringify(body));
  });
  await new Promise((r) => srv.listen(0, "127.0.0.1", r));
  const url = `http://127.0.0.1:${srv.address().port}`;
  return { url, requests, close: () => new Promise((r) => srv.close(r)) };
}

describe("against a tiny fake server", () => {
  test("an HTML 404 (a server that is not idem): IdemError 404 that says the URL does not look like idem", async () => {
    const fake = await tinyServer(() => ({ status: 404, type: "text/html", body: "<h1>Not Found</h1>" }));
    try {
      const idem = new Idem({ url: fake.url, retries: 0 });
      for (const call of [() => idem.claims.claim("ns", { key: "k" }), () => idem.claims.get("ns", { key: "k" }), () => idem.claims.list("ns", { prefix: ["a"] })]) {
        const err = await call().catch((e) => e);
        assert.equal(err.constructor, IdemError, String(err));
        assert.equal(err.status, 404);
        assert.equal(err.notIdem, true);
        assert.match(err.message, new RegExp(`^404 Not Found: ${fake.url.replace(/\./g, "\\.")} answered 404 to \\w+ /v1/claims/ns\\S* without an idem problem document: it does not look like idem`));
        assert.match(err.message, /IDEM_URL/);
      }
    } finally {
      await fake.close();
    }
  });

  test("200 {} and 200 text/html (a server that answers anything): the not-idem error naming the URL, never claimed: false", async () => {
    for (const [type, body, says] of [["application/json", "{}", /without the fields of idem's answer \(expected \{ claimed: boolean, id: string \}\)/], ["text/html", "<html>Welcome</html>", /with a body that is not JSON \(text\/html\)/]]) {
      const fake = await tinyServer(() => ({ status: 200, type, body }));
      try {
        const idem = new Idem({ url: fake.url, retries: 0 });
        const err = await idem.claims.claim("survey", { parts: ["scenario-1", "user-3"] }).then((r) => r, (e) => e);
        assert.ok(err instanceof IdemError, `a claim answered 200 ${type} must throw, not return ${JSON.stringify(err)}`);
        assert.equal(err.status, 200);
        assert.equal(err.notIdem, true);
        assert.ok(err.message.startsWith(`200 Invalid response: ${fake.url} answered 200 to POST /v1/claims/survey `), err.message);
        assert.match(err.message, says);
        assert.match(err.message, /it does not look like idem \(check the client's `url` option or IDEM_URL\)$/);
        const run = await idem.operations.run("orders", { key: "k" }, () => "never").catch((e) => e);
        assert.ok(run instanceof IdemError && run.notIdem && run.message.includes(`${fake.url} answered 200 to POST /v1/operations/orders/begin`), String(run));
      } finally {
        await fake.close();
      }
    }
  });

  test("deletePrefix calls again while the answer says more: true, and sums what was deleted", async () => {
    const answers = [{ deleted: 100000, more: true }, { deleted: 100000, more: true }, { deleted: 42, more: false }];
    const fake = await tinyServer((_, i) => ({ status: 200, body: answers[i] ?? { deleted: 0, more: false } }));
    try {
      const idem = new Idem({ url: fake.url, retries: 0 });
      assert.equal(await idem.claims.deletePrefix("survey", { prefix: ["scenario 1", "user/3"] }), 200042);
      assert.equal(fake.requests.length, 3);
      for (const r of fake.requests) {
        assert.equal(r.method, "DELETE");
        assert.equal(r.url, "/v1/claims/survey?prefix=scenario+1&prefix=user%2F3");
      }
    } finally {
      await fake.close();
    }
  });
});

describe("auth against a real idem", () => {
  let server;
  before(async () => {
    server = await startIdem({
      config: '[auth]\ntokens = ["t0k"]\n[[auth.token]]\nname = "viewer"\ntoken = "v13w"\ncan = "read"\n',
    });
  });
  after(async () => {
    await server?.stop();
  });

  test("without a token: IdemError 401; with a wrong one: 401; with the token: works", async () => {
    const anon = await new Idem({ url: server.url }).claims.claim("auth", { key: "k" }).catch((e) => e);
    assert.ok(anon instanceof IdemError);
    assert.equal(anon.status, 401);
    assert.equal(anon.type, "urn:idem:problem:unauthorized");

    const wrong = await new Idem({ url: server.url, token: "nope" }).claims.get("auth", { key: "k" }).catch((e) => e);
    assert.equal(wrong.status, 401);
    assert.ok(!wrong.message.includes("nope"));

    const idem = new Idem({ url: server.url, token: "t0k" });
    assert.equal((await idem.claims.claim("auth", { key: "k" })).claimed, true);
    assert.equal((await idem.claims.get("auth", { key: "k" })).id, claimId("k"));
    assert.deepEqual(await idem.receipts.list(), { items: [], nextCursor: null });
  });

  test("a read token reads; its claim is a ForbiddenError that says why, and changes nothing", async () => {
    const viewer = new Idem({ url: server.url, token: "v13w" });
    assert.equal((await viewer.claims.get("auth", { key: "k" })).id, claimId("k"));
    const err = await viewer.claims.claim("auth", { key: "k2" }).catch((e) => e);
    assert.ok(err instanceof ForbiddenError, String(err));
    assert.equal(err.status, 403);
    assert.equal(err.type, "urn:idem:problem:forbidden");
    assert.match(err.message, /viewer.*can = "read".*claiming/);
    assert.ok(!err.message.includes("v13w"), "never the token");
    const replay = await viewer.receipts.replay("rcpt_000000000000000000000000000000000000").catch((e) => e);
    assert.ok(replay instanceof ForbiddenError && /replaying/.test(replay.message), String(replay));
    assert.equal(await viewer.claims.get("auth", { key: "k2" }), null, "nothing was claimed");
  });
});

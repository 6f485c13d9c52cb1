// verifyWebhook against the reference implementation (the npm package `standardwebhooks`, a
// devDependency used only here): what it signs, ours accepts; tampering, a wrong secret and stale or
// future timestamps are refused; several signatures in one header are accepted.

import assert from "node:assert/strict";
import { createHmac } from "node:crypto";
import { describe, test } from "node:test";

import { Webhook } from "standardwebhooks";

import { WebhookVerificationError, verifyWebhook } from "../dist/index.js";
import { makeSecret } from "./helpers.mjs";

const SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"; // the contract's example (24 bytes)
const BODY = JSON.stringify({ external_event_id: "evt-1", amount: 1200, note: "日本語 ✓" });

function signed({ secret = SECRET, body = BODY, id = "rcpt_01JD0000000000000000000000", at = new Date() } = {}) {
  const signature = new Webhook(secret).sign(id, at, body);
  return {
    "webhook-id": id,
    "webhook-timestamp": String(Math.floor(at.getTime() / 1000)),
    "webhook-signature": signature,
  };
}

describe("verifyWebhook against standardwebhooks", () => {
  test("accepts what the reference signs, returning the parsed payload", () => {
    const headers = signed();
    assert.deepEqual(verifyWebhook(SECRET, headers, BODY), JSON.parse(BODY));
    // and the reference agrees on the same delivery
    assert.deepEqual(new Webhook(SECRET).verify(BODY, headers), JSON.parse(BODY));
  });

  test("body as a Buffer, Uint8Array or ArrayBuffer; headers as Headers or any-case object", () => {
    const headers = signed();
    const bytes = Buffer.from(BODY, "utf8");
    assert.deepEqual(verifyWebhook(SECRET, headers, bytes), JSON.parse(BODY));
    assert.deepEqual(verifyWebhook(SECRET, headers, new Uint8Array(bytes)), JSON.parse(BODY));
    const ab = bytes.buffer.slice(bytes.byteOffset, bytes.byteOffset + bytes.byteLength);
    assert.deepEqual(verifyWebhook(SECRET, headers, ab), JSON.parse(BODY));
    assert.deepEqual(verifyWebhook(SECRET, new Headers(headers), BODY), JSON.parse(BODY));
    const upper = Object.fromEntries(Object.entries(headers).map(([k, v]) => [k.toUpperCase(), v]));
    assert.deepEqual(verifyWebhook(SECRET, { ...upper, "Content-Type": "application/json" }, BODY), JSON.parse(BODY));
  });

  test("a raw base64 secret (no whsec_ prefix) works the same", () => {
    const secret = makeSecret(32);
    const headers = signed({ secret });
    assert.deepEqual(verifyWebhook(secret.slice("whsec_".length), headers, BODY), JSON.parse(BODY));
    assert.deepEqual(verifyWebhook(secret, headers, BODY), JSON.parse(BODY));
  });

  test("a tampered body is refused", () => {
    const headers = signed();
    const tampered = BODY.replace("1200", "1201");
    assert.throws(() => verifyWebhook(SECRET, headers, tampered), WebhookVerificationError);
    assert.throws(() => verifyWebhook(SECRET, headers, `${BODY} `), WebhookVerificationError);
    assert.throws(() => new Webhook(SECRET).verify(tampered, headers)); // the reference agrees
  });

  test("a tampered id or timestamp is refused", () => {
    const headers = signed();
    assert.throws(() => verifyWebhook(SECRET, { ...headers, "webhook-id": "rcpt_other" }, BODY), WebhookVerificationError);
    const ts = String(Number(headers["webhook-timestamp"]) - 1);
    assert.throws(() => verifyWebhook(SECRET, { ...headers, "webhook-timestamp": ts }, BODY), WebhookVerificationError);
  });

  test("the wrong secret is refused", () => {
    const headers = signed({ secret: makeSecret(32, 1) });
    assert.throws(() => verifyWebhook(makeSecret(32, 2), headers, BODY), /no matching signature/);
    assert.throws(() => verifyWebhook(SECRET, headers, BODY), WebhookVerificationError);
  });

  test("a stale (> 5 min) or future (> 5 min) timestamp is refused, even when correctly signed", () => {
    const now = Date.now();
    const stale = signed({ at: new Date(now - 301_000) });
    assert.throws(() => verifyWebhook(SECRET, stale, BODY), /too old/);
    assert.throws(() => new Webhook(SECRET).verify(BODY, stale), /too old/); // the reference agrees
    const future = signed({ at: new Date(now + 301_000) });
    assert.throws(() => verifyWebhook(SECRET, future, BODY), /future/);
    // within the window, on either side
    assert.doesNotThrow(() => verifyWebhook(SECRET, signed({ at: new Date(now - 290_000) }), BODY));
    assert.doesNotThrow(() => verifyWebhook(SECRET, signed({ at: new Date(now + 290_000) }), BODY));
  });

  test("`now` can be injected (Date or ms), and the tolerance changed", () => {
    const at = new Date("2026-01-01T00:00:00Z");
    const headers = signed({ at });
    assert.throws(() => verifyWebhook(SECRET, headers, BODY), /too old/);
    assert.doesNotThrow(() => verifyWebhook(SECRET, headers, BODY, { now: at }));
    assert.doesNotThrow(() => verifyWebhook(SECRET, headers, BODY, { now: at.getTime() + 299_000 }));
    assert.throws(() => verifyWebhook(SECRET, headers, BODY, { now: at.getTime() + 301_000 }), /too old/);
    assert.throws(() => verifyWebhook(SECRET, headers, BODY, { now: at.getTime() + 11_000, toleranceSeconds: 10 }), /too old/);
  });

  test("a header listing several signatures passes when any v1 matches", () => {
    const headers = signed();
    const other = new Webhook(makeSecret(32, 9)).sign(headers["webhook-id"], new Date(), BODY);
    const several = `v1a,AAAA ${other} ${headers["webhook-signature"]} v2,zzzz`;
    assert.deepEqual(verifyWebhook(SECRET, { ...headers, "webhook-signature": several }, BODY), JSON.parse(BODY));
    // the reference agrees
    assert.deepEqual(new Webhook(SECRET).verify(BODY, { ...headers, "webhook-signature": several }), JSON.parse(BODY));
    // a list of only non-matching signatures is refused
    assert.throws(() => verifyWebhook(SECRET, { ...headers, "webhook-signature": `${other} v1,${"A".repeat(44)}` }, BODY), WebhookVerificationError);
    // a header given as an array (several header lines)
    assert.deepEqual(verifyWebhook(SECRET, { ...headers, "webhook-signature": [other, headers["webhook-signature"]] }, BODY), JSON.parse(BODY));
  });

  test("missing headers and malformed values are refused", () => {
    const headers = signed();
    for (const name of Object.keys(headers)) {
      const { [name]: _, ...rest } = headers;
      assert.throws(() => verifyWebhook(SECRET, rest, BODY), /missing/);
    }
    assert.throws(() => verifyWebhook(SECRET, { ...headers, "webhook-timestamp": "soon" }, BODY), /timestamp/);
    assert.throws(() => verifyWebhook(SECRET, { ...headers, "webhook-signature": "garbage" }, BODY), WebhookVerificationError);
    assert.throws(() => verifyWebhook(SECRET, { ...headers, "webhook-signature": headers["webhook-signature"].slice(0, -4) }, BODY), WebhookVerificationError);
  });

  test("a secret that is not base64 is a TypeError (a configuration mistake, not a bad request)", () => {
    assert.throws(() => verifyWebhook("whsec_!!!", signed(), BODY), TypeError);
    assert.throws(() => verifyWebhook("", signed(), BODY), TypeError);
  });

  test("a body that is not JSON is returned as a string", () => {
    const body = "plain text event";
    assert.equal(verifyWebhook(SECRET, signed({ body }), body), body);
  });

  test("the signature is exactly v1,base64(HMAC-SHA256(key, id.timestamp.body))", () => {
    const key = Buffer.from(SECRET.slice(6), "base64");
    const ts = Math.floor(Date.now() / 1000);
    const sig = createHmac("sha256", key).update(`msg_1.${ts}.${BODY}`).digest("base64");
    const headers = { "webhook-id": "msg_1", "webhook-timestamp": String(ts), "webhook-signature": `v1,${sig}` };
    assert.deepEqual(verifyWebhook(SECRET, headers, BODY), JSON.parse(BODY));
  });
});

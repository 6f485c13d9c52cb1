"use strict";
/** Standard Webhooks verification for idem's deliveries and result webhooks. */
Object.defineProperty(exports, "__esModule", { value: true });
exports.verifyWebhook = verifyWebhook;
const node_buffer_1 = require("node:buffer");
const node_crypto_1 = require("node:crypto");
const errors_js_1 = require("./errors.js");
const DEFAULT_TOLERANCE_SECONDS = 5 * 60;
const decoder = new TextDecoder("utf-8", { fatal: false });
function header(headers, name) {
    if (typeof headers.get === "function") {
        const value = headers.get(name);
        return value ?? undefined;
    }
    const record = headers;
    for (const key of Object.keys(record)) {
        if (key.toLowerCase() !== name)
            continue;
        const value = record[key];
        if (value === undefined)
            continue;
        return typeof value === "string" ? value : value.join(" ");
    }
    return undefined;
}
function secretKey(secret) {
    if (typeof secret !== "string")
        throw new TypeError("verifyWebhook: the secret must be a string");
    const encoded = secret.startsWith("whsec_") ? secret.slice("whsec_".length) : secret;
    if (encoded.length === 0 || !/^[A-Za-z0-9+/]+={0,2}$/.test(encoded)) {
        throw new TypeError("verifyWebhook: the secret must be whsec_ followed by base64");
    }
    return node_buffer_1.Buffer.from(encoded, "base64");
}
function bodyBytes(body) {
    if (typeof body === "string")
        return node_buffer_1.Buffer.from(body, "utf8");
    if (body instanceof Uint8Array)
        return body;
    if (body instanceof ArrayBuffer)
        return new Uint8Array(body);
    throw new TypeError("verifyWebhook: the body must be the raw string or bytes, as received");
}
/**
 * Verify a Standard Webhooks delivery (idem's deliveries to your handler and its result webhooks)
 * and return its parsed JSON payload (or the body as a string when it is not JSON).
 *
 * - `secret`: `whsec_` + base64 (raw base64 is accepted too), e.g. the source's `signing_secret`.
 * - `headers`: a `Headers` object or a plain object (header names in any case), e.g. `req.headers`.
 * - `body`: the raw body exactly as received (string, `Uint8Array`/`Buffer` or `ArrayBuffer`) —
 *   not a re-serialised object.
 *
 * Checks `webhook-signature` (`v1,<base64 HMAC-SHA256 of "id.timestamp.body">`; several
 * space-separated signatures may be listed, any `v1` match passes; compared in constant time) and
 * that `webhook-timestamp` is within 5 minutes of now. Synchronous (uses `node:crypto`, which Node,
 * Deno and Bun provide). Throws `WebhookVerificationError` on a missing header, a bad signature or
 * a stale or future timestamp; a `TypeError` for a secret that is not base64.
 */
function verifyWebhook(secret, headers, body, options = {}) {
    const key = secretKey(secret);
    if (headers === null || typeof headers !== "object") {
        throw new TypeError("verifyWebhook: headers must be a Headers or a plain object");
    }
    const id = header(headers, "webhook-id");
    const timestamp = header(headers, "webhook-timestamp");
    const signatures = header(headers, "webhook-signature");
    if (!id || !timestamp || !signatures) {
        throw new errors_js_1.WebhookVerificationError("missing webhook-id, webhook-timestamp or webhook-signature header");
    }
    if (!/^\d{1,15}$/.test(timestamp.trim()))
        throw new errors_js_1.WebhookVerificationError("invalid webhook-timestamp");
    const ts = Number(timestamp.trim());
    const nowMs = options.now === undefined ? Date.now() : options.now instanceof Date ? options.now.getTime() : options.now;
    const nowSeconds = Math.floor(nowMs / 1000);
    const tolerance = options.toleranceSeconds ?? DEFAULT_TOLERANCE_SECONDS;
    if (ts < nowSeconds - tolerance)
        throw new errors_js_1.WebhookVerificationError("webhook-timestamp is too old");
    if (ts > nowSeconds + tolerance)
        throw new errors_js_1.WebhookVerificationError("webhook-timestamp is in the future");
    const bytes = bodyBytes(body);
    const mac = (0, node_crypto_1.createHmac)("sha256", key);
    mac.update(`${id}.${timestamp.trim()}.`, "utf8");
    mac.update(bytes);
    const expected = mac.digest();
    let matched = false;
    for (const entry of signatures.split(/\s+/)) {
        if (!entry.startsWith("v1,"))
            continue;
        const candidate = node_buffer_1.Buffer.from(entry.slice(3).replace(/,+$/, ""), "base64");
        // Every candidate is compared (no early exit), each in constant time.
        if (candidate.length === expected.length && (0, node_crypto_1.timingSafeEqual)(candidate, expected))
            matched = true;
    }
    if (!matched)
        throw new errors_js_1.WebhookVerificationError("no matching signature");
    const text = typeof body === "string" ? body : decoder.decode(bytes);
    try {
        return JSON.parse(text);
    }
    catch {
        return text;
    }
}

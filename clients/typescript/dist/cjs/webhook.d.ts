/** Standard Webhooks verification for idem's deliveries and result webhooks. */
/** A `Headers` object, or a plain object of header names (any case) to values. */
export type HeadersLike = {
    get(name: string): string | null;
} | Readonly<Record<string, string | readonly string[] | undefined>>;
export interface VerifyOptions {
    /** The time to check `webhook-timestamp` against: a `Date` or milliseconds since the epoch (default now). */
    now?: Date | number;
    /** How far the timestamp may be from `now`, in seconds (default 300). */
    toleranceSeconds?: number;
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
export declare function verifyWebhook<T = unknown>(secret: string, headers: HeadersLike, body: string | Uint8Array | ArrayBuffer, options?: VerifyOptions): T;

"use strict";
/** `idem.operations`: docs/reference/api.md#operations, and `run`, which does a piece of work once. */
Object.defineProperty(exports, "__esModule", { value: true });
exports.Operations = void 0;
const client_token_js_1 = require("./client-token.js");
const errors_js_1 = require("./errors.js");
const http_js_1 = require("./http.js");
const keys_js_1 = require("./keys.js");
const DEFAULT_LEASE_SECONDS = 60;
const DEFAULT_RUN_WAIT_SECONDS = 60;
const MAX_SERVER_WAIT_SECONDS = 30;
/** How soon a heartbeat that failed (no answer, a 5xx, a timeout) is tried again. */
const RETRY_BEAT_MS = 250;
const base = (ns) => `/v1/operations/${(0, keys_js_1.segment)(ns, "namespace")}`;
class Operations {
    #http;
    /** @internal */
    constructor(http) {
        this.#http = http;
    }
    /**
     * Begin an operation: `{ status: "started", id, token, lease_expires_at, fence }` (do the work,
     * then `complete` or `release`) or `{ status: "completed", id, result, … }` (it was done before).
     * Throws `InProgressError` while another caller holds the key, `MismatchError` for another `request`.
     * Every attempt carries the same `client_token`, so a retry after a lost answer gets its lease back.
     */
    async begin(ns, options) {
        const body = (0, keys_js_1.keyBody)(options);
        if (options.request !== undefined)
            body["request"] = options.request;
        if (options.leaseSeconds !== undefined)
            body["lease_seconds"] = options.leaseSeconds;
        if (options.ttlSeconds !== undefined)
            body["ttl_seconds"] = options.ttlSeconds;
        if (options.waitSeconds !== undefined)
            body["wait_seconds"] = options.waitSeconds;
        body["client_token"] = (0, client_token_js_1.clientTokenOf)(options.clientToken);
        const res = await this.#http.call("POST", `${base(ns)}/begin`, {
            body,
            extraTimeoutMs: (options.waitSeconds ?? 0) * 1000,
            shape: http_js_1.BEGIN,
        });
        return res?.body;
    }
    /**
     * Store the result (any JSON ≤ 64 KiB) and finish: waiters get it, later begins get it.
     * Throws `LeaseLostError` when the token no longer holds the key. A second complete with the same
     * token returns the stored result unchanged.
     */
    async complete(ns, id, token, result) {
        const body = { token };
        if (result !== undefined)
            body["result"] = result;
        const res = await this.#http.call("POST", `${base(ns)}/${(0, keys_js_1.segment)(id, "id")}/complete`, { body, shape: http_js_1.COMPLETED });
        return res?.body;
    }
    /** The work failed: free the key so it may run again. Throws `LeaseLostError` if not held. */
    async release(ns, id, token) {
        await this.#http.call("POST", `${base(ns)}/${(0, keys_js_1.segment)(id, "id")}/release`, { body: { token } });
    }
    /** Heartbeat: hold the key for `leaseSeconds` more from now. Throws `LeaseLostError` if not held. */
    async extend(ns, id, token, leaseSeconds) {
        const res = await this.#http.call("POST", `${base(ns)}/${(0, keys_js_1.segment)(id, "id")}/extend`, {
            body: { token, lease_seconds: leaseSeconds },
            shape: http_js_1.EXTENDED,
        });
        return res?.body;
    }
    /** The operation by key or id (`in_progress` or `completed`), or `null` when absent. */
    async get(ns, ref) {
        const res = await this.#http.call("GET", `${base(ns)}/${(0, keys_js_1.segment)((0, keys_js_1.idOf)(ref), "id")}`, { nullOn404: true, shape: http_js_1.OPERATION });
        return res === null ? null : res.body;
    }
    /** Forget a completed result: `true`, or `false` when absent. A held key: `InProgressError`. */
    async delete(ns, ref) {
        const res = await this.#http.call("DELETE", `${base(ns)}/${(0, keys_js_1.segment)((0, keys_js_1.idOf)(ref), "id")}`, { nullOn404: true });
        return res !== null;
    }
    /**
     * Do `fn` once per key. Begins the operation; if this call holds the key, runs `fn`, stores its
     * JSON result with `complete` and returns it; if the work was completed before, returns the stored
     * result without calling `fn`; if another caller is running it, waits (up to `waitSeconds`) for
     * its result. If `fn` throws, the key is released (so a retry runs it again) and the error is
     * re-thrown. While `fn` runs the lease is extended every third of it (see `#hold`).
     *
     * Every begin this `run` sends (its retries, and its begins again while it waits for another
     * holder) carries one `client_token`, so a begin that took the key but whose answer was lost still
     * hands this call the lease. The value returned is the result as stored (JSON), the same on the
     * first call and on every later one. Throws `InProgressError` when the wait runs out, `MismatchError` when the key was
     * used with another `request`, `LeaseLostError` when the lease was lost before `complete`.
     */
    async run(ns, options, fn) {
        const leaseSeconds = options.leaseSeconds ?? DEFAULT_LEASE_SECONDS;
        const waitMs = (options.waitSeconds ?? DEFAULT_RUN_WAIT_SECONDS) * 1000;
        const deadline = Date.now() + waitMs;
        // One token for the whole run: each begin below is the same request, asked again.
        const clientToken = (0, client_token_js_1.clientTokenOf)(options.clientToken);
        for (let attempt = 0;; attempt++) {
            const remaining = deadline - Date.now();
            const serverWait = Math.max(0, Math.min(MAX_SERVER_WAIT_SECONDS, Math.floor(remaining / 1000)));
            const started = Date.now();
            let begun;
            try {
                begun = await this.begin(ns, { ...options, leaseSeconds, waitSeconds: serverWait, clientToken });
            }
            catch (err) {
                if (!(err instanceof errors_js_1.InProgressError))
                    throw err;
                const left = deadline - Date.now();
                if (left <= 0)
                    throw err;
                // The server already waited `serverWait` s when it could; otherwise honour Retry-After.
                if (Date.now() - started < serverWait * 1000) {
                    const after = err.retryAfterSeconds !== undefined ? err.retryAfterSeconds * 1000 : this.#http.backoff(attempt);
                    await this.#http.sleep(Math.min(left, Math.max(after, 10)));
                }
                continue;
            }
            if (begun.status === "completed")
                return ("result" in begun ? begun.result : null);
            // The lease counts from before this begin was sent, as the server counts it: a begin held
            // up on the way (or retried) has used part of it.
            return this.#hold(ns, begun, { leaseSeconds, leasedAt: started, heartbeatMs: options.heartbeatMs }, fn);
        }
    }
    /**
     * Runs `fn` while holding `op`'s key, then completes (or releases). The heartbeat follows the
     * gateway's rule: the lease is counted from before the begin was sent (`lease.leasedAt`); it is
     * extended every third of the lease, each extension's lease counted again from before that
     * extend was sent; an extension that fails (no answer, a 5xx, a timeout: one attempt each, its
     * timeout at most a third of the lease) is tried again 250 ms later, again and again, until one
     * gets through — past the lease's end too, since a lease that ran out is still this caller's
     * until another begin takes the key. A `lease-lost` answer stops the beats and aborts `signal`.
     */
    async #hold(ns, op, lease, fn) {
        const controller = new AbortController();
        const leaseMs = lease.leaseSeconds * 1000;
        const every = Math.max(10, lease.heartbeatMs ?? leaseMs / 3);
        const attemptMs = Math.min(this.#http.timeoutMs, leaseMs / 3);
        let stopped = false;
        let lost = false;
        let timer;
        let wake;
        // Resolves at `at`, or at once when stopped.
        const until = (at) => new Promise((resolve) => {
            wake = resolve;
            timer = setTimeout(resolve, Math.max(0, at - Date.now()));
        });
        const beats = async () => {
            let beatAt = lease.leasedAt + every;
            for (;;) {
                await until(beatAt);
                if (stopped)
                    return;
                const askedAt = Date.now();
                try {
                    await this.#extendOnce(ns, op, lease.leaseSeconds, attemptMs);
                    beatAt = askedAt + every;
                }
                catch (err) {
                    if (err instanceof errors_js_1.LeaseLostError) {
                        lost = true;
                        controller.abort(err);
                        return;
                    }
                    // Soon again, not a whole interval later: the lease was not extended.
                    beatAt = Date.now() + RETRY_BEAT_MS;
                }
                if (stopped)
                    return;
            }
        };
        const beating = beats();
        const stop = async () => {
            stopped = true;
            if (timer !== undefined)
                clearTimeout(timer);
            wake?.();
            await beating;
        };
        let value;
        try {
            value = await fn({ id: op.id, signal: controller.signal });
        }
        catch (err) {
            await stop();
            if (!lost)
                await this.release(ns, op.id, op.token).catch(() => undefined);
            throw err;
        }
        await stop();
        let done;
        try {
            done = await this.complete(ns, op.id, op.token, value);
        }
        catch (err) {
            // Not stored (too large, not JSON, no answer…): free the key for a retry, unless it is gone.
            if (!(err instanceof errors_js_1.LeaseLostError))
                await this.release(ns, op.id, op.token).catch(() => undefined);
            throw err;
        }
        if (done && typeof done === "object" && "result" in done)
            return done.result;
        return (value === undefined ? null : JSON.parse(JSON.stringify(value)));
    }
    /**
     * One heartbeat: a single attempt (no retries, no `Retry-After` waits: the heartbeat tries again
     * on its own pace) whose timeout is at most a third of the lease.
     */
    async #extendOnce(ns, op, leaseSeconds, timeoutMs) {
        await this.#http.call("POST", `${base(ns)}/${(0, keys_js_1.segment)(op.id, "id")}/extend`, {
            body: { token: op.token, lease_seconds: leaseSeconds },
            shape: http_js_1.EXTENDED,
            retries: 0,
            timeoutMs: Math.max(1, timeoutMs),
        });
    }
}
exports.Operations = Operations;

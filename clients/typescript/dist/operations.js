/** `idem.operations`: docs/reference/api.md#operations, and `run`, which does a piece of work once. */
import { clientTokenOf } from "./client-token.js";
import { InProgressError, LeaseLostError } from "./errors.js";
import { idOf, keyBody, segment } from "./keys.js";
const DEFAULT_LEASE_SECONDS = 60;
const DEFAULT_RUN_WAIT_SECONDS = 60;
const MAX_SERVER_WAIT_SECONDS = 30;
const base = (ns) => `/v1/operations/${segment(ns, "namespace")}`;
export class Operations {
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
        const body = keyBody(options);
        if (options.request !== undefined)
            body["request"] = options.request;
        if (options.leaseSeconds !== undefined)
            body["lease_seconds"] = options.leaseSeconds;
        if (options.ttlSeconds !== undefined)
            body["ttl_seconds"] = options.ttlSeconds;
        if (options.waitSeconds !== undefined)
            body["wait_seconds"] = options.waitSeconds;
        body["client_token"] = clientTokenOf(options.clientToken);
        const res = await this.#http.call("POST", `${base(ns)}/begin`, {
            body,
            extraTimeoutMs: (options.waitSeconds ?? 0) * 1000,
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
        const res = await this.#http.call("POST", `${base(ns)}/${segment(id, "id")}/complete`, { body });
        return res?.body;
    }
    /** The work failed: free the key so it may run again. Throws `LeaseLostError` if not held. */
    async release(ns, id, token) {
        await this.#http.call("POST", `${base(ns)}/${segment(id, "id")}/release`, { body: { token } });
    }
    /** Heartbeat: hold the key for `leaseSeconds` more from now. Throws `LeaseLostError` if not held. */
    async extend(ns, id, token, leaseSeconds) {
        const res = await this.#http.call("POST", `${base(ns)}/${segment(id, "id")}/extend`, {
            body: { token, lease_seconds: leaseSeconds },
        });
        return res?.body;
    }
    /** The operation by key or id (`in_progress` or `completed`), or `null` when absent. */
    async get(ns, ref) {
        const res = await this.#http.call("GET", `${base(ns)}/${segment(idOf(ref), "id")}`, { nullOn404: true });
        return res === null ? null : res.body;
    }
    /** Forget a completed result: `true`, or `false` when absent. A held key: `InProgressError`. */
    async delete(ns, ref) {
        const res = await this.#http.call("DELETE", `${base(ns)}/${segment(idOf(ref), "id")}`, { nullOn404: true });
        return res !== null;
    }
    /**
     * Do `fn` once per key. Begins the operation; if this call holds the key, runs `fn`, stores its
     * JSON result with `complete` and returns it; if the work was completed before, returns the stored
     * result without calling `fn`; if another caller is running it, waits (up to `waitSeconds`) for
     * its result. If `fn` throws, the key is released (so a retry runs it again) and the error is
     * re-thrown. While `fn` runs the lease is extended every half lease.
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
        const clientToken = clientTokenOf(options.clientToken);
        for (let attempt = 0;; attempt++) {
            const remaining = deadline - Date.now();
            const serverWait = Math.max(0, Math.min(MAX_SERVER_WAIT_SECONDS, Math.floor(remaining / 1000)));
            const started = Date.now();
            let begun;
            try {
                begun = await this.begin(ns, { ...options, leaseSeconds, waitSeconds: serverWait, clientToken });
            }
            catch (err) {
                if (!(err instanceof InProgressError))
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
            return this.#hold(ns, begun, leaseSeconds, options.heartbeatMs, fn);
        }
    }
    async #hold(ns, op, leaseSeconds, heartbeatMs, fn) {
        const controller = new AbortController();
        const interval = heartbeatMs ?? (leaseSeconds * 1000) / 2;
        let stopped = false;
        let lost = false;
        let timer;
        let beating = Promise.resolve();
        const beat = async () => {
            try {
                await this.extend(ns, op.id, op.token, leaseSeconds);
            }
            catch (err) {
                if (err instanceof LeaseLostError) {
                    lost = true;
                    controller.abort(err);
                    return;
                }
                // A transient failure (after the transport's own retries): try again next beat.
            }
            schedule();
        };
        const schedule = () => {
            if (stopped)
                return;
            timer = setTimeout(() => {
                if (!stopped)
                    beating = beat();
            }, interval);
        };
        const stop = async () => {
            stopped = true;
            if (timer !== undefined)
                clearTimeout(timer);
            await beating;
        };
        schedule();
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
            if (!(err instanceof LeaseLostError))
                await this.release(ns, op.id, op.token).catch(() => undefined);
            throw err;
        }
        if (done && typeof done === "object" && "result" in done)
            return done.result;
        return (value === undefined ? null : JSON.parse(JSON.stringify(value)));
    }
}

/** `idem.operations`: docs/reference/api.md#operations, and `run`, which does a piece of work once. */

import { clientTokenOf } from "./client-token.js";
import { InProgressError, LeaseLostError } from "./errors.js";
import { BEGIN, COMPLETED, EXTENDED, OPERATION, type Transport } from "./http.js";
import { idOf, keyBody, segment, type KeyRef } from "./keys.js";

/** `begin`'s answer when the caller now holds the key and must do the work. */
export interface StartedOperation {
  status: "started";
  id: string;
  /** Proves the hold to `complete`, `release` and `extend`. Keep it private. */
  token: string;
  lease_expires_at: string;
  /**
   * The lease's fencing number: greater for every later holder of this key. Pass it along with the
   * work's writes (a column, a header) so that what they write to can refuse a write carrying a
   * smaller fence than one it has seen: a holder paused past its lease, whose key another caller
   * has taken since, is then refused instead of overwriting the newer holder's work.
   */
  fence: number;
}

/** A completed operation: the stored result. */
export interface CompletedOperation<R = unknown> {
  status: "completed";
  id: string;
  result: R;
  completed_at: string;
  expires_at: string | null;
  [member: string]: unknown;
}

export type BeginResult<R = unknown> = StartedOperation | CompletedOperation<R>;

/** `GET /v1/operations/{ns}/{id}`: the record (never the token). */
export interface OperationRecord<R = unknown> {
  status: "in_progress" | "completed";
  id: string;
  result?: R;
  [member: string]: unknown;
}

export type BeginOptions = KeyRef & {
  /** Any JSON describing the work; a later begin with another `request` gets a `MismatchError`. */
  request?: unknown;
  /** How long the hold lasts without an `extend`, 1–3600 (server default 60). */
  leaseSeconds?: number;
  /** How long the result is kept after completion (server default: the namespace's, else 24 h). */
  ttlSeconds?: number;
  /** Server-side wait, 0–30 s, for a holder to finish before answering 409 (default 0). */
  waitSeconds?: number;
  /**
   * Sent as `client_token` on every attempt of this begin (default: a fresh random UUID per call).
   * A retry of a begin that took the key, its answer lost, gets `started` with the same lease
   * `token` and `fence` instead of a 409. Give your own (1–255 printable ASCII) to carry it across
   * a restart; never give one token to two different pieces of work.
   */
  clientToken?: string;
};

export type RunOptions = KeyRef & {
  request?: unknown;
  /**
   * The lease taken by `run`, 1–3600 (default 60); extended every third of it while `fn` runs,
   * counted from before the begin (then each extension) was sent.
   */
  leaseSeconds?: number;
  ttlSeconds?: number;
  /**
   * How long, in total, to wait for another holder of the key to finish before throwing
   * `InProgressError` (default 60). Waiting uses the server's `wait_seconds` (up to 30 s per
   * call, woken as soon as the holder completes) and `Retry-After` between calls.
   */
  waitSeconds?: number;
  /** The heartbeat interval in ms (default: a third of the lease). Mostly for tests. */
  heartbeatMs?: number;
  /** As `BeginOptions.clientToken`: one token for every begin this `run` sends (default: a fresh one). */
  clientToken?: string;
};

/** What `run` passes to the function. */
export interface RunContext {
  /** The operation's id. */
  id: string;
  /**
   * Aborted when the lease is lost (a heartbeat was answered `lease-lost`: another caller took the
   * key): stop if you can. Its `reason` is the `LeaseLostError`.
   */
  signal: AbortSignal;
}

const DEFAULT_LEASE_SECONDS = 60;
const DEFAULT_RUN_WAIT_SECONDS = 60;
const MAX_SERVER_WAIT_SECONDS = 30;
/** How soon a heartbeat that failed (no answer, a 5xx, a timeout) is tried again. */
const RETRY_BEAT_MS = 250;

const base = (ns: string): string => `/v1/operations/${segment(ns, "namespace")}`;

export class Operations {
  readonly #http: Transport;

  /** @internal */
  constructor(http: Transport) {
    this.#http = http;
  }

  /**
   * Begin an operation: `{ status: "started", id, token, lease_expires_at, fence }` (do the work,
   * then `complete` or `release`) or `{ status: "completed", id, result, … }` (it was done before).
   * Throws `InProgressError` while another caller holds the key, `MismatchError` for another `request`.
   * Every attempt carries the same `client_token`, so a retry after a lost answer gets its lease back.
   */
  async begin<R = unknown>(ns: string, options: BeginOptions): Promise<BeginResult<R>> {
    const body: Record<string, unknown> = keyBody(options);
    if (options.request !== undefined) body["request"] = options.request;
    if (options.leaseSeconds !== undefined) body["lease_seconds"] = options.leaseSeconds;
    if (options.ttlSeconds !== undefined) body["ttl_seconds"] = options.ttlSeconds;
    if (options.waitSeconds !== undefined) body["wait_seconds"] = options.waitSeconds;
    body["client_token"] = clientTokenOf(options.clientToken);
    const res = await this.#http.call("POST", `${base(ns)}/begin`, {
      body,
      extraTimeoutMs: (options.waitSeconds ?? 0) * 1000,
      shape: BEGIN,
    });
    return res?.body as BeginResult<R>;
  }

  /**
   * Store the result (any JSON ≤ 64 KiB) and finish: waiters get it, later begins get it.
   * Throws `LeaseLostError` when the token no longer holds the key. A second complete with the same
   * token returns the stored result unchanged.
   */
  async complete<R = unknown>(ns: string, id: string, token: string, result?: R): Promise<CompletedOperation<R>> {
    const body: Record<string, unknown> = { token };
    if (result !== undefined) body["result"] = result;
    const res = await this.#http.call("POST", `${base(ns)}/${segment(id, "id")}/complete`, { body, shape: COMPLETED });
    return res?.body as CompletedOperation<R>;
  }

  /** The work failed: free the key so it may run again. Throws `LeaseLostError` if not held. */
  async release(ns: string, id: string, token: string): Promise<void> {
    await this.#http.call("POST", `${base(ns)}/${segment(id, "id")}/release`, { body: { token } });
  }

  /** Heartbeat: hold the key for `leaseSeconds` more from now. Throws `LeaseLostError` if not held. */
  async extend(ns: string, id: string, token: string, leaseSeconds: number): Promise<{ lease_expires_at: string }> {
    const res = await this.#http.call("POST", `${base(ns)}/${segment(id, "id")}/extend`, {
      body: { token, lease_seconds: leaseSeconds },
      shape: EXTENDED,
    });
    return res?.body as { lease_expires_at: string };
  }

  /** The operation by key or id (`in_progress` or `completed`), or `null` when absent. */
  async get<R = unknown>(ns: string, ref: KeyRef | string): Promise<OperationRecord<R> | null> {
    const res = await this.#http.call("GET", `${base(ns)}/${segment(idOf(ref), "id")}`, { nullOn404: true, shape: OPERATION });
    return res === null ? null : (res.body as OperationRecord<R>);
  }

  /** Forget a completed result: `true`, or `false` when absent. A held key: `InProgressError`. */
  async delete(ns: string, ref: KeyRef | string): Promise<boolean> {
    const res = await this.#http.call("DELETE", `${base(ns)}/${segment(idOf(ref), "id")}`, { nullOn404: true });
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
  async run<T>(ns: string, options: RunOptions, fn: (context: RunContext) => T | Promise<T>): Promise<T> {
    const leaseSeconds = options.leaseSeconds ?? DEFAULT_LEASE_SECONDS;
    const waitMs = (options.waitSeconds ?? DEFAULT_RUN_WAIT_SECONDS) * 1000;
    const deadline = Date.now() + waitMs;
    // One token for the whole run: each begin below is the same request, asked again.
    const clientToken = clientTokenOf(options.clientToken);

    for (let attempt = 0; ; attempt++) {
      const remaining = deadline - Date.now();
      const serverWait = Math.max(0, Math.min(MAX_SERVER_WAIT_SECONDS, Math.floor(remaining / 1000)));
      const started = Date.now();
      let begun: BeginResult<T>;
      try {
        begun = await this.begin<T>(ns, { ...options, leaseSeconds, waitSeconds: serverWait, clientToken });
      } catch (err) {
        if (!(err instanceof InProgressError)) throw err;
        const left = deadline - Date.now();
        if (left <= 0) throw err;
        // The server already waited `serverWait` s when it could; otherwise honour Retry-After.
        if (Date.now() - started < serverWait * 1000) {
          const after = err.retryAfterSeconds !== undefined ? err.retryAfterSeconds * 1000 : this.#http.backoff(attempt);
          await this.#http.sleep(Math.min(left, Math.max(after, 10)));
        }
        continue;
      }
      if (begun.status === "completed") return ("result" in begun ? begun.result : null) as T;
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
  async #hold<T>(
    ns: string,
    op: StartedOperation,
    lease: { leaseSeconds: number; leasedAt: number; heartbeatMs: number | undefined },
    fn: (context: RunContext) => T | Promise<T>,
  ): Promise<T> {
    const controller = new AbortController();
    const leaseMs = lease.leaseSeconds * 1000;
    const every = Math.max(10, lease.heartbeatMs ?? leaseMs / 3);
    const attemptMs = Math.min(this.#http.timeoutMs, leaseMs / 3);
    let stopped = false;
    let lost = false;
    let timer: ReturnType<typeof setTimeout> | undefined;
    let wake: (() => void) | undefined;

    // Resolves at `at`, or at once when stopped.
    const until = (at: number): Promise<void> =>
      new Promise((resolve) => {
        wake = resolve;
        timer = setTimeout(resolve, Math.max(0, at - Date.now()));
      });
    const beats = async (): Promise<void> => {
      let beatAt = lease.leasedAt + every;
      for (;;) {
        await until(beatAt);
        if (stopped) return;
        const askedAt = Date.now();
        try {
          await this.#extendOnce(ns, op, lease.leaseSeconds, attemptMs);
          beatAt = askedAt + every;
        } catch (err) {
          if (err instanceof LeaseLostError) {
            lost = true;
            controller.abort(err);
            return;
          }
          // Soon again, not a whole interval later: the lease was not extended.
          beatAt = Date.now() + RETRY_BEAT_MS;
        }
        if (stopped) return;
      }
    };
    const beating = beats();
    const stop = async (): Promise<void> => {
      stopped = true;
      if (timer !== undefined) clearTimeout(timer);
      wake?.();
      await beating;
    };

    let value: T;
    try {
      value = await fn({ id: op.id, signal: controller.signal });
    } catch (err) {
      await stop();
      if (!lost) await this.release(ns, op.id, op.token).catch(() => undefined);
      throw err;
    }
    await stop();

    let done: CompletedOperation<T>;
    try {
      done = await this.complete<T>(ns, op.id, op.token, value);
    } catch (err) {
      // Not stored (too large, not JSON, no answer…): free the key for a retry, unless it is gone.
      if (!(err instanceof LeaseLostError)) await this.release(ns, op.id, op.token).catch(() => undefined);
      throw err;
    }
    if (done && typeof done === "object" && "result" in done) return done.result;
    return (value === undefined ? null : JSON.parse(JSON.stringify(value))) as T;
  }

  /**
   * One heartbeat: a single attempt (no retries, no `Retry-After` waits: the heartbeat tries again
   * on its own pace) whose timeout is at most a third of the lease.
   */
  async #extendOnce(ns: string, op: StartedOperation, leaseSeconds: number, timeoutMs: number): Promise<void> {
    await this.#http.call("POST", `${base(ns)}/${segment(op.id, "id")}/extend`, {
      body: { token: op.token, lease_seconds: leaseSeconds },
      shape: EXTENDED,
      retries: 0,
      timeoutMs: Math.max(1, timeoutMs),
    });
  }
}

/** `idem.operations`: docs/reference/api.md#operations, and `run`, which does a piece of work once. */
import { type Transport } from "./http.js";
import { type KeyRef } from "./keys.js";
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
export declare class Operations {
    #private;
    /** @internal */
    constructor(http: Transport);
    /**
     * Begin an operation: `{ status: "started", id, token, lease_expires_at, fence }` (do the work,
     * then `complete` or `release`) or `{ status: "completed", id, result, … }` (it was done before).
     * Throws `InProgressError` while another caller holds the key, `MismatchError` for another `request`.
     * Every attempt carries the same `client_token`, so a retry after a lost answer gets its lease back.
     */
    begin<R = unknown>(ns: string, options: BeginOptions): Promise<BeginResult<R>>;
    /**
     * Store the result (any JSON ≤ 64 KiB) and finish: waiters get it, later begins get it.
     * Throws `LeaseLostError` when the token no longer holds the key. A second complete with the same
     * token returns the stored result unchanged.
     */
    complete<R = unknown>(ns: string, id: string, token: string, result?: R): Promise<CompletedOperation<R>>;
    /** The work failed: free the key so it may run again. Throws `LeaseLostError` if not held. */
    release(ns: string, id: string, token: string): Promise<void>;
    /** Heartbeat: hold the key for `leaseSeconds` more from now. Throws `LeaseLostError` if not held. */
    extend(ns: string, id: string, token: string, leaseSeconds: number): Promise<{
        lease_expires_at: string;
    }>;
    /** The operation by key or id (`in_progress` or `completed`), or `null` when absent. */
    get<R = unknown>(ns: string, ref: KeyRef | string): Promise<OperationRecord<R> | null>;
    /** Forget a completed result: `true`, or `false` when absent. A held key: `InProgressError`. */
    delete(ns: string, ref: KeyRef | string): Promise<boolean>;
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
    run<T>(ns: string, options: RunOptions, fn: (context: RunContext) => T | Promise<T>): Promise<T>;
}

/**
 * The transport: one JSON call to idem with a per-attempt timeout, retries with exponential
 * backoff and jitter on connection errors and 502/503/504 (honouring `Retry-After`), and
 * problem+json answers turned into errors.
 */
/** What the client needs of a `Response`; the standard one fits. */
export interface FetchResponseLike {
    readonly status: number;
    readonly statusText?: string;
    readonly headers: {
        get(name: string): string | null;
    };
    text(): Promise<string>;
}
/** What the client passes to `fetch`. */
export interface FetchInit {
    method: string;
    headers: Record<string, string>;
    body?: string;
    signal: AbortSignal;
}
/** The standard `fetch` (Node 18+, Deno, Bun, browsers) or anything shaped like it. */
export type FetchLike = (url: string, init: FetchInit) => Promise<FetchResponseLike>;
export interface IdemOptions {
    /**
     * The idem server, e.g. `http://127.0.0.1:7070` (a base path is kept: `https://h/idem`).
     * Default: the `IDEM_URL` environment variable, else {@link DEFAULT_URL}.
     */
    url?: string | undefined;
    /**
     * Sent as `Authorization: Bearer <token>` when set. Never put in a URL or an error message.
     * Default (`undefined`): the `IDEM_TOKEN` environment variable, if set; `null` or `""`: no token.
     */
    token?: string | null | undefined;
    /** Time limit of each HTTP attempt, in milliseconds (default 30,000). */
    timeoutMs?: number | undefined;
    /** Retries after the first attempt on connection errors, timeouts and 502/503/504 (default 3). */
    retries?: number | undefined;
    /** The `fetch` to use (default the global one). */
    fetch?: FetchLike | undefined;
    /** Backoff before retry n is about `retryBaseDelayMs * 2^n`, with jitter (default 200). */
    retryBaseDelayMs?: number | undefined;
    /**
     * The longest wait between attempts (default 30,000). A `Retry-After` longer than this is not
     * waited for: the error is thrown at once, with `retryAfterSeconds` set.
     */
    retryMaxDelayMs?: number | undefined;
    /** How to wait; injectable so tests run fast (default `setTimeout`). */
    sleep?: ((ms: number) => Promise<void>) | undefined;
    /** Source of jitter in [0, 1) (default `Math.random`). */
    random?: (() => number) | undefined;
}
export interface CallOptions {
    body?: unknown;
    /** Query parameters; an array is the parameter repeated, in order (`prefix=a&prefix=b`). */
    query?: Record<string, string | number | readonly string[] | undefined>;
    /** Answer `null` instead of throwing on a 404. */
    nullOn404?: boolean;
    /** Added to the per-attempt timeout (for calls the server may hold open, like a waiting begin). */
    extraTimeoutMs?: number;
    /** This call's per-attempt timeout instead of the client's `timeoutMs` (a heartbeat's, bounded by its lease). */
    timeoutMs?: number;
    /** This call's retries instead of the client's (a heartbeat retries on a pace of its own). */
    retries?: number;
    /**
     * What a 2xx answer's body must have: without it the answer is not idem's, and the call throws
     * the not-idem error naming the URL instead of returning it.
     */
    shape?: Shape;
}
export interface CallResult {
    status: number;
    body: unknown;
}
/** Where the client looks for idem when neither `url` nor `IDEM_URL` says. */
export declare const DEFAULT_URL = "http://127.0.0.1:7070";
/**
 * An environment variable, where the runtime has them: Node's and Bun's `process.env`, Deno's
 * `Deno.env` (undefined without `--allow-env`), none in a browser.
 */
export declare function envVar(name: string): string | undefined;
export declare const defaultSleep: (ms: number) => Promise<void>;
/** `Retry-After` as seconds: delta-seconds or an HTTP date. */
export declare function parseRetryAfter(value: string | null, nowMs?: number): number | undefined;
export declare class Transport {
    #private;
    readonly sleep: (ms: number) => Promise<void>;
    readonly random: () => number;
    constructor(options: IdemOptions);
    /** The wait before retry `attempt` (0-based): half fixed, half random, capped. */
    backoff(attempt: number): number;
    get maxDelayMs(): number;
    /** The per-attempt timeout, in ms. */
    get timeoutMs(): number;
    call(method: string, path: string, options?: CallOptions): Promise<CallResult | null>;
}
/** A shape a 2xx body must have: `fits` tells, `expected` says it in the error. */
export interface Shape {
    readonly expected: string;
    fits(body: unknown): boolean;
}
/** A claim's answer: `claimed` must be a boolean (missing is not `false`). */
export declare const CLAIM: Shape;
export declare const CLAIM_BATCH: Shape;
export declare const LOOKUP: Shape;
export declare const EXISTS: Shape;
export declare const CLAIM_RECORD: Shape;
export declare const CLAIM_PAGE: Shape;
export declare const DELETED: Shape;
/** A begin's answer: started with its lease token, or completed. */
export declare const BEGIN: Shape;
export declare const COMPLETED: Shape;
export declare const EXTENDED: Shape;
export declare const OPERATION: Shape;
export declare const RECEIPT_PAGE: Shape;
export declare const RECEIPT: Shape;
export declare const RECEIPT_ACK: Shape;
export declare const MATCHING: Shape;
export declare const QUEUED: Shape;

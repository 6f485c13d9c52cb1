/** `idem.claims`: the Claims API (docs/reference/api.md#claims). */
import { type Transport } from "./http.js";
import { type KeyRef } from "./keys.js";
/** A stored claim, with the fields as the API names them. */
export interface ClaimRecord<D = unknown> {
    namespace: string;
    /** Lowercase hex SHA-256 of the parts joined by NUL (see `claimId`). */
    id: string;
    parts: string[];
    /** The claim's `data`; `null` when none was given. */
    data: D | null;
    /** RFC 3339 UTC. */
    created_at: string;
    /** RFC 3339 UTC; `null`: never expires. */
    expires_at: string | null;
}
/** One claim to make: a key, and optionally `data` (any JSON ≤ 64 KiB) and a TTL. */
export type ClaimInput<D = unknown> = KeyRef & {
    data?: D;
    /** Seconds until the claim expires (default: the namespace's `default_ttl`, else never). */
    ttlSeconds?: number;
};
/** What `claim` takes: one claim, and optionally the call's own client token. */
export type ClaimOptions<D = unknown> = ClaimInput<D> & {
    /**
     * Sent as `client_token` on the first attempt and on every retry of this call (default: a fresh
     * random UUID per call). A retry of a claim that was stored but whose answer was lost is told
     * `claimed: true` again. Give your own (1–255 printable ASCII) to carry it further than this
     * call's retries, e.g. across a restart; never give one token to two different claims.
     */
    clientToken?: string;
};
/** What `claimBatch` takes besides the items. */
export interface BatchOptions {
    /** As `ClaimOptions.clientToken`, for the whole batch: the server derives each item's from it. */
    clientToken?: string;
}
export interface ClaimResult<D = unknown> {
    /** `true`: this call created the claim; `false`: it existed, and `record` is the existing one, unchanged. */
    claimed: boolean;
    record: ClaimRecord<D>;
}
export interface LookupResult<D = unknown> {
    id: string;
    exists: boolean;
    /** Present when `exists`. */
    record?: ClaimRecord<D>;
}
/** For `exists`: a prefix of parts, or one exact key. */
export type ExistsQuery = {
    prefix: readonly string[];
} | KeyRef;
/** What `list` takes: a prefix of 1 to 16 parts, and optionally the page's size and start. */
export interface ClaimListOptions {
    /** The claims whose parts begin with these (`["scenario-1"]`, `["scenario-1", "user-3"]`). */
    prefix: readonly string[];
    /** 1 to 1000 (server default 100). */
    limit?: number | undefined;
    /** The `next` of the previous page. */
    after?: string | null | undefined;
}
/** What `iterate` takes: the prefix, and how many claims to fetch a call. */
export interface ClaimIterateOptions {
    prefix: readonly string[];
    /** Claims fetched a call, 1 to 1000 (server default 100). */
    pageSize?: number | undefined;
}
/** A page of claims, in the order of their parts. */
export interface ClaimPage<D = unknown> {
    items: ClaimRecord<D>[];
    /** Give it as `after` for the next page; `null` on the last page. */
    next: string | null;
}
export declare class Claims {
    #private;
    /** @internal */
    constructor(http: Transport);
    /**
     * Claim a key: `{ claimed: true, record }` when this call created it, `{ claimed: false, record }`
     * (the existing record, unchanged) when it already existed. Every attempt of the call carries the
     * same `client_token`, so a retry after a lost answer is still told `claimed: true`.
     */
    claim<D = unknown>(ns: string, item: ClaimOptions<D>): Promise<ClaimResult<D>>;
    /**
     * Claim 1 to 10,000 keys in one call; the results are in request order, and of two equal keys in
     * one batch the first wins. A batch with one bad item is refused whole (400 naming `items[i]…`).
     * One `client_token` for the whole call: a retry after a lost answer is told each item as it was
     * first decided.
     */
    claimBatch<D = unknown>(ns: string, items: readonly ClaimInput<D>[], options?: BatchOptions): Promise<ClaimResult<D>[]>;
    /** Look up 1 to 10,000 keys; `[{ id, exists, record? }]` in request order. */
    lookup<D = unknown>(ns: string, keys: readonly KeyRef[]): Promise<LookupResult<D>[]>;
    /**
     * `{ prefix: [...] }`: is there a live claim whose parts begin with these? (An index range on the
     * server, not a scan.) `{ key }` / `{ parts }`: does this exact key have a live claim?
     */
    exists(ns: string, query: ExistsQuery): Promise<boolean>;
    /**
     * One page of the live claims whose parts begin with `prefix`, in the order of their parts:
     * `{ items, next }`. Pass `next` as `after` for the following page; it is `null` on the last.
     */
    list<D = unknown>(ns: string, options: ClaimListOptions): Promise<ClaimPage<D>>;
    /** Every live claim whose parts begin with `prefix`, in the order of their parts, page after page. */
    iterate<D = unknown>(ns: string, options: ClaimIterateOptions): AsyncGenerator<ClaimRecord<D>, void, undefined>;
    /**
     * Delete every live claim whose parts begin with `prefix` (at least one part); answers how many
     * were deleted. The server deletes up to 100,000 a call: this calls again while it says more remain.
     */
    deletePrefix(ns: string, options: {
        prefix: readonly string[];
    }): Promise<number>;
    /** The live claim for a key (`{ key }`, `{ parts }`) or an id, or `null` when there is none. */
    get<D = unknown>(ns: string, ref: KeyRef | string): Promise<ClaimRecord<D> | null>;
    /** Delete a claim by key or id: `true` when it was deleted, `false` when there was none. */
    delete(ns: string, ref: KeyRef | string): Promise<boolean>;
}

/** `idem.claims`: the Claims API (docs/reference/api.md#claims). */
import type { Transport } from "./http.js";
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
export declare class Claims {
    #private;
    /** @internal */
    constructor(http: Transport);
    /**
     * Claim a key: `{ claimed: true, record }` when this call created it, `{ claimed: false, record }`
     * (the existing record, unchanged) when it already existed.
     */
    claim<D = unknown>(ns: string, item: ClaimInput<D>): Promise<ClaimResult<D>>;
    /**
     * Claim 1 to 10,000 keys in one call; the results are in request order, and of two equal keys in
     * one batch the first wins. A batch with one bad item is refused whole (400 naming `items[i]…`).
     */
    claimBatch<D = unknown>(ns: string, items: readonly ClaimInput<D>[]): Promise<ClaimResult<D>[]>;
    /** Look up 1 to 10,000 keys; `[{ id, exists, record? }]` in request order. */
    lookup<D = unknown>(ns: string, keys: readonly KeyRef[]): Promise<LookupResult<D>[]>;
    /**
     * `{ prefix: [...] }`: is there a live claim whose parts begin with these? (An index range on the
     * server, not a scan.) `{ key }` / `{ parts }`: does this exact key have a live claim?
     */
    exists(ns: string, query: ExistsQuery): Promise<boolean>;
    /** The live claim for a key (`{ key }`, `{ parts }`) or an id, or `null` when there is none. */
    get<D = unknown>(ns: string, ref: KeyRef | string): Promise<ClaimRecord<D> | null>;
    /** Delete a claim by key or id: `true` when it was deleted, `false` when there was none. */
    delete(ns: string, ref: KeyRef | string): Promise<boolean>;
}

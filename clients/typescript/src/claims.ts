/** `idem.claims`: the Claims API (docs/reference/api.md#claims). */

import { clientTokenOf } from "./client-token.js";
import { CLAIM, CLAIM_BATCH, CLAIM_PAGE, CLAIM_RECORD, DELETED, EXISTS, LOOKUP, type Transport } from "./http.js";
import { idOf, keyBody, segment, type KeyRef } from "./keys.js";

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
export type ExistsQuery = { prefix: readonly string[] } | KeyRef;

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

function claimBody(item: ClaimInput): Record<string, unknown> {
  const body: Record<string, unknown> = keyBody(item);
  if (item.data !== undefined) body["data"] = item.data;
  if (item.ttlSeconds !== undefined) body["ttl_seconds"] = item.ttlSeconds;
  return body;
}

function splitClaim<D>(raw: unknown): ClaimResult<D> {
  const { claimed, ...record } = raw as { claimed: boolean } & ClaimRecord<D>;
  return { claimed, record };
}

const base = (ns: string): string => `/v1/claims/${segment(ns, "namespace")}`;

/** A prefix as the query takes it: at least one part (the server checks each part). */
function prefixOf(prefix: readonly string[]): readonly string[] {
  if (!Array.isArray(prefix) || prefix.length === 0) {
    throw new TypeError("Idem: a prefix is at least one part, e.g. { prefix: [\"scenario-1\"] }");
  }
  return prefix;
}

export class Claims {
  readonly #http: Transport;

  /** @internal */
  constructor(http: Transport) {
    this.#http = http;
  }

  /**
   * Claim a key: `{ claimed: true, record }` when this call created it, `{ claimed: false, record }`
   * (the existing record, unchanged) when it already existed. Every attempt of the call carries the
   * same `client_token`, so a retry after a lost answer is still told `claimed: true`.
   */
  async claim<D = unknown>(ns: string, item: ClaimOptions<D>): Promise<ClaimResult<D>> {
    const body = { ...claimBody(item), client_token: clientTokenOf(item.clientToken) };
    const res = await this.#http.call("POST", base(ns), { body, shape: CLAIM });
    return splitClaim<D>(res?.body);
  }

  /**
   * Claim 1 to 10,000 keys in one call; the results are in request order, and of two equal keys in
   * one batch the first wins. A batch with one bad item is refused whole (400 naming `items[i]…`).
   * One `client_token` for the whole call: a retry after a lost answer is told each item as it was
   * first decided.
   */
  async claimBatch<D = unknown>(
    ns: string,
    items: readonly ClaimInput<D>[],
    options: BatchOptions = {},
  ): Promise<ClaimResult<D>[]> {
    const body = { items: items.map(claimBody), client_token: clientTokenOf(options.clientToken) };
    const res = await this.#http.call("POST", `${base(ns)}/batch`, { body, shape: CLAIM_BATCH });
    const results = (res?.body as { results: unknown[] }).results;
    return results.map((r) => splitClaim<D>(r));
  }

  /** Look up 1 to 10,000 keys; `[{ id, exists, record? }]` in request order. */
  async lookup<D = unknown>(ns: string, keys: readonly KeyRef[]): Promise<LookupResult<D>[]> {
    const res = await this.#http.call("POST", `${base(ns)}/lookup`, { body: { items: keys.map(keyBody) }, shape: LOOKUP });
    return (res?.body as { results: LookupResult<D>[] }).results;
  }

  /**
   * `{ prefix: [...] }`: is there a live claim whose parts begin with these? (An index range on the
   * server, not a scan.) `{ key }` / `{ parts }`: does this exact key have a live claim?
   */
  async exists(ns: string, query: ExistsQuery): Promise<boolean> {
    if (query !== null && typeof query === "object" && "prefix" in query && query.prefix !== undefined) {
      const res = await this.#http.call("POST", `${base(ns)}/prefix`, { body: { prefix: [...query.prefix] }, shape: EXISTS });
      return (res?.body as { exists: boolean }).exists;
    }
    const [result] = await this.lookup(ns, [query as KeyRef]);
    return result?.exists ?? false;
  }

  /**
   * One page of the live claims whose parts begin with `prefix`, in the order of their parts:
   * `{ items, next }`. Pass `next` as `after` for the following page; it is `null` on the last.
   */
  async list<D = unknown>(ns: string, options: ClaimListOptions): Promise<ClaimPage<D>> {
    const res = await this.#http.call("GET", base(ns), {
      query: { prefix: prefixOf(options.prefix), limit: options.limit, after: options.after ?? undefined },
      shape: CLAIM_PAGE,
    });
    const page = res?.body as { items: ClaimRecord<D>[]; next?: unknown };
    return { items: page.items, next: typeof page.next === "string" && page.next ? page.next : null };
  }

  /** Every live claim whose parts begin with `prefix`, in the order of their parts, page after page. */
  async *iterate<D = unknown>(ns: string, options: ClaimIterateOptions): AsyncGenerator<ClaimRecord<D>, void, undefined> {
    let after: string | null = null;
    for (;;) {
      const page: ClaimPage<D> = await this.list<D>(ns, { prefix: options.prefix, limit: options.pageSize, after });
      yield* page.items;
      if (page.next === null || page.items.length === 0) return;
      after = page.next;
    }
  }

  /**
   * Delete every live claim whose parts begin with `prefix` (at least one part); answers how many
   * were deleted. The server deletes up to 100,000 a call: this calls again while it says more remain.
   */
  async deletePrefix(ns: string, options: { prefix: readonly string[] }): Promise<number> {
    const query = { prefix: prefixOf(options.prefix) };
    let deleted = 0;
    for (;;) {
      const res = await this.#http.call("DELETE", base(ns), { query, shape: DELETED });
      const step = res?.body as { deleted: number; more?: unknown };
      deleted += step.deleted;
      // A call that deleted nothing cannot have more to delete: never loop on a confused answer.
      if (step.more !== true || step.deleted === 0) return deleted;
    }
  }

  /** The live claim for a key (`{ key }`, `{ parts }`) or an id, or `null` when there is none. */
  async get<D = unknown>(ns: string, ref: KeyRef | string): Promise<ClaimRecord<D> | null> {
    const res = await this.#http.call("GET", `${base(ns)}/${segment(idOf(ref), "id")}`, { nullOn404: true, shape: CLAIM_RECORD });
    return res === null ? null : (res.body as ClaimRecord<D>);
  }

  /** Delete a claim by key or id: `true` when it was deleted, `false` when there was none. */
  async delete(ns: string, ref: KeyRef | string): Promise<boolean> {
    const res = await this.#http.call("DELETE", `${base(ns)}/${segment(idOf(ref), "id")}`, { nullOn404: true });
    return res !== null;
  }
}

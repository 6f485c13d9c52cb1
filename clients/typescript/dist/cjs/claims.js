"use strict";
/** `idem.claims`: the Claims API (docs/reference/api.md#claims). */
Object.defineProperty(exports, "__esModule", { value: true });
exports.Claims = void 0;
const client_token_js_1 = require("./client-token.js");
const http_js_1 = require("./http.js");
const keys_js_1 = require("./keys.js");
function claimBody(item) {
    const body = (0, keys_js_1.keyBody)(item);
    if (item.data !== undefined)
        body["data"] = item.data;
    if (item.ttlSeconds !== undefined)
        body["ttl_seconds"] = item.ttlSeconds;
    return body;
}
function splitClaim(raw) {
    const { claimed, ...record } = raw;
    return { claimed, record };
}
const base = (ns) => `/v1/claims/${(0, keys_js_1.segment)(ns, "namespace")}`;
/** A prefix as the query takes it: at least one part (the server checks each part). */
function prefixOf(prefix) {
    if (!Array.isArray(prefix) || prefix.length === 0) {
        throw new TypeError("Idem: a prefix is at least one part, e.g. { prefix: [\"scenario-1\"] }");
    }
    return prefix;
}
class Claims {
    #http;
    /** @internal */
    constructor(http) {
        this.#http = http;
    }
    /**
     * Claim a key: `{ claimed: true, record }` when this call created it, `{ claimed: false, record }`
     * (the existing record, unchanged) when it already existed. Every attempt of the call carries the
     * same `client_token`, so a retry after a lost answer is still told `claimed: true`.
     */
    async claim(ns, item) {
        const body = { ...claimBody(item), client_token: (0, client_token_js_1.clientTokenOf)(item.clientToken) };
        const res = await this.#http.call("POST", base(ns), { body, shape: http_js_1.CLAIM });
        return splitClaim(res?.body);
    }
    /**
     * Claim 1 to 10,000 keys in one call; the results are in request order, and of two equal keys in
     * one batch the first wins. A batch with one bad item is refused whole (400 naming `items[i]…`).
     * One `client_token` for the whole call: a retry after a lost answer is told each item as it was
     * first decided.
     */
    async claimBatch(ns, items, options = {}) {
        const body = { items: items.map(claimBody), client_token: (0, client_token_js_1.clientTokenOf)(options.clientToken) };
        const res = await this.#http.call("POST", `${base(ns)}/batch`, { body, shape: http_js_1.CLAIM_BATCH });
        const results = (res?.body).results;
        return results.map((r) => splitClaim(r));
    }
    /** Look up 1 to 10,000 keys; `[{ id, exists, record? }]` in request order. */
    async lookup(ns, keys) {
        const res = await this.#http.call("POST", `${base(ns)}/lookup`, { body: { items: keys.map(keys_js_1.keyBody) }, shape: http_js_1.LOOKUP });
        return (res?.body).results;
    }
    /**
     * `{ prefix: [...] }`: is there a live claim whose parts begin with these? (An index range on the
     * server, not a scan.) `{ key }` / `{ parts }`: does this exact key have a live claim?
     */
    async exists(ns, query) {
        if (query !== null && typeof query === "object" && "prefix" in query && query.prefix !== undefined) {
            const res = await this.#http.call("POST", `${base(ns)}/prefix`, { body: { prefix: [...query.prefix] }, shape: http_js_1.EXISTS });
            return (res?.body).exists;
        }
        const [result] = await this.lookup(ns, [query]);
        return result?.exists ?? false;
    }
    /**
     * One page of the live claims whose parts begin with `prefix`, in the order of their parts:
     * `{ items, next }`. Pass `next` as `after` for the following page; it is `null` on the last.
     */
    async list(ns, options) {
        const res = await this.#http.call("GET", base(ns), {
            query: { prefix: prefixOf(options.prefix), limit: options.limit, after: options.after ?? undefined },
            shape: http_js_1.CLAIM_PAGE,
        });
        const page = res?.body;
        return { items: page.items, next: typeof page.next === "string" && page.next ? page.next : null };
    }
    /** Every live claim whose parts begin with `prefix`, in the order of their parts, page after page. */
    async *iterate(ns, options) {
        let after = null;
        for (;;) {
            const page = await this.list(ns, { prefix: options.prefix, limit: options.pageSize, after });
            yield* page.items;
            if (page.next === null || page.items.length === 0)
                return;
            after = page.next;
        }
    }
    /**
     * Delete every live claim whose parts begin with `prefix` (at least one part); answers how many
     * were deleted. The server deletes up to 100,000 a call: this calls again while it says more remain.
     */
    async deletePrefix(ns, options) {
        const query = { prefix: prefixOf(options.prefix) };
        let deleted = 0;
        for (;;) {
            const res = await this.#http.call("DELETE", base(ns), { query, shape: http_js_1.DELETED });
            const step = res?.body;
            deleted += step.deleted;
            // A call that deleted nothing cannot have more to delete: never loop on a confused answer.
            if (step.more !== true || step.deleted === 0)
                return deleted;
        }
    }
    /** The live claim for a key (`{ key }`, `{ parts }`) or an id, or `null` when there is none. */
    async get(ns, ref) {
        const res = await this.#http.call("GET", `${base(ns)}/${(0, keys_js_1.segment)((0, keys_js_1.idOf)(ref), "id")}`, { nullOn404: true, shape: http_js_1.CLAIM_RECORD });
        return res === null ? null : res.body;
    }
    /** Delete a claim by key or id: `true` when it was deleted, `false` when there was none. */
    async delete(ns, ref) {
        const res = await this.#http.call("DELETE", `${base(ns)}/${(0, keys_js_1.segment)((0, keys_js_1.idOf)(ref), "id")}`, { nullOn404: true });
        return res !== null;
    }
}
exports.Claims = Claims;

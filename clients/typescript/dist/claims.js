/** `idem.claims`: the Claims API (docs/reference/api.md#claims). */
import { clientTokenOf } from "./client-token.js";
import { idOf, keyBody, segment } from "./keys.js";
function claimBody(item) {
    const body = keyBody(item);
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
const base = (ns) => `/v1/claims/${segment(ns, "namespace")}`;
export class Claims {
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
        const body = { ...claimBody(item), client_token: clientTokenOf(item.clientToken) };
        const res = await this.#http.call("POST", base(ns), { body });
        return splitClaim(res?.body);
    }
    /**
     * Claim 1 to 10,000 keys in one call; the results are in request order, and of two equal keys in
     * one batch the first wins. A batch with one bad item is refused whole (400 naming `items[i]…`).
     * One `client_token` for the whole call: a retry after a lost answer is told each item as it was
     * first decided.
     */
    async claimBatch(ns, items, options = {}) {
        const body = { items: items.map(claimBody), client_token: clientTokenOf(options.clientToken) };
        const res = await this.#http.call("POST", `${base(ns)}/batch`, { body });
        const results = (res?.body).results;
        return results.map((r) => splitClaim(r));
    }
    /** Look up 1 to 10,000 keys; `[{ id, exists, record? }]` in request order. */
    async lookup(ns, keys) {
        const res = await this.#http.call("POST", `${base(ns)}/lookup`, { body: { items: keys.map(keyBody) } });
        return (res?.body).results;
    }
    /**
     * `{ prefix: [...] }`: is there a live claim whose parts begin with these? (An index range on the
     * server, not a scan.) `{ key }` / `{ parts }`: does this exact key have a live claim?
     */
    async exists(ns, query) {
        if (query !== null && typeof query === "object" && "prefix" in query && query.prefix !== undefined) {
            const res = await this.#http.call("POST", `${base(ns)}/prefix`, { body: { prefix: [...query.prefix] } });
            return (res?.body).exists;
        }
        const [result] = await this.lookup(ns, [query]);
        return result?.exists ?? false;
    }
    /** The live claim for a key (`{ key }`, `{ parts }`) or an id, or `null` when there is none. */
    async get(ns, ref) {
        const res = await this.#http.call("GET", `${base(ns)}/${segment(idOf(ref), "id")}`, { nullOn404: true });
        return res === null ? null : res.body;
    }
    /** Delete a claim by key or id: `true` when it was deleted, `false` when there was none. */
    async delete(ns, ref) {
        const res = await this.#http.call("DELETE", `${base(ns)}/${segment(idOf(ref), "id")}`, { nullOn404: true });
        return res !== null;
    }
}

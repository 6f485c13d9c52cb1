"use strict";
/** `idem.receipts`: receipts of inbound events and dead letters (docs/reference/api.md#events). */
Object.defineProperty(exports, "__esModule", { value: true });
exports.Receipts = void 0;
const http_js_1 = require("./http.js");
const keys_js_1 = require("./keys.js");
class Receipts {
    #http;
    /** @internal */
    constructor(http) {
        this.#http = http;
    }
    /** One page of receipts, newest first: `{ items, nextCursor }`. */
    async list(filter = {}) {
        const res = await this.#http.call("GET", "/v1/receipts", {
            query: {
                source: filter.source,
                status: filter.status,
                event_id: filter.eventId,
                limit: filter.limit,
                cursor: filter.cursor,
            },
            shape: http_js_1.RECEIPT_PAGE,
        });
        const page = res?.body;
        return { items: page.receipts, nextCursor: page.next_cursor ?? null };
    }
    /** Every receipt matching the filter, newest first, fetching page after page. */
    async *iterate(filter = {}) {
        let cursor = filter.cursor;
        for (;;) {
            const page = await this.list(cursor === undefined ? filter : { ...filter, cursor });
            yield* page.items;
            if (page.nextCursor === null || page.items.length === 0)
                return;
            cursor = page.nextCursor;
        }
    }
    /** One receipt with its attempts, or `null` when there is none. */
    async get(id) {
        const res = await this.#http.call("GET", `/v1/receipts/${(0, keys_js_1.segment)(id, "id")}`, { nullOn404: true, shape: http_js_1.RECEIPT });
        return res === null ? null : res.body;
    }
    /** How many receipts a `replayMatching` of `filter` would replay; changes nothing. */
    async countMatching(filter = {}) {
        const res = await this.#http.call("POST", "/v1/receipts/replay", { body: { ...bulkBody(filter), dry_run: true }, shape: http_js_1.MATCHING });
        return (res?.body).matching;
    }
    /**
     * Replays every receipt matching `filter` (default: every dead letter) from attempt 1; answers
     * how many were queued. Safe to repeat: a repeat finds only what still matches.
     */
    async replayMatching(filter = {}) {
        const res = await this.#http.call("POST", "/v1/receipts/replay", { body: bulkBody(filter), shape: http_js_1.QUEUED });
        return (res?.body).queued;
    }
    /**
     * Marks a dead receipt as handled by hand: it leaves the dead letters and can still be replayed.
     * A 409 `IdemError` when it is not dead; a 404 `IdemError` when there is none.
     */
    async discard(id) {
        const res = await this.#http.call("POST", `/v1/receipts/${(0, keys_js_1.segment)(id, "id")}/discard`, { shape: http_js_1.RECEIPT_ACK });
        return res?.body;
    }
    /**
     * Deliver a `dead`, `discarded` or `completed` receipt again from attempt 1, with the same `webhook-id`.
     * A 409 `IdemError` while it is still being delivered; a 404 `IdemError` when there is none.
     */
    async replay(id) {
        const res = await this.#http.call("POST", `/v1/receipts/${(0, keys_js_1.segment)(id, "id")}/replay`, { shape: http_js_1.RECEIPT_ACK });
        return res?.body;
    }
}
exports.Receipts = Receipts;
function bulkBody(filter) {
    const time = (t) => (t instanceof Date ? t.toISOString() : t);
    const body = {
        source: filter.source,
        status: filter.status,
        event_id: filter.eventId,
        created_before: time(filter.createdBefore),
        created_after: time(filter.createdAfter),
    };
    for (const k of Object.keys(body))
        if (body[k] === undefined)
            delete body[k];
    return body;
}

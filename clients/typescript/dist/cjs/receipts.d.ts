/** `idem.receipts`: receipts of inbound events and dead letters (docs/reference/api.md#events). */
import { type Transport } from "./http.js";
export type ReceiptStatus = "accepted" | "processing" | "retrying" | "completed" | "dead" | "discarded";
/** One delivery attempt. */
export interface Attempt {
    /** The receipt's round this attempt belongs to (n counts from 1 in each). */
    round: number;
    n: number;
    started_at: string;
    duration_ms: number;
    /** The handler's status, when it answered. */
    status_code?: number;
    /** Why there was no answer (timeout, connection error). */
    error?: string;
    /** The first 1 KiB of the handler's answer. */
    response?: string;
}
/** The result webhook's state. */
export interface ResultWebhookState {
    status: string;
    attempts: number;
    last_status_code: number | null;
    last_error: string | null;
}
/** A receipt, with the fields as the API names them. */
export interface Receipt {
    /** `rcpt_…`; also the `webhook-id` of every delivery. */
    id: string;
    source: string;
    event_id: string;
    status: ReceiptStatus | (string & {});
    created_at: string;
    updated_at: string;
    /** 1, plus one per replay. */
    round: number;
    /** Present on `get`, not in `list` pages. */
    attempts?: Attempt[];
    /** While `retrying`: when the next delivery attempt is due (RFC 3339). */
    next_attempt_at?: string;
    result_webhook: ResultWebhookState | null;
    /** On `get`: the event as received, when it was JSON. */
    body?: unknown;
    /** On `get`: the event as received, base64, when it was not JSON. */
    body_base64?: string;
    /** On `get`: the event's Content-Type as the sender gave it. */
    content_type?: string;
    [member: string]: unknown;
}
export interface ReceiptFilter {
    source?: string;
    status?: ReceiptStatus | (string & {});
    /** Only the receipt(s) of this event id. */
    eventId?: string;
    /** 1 to 1000 (server default 50). */
    limit?: number;
    /** `nextCursor` of the previous page. */
    cursor?: string;
}
export interface ReceiptPage {
    /** Newest first. */
    items: Receipt[];
    /** Pass as `cursor` for the next page; `null` on the last page. */
    nextCursor: string | null;
}
/** Which receipts a bulk replay selects; every field narrows it. */
export interface BulkReplayFilter {
    source?: string;
    /** `dead` (the default), `completed` or `discarded`. */
    status?: "dead" | "completed" | "discarded";
    eventId?: string;
    /** RFC 3339, or a `Date`: only receipts created before it. */
    createdBefore?: string | Date;
    /** RFC 3339, or a `Date`: only receipts created after it. */
    createdAfter?: string | Date;
}
/** What intake answers: `replay` is true when the event was seen before (a resend). */
export interface ReceiptAck {
    receipt_id: string;
    status: string;
    replay: boolean;
}
/** What `replay` answers: the receipt is `accepted` again, and this call replayed it. */
export interface ReplayAck {
    receipt_id: string;
    status: "accepted";
    replayed: true;
}
export declare class Receipts {
    #private;
    /** @internal */
    constructor(http: Transport);
    /** One page of receipts, newest first: `{ items, nextCursor }`. */
    list(filter?: ReceiptFilter): Promise<ReceiptPage>;
    /** Every receipt matching the filter, newest first, fetching page after page. */
    iterate(filter?: ReceiptFilter): AsyncGenerator<Receipt, void, undefined>;
    /** One receipt with its attempts, or `null` when there is none. */
    get(id: string): Promise<Receipt | null>;
    /** How many receipts a `replayMatching` of `filter` would replay; changes nothing. */
    countMatching(filter?: BulkReplayFilter): Promise<number>;
    /**
     * Replays every receipt matching `filter` (default: every dead letter) from attempt 1; answers
     * how many were queued. Safe to repeat: a repeat finds only what still matches.
     */
    replayMatching(filter?: BulkReplayFilter): Promise<number>;
    /**
     * Marks a dead receipt as handled by hand: it leaves the dead letters and can still be replayed.
     * A 409 `IdemError` when it is not dead; a 404 `IdemError` when there is none.
     */
    discard(id: string): Promise<{
        receipt_id: string;
        status: "discarded";
    }>;
    /**
     * Deliver a `dead`, `discarded` or `completed` receipt again from attempt 1, with the same `webhook-id`.
     * A 409 `IdemError` while it is still being delivered; a 404 `IdemError` when there is none.
     */
    replay(id: string): Promise<ReplayAck>;
}

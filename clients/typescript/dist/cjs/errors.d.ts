/**
 * Errors thrown by the client. Every answer of the server that is not a success becomes an
 * {@link IdemError} carrying the RFC 9457 problem's fields; a few kinds have subclasses so callers
 * can branch with `instanceof`.
 */
/** An RFC 9457 `application/problem+json` body as idem sends it. */
export interface Problem {
    type?: string;
    title?: string;
    status?: number;
    detail?: string;
    /** For a 400: the field at fault, e.g. `items[3].parts[0]`. */
    field?: string;
    [extension: string]: unknown;
}
/** Problem types idem uses that the client gives a class of their own. */
export declare const PROBLEM_IN_PROGRESS = "urn:idem:problem:in-progress";
export declare const PROBLEM_LEASE_LOST = "urn:idem:problem:lease-lost";
export declare const PROBLEM_FINGERPRINT_MISMATCH = "urn:idem:problem:fingerprint-mismatch";
export declare const PROBLEM_FORBIDDEN = "urn:idem:problem:forbidden";
/** A 503 ({@link UnavailableError}): the store could not be used; nothing was changed. */
export declare const PROBLEM_STORE_UNAVAILABLE = "urn:idem:problem:store-unavailable";
/**
 * A 503 ({@link UnavailableError}): the store's answer was lost after a write was sent, so it may or
 * may not have been made. The client retries it with the call's own `client_token`, which tells it
 * which; this type reaches the caller only once the retries ran out.
 */
export declare const PROBLEM_OUTCOME_UNKNOWN = "urn:idem:problem:outcome-unknown";
/** A 404 that means "no such record": the only 404 a `get` or `delete` reads as absent. */
export declare const PROBLEM_NOT_FOUND = "urn:idem:problem:not-found";
/** A 404 for a path that is no route at all: a wrong base URL, never "absent". */
export declare const PROBLEM_NO_SUCH_ROUTE = "urn:idem:problem:no-such-route";
/** Types the client itself uses for failures that never reached a server's answer. */
export declare const PROBLEM_CONNECTION = "urn:idem:client:connection-error";
export declare const PROBLEM_TIMEOUT = "urn:idem:client:timeout";
export interface IdemErrorInit {
    status: number;
    type?: string | undefined;
    title?: string | undefined;
    detail?: string | undefined;
    field?: string | undefined;
    /** The `Retry-After` header of the answer, in seconds. */
    retryAfterSeconds?: number | undefined;
    /** The whole problem body as received (it may hold extension members). */
    problem?: Problem | undefined;
    /** The answer was not an idem problem document (see {@link IdemError.notIdem}). */
    notIdem?: boolean | undefined;
    cause?: unknown;
}
/**
 * An error answer from idem (or a failure to get one, see {@link ConnectionError}).
 * `status`, `type`, `title`, `detail` and `field` are the problem+json members; `type` defaults to
 * `"about:blank"` when the body was not a problem (e.g. a proxy's HTML page). An answer that is not
 * an idem problem document has `notIdem` set, and its message says the URL does not look like idem.
 */
export declare class IdemError extends Error {
    /** The HTTP status; `0` for a {@link ConnectionError}. */
    readonly status: number;
    /** The problem type URI, e.g. `urn:idem:problem:invalid-request`. */
    readonly type: string;
    readonly title: string;
    readonly detail: string | undefined;
    /** For an invalid request: the field at fault, e.g. `parts[0]` or `items[3].parts[0]`. */
    readonly field: string | undefined;
    /** The answer's `Retry-After`, in seconds, when it had one. */
    readonly retryAfterSeconds: number | undefined;
    /** The problem body as received. */
    readonly problem: Problem | undefined;
    /**
     * `true` when the answer was not an idem problem document (`application/problem+json` with a
     * `urn:idem:problem:` type): a 404 page of another web server, a proxy's error. The client's
     * `url` (or `IDEM_URL`) probably points at something that is not idem.
     */
    readonly notIdem: boolean;
    constructor(init: IdemErrorInit);
}
/**
 * `409 urn:idem:problem:in-progress`: another caller holds the operation's key and is still
 * running. `retryAfterSeconds` says when to ask again.
 */
export declare class InProgressError extends IdemError {
    constructor(init: IdemErrorInit);
}
/** `422`: the key was used before with another request (`urn:idem:problem:fingerprint-mismatch`). */
export declare class MismatchError extends IdemError {
    constructor(init: IdemErrorInit);
}
/**
 * `503`: the store cannot be written right now (after the client's own retries). `type` says which:
 * {@link PROBLEM_STORE_UNAVAILABLE} (nothing was changed) or {@link PROBLEM_OUTCOME_UNKNOWN} (the
 * write may have been made). After the latter, ask again with the same `clientToken` to learn which:
 * a claim that was made answers `claimed: true`, a begin that took the key its lease.
 */
export declare class UnavailableError extends IdemError {
    constructor(init: IdemErrorInit);
}
/**
 * `403 urn:idem:problem:forbidden`: the token is known but may not do this (its `can`, namespaces
 * or sources), or, on a server with no tokens, the request came from another site. `detail` says
 * what was refused, e.g. `token viewer has can = "read": claiming needs can = "write"`. Nothing was
 * changed; retrying will not help.
 */
export declare class ForbiddenError extends IdemError {
    constructor(init: IdemErrorInit);
}
/**
 * `409 urn:idem:problem:lease-lost`: the token no longer holds the operation's key (its lease ran
 * out, or it was completed or released already). The work may have been taken over by another
 * caller; its result was not stored.
 */
export declare class LeaseLostError extends IdemError {
    constructor(init: IdemErrorInit);
}
/**
 * No answer from the server: the connection failed, or the per-call timeout passed, on every
 * attempt. `status` is `0`; `type` is `urn:idem:client:connection-error` or
 * `urn:idem:client:timeout`; `cause` is the last underlying error.
 */
export declare class ConnectionError extends IdemError {
    constructor(init: IdemErrorInit);
}
/** `verifyWebhook` rejected a delivery: a missing header, a bad signature or a stale timestamp. */
export declare class WebhookVerificationError extends Error {
    constructor(message: string);
}
/** The error for a non-success answer: the subclass its status and problem type call for. */
export declare function errorFor(init: IdemErrorInit): IdemError;

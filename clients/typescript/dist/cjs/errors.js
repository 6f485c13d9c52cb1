"use strict";
/**
 * Errors thrown by the client. Every answer of the server that is not a success becomes an
 * {@link IdemError} carrying the RFC 9457 problem's fields; a few kinds have subclasses so callers
 * can branch with `instanceof`.
 */
Object.defineProperty(exports, "__esModule", { value: true });
exports.WebhookVerificationError = exports.ConnectionError = exports.LeaseLostError = exports.ForbiddenError = exports.UnavailableError = exports.MismatchError = exports.InProgressError = exports.IdemError = exports.PROBLEM_TIMEOUT = exports.PROBLEM_CONNECTION = exports.PROBLEM_NO_SUCH_ROUTE = exports.PROBLEM_NOT_FOUND = exports.PROBLEM_OUTCOME_UNKNOWN = exports.PROBLEM_STORE_UNAVAILABLE = exports.PROBLEM_FORBIDDEN = exports.PROBLEM_FINGERPRINT_MISMATCH = exports.PROBLEM_LEASE_LOST = exports.PROBLEM_IN_PROGRESS = void 0;
exports.errorFor = errorFor;
/** Problem types idem uses that the client gives a class of their own. */
exports.PROBLEM_IN_PROGRESS = "urn:idem:problem:in-progress";
exports.PROBLEM_LEASE_LOST = "urn:idem:problem:lease-lost";
exports.PROBLEM_FINGERPRINT_MISMATCH = "urn:idem:problem:fingerprint-mismatch";
exports.PROBLEM_FORBIDDEN = "urn:idem:problem:forbidden";
/** A 503 ({@link UnavailableError}): the store could not be used; nothing was changed. */
exports.PROBLEM_STORE_UNAVAILABLE = "urn:idem:problem:store-unavailable";
/**
 * A 503 ({@link UnavailableError}): the store's answer was lost after a write was sent, so it may or
 * may not have been made. The client retries it with the call's own `client_token`, which tells it
 * which; this type reaches the caller only once the retries ran out.
 */
exports.PROBLEM_OUTCOME_UNKNOWN = "urn:idem:problem:outcome-unknown";
/** A 404 that means "no such record": the only 404 a `get` or `delete` reads as absent. */
exports.PROBLEM_NOT_FOUND = "urn:idem:problem:not-found";
/** A 404 for a path that is no route at all: a wrong base URL, never "absent". */
exports.PROBLEM_NO_SUCH_ROUTE = "urn:idem:problem:no-such-route";
/** Types the client itself uses for failures that never reached a server's answer. */
exports.PROBLEM_CONNECTION = "urn:idem:client:connection-error";
exports.PROBLEM_TIMEOUT = "urn:idem:client:timeout";
/**
 * An error answer from idem (or a failure to get one, see {@link ConnectionError}).
 * `status`, `type`, `title`, `detail` and `field` are the problem+json members; `type` defaults to
 * `"about:blank"` when the body was not a problem (e.g. a proxy's HTML page). An answer that is not
 * an idem problem document has `notIdem` set, and its message says the URL does not look like idem.
 */
class IdemError extends Error {
    /** The HTTP status; `0` for a {@link ConnectionError}. */
    status;
    /** The problem type URI, e.g. `urn:idem:problem:invalid-request`. */
    type;
    title;
    detail;
    /** For an invalid request: the field at fault, e.g. `parts[0]` or `items[3].parts[0]`. */
    field;
    /** The answer's `Retry-After`, in seconds, when it had one. */
    retryAfterSeconds;
    /** The problem body as received. */
    problem;
    /**
     * `true` when the answer was not an idem problem document (`application/problem+json` with a
     * `urn:idem:problem:` type): a 404 page of another web server, a proxy's error. The client's
     * `url` (or `IDEM_URL`) probably points at something that is not idem.
     */
    notIdem;
    constructor(init) {
        const title = init.title ?? "Error";
        let message = init.status > 0 ? `${init.status} ${title}` : title;
        if (init.detail)
            message += `: ${init.detail}`;
        if (init.field && !init.detail?.includes(init.field))
            message += ` (field ${init.field})`;
        super(message, init.cause === undefined ? undefined : { cause: init.cause });
        this.name = "IdemError";
        this.status = init.status;
        this.type = init.type ?? "about:blank";
        this.title = title;
        this.detail = init.detail;
        this.field = init.field;
        this.retryAfterSeconds = init.retryAfterSeconds;
        this.problem = init.problem;
        this.notIdem = init.notIdem ?? false;
    }
}
exports.IdemError = IdemError;
/**
 * `409 urn:idem:problem:in-progress`: another caller holds the operation's key and is still
 * running. `retryAfterSeconds` says when to ask again.
 */
class InProgressError extends IdemError {
    constructor(init) {
        super(init);
        this.name = "InProgressError";
    }
}
exports.InProgressError = InProgressError;
/** `422`: the key was used before with another request (`urn:idem:problem:fingerprint-mismatch`). */
class MismatchError extends IdemError {
    constructor(init) {
        super(init);
        this.name = "MismatchError";
    }
}
exports.MismatchError = MismatchError;
/**
 * `503`: the store cannot be written right now (after the client's own retries). `type` says which:
 * {@link PROBLEM_STORE_UNAVAILABLE} (nothing was changed) or {@link PROBLEM_OUTCOME_UNKNOWN} (the
 * write may have been made). After the latter, ask again with the same `clientToken` to learn which:
 * a claim that was made answers `claimed: true`, a begin that took the key its lease.
 */
class UnavailableError extends IdemError {
    constructor(init) {
        super(init);
        this.name = "UnavailableError";
    }
}
exports.UnavailableError = UnavailableError;
/**
 * `403 urn:idem:problem:forbidden`: the token is known but may not do this (its `can`, namespaces
 * or sources), or, on a server with no tokens, the request came from another site. `detail` says
 * what was refused, e.g. `token viewer has can = "read": claiming needs can = "write"`. Nothing was
 * changed; retrying will not help.
 */
class ForbiddenError extends IdemError {
    constructor(init) {
        super(init);
        this.name = "ForbiddenError";
    }
}
exports.ForbiddenError = ForbiddenError;
/**
 * `409 urn:idem:problem:lease-lost`: the token no longer holds the operation's key (its lease ran
 * out, or it was completed or released already). The work may have been taken over by another
 * caller; its result was not stored.
 */
class LeaseLostError extends IdemError {
    constructor(init) {
        super(init);
        this.name = "LeaseLostError";
    }
}
exports.LeaseLostError = LeaseLostError;
/**
 * No answer from the server: the connection failed, or the per-call timeout passed, on every
 * attempt. `status` is `0`; `type` is `urn:idem:client:connection-error` or
 * `urn:idem:client:timeout`; `cause` is the last underlying error.
 */
class ConnectionError extends IdemError {
    constructor(init) {
        super(init);
        this.name = "ConnectionError";
    }
}
exports.ConnectionError = ConnectionError;
/** `verifyWebhook` rejected a delivery: a missing header, a bad signature or a stale timestamp. */
class WebhookVerificationError extends Error {
    constructor(message) {
        super(message);
        this.name = "WebhookVerificationError";
    }
}
exports.WebhookVerificationError = WebhookVerificationError;
/** The error for a non-success answer: the subclass its status and problem type call for. */
function errorFor(init) {
    if (init.status === 409 && init.type === exports.PROBLEM_IN_PROGRESS)
        return new InProgressError(init);
    if (init.status === 409 && init.type === exports.PROBLEM_LEASE_LOST)
        return new LeaseLostError(init);
    if (init.status === 403)
        return new ForbiddenError(init);
    if (init.status === 422)
        return new MismatchError(init);
    if (init.status === 503)
        return new UnavailableError(init);
    return new IdemError(init);
}

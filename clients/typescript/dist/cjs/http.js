"use strict";
/**
 * The transport: one JSON call to idem with a per-attempt timeout, retries with exponential
 * backoff and jitter on connection errors and 502/503/504 (honouring `Retry-After`), and
 * problem+json answers turned into errors.
 */
Object.defineProperty(exports, "__esModule", { value: true });
exports.QUEUED = exports.MATCHING = exports.RECEIPT_ACK = exports.RECEIPT = exports.RECEIPT_PAGE = exports.OPERATION = exports.EXTENDED = exports.COMPLETED = exports.BEGIN = exports.DELETED = exports.CLAIM_PAGE = exports.CLAIM_RECORD = exports.EXISTS = exports.LOOKUP = exports.CLAIM_BATCH = exports.CLAIM = exports.Transport = exports.defaultSleep = exports.DEFAULT_URL = void 0;
exports.envVar = envVar;
exports.parseRetryAfter = parseRetryAfter;
const errors_js_1 = require("./errors.js");
const RETRY_STATUSES = new Set([502, 503, 504]);
/** Where the client looks for idem when neither `url` nor `IDEM_URL` says. */
exports.DEFAULT_URL = "http://127.0.0.1:7070";
/**
 * An environment variable, where the runtime has them: Node's and Bun's `process.env`, Deno's
 * `Deno.env` (undefined without `--allow-env`), none in a browser.
 */
function envVar(name) {
    const g = globalThis;
    try {
        const value = g.process?.env?.[name] ?? g.Deno?.env?.get(name);
        return value === "" ? undefined : value;
    }
    catch {
        return undefined; // Deno without the permission
    }
}
const defaultSleep = (ms) => new Promise((resolve) => {
    setTimeout(resolve, ms);
});
exports.defaultSleep = defaultSleep;
/** `Retry-After` as seconds: delta-seconds or an HTTP date. */
function parseRetryAfter(value, nowMs = Date.now()) {
    if (value === null)
        return undefined;
    const text = value.trim();
    if (/^\d+$/.test(text))
        return Number(text);
    const date = Date.parse(text);
    if (Number.isNaN(date))
        return undefined;
    return Math.max(0, Math.ceil((date - nowMs) / 1000));
}
class Transport {
    #base;
    #authorization;
    #fetch;
    #timeoutMs;
    #retries;
    #baseDelayMs;
    #maxDelayMs;
    sleep;
    random;
    constructor(options) {
        const url = options.url ?? envVar("IDEM_URL") ?? exports.DEFAULT_URL;
        if (typeof url !== "string" || !/^https?:\/\//i.test(url)) {
            const from = options.url === undefined ? " (IDEM_URL)" : "";
            throw new TypeError(`Idem: url${from} must be an http:// or https:// URL`);
        }
        this.#base = url.replace(/\/+$/, "");
        const token = options.token === undefined ? envVar("IDEM_TOKEN") : options.token;
        this.#authorization = token ? `Bearer ${token}` : undefined;
        const globalFetch = globalThis.fetch;
        const f = options.fetch ?? (globalFetch ? globalFetch.bind(globalThis) : undefined);
        if (!f)
            throw new TypeError("Idem: no fetch available; pass options.fetch (Node 18+ has one)");
        this.#fetch = f;
        this.#timeoutMs = nonNegative(options.timeoutMs, 30_000, "timeoutMs");
        this.#retries = Math.floor(nonNegative(options.retries, 3, "retries"));
        this.#baseDelayMs = nonNegative(options.retryBaseDelayMs, 200, "retryBaseDelayMs");
        this.#maxDelayMs = nonNegative(options.retryMaxDelayMs, 30_000, "retryMaxDelayMs");
        this.sleep = options.sleep ?? exports.defaultSleep;
        this.random = options.random ?? Math.random;
    }
    /** The wait before retry `attempt` (0-based): half fixed, half random, capped. */
    backoff(attempt) {
        const cap = Math.min(this.#maxDelayMs, this.#baseDelayMs * 2 ** Math.min(attempt, 30));
        return cap / 2 + (cap / 2) * this.random();
    }
    get maxDelayMs() {
        return this.#maxDelayMs;
    }
    /** The per-attempt timeout, in ms. */
    get timeoutMs() {
        return this.#timeoutMs;
    }
    async call(method, path, options = {}) {
        let url = this.#base + path;
        if (options.query) {
            const params = new URLSearchParams();
            for (const [name, value] of Object.entries(options.query)) {
                if (Array.isArray(value))
                    for (const v of value)
                        params.append(name, v);
                else if (value !== undefined)
                    params.set(name, String(value));
            }
            const qs = params.toString();
            if (qs)
                url += `?${qs}`;
        }
        const headers = { accept: "application/json, application/problem+json" };
        if (this.#authorization)
            headers["authorization"] = this.#authorization;
        let body;
        if (options.body !== undefined) {
            body = JSON.stringify(options.body);
            headers["content-type"] = "application/json";
        }
        const what = `${method} ${path}`;
        const timeoutMs = (options.timeoutMs ?? this.#timeoutMs) + (options.extraTimeoutMs ?? 0);
        const retries = options.retries ?? this.#retries;
        for (let attempt = 0;; attempt++) {
            const controller = new AbortController();
            let timedOut = false;
            const timer = setTimeout(() => {
                timedOut = true;
                controller.abort();
            }, timeoutMs);
            let status;
            let statusText;
            let retryAfter;
            let contentType;
            let text;
            try {
                const init = { method, headers, signal: controller.signal };
                if (body !== undefined)
                    init.body = body;
                const response = await this.#fetch(url, init);
                status = response.status;
                statusText = response.statusText;
                retryAfter = response.headers.get("retry-after");
                contentType = response.headers.get("content-type");
                text = await response.text();
            }
            catch (cause) {
                clearTimeout(timer);
                if (attempt < retries) {
                    await this.sleep(this.backoff(attempt));
                    continue;
                }
                throw new errors_js_1.ConnectionError({
                    status: 0,
                    type: timedOut ? errors_js_1.PROBLEM_TIMEOUT : errors_js_1.PROBLEM_CONNECTION,
                    title: timedOut ? "Timed out" : "Connection failed",
                    detail: timedOut
                        ? `no answer from idem at ${where(this.#base)} within ${timeoutMs} ms (${what}, ${attempt + 1} attempts)`
                        : `cannot reach idem at ${where(this.#base)}: ${describe(cause)} (${what}, ${attempt + 1} attempts); ` +
                            "to point the client elsewhere, give its `url` option or set IDEM_URL",
                    cause,
                });
            }
            clearTimeout(timer);
            if (status >= 200 && status < 300) {
                const parsed = parseBody(text);
                if (options.shape && !options.shape.fits(parsed)) {
                    throw notIdemAnswer(status, contentType, text, options.shape.expected, what, where(this.#base));
                }
                return { status, body: parsed };
            }
            // Only idem's own "no such record" is absent: a 404 for an unknown route (a wrong base URL)
            // or from something in front of idem is an error.
            if (status === 404 && options.nullOn404 && problemType(contentType, text) === errors_js_1.PROBLEM_NOT_FOUND)
                return null;
            const retryAfterSeconds = parseRetryAfter(retryAfter);
            if (RETRY_STATUSES.has(status) && attempt < retries) {
                const wait = retryAfterSeconds !== undefined ? retryAfterSeconds * 1000 : this.backoff(attempt);
                if (wait <= this.#maxDelayMs) {
                    await this.sleep(wait);
                    continue;
                }
            }
            throw problemError(status, statusText, contentType, text, retryAfterSeconds, what, where(this.#base));
        }
    }
}
exports.Transport = Transport;
function nonNegative(value, fallback, name) {
    if (value === undefined)
        return fallback;
    if (typeof value !== "number" || !Number.isFinite(value) || value < 0) {
        throw new TypeError(`Idem: ${name} must be a non-negative number`);
    }
    return value;
}
/** Node's error codes for a failed connection, in words. */
const REASONS = {
    ECONNREFUSED: "connection refused (is idem running there?)",
    ENOTFOUND: "no such host",
    EAI_AGAIN: "the host name could not be resolved",
    ECONNRESET: "the connection was reset",
    ETIMEDOUT: "the connection timed out",
    EHOSTUNREACH: "the host is unreachable",
    ENETUNREACH: "the network is unreachable",
    UND_ERR_SOCKET: "the connection closed early",
};
/** The cause of a failed fetch, in words, with its code: `fetch failed` alone says nothing. */
function describe(cause) {
    if (cause instanceof Error) {
        const inner = cause.cause;
        const code = inner && typeof inner === "object" ? inner.code : undefined;
        if (typeof code !== "string")
            return cause.message;
        return `${REASONS[code] ?? (inner instanceof Error ? inner.message : cause.message)} [${code}]`;
    }
    return String(cause);
}
/** The base URL without any user or password in it, as an error may show it. */
function where(base) {
    try {
        const url = new URL(base);
        url.username = "";
        url.password = "";
        return url.toString().replace(/\/+$/, "");
    }
    catch {
        return base;
    }
}
function parseBody(text) {
    if (text === "")
        return undefined;
    try {
        return JSON.parse(text);
    }
    catch {
        return text;
    }
}
/**
 * A 2xx answer without the fields the call needs (`200 {}`, an HTML page): not idem's answer, so
 * not a result either. The not-idem error, naming the URL, as for an error answer that is not an
 * idem problem document.
 */
function notIdemAnswer(status, contentType, text, expected, what, base) {
    let json = true;
    try {
        JSON.parse(text);
    }
    catch {
        json = false;
    }
    const got = text === ""
        ? `with an empty body (expected ${expected})`
        : json
            ? `without the fields of idem's answer (expected ${expected})`
            : `with a body that is not JSON (${contentType ?? "no Content-Type"})`;
    return new errors_js_1.IdemError({
        status,
        title: "Invalid response",
        detail: `${base} answered ${status} to ${what} ${got}: it does not look like idem (check the client's \`url\` option or IDEM_URL)`,
        notIdem: true,
    });
}
function problemType(contentType, text) {
    if (!text || (contentType !== null && !/json/i.test(contentType)))
        return undefined;
    try {
        const parsed = JSON.parse(text);
        const type = parsed && typeof parsed === "object" ? parsed.type : undefined;
        return typeof type === "string" ? type : undefined;
    }
    catch {
        return undefined;
    }
}
function problemError(status, statusText, contentType, text, retryAfterSeconds, what, base) {
    let problem;
    if (text && (contentType === null || /json/i.test(contentType))) {
        try {
            const parsed = JSON.parse(text);
            if (parsed && typeof parsed === "object" && !Array.isArray(parsed))
                problem = parsed;
        }
        catch {
            // not JSON: described below by status alone
        }
    }
    const str = (v) => (typeof v === "string" ? v : undefined);
    const notIdem = !isIdemProblem(contentType, problem);
    let detail = str(problem?.detail) ?? (problem ? undefined : `${what} answered ${status}`);
    if (notIdem) {
        detail =
            `${base} answered ${status} to ${what} without an idem problem document: it does not look like idem ` +
                "(check the client's `url` option or IDEM_URL)" +
                (problem?.detail !== undefined ? ` [its detail: ${String(problem.detail)}]` : "");
    }
    return (0, errors_js_1.errorFor)({
        status,
        type: str(problem?.type),
        title: str(problem?.title) ?? (statusText || `HTTP ${status}`),
        detail,
        field: str(problem?.field),
        retryAfterSeconds,
        problem,
        notIdem,
    });
}
/**
 * Whether an error answer is idem's own: `application/problem+json` whose `type` is one of idem's
 * (`urn:idem:problem:…`). Anything else (a web server's 404 page, a proxy's error) comes from
 * something that is not idem.
 */
function isIdemProblem(contentType, problem) {
    const problemJson = contentType !== null && /^application\/problem\+json\b/i.test(contentType.trim());
    return problemJson && typeof problem?.type === "string" && problem.type.startsWith("urn:idem:problem:");
}
const isObject = (v) => typeof v === "object" && v !== null && !Array.isArray(v);
function kindFits(value, kind) {
    switch (kind) {
        case "string":
            return typeof value === "string";
        case "boolean":
            return typeof value === "boolean";
        case "integer":
            return typeof value === "number" && Number.isInteger(value);
        case "array":
            return Array.isArray(value);
    }
}
function describeFields(fields) {
    return `{ ${Object.entries(fields).map(([name, kind]) => `${name}: ${kind}`).join(", ")} }`;
}
function fieldsFit(body, fields) {
    return isObject(body) && Object.entries(fields).every(([name, kind]) => kindFits(body[name], kind));
}
/** An object with these fields, of these kinds (others may be there too). */
function object(fields) {
    return { expected: describeFields(fields), fits: (body) => fieldsFit(body, fields) };
}
/** `{ [name]: [item…] }`, each item an object with `fields`. */
function listOf(name, fields) {
    return {
        expected: `{ ${name}: [${describeFields(fields)}, …] }`,
        fits: (body) => isObject(body) && Array.isArray(body[name]) && body[name].every((item) => fieldsFit(item, fields)),
    };
}
/** A claim's answer: `claimed` must be a boolean (missing is not `false`). */
exports.CLAIM = object({ claimed: "boolean", id: "string" });
exports.CLAIM_BATCH = listOf("results", { claimed: "boolean", id: "string" });
exports.LOOKUP = listOf("results", { id: "string", exists: "boolean" });
exports.EXISTS = object({ exists: "boolean" });
exports.CLAIM_RECORD = object({ id: "string" });
exports.CLAIM_PAGE = object({ items: "array" });
exports.DELETED = object({ deleted: "integer" });
/** A begin's answer: started with its lease token, or completed. */
exports.BEGIN = {
    expected: '{ status: "started", id: string, token: string } or { status: "completed", id: string, result }',
    fits: (body) => isObject(body) &&
        typeof body["id"] === "string" &&
        ((body["status"] === "started" && typeof body["token"] === "string" && body["token"] !== "") || body["status"] === "completed"),
};
exports.COMPLETED = {
    expected: '{ status: "completed", id: string, result }',
    fits: (body) => isObject(body) && body["status"] === "completed" && typeof body["id"] === "string",
};
exports.EXTENDED = object({ lease_expires_at: "string" });
exports.OPERATION = object({ status: "string", id: "string" });
exports.RECEIPT_PAGE = object({ receipts: "array" });
exports.RECEIPT = object({ id: "string", status: "string" });
exports.RECEIPT_ACK = object({ receipt_id: "string", status: "string" });
exports.MATCHING = object({ matching: "integer" });
exports.QUEUED = object({ queued: "integer" });

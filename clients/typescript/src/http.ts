/**
 * The transport: one JSON call to idem with a per-attempt timeout, retries with exponential
 * backoff and jitter on connection errors and 502/503/504 (honouring `Retry-After`), and
 * problem+json answers turned into errors.
 */

import {
  ConnectionError,
  errorFor,
  IdemError,
  PROBLEM_CONNECTION,
  PROBLEM_NOT_FOUND,
  PROBLEM_TIMEOUT,
  type Problem,
} from "./errors.js";

/** What the client needs of a `Response`; the standard one fits. */
export interface FetchResponseLike {
  readonly status: number;
  readonly statusText?: string;
  readonly headers: { get(name: string): string | null };
  text(): Promise<string>;
}

/** What the client passes to `fetch`. */
export interface FetchInit {
  method: string;
  headers: Record<string, string>;
  body?: string;
  signal: AbortSignal;
}

/** The standard `fetch` (Node 18+, Deno, Bun, browsers) or anything shaped like it. */
export type FetchLike = (url: string, init: FetchInit) => Promise<FetchResponseLike>;

export interface IdemOptions {
  /**
   * The idem server, e.g. `http://127.0.0.1:7070` (a base path is kept: `https://h/idem`).
   * Default: the `IDEM_URL` environment variable, else {@link DEFAULT_URL}.
   */
  url?: string | undefined;
  /**
   * Sent as `Authorization: Bearer <token>` when set. Never put in a URL or an error message.
   * Default (`undefined`): the `IDEM_TOKEN` environment variable, if set; `null` or `""`: no token.
   */
  token?: string | null | undefined;
  /** Time limit of each HTTP attempt, in milliseconds (default 30,000). */
  timeoutMs?: number | undefined;
  /** Retries after the first attempt on connection errors, timeouts and 502/503/504 (default 3). */
  retries?: number | undefined;
  /** The `fetch` to use (default the global one). */
  fetch?: FetchLike | undefined;
  /** Backoff before retry n is about `retryBaseDelayMs * 2^n`, with jitter (default 200). */
  retryBaseDelayMs?: number | undefined;
  /**
   * The longest wait between attempts (default 30,000). A `Retry-After` longer than this is not
   * waited for: the error is thrown at once, with `retryAfterSeconds` set.
   */
  retryMaxDelayMs?: number | undefined;
  /** How to wait; injectable so tests run fast (default `setTimeout`). */
  sleep?: ((ms: number) => Promise<void>) | undefined;
  /** Source of jitter in [0, 1) (default `Math.random`). */
  random?: (() => number) | undefined;
}

export interface CallOptions {
  body?: unknown;
  /** Query parameters; an array is the parameter repeated, in order (`prefix=a&prefix=b`). */
  query?: Record<string, string | number | readonly string[] | undefined>;
  /** Answer `null` instead of throwing on a 404. */
  nullOn404?: boolean;
  /** Added to the per-attempt timeout (for calls the server may hold open, like a waiting begin). */
  extraTimeoutMs?: number;
  /** This call's per-attempt timeout instead of the client's `timeoutMs` (a heartbeat's, bounded by its lease). */
  timeoutMs?: number;
  /** This call's retries instead of the client's (a heartbeat retries on a pace of its own). */
  retries?: number;
  /**
   * What a 2xx answer's body must have: without it the answer is not idem's, and the call throws
   * the not-idem error naming the URL instead of returning it.
   */
  shape?: Shape;
}

export interface CallResult {
  status: number;
  body: unknown;
}

const RETRY_STATUSES = new Set([502, 503, 504]);

/** Where the client looks for idem when neither `url` nor `IDEM_URL` says. */
export const DEFAULT_URL = "http://127.0.0.1:7070";

/**
 * An environment variable, where the runtime has them: Node's and Bun's `process.env`, Deno's
 * `Deno.env` (undefined without `--allow-env`), none in a browser.
 */
export function envVar(name: string): string | undefined {
  const g = globalThis as {
    process?: { env?: Record<string, string | undefined> };
    Deno?: { env?: { get(name: string): string | undefined } };
  };
  try {
    const value = g.process?.env?.[name] ?? g.Deno?.env?.get(name);
    return value === "" ? undefined : value;
  } catch {
    return undefined; // Deno without the permission
  }
}

export const defaultSleep = (ms: number): Promise<void> =>
  new Promise((resolve) => {
    setTimeout(resolve, ms);
  });

/** `Retry-After` as seconds: delta-seconds or an HTTP date. */
export function parseRetryAfter(value: string | null, nowMs: number = Date.now()): number | undefined {
  if (value === null) return undefined;
  const text = value.trim();
  if (/^\d+$/.test(text)) return Number(text);
  const date = Date.parse(text);
  if (Number.isNaN(date)) return undefined;
  return Math.max(0, Math.ceil((date - nowMs) / 1000));
}

export class Transport {
  readonly #base: string;
  readonly #authorization: string | undefined;
  readonly #fetch: FetchLike;
  readonly #timeoutMs: number;
  readonly #retries: number;
  readonly #baseDelayMs: number;
  readonly #maxDelayMs: number;
  readonly sleep: (ms: number) => Promise<void>;
  readonly random: () => number;

  constructor(options: IdemOptions) {
    const url = options.url ?? envVar("IDEM_URL") ?? DEFAULT_URL;
    if (typeof url !== "string" || !/^https?:\/\//i.test(url)) {
      const from = options.url === undefined ? " (IDEM_URL)" : "";
      throw new TypeError(`Idem: url${from} must be an http:// or https:// URL`);
    }
    this.#base = url.replace(/\/+$/, "");
    const token = options.token === undefined ? envVar("IDEM_TOKEN") : options.token;
    this.#authorization = token ? `Bearer ${token}` : undefined;
    const globalFetch = (globalThis as { fetch?: FetchLike }).fetch;
    const f = options.fetch ?? (globalFetch ? globalFetch.bind(globalThis) : undefined);
    if (!f) throw new TypeError("Idem: no fetch available; pass options.fetch (Node 18+ has one)");
    this.#fetch = f;
    this.#timeoutMs = nonNegative(options.timeoutMs, 30_000, "timeoutMs");
    this.#retries = Math.floor(nonNegative(options.retries, 3, "retries"));
    this.#baseDelayMs = nonNegative(options.retryBaseDelayMs, 200, "retryBaseDelayMs");
    this.#maxDelayMs = nonNegative(options.retryMaxDelayMs, 30_000, "retryMaxDelayMs");
    this.sleep = options.sleep ?? defaultSleep;
    this.random = options.random ?? Math.random;
  }

  /** The wait before retry `attempt` (0-based): half fixed, half random, capped. */
  backoff(attempt: number): number {
    const cap = Math.min(this.#maxDelayMs, this.#baseDelayMs * 2 ** Math.min(attempt, 30));
    return cap / 2 + (cap / 2) * this.random();
  }

  get maxDelayMs(): number {
    return this.#maxDelayMs;
  }

  /** The per-attempt timeout, in ms. */
  get timeoutMs(): number {
    return this.#timeoutMs;
  }

  async call(method: string, path: string, options: CallOptions = {}): Promise<CallResult | null> {
    let url = this.#base + path;
    if (options.query) {
      const params = new URLSearchParams();
      for (const [name, value] of Object.entries(options.query)) {
        if (Array.isArray(value)) for (const v of value as readonly string[]) params.append(name, v);
        else if (value !== undefined) params.set(name, String(value));
      }
      const qs = params.toString();
      if (qs) url += `?${qs}`;
    }
    const headers: Record<string, string> = { accept: "application/json, application/problem+json" };
    if (this.#authorization) headers["authorization"] = this.#authorization;
    let body: string | undefined;
    if (options.body !== undefined) {
      body = JSON.stringify(options.body);
      headers["content-type"] = "application/json";
    }
    const what = `${method} ${path}`;
    const timeoutMs = (options.timeoutMs ?? this.#timeoutMs) + (options.extraTimeoutMs ?? 0);
    const retries = options.retries ?? this.#retries;

    for (let attempt = 0; ; attempt++) {
      const controller = new AbortController();
      let timedOut = false;
      const timer = setTimeout(() => {
        timedOut = true;
        controller.abort();
      }, timeoutMs);
      let status: number;
      let statusText: string | undefined;
      let retryAfter: string | null;
      let contentType: string | null;
      let text: string;
      try {
        const init: FetchInit = { method, headers, signal: controller.signal };
        if (body !== undefined) init.body = body;
        const response = await this.#fetch(url, init);
        status = response.status;
        statusText = response.statusText;
        retryAfter = response.headers.get("retry-after");
        contentType = response.headers.get("content-type");
        text = await response.text();
      } catch (cause) {
        clearTimeout(timer);
        if (attempt < retries) {
          await this.sleep(this.backoff(attempt));
          continue;
        }
        throw new ConnectionError({
          status: 0,
          type: timedOut ? PROBLEM_TIMEOUT : PROBLEM_CONNECTION,
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
      if (status === 404 && options.nullOn404 && problemType(contentType, text) === PROBLEM_NOT_FOUND) return null;

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

function nonNegative(value: number | undefined, fallback: number, name: string): number {
  if (value === undefined) return fallback;
  if (typeof value !== "number" || !Number.isFinite(value) || value < 0) {
    throw new TypeError(`Idem: ${name} must be a non-negative number`);
  }
  return value;
}

/** Node's error codes for a failed connection, in words. */
const REASONS: Record<string, string> = {
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
function describe(cause: unknown): string {
  if (cause instanceof Error) {
    const inner = (cause as { cause?: unknown }).cause;
    const code = inner && typeof inner === "object" ? (inner as { code?: unknown }).code : undefined;
    if (typeof code !== "string") return cause.message;
    return `${REASONS[code] ?? (inner instanceof Error ? inner.message : cause.message)} [${code}]`;
  }
  return String(cause);
}

/** The base URL without any user or password in it, as an error may show it. */
function where(base: string): string {
  try {
    const url = new URL(base);
    url.username = "";
    url.password = "";
    return url.toString().replace(/\/+$/, "");
  } catch {
    return base;
  }
}

function parseBody(text: string): unknown {
  if (text === "") return undefined;
  try {
    return JSON.parse(text);
  } catch {
    return text;
  }
}

/**
 * A 2xx answer without the fields the call needs (`200 {}`, an HTML page): not idem's answer, so
 * not a result either. The not-idem error, naming the URL, as for an error answer that is not an
 * idem problem document.
 */
function notIdemAnswer(status: number, contentType: string | null, text: string, expected: string, what: string, base: string): IdemError {
  let json = true;
  try {
    JSON.parse(text);
  } catch {
    json = false;
  }
  const got = text === ""
    ? `with an empty body (expected ${expected})`
    : json
      ? `without the fields of idem's answer (expected ${expected})`
      : `with a body that is not JSON (${contentType ?? "no Content-Type"})`;
  return new IdemError({
    status,
    title: "Invalid response",
    detail: `${base} answered ${status} to ${what} ${got}: it does not look like idem (check the client's \`url\` option or IDEM_URL)`,
    notIdem: true,
  });
}

function problemType(contentType: string | null, text: string): string | undefined {
  if (!text || (contentType !== null && !/json/i.test(contentType))) return undefined;
  try {
    const parsed: unknown = JSON.parse(text);
    const type = parsed && typeof parsed === "object" ? (parsed as { type?: unknown }).type : undefined;
    return typeof type === "string" ? type : undefined;
  } catch {
    return undefined;
  }
}

function problemError(
  status: number,
  statusText: string | undefined,
  contentType: string | null,
  text: string,
  retryAfterSeconds: number | undefined,
  what: string,
  base: string,
): IdemError {
  let problem: Problem | undefined;
  if (text && (contentType === null || /json/i.test(contentType))) {
    try {
      const parsed: unknown = JSON.parse(text);
      if (parsed && typeof parsed === "object" && !Array.isArray(parsed)) problem = parsed as Problem;
    } catch {
      // not JSON: described below by status alone
    }
  }
  const str = (v: unknown): string | undefined => (typeof v === "string" ? v : undefined);
  const notIdem = !isIdemProblem(contentType, problem);
  let detail = str(problem?.detail) ?? (problem ? undefined : `${what} answered ${status}`);
  if (notIdem) {
    detail =
      `${base} answered ${status} to ${what} without an idem problem document: it does not look like idem ` +
      "(check the client's `url` option or IDEM_URL)" +
      (problem?.detail !== undefined ? ` [its detail: ${String(problem.detail)}]` : "");
  }
  return errorFor({
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
function isIdemProblem(contentType: string | null, problem: Problem | undefined): boolean {
  const problemJson = contentType !== null && /^application\/problem\+json\b/i.test(contentType.trim());
  return problemJson && typeof problem?.type === "string" && problem.type.startsWith("urn:idem:problem:");
}

// ---------------------------------------------------------------------------------------------
// What each call needs of a success answer's body. A 2xx answer without these fields (a server
// that answers `200 {}` or an HTML page to anything) is not idem's: `call` throws the not-idem
// error naming the URL instead of returning it as a result (`claimed` missing is not
// `claimed: false`).

/** A shape a 2xx body must have: `fits` tells, `expected` says it in the error. */
export interface Shape {
  readonly expected: string;
  fits(body: unknown): boolean;
}

type Kind = "string" | "boolean" | "integer" | "array";

const isObject = (v: unknown): v is Record<string, unknown> => typeof v === "object" && v !== null && !Array.isArray(v);

function kindFits(value: unknown, kind: Kind): boolean {
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

function describeFields(fields: Record<string, Kind>): string {
  return `{ ${Object.entries(fields).map(([name, kind]) => `${name}: ${kind}`).join(", ")} }`;
}

function fieldsFit(body: unknown, fields: Record<string, Kind>): body is Record<string, unknown> {
  return isObject(body) && Object.entries(fields).every(([name, kind]) => kindFits(body[name], kind));
}

/** An object with these fields, of these kinds (others may be there too). */
function object(fields: Record<string, Kind>): Shape {
  return { expected: describeFields(fields), fits: (body) => fieldsFit(body, fields) };
}

/** `{ [name]: [item…] }`, each item an object with `fields`. */
function listOf(name: string, fields: Record<string, Kind>): Shape {
  return {
    expected: `{ ${name}: [${describeFields(fields)}, …] }`,
    fits: (body) => isObject(body) && Array.isArray(body[name]) && (body[name] as unknown[]).every((item) => fieldsFit(item, fields)),
  };
}

/** A claim's answer: `claimed` must be a boolean (missing is not `false`). */
export const CLAIM = object({ claimed: "boolean", id: "string" });
export const CLAIM_BATCH = listOf("results", { claimed: "boolean", id: "string" });
export const LOOKUP = listOf("results", { id: "string", exists: "boolean" });
export const EXISTS = object({ exists: "boolean" });
export const CLAIM_RECORD = object({ id: "string" });
export const CLAIM_PAGE = object({ items: "array" });
export const DELETED = object({ deleted: "integer" });

/** A begin's answer: started with its lease token, or completed. */
export const BEGIN: Shape = {
  expected: '{ status: "started", id: string, token: string } or { status: "completed", id: string, result }',
  fits: (body) =>
    isObject(body) &&
    typeof body["id"] === "string" &&
    ((body["status"] === "started" && typeof body["token"] === "string" && body["token"] !== "") || body["status"] === "completed"),
};
export const COMPLETED: Shape = {
  expected: '{ status: "completed", id: string, result }',
  fits: (body) => isObject(body) && body["status"] === "completed" && typeof body["id"] === "string",
};
export const EXTENDED = object({ lease_expires_at: "string" });
export const OPERATION = object({ status: "string", id: "string" });

export const RECEIPT_PAGE = object({ receipts: "array" });
export const RECEIPT = object({ id: "string", status: "string" });
export const RECEIPT_ACK = object({ receipt_id: "string", status: "string" });
export const MATCHING = object({ matching: "integer" });
export const QUEUED = object({ queued: "integer" });

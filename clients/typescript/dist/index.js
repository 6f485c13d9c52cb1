/**
 * idem-client: the TypeScript client of idem, a server that makes side
 * effects happen once. ESM and CommonJS, no runtime dependencies; Node 18+, Deno and Bun.
 */
export { Idem } from "./client.js";
export { claimId } from "./keys.js";
export { verifyWebhook } from "./webhook.js";
export { ConnectionError, ForbiddenError, IdemError, InProgressError, LeaseLostError, MismatchError, UnavailableError, WebhookVerificationError, PROBLEM_CONNECTION, PROBLEM_FINGERPRINT_MISMATCH, PROBLEM_FORBIDDEN, PROBLEM_IN_PROGRESS, PROBLEM_LEASE_LOST, PROBLEM_NOT_FOUND, PROBLEM_NO_SUCH_ROUTE, PROBLEM_OUTCOME_UNKNOWN, PROBLEM_STORE_UNAVAILABLE, PROBLEM_TIMEOUT, } from "./errors.js";
export { DEFAULT_URL } from "./http.js";

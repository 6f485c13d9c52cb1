/**
 * idem-client: the TypeScript client of idem, a server that makes side
 * effects happen once. ESM and CommonJS, no runtime dependencies; Node 18+, Deno and Bun.
 */

export { Idem } from "./client.js";
export { claimId, type KeyRef } from "./keys.js";
export { verifyWebhook, type HeadersLike, type VerifyOptions } from "./webhook.js";
export {
  ConnectionError,
  ForbiddenError,
  IdemError,
  InProgressError,
  LeaseLostError,
  MismatchError,
  UnavailableError,
  WebhookVerificationError,
  PROBLEM_CONNECTION,
  PROBLEM_FINGERPRINT_MISMATCH,
  PROBLEM_FORBIDDEN,
  PROBLEM_IN_PROGRESS,
  PROBLEM_LEASE_LOST,
  PROBLEM_NOT_FOUND,
  PROBLEM_NO_SUCH_ROUTE,
  PROBLEM_OUTCOME_UNKNOWN,
  PROBLEM_STORE_UNAVAILABLE,
  PROBLEM_TIMEOUT,
  type IdemErrorInit,
  type Problem,
} from "./errors.js";
export { DEFAULT_URL } from "./http.js";
export type { FetchInit, FetchLike, FetchResponseLike, IdemOptions } from "./http.js";
export type {
  BatchOptions,
  Claims,
  ClaimInput,
  ClaimIterateOptions,
  ClaimListOptions,
  ClaimPage,
  ClaimOptions,
  ClaimRecord,
  ClaimResult,
  ExistsQuery,
  LookupResult,
} from "./claims.js";
export type {
  BeginOptions,
  BeginResult,
  CompletedOperation,
  OperationRecord,
  Operations,
  RunContext,
  RunOptions,
  StartedOperation,
} from "./operations.js";
export type {
  Attempt,
  BulkReplayFilter,
  Receipt,
  ReceiptAck,
  ReplayAck,
  ReceiptFilter,
  ReceiptPage,
  ReceiptStatus,
  Receipts,
  ResultWebhookState,
} from "./receipts.js";

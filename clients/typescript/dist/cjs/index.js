"use strict";
/**
 * idem-client: the TypeScript client of idem, a server that makes side
 * effects happen once. ESM and CommonJS, no runtime dependencies; Node 18+, Deno and Bun.
 */
Object.defineProperty(exports, "__esModule", { value: true });
exports.DEFAULT_URL = exports.PROBLEM_TIMEOUT = exports.PROBLEM_STORE_UNAVAILABLE = exports.PROBLEM_OUTCOME_UNKNOWN = exports.PROBLEM_NO_SUCH_ROUTE = exports.PROBLEM_NOT_FOUND = exports.PROBLEM_LEASE_LOST = exports.PROBLEM_IN_PROGRESS = exports.PROBLEM_FORBIDDEN = exports.PROBLEM_FINGERPRINT_MISMATCH = exports.PROBLEM_CONNECTION = exports.WebhookVerificationError = exports.UnavailableError = exports.MismatchError = exports.LeaseLostError = exports.InProgressError = exports.IdemError = exports.ForbiddenError = exports.ConnectionError = exports.verifyWebhook = exports.claimId = exports.Idem = void 0;
var client_js_1 = require("./client.js");
Object.defineProperty(exports, "Idem", { enumerable: true, get: function () { return client_js_1.Idem; } });
var keys_js_1 = require("./keys.js");
Object.defineProperty(exports, "claimId", { enumerable: true, get: function () { return keys_js_1.claimId; } });
var webhook_js_1 = require("./webhook.js");
Object.defineProperty(exports, "verifyWebhook", { enumerable: true, get: function () { return webhook_js_1.verifyWebhook; } });
var errors_js_1 = require("./errors.js");
Object.defineProperty(exports, "ConnectionError", { enumerable: true, get: function () { return errors_js_1.ConnectionError; } });
Object.defineProperty(exports, "ForbiddenError", { enumerable: true, get: function () { return errors_js_1.ForbiddenError; } });
Object.defineProperty(exports, "IdemError", { enumerable: true, get: function () { return errors_js_1.IdemError; } });
Object.defineProperty(exports, "InProgressError", { enumerable: true, get: function () { return errors_js_1.InProgressError; } });
Object.defineProperty(exports, "LeaseLostError", { enumerable: true, get: function () { return errors_js_1.LeaseLostError; } });
Object.defineProperty(exports, "MismatchError", { enumerable: true, get: function () { return errors_js_1.MismatchError; } });
Object.defineProperty(exports, "UnavailableError", { enumerable: true, get: function () { return errors_js_1.UnavailableError; } });
Object.defineProperty(exports, "WebhookVerificationError", { enumerable: true, get: function () { return errors_js_1.WebhookVerificationError; } });
Object.defineProperty(exports, "PROBLEM_CONNECTION", { enumerable: true, get: function () { return errors_js_1.PROBLEM_CONNECTION; } });
Object.defineProperty(exports, "PROBLEM_FINGERPRINT_MISMATCH", { enumerable: true, get: function () { return errors_js_1.PROBLEM_FINGERPRINT_MISMATCH; } });
Object.defineProperty(exports, "PROBLEM_FORBIDDEN", { enumerable: true, get: function () { return errors_js_1.PROBLEM_FORBIDDEN; } });
Object.defineProperty(exports, "PROBLEM_IN_PROGRESS", { enumerable: true, get: function () { return errors_js_1.PROBLEM_IN_PROGRESS; } });
Object.defineProperty(exports, "PROBLEM_LEASE_LOST", { enumerable: true, get: function () { return errors_js_1.PROBLEM_LEASE_LOST; } });
Object.defineProperty(exports, "PROBLEM_NOT_FOUND", { enumerable: true, get: function () { return errors_js_1.PROBLEM_NOT_FOUND; } });
Object.defineProperty(exports, "PROBLEM_NO_SUCH_ROUTE", { enumerable: true, get: function () { return errors_js_1.PROBLEM_NO_SUCH_ROUTE; } });
Object.defineProperty(exports, "PROBLEM_OUTCOME_UNKNOWN", { enumerable: true, get: function () { return errors_js_1.PROBLEM_OUTCOME_UNKNOWN; } });
Object.defineProperty(exports, "PROBLEM_STORE_UNAVAILABLE", { enumerable: true, get: function () { return errors_js_1.PROBLEM_STORE_UNAVAILABLE; } });
Object.defineProperty(exports, "PROBLEM_TIMEOUT", { enumerable: true, get: function () { return errors_js_1.PROBLEM_TIMEOUT; } });
var http_js_1 = require("./http.js");
Object.defineProperty(exports, "DEFAULT_URL", { enumerable: true, get: function () { return http_js_1.DEFAULT_URL; } });

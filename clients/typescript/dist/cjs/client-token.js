"use strict";
/**
 * Client tokens (docs/reference/api.md, contract §10 "an unknown outcome is not called a failure").
 *
 * A claim, a batch claim and an operation's begin carry a `client_token` chosen once per logical
 * call and sent again, unchanged, on every retry of that call. When the store's answer was lost
 * after the write was made (a 503 `outcome-unknown`, a dropped connection, a timeout), the retry
 * with the same token is told that the claim, or the lease, it finds is its own: `claimed: true`
 * again, or the same lease `token` and `fence`. A token made for one call is never reused for
 * another: that would tell a second call it won what the first won.
 */
Object.defineProperty(exports, "__esModule", { value: true });
exports.newClientToken = newClientToken;
exports.clientTokenOf = clientTokenOf;
const node_crypto_1 = require("node:crypto");
/** A fresh token for one logical call: a random UUID v4 from the platform's CSPRNG. */
function newClientToken() {
    return (0, node_crypto_1.randomUUID)();
}
/** The caller's own token when given (e.g. kept across a process restart), else a fresh one. */
function clientTokenOf(given) {
    if (given === undefined)
        return newClientToken();
    if (typeof given !== "string" || !/^[\x20-\x7e]{1,255}$/.test(given)) {
        throw new TypeError("Idem: clientToken must be 1 to 255 printable ASCII characters");
    }
    return given;
}

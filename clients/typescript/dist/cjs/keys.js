"use strict";
/** Keys (`key` or `parts`) and their ids, computed exactly as the server does. */
Object.defineProperty(exports, "__esModule", { value: true });
exports.MAX_PART_BYTES = exports.MAX_PARTS = void 0;
exports.claimId = claimId;
exports.keyBody = keyBody;
exports.idOf = idOf;
exports.segment = segment;
const node_crypto_1 = require("node:crypto");
exports.MAX_PARTS = 16;
exports.MAX_PART_BYTES = 1024;
const encoder = new TextEncoder();
/**
 * The id idem gives a key: the lowercase hex SHA-256 of the parts joined by a NUL byte (a string is
 * the one-part form). Synchronous (it uses `node:crypto`, which Node, Deno and Bun all provide).
 *
 * Throws a `TypeError` naming the part for parts the server would refuse with a 400: none or more
 * than 16, an empty part, a part over 1 KiB of UTF-8, or a part containing NUL.
 */
function claimId(parts) {
    const list = typeof parts === "string" ? [parts] : parts;
    checkParts(list, typeof parts === "string" ? "key" : "parts");
    const hash = (0, node_crypto_1.createHash)("sha256");
    list.forEach((part, i) => {
        if (i > 0)
            hash.update(new Uint8Array([0]));
        hash.update(encoder.encode(part));
    });
    return hash.digest("hex");
}
function checkParts(parts, field) {
    if (!Array.isArray(parts))
        throw new TypeError(`${field} must be an array of strings`);
    if (parts.length === 0)
        throw new TypeError(`${field} must have at least one part`);
    if (parts.length > exports.MAX_PARTS)
        throw new TypeError(`${field} must have at most ${exports.MAX_PARTS} parts`);
    parts.forEach((part, i) => {
        const name = field === "key" ? "key" : `${field}[${i}]`;
        if (typeof part !== "string")
            throw new TypeError(`${name} must be a string`);
        if (part.length === 0)
            throw new TypeError(`${name} must not be empty`);
        if (part.includes("\0"))
            throw new TypeError(`${name} must not contain NUL`);
        if (encoder.encode(part).length > exports.MAX_PART_BYTES) {
            throw new TypeError(`${name} must be at most ${exports.MAX_PART_BYTES} bytes`);
        }
    });
}
/** The request-body form of a key: `{key}` or `{parts}` (both, if both were given: the server says 400). */
function keyBody(ref) {
    if (ref === null || typeof ref !== "object")
        throw new TypeError("a key must be { key } or { parts }");
    const out = {};
    if (ref.key !== undefined)
        out.key = ref.key;
    if (ref.parts !== undefined)
        out.parts = [...ref.parts];
    return out;
}
/** The id of a `{key}`/`{parts}` reference, or the id string itself. */
function idOf(ref) {
    if (typeof ref === "string")
        return ref;
    if (ref === null || typeof ref !== "object")
        throw new TypeError("give an id, { key } or { parts }");
    if (ref.key !== undefined && ref.parts !== undefined)
        throw new TypeError("give either key or parts, not both");
    if (ref.key !== undefined)
        return claimId(ref.key);
    if (ref.parts !== undefined)
        return claimId(ref.parts);
    throw new TypeError("give an id, { key } or { parts }");
}
function segment(value, what) {
    if (typeof value !== "string" || value.length === 0)
        throw new TypeError(`${what} must be a non-empty string`);
    return encodeURIComponent(value);
}

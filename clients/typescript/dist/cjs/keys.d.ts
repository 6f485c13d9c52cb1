/** Keys (`key` or `parts`) and their ids, computed exactly as the server does. */
/** A key: `{ key: "…" }` (the one-part form) or `{ parts: ["…", …] }`. */
export type KeyRef = {
    key: string;
    parts?: undefined;
} | {
    parts: readonly string[];
    key?: undefined;
};
export declare const MAX_PARTS = 16;
export declare const MAX_PART_BYTES = 1024;
/**
 * The id idem gives a key: the lowercase hex SHA-256 of the parts joined by a NUL byte (a string is
 * the one-part form). Synchronous (it uses `node:crypto`, which Node, Deno and Bun all provide).
 *
 * Throws a `TypeError` naming the part for parts the server would refuse with a 400: none or more
 * than 16, an empty part, a part over 1 KiB of UTF-8, or a part containing NUL.
 */
export declare function claimId(parts: readonly string[] | string): string;
/** The request-body form of a key: `{key}` or `{parts}` (both, if both were given: the server says 400). */
export declare function keyBody(ref: KeyRef): {
    key?: string;
    parts?: string[];
};
/** The id of a `{key}`/`{parts}` reference, or the id string itself. */
export declare function idOf(ref: KeyRef | string): string;
export declare function segment(value: string, what: string): string;

/** The client: `new Idem({ url?, token? })` with `claims`, `operations` and `receipts`. */
import { Claims } from "./claims.js";
import { type IdemOptions } from "./http.js";
import { Operations } from "./operations.js";
import { Receipts } from "./receipts.js";
export declare class Idem {
    /** The Claims API: atomic first-writer-wins records. */
    readonly claims: Claims;
    /** The Operations API: begin / complete / release / extend, and `run`. */
    readonly operations: Operations;
    /** Receipts of inbound events: list, get, replay. */
    readonly receipts: Receipts;
    /**
     * `new Idem({ url?, token?, timeoutMs?, retries?, fetch? })`, `new Idem(url)`, or `new Idem()`.
     * Without a `url`, the `IDEM_URL` environment variable, else `http://127.0.0.1:7070`; without a
     * `token` (`undefined`), `IDEM_TOKEN` if set. The token is kept private: it is sent only as
     * `Authorization: Bearer …`.
     */
    constructor(options?: IdemOptions | string);
}

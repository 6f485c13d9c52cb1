/** The client: `new Idem({ url, token? })` with `claims`, `operations` and `receipts`. */
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
     * `new Idem({ url, token?, timeoutMs?, retries?, fetch? })`, or `new Idem(url)`.
     * The token is kept private: it is sent only as `Authorization: Bearer …`.
     */
    constructor(options: IdemOptions | string);
}

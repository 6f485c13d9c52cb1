/** The client: `new Idem({ url?, token? })` with `claims`, `operations` and `receipts`. */
import { Claims } from "./claims.js";
import { Transport } from "./http.js";
import { Operations } from "./operations.js";
import { Receipts } from "./receipts.js";
export class Idem {
    /** The Claims API: atomic first-writer-wins records. */
    claims;
    /** The Operations API: begin / complete / release / extend, and `run`. */
    operations;
    /** Receipts of inbound events: list, get, replay. */
    receipts;
    /**
     * `new Idem({ url?, token?, timeoutMs?, retries?, fetch? })`, `new Idem(url)`, or `new Idem()`.
     * Without a `url`, the `IDEM_URL` environment variable, else `http://127.0.0.1:7070`; without a
     * `token` (`undefined`), `IDEM_TOKEN` if set. The token is kept private: it is sent only as
     * `Authorization: Bearer …`.
     */
    constructor(options = {}) {
        const http = new Transport(typeof options === "string" ? { url: options } : options);
        this.claims = new Claims(http);
        this.operations = new Operations(http);
        this.receipts = new Receipts(http);
    }
}

"use strict";
/** The client: `new Idem({ url?, token? })` with `claims`, `operations` and `receipts`. */
Object.defineProperty(exports, "__esModule", { value: true });
exports.Idem = void 0;
const claims_js_1 = require("./claims.js");
const http_js_1 = require("./http.js");
const operations_js_1 = require("./operations.js");
const receipts_js_1 = require("./receipts.js");
class Idem {
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
        const http = new http_js_1.Transport(typeof options === "string" ? { url: options } : options);
        this.claims = new claims_js_1.Claims(http);
        this.operations = new operations_js_1.Operations(http);
        this.receipts = new receipts_js_1.Receipts(http);
    }
}
exports.Idem = Idem;

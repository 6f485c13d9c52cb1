/** The client: `new Idem({ url, token? })` with `claims`, `operations` and `receipts`. */

import { Claims } from "./claims.js";
import { Transport, type IdemOptions } from "./http.js";
import { Operations } from "./operations.js";
import { Receipts } from "./receipts.js";

export class Idem {
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
  constructor(options: IdemOptions | string) {
    const http = new Transport(typeof options === "string" ? { url: options } : options);
    this.claims = new Claims(http);
    this.operations = new Operations(http);
    this.receipts = new Receipts(http);
  }
}

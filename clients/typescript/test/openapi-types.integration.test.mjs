// The server's OpenAPI document against this client's own types: TypeScript types generated from a
// real `idem serve`'s GET /openapi.json by openapi-typescript must be assignable to what the client
// declares it receives (so a client generated from the document and this one agree), checked by a
// strict `tsc`.

import { test } from "node:test";
import assert from "node:assert/strict";
import { mkdtemp, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join, resolve, dirname } from "node:path";
import { fileURLToPath } from "node:url";
import { execFileSync } from "node:child_process";
import openapiTS, { astToString } from "openapi-typescript";

import { startIdem } from "./helpers.mjs";

const root = resolve(dirname(fileURLToPath(import.meta.url)), "..");

const CHECKS = `
import type { components } from "./api.js";
import type {
  ClaimRecord, LookupResult, StartedOperation, CompletedOperation, OperationRecord, Receipt, ReceiptAck, ReplayAck, Problem,
} from "${join(root, "dist", "index.js")}";

type S = components["schemas"];
/** Compiles only when what the server sends (Server) is something the client accepts (Client). */
type Accepts<Client, Server extends Client> = Server;

export type Checks = [
  Accepts<ClaimRecord, S["Record"]>,
  Accepts<{ claimed: boolean } & ClaimRecord, S["ClaimResponse"]>,
  Accepts<LookupResult, S["LookupResult"]>,
  Accepts<{ exists: boolean }, S["PrefixResponse"]>,
  Accepts<StartedOperation, S["Started"]>,
  Accepts<CompletedOperation, S["Completed"]>,
  Accepts<OperationRecord, S["OperationView"]>,
  Accepts<{ lease_expires_at: string }, S["Extended"]>,
  Accepts<Receipt, S["ReceiptView"]>,
  Accepts<Receipt[], S["ReceiptPage"]["receipts"]>,
  Accepts<ReceiptAck, S["IntakeResponse"]>,
  Accepts<ReplayAck, S["ReplayResponse"]>,
  Accepts<Problem, S["Problem"]>,
];
`;

test("types generated from the server's OpenAPI document fit the client's types", async () => {
  const server = await startIdem();
  try {
    const doc = await (await fetch(`${server.url}/openapi.json`)).json();
    const dir = await mkdtemp(join(tmpdir(), "idem-openapi-"));
    await writeFile(join(dir, "api.d.ts"), astToString(await openapiTS(doc)));
    await writeFile(join(dir, "check.ts"), CHECKS);
    const tsc = join(root, "node_modules", "typescript", "bin", "tsc");
    const args = ["--noEmit", "--strict", "--exactOptionalPropertyTypes", "--module", "nodenext", "--moduleResolution", "nodenext", "--target", "es2022", "--skipLibCheck", join(dir, "check.ts")];
    try {
      execFileSync(process.execPath, [tsc, ...args], { encoding: "utf8", stdio: "pipe" });
    } catch (e) {
      assert.fail(`the generated types do not fit the client's:\n${e.stdout}${e.stderr}`);
    }
  } finally {
    await server.stop();
  }
});

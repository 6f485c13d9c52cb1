// The seed-000 example (examples/survey, a TypeScript bot on this client) compiled with this
// package's own tsc and run twice in a row against a real idem: it checks its own expectations, and
// must pass again against the same server.

import { test } from "node:test";
import assert from "node:assert/strict";
import { copyFile, mkdir, mkdtemp, symlink, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { execFile } from "node:child_process";
import { promisify } from "node:util";

import { startIdem } from "./helpers.mjs";

const run = promisify(execFile);
const client = resolve(dirname(fileURLToPath(import.meta.url)), "..");
const example = resolve(client, "..", "..", "examples", "survey");

/** A build dir where `idem-client` resolves to this package, as `npm install` would make it. */
async function build() {
  const dir = await mkdtemp(join(tmpdir(), "idem-survey-"));
  await copyFile(join(example, "survey.ts"), join(dir, "survey.ts"));
  await mkdir(join(dir, "node_modules"));
  await symlink(client, join(dir, "node_modules", "idem-client"), "dir");
  await symlink(join(client, "node_modules", "@types"), join(dir, "node_modules", "@types"), "dir");
  await writeFile(join(dir, "package.json"), JSON.stringify({ type: "module", private: true }));
  await writeFile(join(dir, "tsconfig.json"), await import("node:fs/promises").then((fs) => fs.readFile(join(example, "tsconfig.json"), "utf8")));
  const tsc = join(client, "node_modules", "typescript", "bin", "tsc");
  await run(process.execPath, [tsc, "-p", join(dir, "tsconfig.json")]);
  return join(dir, "dist", "survey.js");
}

test("the survey example passes twice in a row against one idem", async () => {
  const script = await build();
  const server = await startIdem();
  try {
    for (const round of [1, 2]) {
      const { stdout } = await run(process.execPath, [script], { env: { ...process.env, IDEM_URL: server.url } });
      assert.match(stdout, /\nok\n?$/, `round ${round}:\n${stdout}`);
      assert.match(stdout, /ignored duplicate tap/, `round ${round}: the duplicates were ignored`);
    }
  } finally {
    await server.stop();
  }
});

// The seed-000 example (examples/survey, a TypeScript bot on this client) compiled with this
// package's own tsc and run twice in a row against a real idem: it checks its own expectations, and
// must pass again against the same server. (The Python examples are run by the server's tests,
// crates/idem-server/tests/it/examples.rs.)

import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import { copyFile, mkdir, mkdtemp, readFile, rm, symlink, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { execFile } from "node:child_process";
import { promisify } from "node:util";

import { freePort, startIdem } from "./helpers.mjs";

const run = promisify(execFile);
const client = resolve(dirname(fileURLToPath(import.meta.url)), "..");
const example = resolve(client, "..", "..", "examples", "survey");

let dir;
let script;

/**
 * A build dir where `idem-client` resolves to this package (its `dist/`), as `npm install` in
 * examples/survey would make it, without a network install: survey.ts and its tsconfig.json are
 * copied in, node_modules/idem-client and @types are symlinks into this package.
 */
before(async () => {
  dir = await mkdtemp(join(tmpdir(), "idem-survey-"));
  await copyFile(join(example, "survey.ts"), join(dir, "survey.ts"));
  await copyFile(join(example, "tsconfig.json"), join(dir, "tsconfig.json"));
  await mkdir(join(dir, "node_modules"));
  await symlink(client, join(dir, "node_modules", "idem-client"), "dir");
  await symlink(join(client, "node_modules", "@types"), join(dir, "node_modules", "@types"), "dir");
  await writeFile(join(dir, "package.json"), JSON.stringify({ type: "module", private: true }));
  const tsc = join(client, "node_modules", "typescript", "bin", "tsc");
  try {
    await run(process.execPath, [tsc, "-p", join(dir, "tsconfig.json")]);
  } catch (error) {
    assert.fail(`examples/survey/survey.ts does not compile:\n${error.stdout}${error.stderr}`);
  }
  script = join(dir, "dist", "survey.js");
  assert.ok((await readFile(script, "utf8")).includes("idem-client"), "compiled against idem-client");
});

after(async () => {
  if (dir) await rm(dir, { recursive: true, force: true });
});

/** Runs the compiled example; resolves to `{ code, stdout, stderr }` whatever its exit code. */
async function survey(url, env = {}) {
  const base = { ...process.env };
  delete base.IDEM_TOKEN;
  try {
    const { stdout, stderr } = await run(process.execPath, [script], {
      env: { ...base, IDEM_URL: url, ...env },
      timeout: 120_000,
    });
    return { code: 0, stdout, stderr };
  } catch (error) {
    return { code: error.code, stdout: error.stdout, stderr: error.stderr };
  }
}

test("the survey example passes twice in a row against one idem", async () => {
  const server = await startIdem();
  try {
    for (const round of [1, 2]) {
      const { code, stdout, stderr } = await survey(server.url);
      assert.equal(code, 0, `round ${round} exited ${code}:\n${stdout}\n${stderr}`);
      assert.match(stdout, /\nok\n?$/, `round ${round}:\n${stdout}`);
      assert.equal(stdout.match(/saved answer "A"/g)?.length, 1, `round ${round}: one of four taps saved:\n${stdout}`);
      assert.equal(stdout.match(/ignored duplicate tap/g)?.length, 4, `round ${round}: three taps and the "B" ignored:\n${stdout}`);
    }
  } finally {
    await server.stop();
  }
});

test("the survey example says plainly when idem is not running", async () => {
  const url = `http://127.0.0.1:${await freePort()}`; // nothing listens there
  const { code, stdout, stderr } = await survey(url);
  assert.equal(code, 1, `${stdout}\n${stderr}`);
  assert.match(stderr, new RegExp(`idem is not reachable at ${url.replaceAll(".", "\\.")}: start it with \`idem serve\``));
  assert.doesNotMatch(stderr, /at .*survey\.js:\d+/, "no stack trace");
});

test("the survey example says plainly when idem wants a token", async () => {
  const server = await startIdem({ config: '[auth]\ntokens = ["survey-t0ken"]\n' });
  try {
    const { code, stdout, stderr } = await survey(server.url);
    assert.equal(code, 1, `${stdout}\n${stderr}`);
    assert.match(stderr, /wants a token: set IDEM_TOKEN to one of its \[auth\] tokens/);
    assert.doesNotMatch(stderr, /at .*survey\.js:\d+/, "no stack trace");
    const wrong = await survey(server.url, { IDEM_TOKEN: "not-it" });
    assert.match(wrong.stderr, /does not know the token in IDEM_TOKEN/);
    const right = await survey(server.url, { IDEM_TOKEN: "survey-t0ken" });
    assert.equal(right.code, 0, `${right.stdout}\n${right.stderr}`);
  } finally {
    await server.stop();
  }
});

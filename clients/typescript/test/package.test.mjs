// The package as a project installs it: `npm pack`, then two projects made by `npm init -y` — one
// left CommonJS (`require`), one with "type": "module" (`import`) — each installing the tarball
// offline (it has no dependencies), running a script under this Node (process.execPath: Node 18 in
// `npm run test:node18`) that loads the client, checks its exported names against dist/index.js and
// makes calls to a fake idem in this process, and type-checking a .ts file against the installed
// declarations with `module: node16` (so each condition of `exports` must lead to types of its own
// format). No server binary, no network.

import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { createHash } from "node:crypto";
import { existsSync } from "node:fs";
import { mkdir, mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { createServer } from "node:http";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, test } from "node:test";
import { promisify } from "node:util";

import { packageDir } from "./helpers.mjs";

const exec = promisify(execFile);

// Under `npm test` npm says which npm and which Node runs it: use those (npm 11 refuses Node 18,
// which runs this file in `npm run test:node18`); run otherwise, the `npm` on PATH.
const npmCommand =
  /[\\/]npm-cli\.js$/.test(process.env.npm_execpath ?? "") && process.env.npm_node_execpath
    ? [process.env.npm_node_execpath, process.env.npm_execpath]
    : ["npm"];

// The npm running `npm test` exports its settings (npm_config_local_prefix is this package's
// folder): a child npm must not inherit them and install into this package instead.
const childEnv = Object.fromEntries(
  Object.entries(process.env).filter(
    ([k]) => !/^npm_/i.test(k) || /^npm_config_(cache|userconfig|globalconfig)$/i.test(k),
  ),
);
delete childEnv.IDEM_URL;
delete childEnv.IDEM_TOKEN;

function npm(args, cwd) {
  return exec(npmCommand[0], [...npmCommand.slice(1), ...args], { cwd, env: childEnv, timeout: 60_000 });
}

function node(args, cwd) {
  return exec(process.execPath, args, { cwd, env: childEnv, timeout: 30_000 });
}

const sha256 = (s) => createHash("sha256").update(s).digest("hex");

let root;
let server;
let url;
let expectedNames;
const projects = {};

/** A fake idem: a claim of namespace `pack` is created; namespace `busy` is held (409 in-progress). */
function fakeIdem(req, res) {
  const chunks = [];
  req.on("data", (c) => chunks.push(c));
  req.on("end", () => {
    const body = chunks.length ? JSON.parse(Buffer.concat(chunks).toString("utf8")) : {};
    const send = (status, type, value) => {
      res.writeHead(status, { "content-type": type }).end(JSON.stringify(value));
    };
    if (req.method === "POST" && req.url === "/v1/claims/pack") {
      const parts = body.parts ?? [body.key];
      send(201, "application/json", {
        claimed: true,
        namespace: "pack",
        id: sha256(parts.join("\0")),
        parts,
        data: body.data ?? null,
        created_at: "2026-01-01T00:00:00.000000Z",
        expires_at: null,
      });
    } else if (req.method === "POST" && req.url === "/v1/claims/busy") {
      send(409, "application/problem+json", {
        type: "urn:idem:problem:in-progress",
        title: "In progress",
        status: 409,
        detail: "held",
      });
    } else {
      send(404, "application/problem+json", { type: "urn:idem:problem:no-such-route", title: "Not Found", status: 404 });
    }
  });
}

// The same checks in both formats; `load` is how the script gets the module, `where` where from.
const CHECKS = `
const names = Object.keys(m).sort();
const idem = new m.Idem({ url: process.argv[2], retries: 0 });
const r = await idem.claims.claim("pack", { parts: [FORMAT, "user-3"], data: { answer: "A" } });
let busy = "no error";
try {
  await idem.claims.claim("busy", { key: "k" });
} catch (e) {
  busy = [e instanceof m.InProgressError, e instanceof m.IdemError, e.status, e.type].join(" ");
}
console.log(JSON.stringify({
  where,
  names,
  claimed: r.claimed,
  idMatches: r.record.id === m.claimId([FORMAT, "user-3"]),
  data: r.record.data,
  busy,
}));
`;

const CJS_SCRIPT = `"use strict";
const FORMAT = "commonjs";
const m = require("idem-client");
const where = require.resolve("idem-client");
(async () => {${CHECKS}})().catch((e) => { console.error(e); process.exit(1); });
`;

const ESM_SCRIPT = `import * as m from "idem-client";
import { fileURLToPath } from "node:url";
const FORMAT = "module";
const where = fileURLToPath(import.meta.resolve("idem-client"));
${CHECKS}`;

// Type-checked, never run: the README's usage, against the installed package's declarations.
const TYPES_TS = `import { Idem, IdemError, InProgressError, claimId, verifyWebhook, type ClaimResult } from "idem-client";
const idem: Idem = new Idem({ url: "http://127.0.0.1:7070", token: null });
export const pending: Promise<ClaimResult<{ answer: string }>> = idem.claims.claim("survey", { parts: ["s", "u"], data: { answer: "A" } });
export const id: string = claimId(["s", "u"]);
export const verify: (secret: string, headers: Record<string, string>, body: string) => unknown = verifyWebhook;
export const busy = (e: unknown): boolean => e instanceof InProgressError || e instanceof IdemError;
`;

const TSCONFIG = JSON.stringify({
  compilerOptions: {
    module: "node16",
    moduleResolution: "node16",
    target: "ES2022",
    lib: ["ES2022", "DOM"],
    types: [],
    strict: true,
    noEmit: true,
    skipLibCheck: true, // the declarations themselves are checked by test/types.ts; here, which ones are found
  },
  files: ["check.ts"],
});

before(async () => {
  expectedNames = Object.keys(await import("../dist/index.js")).sort();
  root = await mkdtemp(join(tmpdir(), "idem-client-pack-"));
  server = createServer(fakeIdem);
  await new Promise((done) => server.listen(0, "127.0.0.1", done));
  url = `http://127.0.0.1:${server.address().port}`;

  const { stdout } = await npm(["pack", "--json", "--pack-destination", root], packageDir);
  const tarball = join(root, JSON.parse(stdout)[0].filename);
  assert.ok(existsSync(tarball), `npm pack wrote ${tarball}`);

  await Promise.all(
    ["commonjs", "module"].map(async (format) => {
      const dir = join(root, format === "commonjs" ? "cjs-app" : "esm-app");
      await mkdir(dir);
      await npm(["init", "-y"], dir);
      if (format === "module") {
        const pkg = JSON.parse(await readFile(join(dir, "package.json"), "utf8"));
        await writeFile(join(dir, "package.json"), JSON.stringify({ ...pkg, type: "module" }, null, 2));
      }
      await npm(["install", "--offline", "--no-audit", "--no-fund", "--loglevel=error", tarball], dir);
      await writeFile(join(dir, "check.js"), format === "commonjs" ? CJS_SCRIPT : ESM_SCRIPT);
      await writeFile(join(dir, "check.ts"), TYPES_TS);
      await writeFile(join(dir, "tsconfig.json"), TSCONFIG);
      projects[format] = dir;
    }),
  );
});

after(async () => {
  server?.close();
  if (root) await rm(root, { recursive: true, force: true });
});

async function runCheck(format) {
  const dir = projects[format];
  const pkg = JSON.parse(await readFile(join(dir, "package.json"), "utf8"));
  // npm init -y writes "type": "commonjs" (npm 10.9 and later) or no "type" (earlier): both CommonJS.
  if (format === "commonjs") assert.ok([undefined, "commonjs"].includes(pkg.type), `npm init -y wrote "type": ${pkg.type}`);
  else assert.equal(pkg.type, "module");
  let out;
  try {
    out = await node(["check.js", url], dir);
  } catch (e) {
    assert.fail(`${format} project: node check.js failed:\n${e.stdout}${e.stderr}`);
  }
  return JSON.parse(out.stdout);
}

function assertChecks(format, got, entry) {
  assert.equal(got.where, join(projects[format], "node_modules", "idem-client", ...entry));
  assert.deepEqual(got.names, expectedNames, `${format}: the exported names are dist/index.js's`);
  for (const name of ["Idem", "claimId", "verifyWebhook", "IdemError", "InProgressError", "MismatchError", "UnavailableError"]) {
    assert.ok(got.names.includes(name), `${format}: exports ${name}`);
  }
  assert.equal(got.claimed, true);
  assert.equal(got.idMatches, true, "claimId agrees with the id the fake computed");
  assert.deepEqual(got.data, { answer: "A" });
  assert.equal(got.busy, "true true 409 urn:idem:problem:in-progress");
}

test("a CommonJS project (npm init -y) requires the installed package: dist/cjs", async () => {
  const got = await runCheck("commonjs");
  assertChecks("commonjs", got, ["dist", "cjs", "index.js"]);
});

test("an ESM project (\"type\": \"module\") imports the installed package: dist/", async () => {
  const got = await runCheck("module");
  assertChecks("module", got, ["dist", "index.js"]);
});

test("TypeScript (module node16) finds each format's own declarations in the installed package", async () => {
  const tsc = join(packageDir, "node_modules", "typescript", "bin", "tsc");
  await Promise.all(
    Object.entries({ commonjs: ["dist", "cjs", "index.d.ts"], module: ["dist", "index.d.ts"] }).map(async ([format, entry]) => {
      const dir = projects[format];
      let out;
      try {
        out = await node([tsc, "-p", "tsconfig.json", "--listFiles"], dir);
      } catch (e) {
        assert.fail(`${format} project: check.ts does not type-check against the installed package:\n${e.stdout}${e.stderr}`);
      }
      const listed = out.stdout.split("\n").map((l) => l.trim());
      const index = join(dir, "node_modules", "idem-client", ...entry);
      assert.ok(listed.includes(index), `${format}: tsc read ${index}; it listed:\n${out.stdout}`);
      const other = join(dir, "node_modules", "idem-client", ...(format === "commonjs" ? ["dist", "index.d.ts"] : ["dist", "cjs", "index.d.ts"]));
      assert.ok(!listed.includes(other), `${format}: tsc must not read ${other}`);
    }),
  );
});

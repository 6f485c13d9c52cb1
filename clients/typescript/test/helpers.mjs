// Shared by the tests: a fake fetch for unit tests, and a real `idem serve` for integration tests.

import { spawn } from "node:child_process";
import { existsSync } from "node:fs";
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

// The client reads IDEM_URL and IDEM_TOKEN when none is given: the tests give theirs, and a
// developer's own settings must not reach them.
delete process.env.IDEM_URL;
delete process.env.IDEM_TOKEN;

export const packageDir = resolve(dirname(fileURLToPath(import.meta.url)), "..");

/** `IDEM_TEST_BIN`, else `../../target/debug/idem` relative to the package folder. */
export const idemBin = process.env.IDEM_TEST_BIN
  ? resolve(process.env.IDEM_TEST_BIN)
  : resolve(packageDir, "../../target/debug/idem");

// ---------------------------------------------------------------------------------------------
// Fake fetch

/** A response for the fake fetch. */
export function reply(status, body, headers = {}) {
  const h = new Headers(headers);
  let text = "";
  if (body !== undefined) {
    text = typeof body === "string" ? body : JSON.stringify(body);
    if (!h.has("content-type")) {
      h.set("content-type", status >= 400 ? "application/problem+json" : "application/json");
    }
  }
  return new Response(status === 204 ? null : text, { status, headers: h });
}

export function problem(status, type, extra = {}) {
  return reply(status, { type, title: extra.title ?? "Problem", status, detail: extra.detail ?? "detail", ...extra }, extra.headers ?? {});
}

/**
 * A fake fetch that answers with `handler(request)` (a Response, a value to throw, or a promise)
 * and records every call as `{ method, url, path, headers, body, signal }`.
 */
export function fakeFetch(handler) {
  const calls = [];
  const fetch = async (url, init) => {
    const u = new URL(url);
    const call = {
      method: init.method,
      url,
      path: u.pathname,
      query: Object.fromEntries(u.searchParams),
      headers: init.headers,
      body: init.body === undefined ? undefined : JSON.parse(init.body),
      signal: init.signal,
    };
    calls.push(call);
    const out = await handler(call, calls.length - 1);
    if (out instanceof Response) return out;
    throw out;
  };
  return { fetch, calls };
}

/**
 * A real `fetch` whose first `lose` answers are lost on the way back: each request reaches the server
 * and is answered, but the caller sees a reset connection. Records every request body (`sent`) and
 * every lost answer (`lost`, parsed).
 */
export function losingFetch(lose = 1) {
  const sent = [];
  const lost = [];
  const fetch = async (url, init) => {
    sent.push(init.body === undefined ? undefined : JSON.parse(init.body));
    const res = await globalThis.fetch(url, init);
    if (lost.length >= lose) return res;
    lost.push({ status: res.status, body: await res.json() });
    throw new TypeError("fetch failed", { cause: Object.assign(new Error("socket hang up"), { code: "ECONNRESET" }) });
  };
  return { fetch, sent, lost };
}

/** An instant sleep that records what it was asked to wait. */
export function recordingSleep() {
  const waits = [];
  const sleep = async (ms) => {
    waits.push(ms);
  };
  return { sleep, waits };
}

// ---------------------------------------------------------------------------------------------
// A real idem server

export function freePort() {
  return new Promise((resolvePort, reject) => {
    const srv = createServer();
    srv.unref();
    srv.on("error", reject);
    srv.listen(0, "127.0.0.1", () => {
      const { port } = srv.address();
      srv.close(() => resolvePort(port));
    });
  });
}

export function sleep(ms) {
  return new Promise((r) => setTimeout(r, ms));
}

/**
 * The server's environment: ours without any IDEM_* variable, so that a developer's own idem settings
 * (IDEM_CONFIG, IDEM_STORE__TYPE, …) do not leak into the test server.
 */
function serverEnv() {
  const env = Object.fromEntries(Object.entries(process.env).filter(([name]) => !name.startsWith("IDEM_")));
  env.IDEM_LOG__LEVEL = "warn";
  return env;
}

/**
 * Start `idem serve` on a free port with a temp data dir (and `config`, a TOML string, if given);
 * resolves once `GET /healthz` answers 200. Returns `{ url, port, stop(), logs() }`.
 */
export async function startIdem({ config } = {}) {
  if (!existsSync(idemBin)) {
    throw new Error(
      `the idem binary is not at ${idemBin}: build it (cargo build -p idem-server) or set IDEM_TEST_BIN`,
    );
  }
  const dir = await mkdtemp(join(tmpdir(), "idem-ts-"));
  const args = [];
  if (config !== undefined) {
    const file = join(dir, "idem.toml");
    await writeFile(file, config);
    args.push("--config", file);
  }
  for (let tries = 0; ; tries++) {
    const port = await freePort();
    const child = spawn(
      idemBin,
      ["serve", "--listen", `127.0.0.1:${port}`, "--data-dir", join(dir, "data"), ...args],
      { stdio: ["ignore", "pipe", "pipe"], env: serverEnv() },
    );
    let output = "";
    child.stdout.on("data", (d) => (output += d));
    child.stderr.on("data", (d) => (output += d));
    let exited = null;
    const exit = new Promise((r) => child.once("exit", (code, signal) => r((exited = { code, signal }))));
    const url = `http://127.0.0.1:${port}`;
    const deadline = Date.now() + 30_000;
    let up = false;
    while (Date.now() < deadline && exited === null) {
      try {
        const res = await fetch(`${url}/healthz`, { signal: AbortSignal.timeout(1000) });
        await res.arrayBuffer();
        if (res.status === 200) {
          up = true;
          break;
        }
      } catch {
        // not listening yet
      }
      await sleep(50);
    }
    if (up) {
      const stop = async () => {
        if (exited === null) {
          child.kill("SIGTERM");
          const timer = setTimeout(() => child.kill("SIGKILL"), 10_000);
          await exit;
          clearTimeout(timer);
        }
        await rm(dir, { recursive: true, force: true });
      };
      return { url, port, dir, stop, logs: () => output };
    }
    if (exited === null) {
      child.kill("SIGKILL");
      await exit;
    }
    if (tries >= 2) {
      await rm(dir, { recursive: true, force: true });
      throw new Error(`idem serve did not become healthy (exit ${JSON.stringify(exited)}):\n${output}`);
    }
  }
}

/** A `whsec_` secret of `n` random-looking bytes (deterministic for a seed). */
export function makeSecret(n = 32, seed = 7) {
  const bytes = Buffer.alloc(n);
  for (let i = 0; i < n; i++) bytes[i] = (seed * 31 + i * 17) & 0xff;
  return `whsec_${bytes.toString("base64")}`;
}

// ---------------------------------------------------------------------------------------------
// A proxy in front of a real idem

/**
 * An HTTP proxy in front of `target` (a real idem) that forwards every request, unless
 * `decide(entry, log)` says otherwise: `{ answer: { status, headers?, body? } }` answers instead
 * (the request does not reach idem), `{ delayMs }` forwards it and holds the answer back that
 * long. Every request is logged as `{ method, path, at, status }` (`at`: when it arrived, ms;
 * `status`: what the client was answered). Returns `{ url, log, close() }`.
 */
export async function proxy(target, decide = () => undefined) {
  const { createServer: createHttpServer } = await import("node:http");
  const log = [];
  const srv = createHttpServer(async (req, res) => {
    const chunks = [];
    for await (const chunk of req) chunks.push(chunk);
    const body = Buffer.concat(chunks);
    const entry = { method: req.method, path: req.url, at: Date.now(), status: undefined };
    log.push(entry);
    const plan = decide(entry, log) ?? {};
    try {
      if (plan.answer) {
        const { status, headers = {}, body: answer } = plan.answer;
        entry.status = status;
        res.writeHead(status, { "content-type": "application/problem+json", ...headers });
        res.end(answer === undefined ? "" : JSON.stringify(answer));
        return;
      }
      const headers = {};
      for (const name of ["content-type", "authorization", "accept"]) if (req.headers[name]) headers[name] = req.headers[name];
      const upstream = await fetch(target + req.url, { method: req.method, headers, body: body.length > 0 ? body : undefined });
      const answer = Buffer.from(await upstream.arrayBuffer());
      if (plan.delayMs) await sleep(plan.delayMs);
      entry.status = upstream.status;
      const out = {};
      for (const name of ["content-type", "retry-after"]) if (upstream.headers.get(name)) out[name] = upstream.headers.get(name);
      res.writeHead(upstream.status, out);
      res.end(answer);
    } catch (err) {
      entry.status = 0;
      res.destroy(err);
    }
  });
  await new Promise((r) => srv.listen(0, "127.0.0.1", r));
  return {
    url: `http://127.0.0.1:${srv.address().port}`,
    log,
    close: () =>
      new Promise((r) => {
        srv.closeAllConnections?.();
        srv.close(r);
      }),
  };
}

/** idem's answer while its store is away: `503` problem store-unavailable with `Retry-After: 1`. */
export const STORE_UNAVAILABLE = {
  status: 503,
  headers: { "retry-after": "1" },
  body: { type: "urn:idem:problem:store-unavailable", title: "Store unavailable", status: 503, detail: "the store did not answer (test outage)" },
};

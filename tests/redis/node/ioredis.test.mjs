// ioredis, the Redis client most Node idempotency code runs on, against idem's Redis protocol
// (`[resp]`): a real `idem serve` ($IDEM_TEST_BIN, default <repo>/target/debug/idem) on a temp data
// dir and free ports, open (no tokens, loopback) and with tokens. ioredis connects as it does to
// Redis (HELLO 3 or AUTH, CLIENT SETINFO, then INFO for its ready check), in RESP2 and RESP3
// (ioredis 6's default). Run: npm ci && node --test (in tests/redis/node).

import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { connect, createServer } from "node:net";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { after, before, describe, test } from "node:test";
import { fileURLToPath } from "node:url";

import Redis from "ioredis";

const repo = resolve(dirname(fileURLToPath(import.meta.url)), "../../..");
const idemBin = process.env.IDEM_TEST_BIN ? resolve(process.env.IDEM_TEST_BIN) : join(repo, "target/debug/idem");
const WRITER = "writer-s3cret";
const READER = "reader-s3cret";

function freePort() {
  return new Promise((ok, fail) => {
    const server = createServer();
    server.once("error", fail);
    server.listen(0, "127.0.0.1", () => {
      const { port } = server.address();
      server.close(() => ok(port));
    });
  });
}

function answers(port) {
  return new Promise((ok) => {
    const socket = connect({ host: "127.0.0.1", port });
    socket.once("connect", () => {
      socket.destroy();
      ok(true);
    });
    socket.once("error", () => ok(false));
  });
}

/** A real `idem serve` with `[resp]` (and, with `tokens`, a writer's and a reader's token). */
async function startIdem({ tokens }) {
  const dir = await mkdtemp(join(tmpdir(), "idem-ioredis-"));
  const api = await freePort();
  const port = await freePort();
  let config = `listen = "127.0.0.1:${api}"\ndata_dir = "${dir}/data"\n`;
  // scripts/test.sh runs this file twice: on the embedded store, then on PostgreSQL.
  if (process.env.IDEM_TEST_RESP_DATABASE_URL) {
    config += `\n[store]\ntype = "postgres"\nurl = "${process.env.IDEM_TEST_RESP_DATABASE_URL}"\n`;
  }
  config += `\n[resp]\nlisten = "127.0.0.1:${port}"\n`;
  if (tokens) {
    config +=
      `\n[[auth.token]]\nname = "writer"\ntoken = "${WRITER}"\ncan = "write"\n` +
      `\n[[auth.token]]\nname = "reader"\ntoken = "${READER}"\ncan = "read"\n`;
  }
  await writeFile(join(dir, "idem.toml"), config);
  const log = [];
  const child = spawn(idemBin, ["serve", "--config", join(dir, "idem.toml")], { stdio: ["ignore", "pipe", "pipe"] });
  child.stdout.on("data", (b) => log.push(b));
  child.stderr.on("data", (b) => log.push(b));
  let exited = null;
  child.once("exit", (code, signal) => (exited = { code, signal }));
  child.once("error", (err) => (exited = { err }));
  const deadline = Date.now() + 30_000;
  for (;;) {
    if (exited) throw new Error(`idem (${idemBin}) exited: ${JSON.stringify(exited)}: ${Buffer.concat(log)}`);
    if (await answers(port)) break;
    if (Date.now() > deadline) {
      child.kill("SIGKILL");
      throw new Error(`idem's [resp] did not listen within 30 s: ${Buffer.concat(log)}`);
    }
    await new Promise((r) => setTimeout(r, 50));
  }
  return {
    port,
    async stop() {
      if (!exited) {
        const gone = new Promise((r) => child.once("exit", r));
        child.kill("SIGTERM");
        await gone;
      }
      await rm(dir, { recursive: true, force: true });
    },
  };
}

let seq = 0;
const unique = (prefix) => `${prefix}:${process.hrtime.bigint()}:${seq++}`;

/**
 * A client that does not reconnect: a refused handshake (WRONGPASS) rejects the command waiting
 * on it, and the client stays down instead of retrying for ever.
 */
function client(port, options = {}) {
  return new Redis({ port, host: "127.0.0.1", retryStrategy: () => null, maxRetriesPerRequest: 0, ...options });
}

describe("ioredis against idem, open (no tokens)", () => {
  let idem;
  const clients = [];
  const open = (options) => {
    const c = client(idem.port, options);
    clients.push(c);
    return c;
  };
  before(async () => {
    idem = await startIdem({ tokens: false });
  });
  after(async () => {
    clients.forEach((c) => c.disconnect());
    await idem?.stop();
  });

  for (const protocol of [2, 3]) {
    describe(`RESP${protocol}`, () => {
      test("SET NX EX, again, GET, TTL, DEL", async () => {
        const redis = open({ protocol });
        assert.equal(await redis.ping(), "PONG");
        const key = unique("order");
        assert.equal(await redis.set(key, '{"status":"INPROGRESS"}', "EX", 60, "NX"), "OK");
        assert.equal(await redis.set(key, "again", "EX", 60, "NX"), null);
        assert.equal(await redis.get(key), '{"status":"INPROGRESS"}');
        const ttl = await redis.ttl(key);
        assert.ok(ttl >= 59 && ttl <= 60, `ttl ${ttl}`);
        assert.equal(await redis.exists(key, unique("absent")), 1);
        assert.equal(await redis.setnx(key, "x"), 0);
        assert.deepEqual(await redis.mget(key, unique("absent")), ['{"status":"INPROGRESS"}', null]);
        assert.equal(await redis.del(key), 1);
        assert.equal(await redis.get(key), null);
        assert.equal(await redis.ttl(key), -2);
      });

      test("a pipeline: SET NX, GET, SET NX again, DEL", async () => {
        const redis = open({ protocol });
        const key = unique("pipeline");
        const replies = await redis.pipeline().set(key, "first", "NX").get(key).set(key, "second", "NX").del(key).exec();
        assert.deepEqual(replies, [
          [null, "OK"],
          [null, "first"],
          [null, null],
          [null, 1],
        ]);
      });

      test("a binary value round-trips through getBuffer", async () => {
        const redis = open({ protocol });
        const key = unique("binary");
        const value = Buffer.from([0x00, 0x0d, 0x0a, 0xff, 0xfe, 0x20, 0x65, 0x6e, 0x64]);
        assert.equal(await redis.set(key, value, "PX", 60000, "NX"), "OK");
        assert.deepEqual(await redis.getBuffer(key), value);
        assert.equal(await redis.del(key), 1);
      });
    });
  }

  test("50 clients SET one key PX NX at once: exactly one OK", async () => {
    const key = unique("contested");
    const racers = Array.from({ length: 50 }, () => open({ lazyConnect: true }));
    await Promise.all(racers.map((r) => r.connect()));
    const outcomes = await Promise.all(racers.map((r, i) => r.set(key, String(i), "PX", 60000, "NX")));
    assert.equal(outcomes.filter((o) => o === "OK").length, 1, JSON.stringify(outcomes));
    assert.equal(outcomes.filter((o) => o === null).length, 49);
    const winner = outcomes.indexOf("OK");
    assert.equal(await racers[0].get(key), String(winner));
  });

  test("plain SET, the EXPIRE family, PERSIST and GETDEL answer as Redis does", async () => {
    const redis = open();
    const key = unique("update");
    assert.equal(await redis.set(key, "first"), "OK");
    assert.equal(await redis.set(key, "second", "GET"), "first");
    assert.equal(await redis.set(unique("absent"), "v", "XX"), null);
    assert.equal(await redis.set(key, "third", "PX", 50000, "XX"), "OK");
    assert.equal(await redis.expire(key, 10, "GT"), 0);
    assert.equal(await redis.pexpire(key, 100000, "GT"), 1);
    assert.equal(await redis.persist(key), 1);
    assert.equal(await redis.ttl(key), -1);
    assert.equal(await redis.psetex(key, 60000, "fourth"), "OK");
    assert.equal(await redis.getdel(key), "fourth");
    assert.equal(await redis.exists(key), 0);
  });

  test("Laravel's lock release, defined as a command (EVALSHA, then EVAL on NOSCRIPT)", async () => {
    const redis = open();
    redis.defineCommand("releaseLock", {
      numberOfKeys: 1,
      lua: 'if redis.call("get",KEYS[1]) == ARGV[1] then\n    return redis.call("del",KEYS[1])\nelse\n    return 0\nend',
    });
    const lock = unique("lock");
    assert.equal(await redis.set(lock, "owner-a", "EX", 10, "NX"), "OK");
    assert.equal(await redis.releaseLock(lock, "owner-b"), 0);
    assert.equal(await redis.releaseLock(lock, "owner-a"), 1);
    assert.equal(await redis.exists(lock), 0);
  });

  test("what idem does not run is refused, and nothing changes", async () => {
    const redis = open();
    const key = unique("refused");
    assert.equal(await redis.set(key, "first", "NX"), "OK");
    await assert.rejects(redis.incr(key), /'incr' is not one of them/);
    await assert.rejects(redis.eval("return 1", 0), /runs only the scripts of the libraries it supports/);
    await assert.rejects(redis.hset(`${key}h`, "f", "v"), /unknown command 'hset'/i);
    assert.equal(await redis.get(key), "first");
  });
});

describe("ioredis against idem, with tokens", () => {
  let idem;
  const clients = [];
  const open = (options) => {
    const c = client(idem.port, options);
    c.on("error", () => {}); // the refused handshakes' errors are asserted through the commands
    clients.push(c);
    return c;
  };
  before(async () => {
    idem = await startIdem({ tokens: true });
  });
  after(async () => {
    clients.forEach((c) => c.disconnect());
    await idem?.stop();
  });

  for (const protocol of [2, 3]) {
    describe(`RESP${protocol}`, () => {
      test("the writer's token as the password: SET NX, GET, DEL", async () => {
        const redis = open({ protocol, password: WRITER });
        const key = unique("authed");
        assert.equal(await redis.set(key, "v", "EX", 60, "NX"), "OK");
        assert.equal(await redis.set(key, "w", "EX", 60, "NX"), null);
        assert.equal(await redis.get(key), "v");
        assert.equal(await redis.del(key), 1);
      });

      test("a wrong password: WRONGPASS", async () => {
        const redis = open({ protocol, password: "wrong" });
        await assert.rejects(redis.get(unique("k")), /WRONGPASS/);
      });

      test("no password: NOAUTH", async () => {
        const redis = open({ protocol });
        await assert.rejects(redis.get(unique("k")), /NOAUTH/);
      });

      test("the reader's token (user default) reads, and may not write: NOPERM", async () => {
        const writer = open({ protocol, password: WRITER });
        const key = unique("read");
        assert.equal(await writer.set(key, "v", "NX"), "OK");
        const reader = open({ protocol, username: "default", password: READER });
        assert.equal(await reader.get(key), "v");
        await assert.rejects(reader.set(unique("nope"), "v", "NX"), /NOPERM/);
      });
    });
  }

  test("a plain SET needs a writer's token", async () => {
    const writer = open({ password: WRITER });
    const key = unique("plain");
    assert.equal(await writer.set(key, "v"), "OK");
    const reader = open({ password: READER });
    await assert.rejects(reader.set(key, "w"), /NOPERM/);
    assert.equal(await reader.get(key), "v");
  });
});

// ioredis connects with HELLO 3 (RESP3) or nothing (RESP2), CLIENT SETINFO LIB-VER and LIB-NAME,
// then INFO for its ready check, which waits while INFO reads `loading:1`; idem's INFO has no
// `loading` field, so the client is ready once the handshake is answered.
test("the handshake: ready at once, and INFO is idem's # Server section", async () => {
  const idem = await startIdem({ tokens: false });
  try {
    for (const protocol of [2, 3]) {
      const redis = client(idem.port, { protocol, lazyConnect: true });
      await redis.connect();
      assert.equal(redis.status, "ready");
      // HELLO without a version: the connection's own, so RESP3 was not downgraded to RESP2.
      const flat = await redis.hello();
      const hello = Object.fromEntries(Array.from({ length: flat.length / 2 }, (_, i) => [flat[2 * i], flat[2 * i + 1]]));
      assert.equal(hello.server, "idem");
      assert.equal(hello.proto, protocol);
      const info = await redis.info();
      assert.match(info, /^# Server\r\n/);
      assert.doesNotMatch(info, /^loading:/m);
      redis.disconnect();
    }
  } finally {
    await idem.stop();
  }
});

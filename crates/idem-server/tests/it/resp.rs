//! The Redis protocol (`[resp]`, contract §13) over real sockets: the bytes a Redis client sends,
//! the bytes Redis would answer. `SET … NX` is a claim the HTTP API sees; one of 100 concurrent
//! `SET NX` of a key wins, on one node and on two nodes of one PostgreSQL; tokens through `AUTH`
//! and `HELLO … AUTH`; plain `SET`, `SETEX`, the `EXPIRE` family, `PERSIST`, `GETDEL` and
//! Laravel's scripts as Redis answers them, the lock scripts racing on two nodes; what idem does
//! not run is refused by name. The replies are read by a small reader written here, not by idem's
//! own codec.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use idem_core::SystemClock;
use idem_server::config::{AuthConfig, RespConfig};
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::support::TestServer;
use crate::support::binary::{Idem, free_port};
use crate::support::pg::TestSchema;

/// A reply as it came: `+`/`-`/`:` lines as text, bulk strings as bytes, aggregates as lists.
#[derive(Debug, Clone, PartialEq)]
enum R {
    Simple(String),
    Error(String),
    Int(i64),
    Bulk(Vec<u8>),
    Nil,
    List(Vec<R>),
}

fn bulk(text: &str) -> R {
    R::Bulk(text.as_bytes().to_vec())
}

struct Client {
    stream: TcpStream,
    buffer: Vec<u8>,
}

impl Client {
    async fn connect(addr: SocketAddr) -> Self {
        Self { stream: TcpStream::connect(addr).await.expect("connect"), buffer: Vec::new() }
    }

    /// Sends `args` as one multibulk command.
    async fn send(&mut self, args: &[&[u8]]) {
        let mut out = format!("*{}\r\n", args.len()).into_bytes();
        for arg in args {
            out.extend_from_slice(format!("${}\r\n", arg.len()).as_bytes());
            out.extend_from_slice(arg);
            out.extend_from_slice(b"\r\n");
        }
        self.stream.write_all(&out).await.expect("write");
    }

    async fn call(&mut self, args: &[&str]) -> R {
        let args: Vec<&[u8]> = args.iter().map(|a| a.as_bytes()).collect();
        self.send(&args).await;
        self.read().await
    }

    async fn line(&mut self) -> Option<String> {
        loop {
            if let Some(end) = self.buffer.windows(2).position(|w| w == b"\r\n") {
                let line = String::from_utf8_lossy(&self.buffer[..end]).into_owned();
                self.buffer.drain(..end + 2);
                return Some(line);
            }
            self.fill().await?;
        }
    }

    /// More bytes; `None` when the connection is gone.
    async fn fill(&mut self) -> Option<()> {
        let mut chunk = [0u8; 4096];
        let n = self.stream.read(&mut chunk).await.ok().filter(|n| *n > 0)?;
        self.buffer.extend_from_slice(&chunk[..n]);
        Some(())
    }

    async fn read(&mut self) -> R {
        self.try_read().await.expect("a reply before the connection closed")
    }

    /// The next reply; `None` when the connection closed first.
    async fn try_read(&mut self) -> Option<R> {
        let line = self.line().await?;
        let (kind, rest) = line.split_at(1);
        let n = || rest.parse::<i64>().expect("a length");
        match kind {
            "+" => Some(R::Simple(rest.to_owned())),
            "-" => Some(R::Error(rest.to_owned())),
            ":" => Some(R::Int(n())),
            "_" => Some(R::Nil),
            "$" | "*" if n() < 0 => Some(R::Nil),
            "$" => {
                let len = n() as usize;
                while self.buffer.len() < len + 2 {
                    self.fill().await?;
                }
                let value = self.buffer[..len].to_vec();
                self.buffer.drain(..len + 2);
                Some(R::Bulk(value))
            }
            "*" | "%" => {
                let count = n() as usize * if kind == "%" { 2 } else { 1 };
                let mut items = Vec::with_capacity(count);
                for _ in 0..count {
                    items.push(Box::pin(self.try_read()).await?);
                }
                Some(R::List(items))
            }
            other => panic!("unexpected reply type {other}: {line}"),
        }
    }

    /// Whether the server closed the connection (reads end).
    async fn closed(&mut self) -> bool {
        let mut chunk = [0u8; 64];
        matches!(tokio::time::timeout(std::time::Duration::from_secs(5), self.stream.read(&mut chunk)).await, Ok(Ok(0)))
    }
}

fn with_resp(config: &mut idem_server::Config) {
    config.resp = Some(RespConfig { listen: "127.0.0.1:0".parse().expect("addr"), namespace: ns("redis") });
}

fn ns(name: &str) -> idem_core::Namespace {
    idem_core::Namespace::new(name).expect("valid")
}

async fn start() -> TestServer {
    TestServer::start_with(with_resp, Arc::new(SystemClock)).await
}

fn is_error(reply: &R, starting: &str) -> bool {
    matches!(reply, R::Error(text) if text.starts_with(starting))
}

#[tokio::test]
async fn set_nx_is_a_claim_the_http_api_sees() {
    let server = start().await;
    let mut redis = Client::connect(server.resp_addr.expect("resp")).await;
    assert_eq!(redis.call(&["PING"]).await, R::Simple("PONG".into()));
    assert_eq!(redis.call(&["SET", "order:1", "in-progress", "NX", "EX", "100"]).await, R::Simple("OK".into()));
    assert_eq!(redis.call(&["SET", "order:1", "other", "NX", "EX", "100"]).await, R::Nil, "the first writer wins");
    assert_eq!(redis.call(&["set", "order:1", "other", "nx", "get"]).await, bulk("in-progress"));
    assert_eq!(redis.call(&["GET", "order:1"]).await, bulk("in-progress"));
    let R::Int(ttl) = redis.call(&["TTL", "order:1"]).await else { panic!("TTL answers an integer") };
    assert!((99..=100).contains(&ttl), "TTL {ttl}");
    assert_eq!(redis.call(&["TTL", "absent"]).await, R::Int(-2));
    assert_eq!(redis.call(&["SETNX", "forever", "1"]).await, R::Int(1));
    assert_eq!(redis.call(&["SETNX", "forever", "2"]).await, R::Int(0));
    assert_eq!(redis.call(&["PTTL", "forever"]).await, R::Int(-1));
    assert_eq!(redis.call(&["EXISTS", "order:1", "forever", "absent", "forever"]).await, R::Int(3));
    assert_eq!(redis.call(&["MGET", "order:1", "absent"]).await, R::List(vec![bulk("in-progress"), R::Nil]));

    // The same key through the HTTP API: the Redis key is the claim's one part.
    let found = server.post("/v1/claims/redis/lookup", json!({"items": [{"key": "order:1"}]}), 200).await;
    assert_eq!(found["results"][0]["record"]["data"], json!("in-progress"));
    server.post("/v1/claims/redis", json!({"key": "from-http", "data": {"a": 1}}), 201).await;
    assert_eq!(redis.call(&["GET", "from-http"]).await, bulk(r#"{"a":1}"#));

    // Values are binary-safe: empty, NUL, CRLF, bytes that are not UTF-8.
    for (key, value) in [("empty", &b""[..]), ("binary", &b"\0\r\n\xff\xfe-\r\n"[..])] {
        redis.send(&[b"SET", key.as_bytes(), value, b"NX"]).await;
        assert_eq!(redis.read().await, R::Simple("OK".into()));
        assert_eq!(redis.call(&["GET", key]).await, R::Bulk(value.to_vec()), "{key}");
    }
    // Counted with the namespace's other claims, as the HTTP API's are.
    for series in [
        r#"idem_claims_total{namespace="redis",outcome="claimed"}"#,
        r#"idem_claims_total{namespace="redis",outcome="existing"}"#,
        r#"idem_lookups_total{namespace="redis",kind="ids"}"#,
    ] {
        assert!(crate::support::metric(&server.client, series).await >= 1.0, "{series}");
    }
    assert_eq!(redis.call(&["DEL", "order:1", "absent"]).await, R::Int(1));
    assert_eq!(redis.call(&["GET", "order:1"]).await, R::Nil);
    assert_eq!(redis.call(&["SET", "order:1", "again", "NX"]).await, R::Simple("OK".into()), "free once deleted");
    server.stop().await;
}

#[tokio::test]
async fn pipelined_commands_are_answered_in_order_and_refusals_name_the_command() {
    let server = start().await;
    let mut redis = Client::connect(server.resp_addr.expect("resp")).await;
    redis.send(&[b"SET", b"p", b"1", b"NX"]).await;
    redis.send(&[b"GET", b"p"]).await;
    redis.send(&[b"SET", b"p", b"2", b"NX"]).await;
    redis.send(&[b"ECHO", b"done"]).await;
    let replies = [redis.read().await, redis.read().await, redis.read().await, redis.read().await];
    assert_eq!(replies, [R::Simple("OK".into()), bulk("1"), R::Nil, bulk("done")]);

    // Claims side by side in a pipeline run as one store call, with the replies of one by one.
    redis.send(&[b"SET", b"q", b"1", b"NX"]).await;
    redis.send(&[b"SETNX", b"q", b"2"]).await;
    redis.send(&[b"SET", b"r", b"1", b"NX", b"EX", b"10"]).await;
    redis.send(&[b"SET", b"\xff", b"1", b"NX"]).await;
    redis.send(&[b"SET", b"q", b"3", b"NX"]).await;
    redis.send(&[b"GET", b"q"]).await;
    let replies = [
        redis.read().await,
        redis.read().await,
        redis.read().await,
        redis.read().await,
        redis.read().await,
        redis.read().await,
    ];
    assert_eq!(replies[..3], [R::Simple("OK".into()), R::Int(0), R::Simple("OK".into())]);
    assert!(is_error(&replies[3], "ERR idem keys are UTF-8 text"), "{:?}", replies[3]);
    assert_eq!(replies[4..], [R::Nil, bulk("1")]);

    for (command, expected) in [
        (&["INCR", "p"][..], "ERR idem runs the commands idempotency libraries use, and 'incr' is not one of them"),
        (&["MULTI"], "ERR idem runs the commands idempotency libraries use, and 'multi' is not one of them"),
        (&["EVAL", "return 1", "0"], "ERR idem runs only the scripts of the libraries it supports"),
        (&["EVALSHA", "e0e1f9fabfc9d4800c877a703b823ac0578ff8db", "0"], "NOSCRIPT No matching script"),
        (&["SCRIPT", "LOAD", "return redis.call('flushall')"], "ERR idem runs only the scripts"),
        (&["SETEX", "p", "0", "2"], "ERR invalid expire time in 'setex' command"),
        (&["EXPIRE", "p", "10", "NX", "GT"], "ERR NX and XX, GT or LT options at the same time are not compatible"),
        (&["EXPIRE", "p", "ten"], "ERR value is not an integer or out of range"),
        (&["SET", "p", "2", "NX", "EX", "0"], "ERR invalid expire time in 'set' command"),
        (&["SET", "p", "2", "NX", "XX"], "ERR syntax error"),
        (&["GET"], "ERR wrong number of arguments for 'get' command"),
        (&["HSET", "h", "f", "v"], "ERR unknown command 'HSET', with args beginning with: 'h' 'f' 'v'"),
        (&["SELECT", "1"], "ERR DB index is out of range"),
    ] {
        let reply = redis.call(command).await;
        assert!(is_error(&reply, expected), "{command:?}: {reply:?}");
    }
    assert_eq!(redis.call(&["GET", "p"]).await, bulk("1"), "no refusal changed anything");
    assert_eq!(redis.call(&["SELECT", "0"]).await, R::Simple("OK".into()));

    // HELLO 3 switches to RESP3 (a map, `_` for nil); a protocol error closes the connection.
    let R::List(hello) = redis.call(&["HELLO", "3"]).await else { panic!("HELLO answers a map") };
    let proto = hello.chunks(2).find(|kv| kv[0] == bulk("proto")).map(|kv| kv[1].clone());
    assert_eq!(proto, Some(R::Int(3)));
    assert_eq!(redis.call(&["GET", "absent"]).await, R::Nil);
    redis.stream.write_all(b"*1\r\n$x\r\n").await.expect("write");
    assert_eq!(redis.read().await, R::Error("ERR Protocol error: invalid bulk length".into()));
    assert!(redis.closed().await, "closed after a protocol error");
    let mut again = Client::connect(server.resp_addr.expect("resp")).await;
    assert_eq!(again.call(&["QUIT"]).await, R::Simple("OK".into()));
    assert!(again.closed().await);
    server.stop().await;
}

/// A client that pipelines 40,000 claims and reads nothing for half a second (its receive buffer
/// small) gets every reply, in order, and the command after them sees what they claimed. (Replies
/// the socket cannot take at all yet are the unit test's, in resp/server.rs: here the kernel's
/// buffers hold them.)
#[tokio::test]
async fn a_slow_reader_gets_every_pipelined_reply_in_order() {
    let server = start().await;
    let socket = tokio::net::TcpSocket::new_v4().expect("socket");
    socket.set_recv_buffer_size(4096).expect("small receive buffer");
    let stream = socket.connect(server.resp_addr.expect("resp")).await.expect("connect");
    let (count, keys) = (40_000, 20_000);
    let mut pipeline = Vec::new();
    for i in 0..count {
        let key = format!("slow-{}", i % keys);
        pipeline.extend_from_slice(
            format!("*4\r\n$3\r\nSET\r\n${}\r\n{key}\r\n$1\r\nv\r\n$2\r\nNX\r\n", key.len()).as_bytes(),
        );
    }
    pipeline.extend_from_slice(b"*2\r\n$6\r\nEXISTS\r\n$7\r\nslow-42\r\n");
    let (mut reader, mut writer) = stream.into_split();
    let sending = tokio::spawn(async move { writer.write_all(&pipeline).await.expect("write") });
    tokio::time::sleep(Duration::from_millis(500)).await;
    // `+OK` for each first claim of a key, nil (RESP2) for each second, then `EXISTS`'s 1.
    let mut expected = b"+OK\r\n".repeat(keys);
    expected.extend_from_slice(&b"$-1\r\n".repeat(count - keys));
    expected.extend_from_slice(b":1\r\n");
    let mut received = vec![0; expected.len()];
    reader.read_exact(&mut received).await.expect("every reply");
    assert!(received == expected, "every reply, in order");
    sending.await.expect("sent");
    server.stop().await;
}

/// 100 clients at once, each on its own connection, `SET k v NX` of one key: one `OK`, and every
/// other client reads the winner's value.
async fn one_of_100_wins(addrs: &[SocketAddr], key: &str) {
    let tasks: Vec<_> = (0..100)
        .map(|i| {
            let (addr, key) = (addrs[i % addrs.len()], key.to_owned());
            tokio::spawn(async move {
                let mut redis = Client::connect(addr).await;
                let set = redis.call(&["SET", &key, &format!("client-{i}"), "NX", "PX", "60000"]).await;
                (set, redis.call(&["GET", &key]).await)
            })
        })
        .collect();
    let (mut wins, mut seen) = (0, std::collections::HashSet::new());
    for task in tasks {
        let (set, got) = task.await.expect("task");
        match set {
            R::Simple(ok) if ok == "OK" => wins += 1,
            R::Nil => {}
            other => panic!("SET NX answered {other:?}"),
        }
        seen.insert(format!("{got:?}"));
    }
    assert_eq!(wins, 1, "one of 100 concurrent SET NX gets OK");
    assert_eq!(seen.len(), 1, "every client reads the winner's value: {seen:?}");
}

#[tokio::test]
async fn plain_set_setex_expire_persist_and_getdel_as_redis_answers_them() {
    let server = start().await;
    let mut redis = Client::connect(server.resp_addr.expect("resp")).await;
    let ok = || R::Simple("OK".into());
    assert_eq!(redis.call(&["SET", "k", "1"]).await, ok(), "a plain SET creates");
    assert_eq!(redis.call(&["SET", "k", "2", "GET"]).await, bulk("1"), "and replaces, GET answering the old value");
    assert_eq!(redis.call(&["SET", "absent", "1", "XX"]).await, R::Nil, "XX: only a key that exists");
    assert_eq!(redis.call(&["EXISTS", "absent"]).await, R::Int(0));
    assert_eq!(redis.call(&["SET", "k", "3", "XX", "EX", "100"]).await, ok());
    assert_eq!(redis.call(&["SET", "k", "4", "KEEPTTL"]).await, ok());
    let R::Int(ttl) = redis.call(&["TTL", "k"]).await else { panic!("TTL answers an integer") };
    assert!((99..=100).contains(&ttl), "KEEPTTL kept it: {ttl}");
    assert_eq!(redis.call(&["SET", "k", "5"]).await, ok());
    assert_eq!(redis.call(&["TTL", "k"]).await, R::Int(-1), "a plain SET drops the expiry");
    assert_eq!(redis.call(&["GETSET", "k", "6"]).await, bulk("5"));
    assert_eq!(redis.call(&["SETEX", "s", "100", "v"]).await, ok());
    assert_eq!(redis.call(&["PSETEX", "p", "100000", "v"]).await, ok());
    let R::Int(pttl) = redis.call(&["PTTL", "p"]).await else { panic!("PTTL answers an integer") };
    assert!((99_000..=100_000).contains(&pttl), "PSETEX: {pttl}");

    // The EXPIRE family and its conditions; a key that never expires has an infinite TTL.
    assert_eq!(redis.call(&["EXPIRE", "absent", "10"]).await, R::Int(0));
    assert_eq!(redis.call(&["EXPIRE", "k", "50", "XX"]).await, R::Int(0), "k never expires");
    assert_eq!(redis.call(&["EXPIRE", "k", "50", "GT"]).await, R::Int(0));
    assert_eq!(redis.call(&["EXPIRE", "k", "50", "NX"]).await, R::Int(1));
    assert_eq!(redis.call(&["EXPIRE", "k", "40", "GT"]).await, R::Int(0));
    assert_eq!(redis.call(&["PEXPIRE", "k", "60000", "GT"]).await, R::Int(1));
    assert_eq!(redis.call(&["EXPIRE", "k", "70", "LT"]).await, R::Int(0));
    assert_eq!(redis.call(&["EXPIRE", "k", "30", "XX", "LT"]).await, R::Int(1));
    let R::Int(ttl) = redis.call(&["TTL", "k"]).await else { panic!("TTL answers an integer") };
    assert!((29..=30).contains(&ttl), "TTL {ttl}");
    let at =
        (std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).expect("time").as_secs() + 500).to_string();
    assert_eq!(redis.call(&["EXPIREAT", "k", &at]).await, R::Int(1));
    let R::Int(ttl) = redis.call(&["TTL", "k"]).await else { panic!("TTL answers an integer") };
    assert!((499..=500).contains(&ttl), "EXPIREAT: TTL {ttl}");
    assert_eq!(redis.call(&["PERSIST", "k"]).await, R::Int(1));
    assert_eq!(redis.call(&["PERSIST", "k"]).await, R::Int(0), "no expiry left to remove");
    assert_eq!(redis.call(&["TTL", "k"]).await, R::Int(-1));
    assert_eq!(redis.call(&["GET", "k"]).await, bulk("6"), "the value through it all");
    assert_eq!(redis.call(&["EXPIRE", "s", "0"]).await, R::Int(1), "an expiry past: deleted");
    assert_eq!(redis.call(&["EXISTS", "s"]).await, R::Int(0));
    assert_eq!(redis.call(&["GETDEL", "k"]).await, bulk("6"));
    assert_eq!(redis.call(&["GETDEL", "k"]).await, R::Nil);

    // A key replaced is the HTTP API's key replaced; counted as updates.
    redis.call(&["SET", "shared", "from-redis"]).await;
    let found = server.post("/v1/claims/redis/lookup", json!({"items": [{"key": "shared"}]}), 200).await;
    assert_eq!(found["results"][0]["record"]["data"], json!("from-redis"));
    for series in [
        r#"idem_claims_updated_total{namespace="redis",outcome="applied"}"#,
        r#"idem_claims_updated_total{namespace="redis",outcome="skipped"}"#,
    ] {
        assert!(crate::support::metric(&server.client, series).await >= 1.0, "{series}");
    }
    server.stop().await;
}

const RELEASE_LOCK: &str =
    "if redis.call(\"get\",KEYS[1]) == ARGV[1] then\n    return redis.call(\"del\",KEYS[1])\nelse\n    return 0\nend";
const REFRESH_LOCK: &str = "if redis.call(\"get\",KEYS[1]) == ARGV[1] then\n    if tonumber(ARGV[2]) > 0 then\n        return redis.call(\"expire\",KEYS[1],ARGV[2])\n    end\n\n    redis.call(\"persist\",KEYS[1])\n\n    return 1\nelse\n    return 0\nend";
const ADD: &str = "return redis.call('exists',KEYS[1])<1 and redis.call('setex',KEYS[1],ARGV[2],ARGV[1])";

/// Laravel's lock and `Cache::add` scripts as Laravel sends them: `EVAL`, then `EVALSHA` of what
/// `SCRIPT LOAD` named.
async fn laravel_scripts(addr: SocketAddr) {
    let mut redis = Client::connect(addr).await;
    assert_eq!(redis.call(&["SET", "lock", "owner-a", "EX", "10", "NX"]).await, R::Simple("OK".into()));
    assert_eq!(redis.call(&["EVAL", RELEASE_LOCK, "1", "lock", "owner-b"]).await, R::Int(0), "not b's to release");
    assert_eq!(redis.call(&["EVAL", REFRESH_LOCK, "1", "lock", "owner-b", "60"]).await, R::Int(0));
    assert_eq!(redis.call(&["EVAL", REFRESH_LOCK, "1", "lock", "owner-a", "60"]).await, R::Int(1));
    let R::Int(ttl) = redis.call(&["TTL", "lock"]).await else { panic!("TTL answers an integer") };
    assert!((59..=60).contains(&ttl), "refreshed: TTL {ttl}");
    assert_eq!(redis.call(&["EVAL", REFRESH_LOCK, "1", "lock", "owner-a", "0"]).await, R::Int(1));
    assert_eq!(redis.call(&["TTL", "lock"]).await, R::Int(-1), "refreshed for ever");
    let R::Bulk(sha) = redis.call(&["SCRIPT", "LOAD", RELEASE_LOCK]).await else { panic!("SCRIPT LOAD answers a SHA") };
    let sha = String::from_utf8(sha).expect("hex");
    assert_eq!(sha.len(), 40);
    assert_eq!(redis.call(&["SCRIPT", "EXISTS", &sha, "0000"]).await, R::List(vec![R::Int(1), R::Int(0)]));
    assert_eq!(redis.call(&["EVALSHA", &sha, "1", "lock", "owner-a"]).await, R::Int(1), "a's to release");
    assert_eq!(redis.call(&["EXISTS", "lock"]).await, R::Int(0));

    assert_eq!(redis.call(&["EVAL", ADD, "1", "cache:k", "v1", "60"]).await, R::Simple("OK".into()));
    assert_eq!(redis.call(&["EVAL", ADD, "1", "cache:k", "v2", "60"]).await, R::Nil, "Lua's false: nil");
    assert_eq!(redis.call(&["GET", "cache:k"]).await, bulk("v1"));
    assert_eq!(redis.call(&["SCRIPT", "FLUSH"]).await, R::Simple("OK".into()));
    assert!(is_error(&redis.call(&["EVALSHA", &sha, "1", "lock", "a"]).await, "NOSCRIPT"));
}

/// 50 workers, each acquiring one lock (`SET … EX … NX`), holding it, and releasing it with the
/// release script, over and over, on however many nodes: never two holders at once, and no worker
/// releases a lock another holds.
async fn one_lock_holder_at_a_time(addrs: &[SocketAddr]) {
    let holders = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let tasks: Vec<_> = (0..50)
        .map(|i| {
            let (addr, holders) = (addrs[i % addrs.len()], Arc::clone(&holders));
            tokio::spawn(async move {
                let mut redis = Client::connect(addr).await;
                let owner = format!("worker-{i}");
                let mut held = 0;
                while held < 3 {
                    let set = redis.call(&["SET", "the-lock", &owner, "EX", "30", "NX"]).await;
                    if set == R::Nil {
                        assert_eq!(redis.call(&["EVAL", RELEASE_LOCK, "1", "the-lock", &owner]).await, R::Int(0));
                        tokio::time::sleep(Duration::from_millis(2)).await;
                        continue;
                    }
                    assert_eq!(set, R::Simple("OK".into()));
                    assert_eq!(holders.fetch_add(1, std::sync::atomic::Ordering::SeqCst), 0, "two holders at once");
                    tokio::time::sleep(Duration::from_millis(1)).await;
                    holders.fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
                    assert_eq!(redis.call(&["EVAL", RELEASE_LOCK, "1", "the-lock", &owner]).await, R::Int(1));
                    held += 1;
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.expect("a worker");
    }
}

#[tokio::test]
async fn laravel_lock_scripts_run_atomically() {
    let server = start().await;
    laravel_scripts(server.resp_addr.expect("resp")).await;
    one_lock_holder_at_a_time(&[server.resp_addr.expect("resp")]).await;
    server.stop().await;
}

#[tokio::test]
async fn laravel_lock_scripts_run_atomically_across_two_nodes_of_one_postgresql() {
    let Some(schema) = TestSchema::create("resp_scripts").await else { return };
    let options = idem_postgres::PgOptions::default();
    let a = TestServer::start_postgres(&schema.url, &options, with_resp).await;
    let b = TestServer::start_postgres(&schema.url, &options, with_resp).await;
    laravel_scripts(a.resp_addr.expect("resp")).await;
    one_lock_holder_at_a_time(&[a.resp_addr.expect("resp"), b.resp_addr.expect("resp")]).await;
    a.stop().await;
    b.stop().await;
}

#[tokio::test]
async fn one_of_100_concurrent_set_nx_wins() {
    let server = start().await;
    one_of_100_wins(&[server.resp_addr.expect("resp")], "contested").await;
    server.stop().await;
}

#[tokio::test]
async fn one_of_100_concurrent_set_nx_wins_across_two_nodes_of_one_postgresql() {
    let Some(schema) = TestSchema::create("resp_two_nodes").await else { return };
    let options = idem_postgres::PgOptions::default();
    let a = TestServer::start_postgres(&schema.url, &options, with_resp).await;
    let b = TestServer::start_postgres(&schema.url, &options, with_resp).await;
    one_of_100_wins(&[a.resp_addr.expect("resp"), b.resp_addr.expect("resp")], "contested").await;
    a.stop().await;
    b.stop().await;
}

#[tokio::test]
async fn tokens_are_redis_passwords_with_their_roles_and_namespaces() {
    let auth: AuthConfig = toml::from_str(
        r#"
[[token]]
name = "worker"
token = "worker-s3cret"
can = "write"

[[token]]
name = "viewer"
token = "viewer-s3cret"
can = "read"

[[token]]
name = "elsewhere"
token = "elsewhere-s3cret"
can = "write"
namespaces = ["survey"]
"#,
    )
    .expect("auth");
    let configure = move |config: &mut idem_server::Config| {
        with_resp(config);
        config.auth = auth;
    };
    let server = TestServer::start_with(configure, Arc::new(SystemClock)).await;
    let addr = server.resp_addr.expect("resp");
    let mut redis = Client::connect(addr).await;
    assert_eq!(redis.call(&["GET", "k"]).await, R::Error("NOAUTH Authentication required.".into()));
    assert!(is_error(&redis.call(&["HELLO", "3"]).await, "NOAUTH HELLO must be called"));
    assert_eq!(
        redis.call(&["AUTH", "nope"]).await,
        R::Error("WRONGPASS invalid username-password pair or user is disabled.".into())
    );
    assert!(is_error(&redis.call(&["AUTH", "someone", "worker-s3cret"]).await, "WRONGPASS"), "the user is default");
    assert_eq!(redis.call(&["AUTH", "worker-s3cret"]).await, R::Simple("OK".into()));
    assert_eq!(redis.call(&["SET", "k", "v", "NX"]).await, R::Simple("OK".into()));

    // redis-py's handshake: HELLO 3 AUTH default <password> in one command.
    let mut viewer = Client::connect(addr).await;
    let R::List(_) = viewer.call(&["HELLO", "3", "AUTH", "default", "viewer-s3cret", "SETNAME", "v"]).await else {
        panic!("HELLO with AUTH answers a map")
    };
    assert_eq!(viewer.call(&["GET", "k"]).await, bulk("v"));
    assert!(is_error(&viewer.call(&["SET", "k2", "v", "NX"]).await, "NOPERM token viewer has can = \"read\""));
    assert_eq!(viewer.call(&["CLIENT", "GETNAME"]).await, bulk("v"));

    let mut elsewhere = Client::connect(addr).await;
    assert_eq!(elsewhere.call(&["AUTH", "default", "elsewhere-s3cret"]).await, R::Simple("OK".into()));
    assert!(is_error(&elsewhere.call(&["GET", "k"]).await, "NOPERM token elsewhere may not use namespace redis"));
    assert_eq!(elsewhere.call(&["RESET"]).await, R::Simple("RESET".into()));
    assert_eq!(elsewhere.call(&["PING"]).await, R::Error("NOAUTH Authentication required.".into()), "RESET forgets");

    // Commands sent together before AUTH are each answered, AUTH among them lifting NOAUTH for
    // those after it (once, they waited for more bytes that never came).
    let mut together = Client::connect(addr).await;
    let bytes =
        b"*2\r\n$3\r\nGET\r\n$1\r\nk\r\n*2\r\n$4\r\nAUTH\r\n$13\r\nworker-s3cret\r\n*2\r\n$3\r\nGET\r\n$1\r\nk\r\n";
    together.stream.write_all(bytes).await.expect("write");
    let replies = [together.read().await, together.read().await, together.read().await];
    assert_eq!(replies, [R::Error("NOAUTH Authentication required.".into()), R::Simple("OK".into()), bulk("v")]);

    // Before AUTH, Redis's bounds: no large command from whoever can connect. AUTH and a large
    // value pipelined behind it: the value is read once AUTH has run, as Redis reads it.
    let large = vec![b'x'; 20_000];
    let mut anyone = Client::connect(addr).await;
    anyone.send(&[b"SET", b"big", &large, b"NX"]).await;
    assert_eq!(anyone.read().await, R::Error("ERR Protocol error: unauthenticated bulk length".into()));
    assert!(anyone.closed().await);
    let mut worker = Client::connect(addr).await;
    worker.send(&[b"AUTH", b"worker-s3cret"]).await;
    worker.send(&[b"SET", b"big", &large, b"NX"]).await;
    assert_eq!([worker.read().await, worker.read().await], [R::Simple("OK".into()), R::Simple("OK".into())]);
    server.stop().await;
}

/// Writers pipeline `SET … NX` 16 deep as fast as they can (so claims run together, one store call
/// per pipeline); idem is killed with SIGKILL mid-stream. After a restart on the same data dir,
/// every key that was answered `OK` is there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_loses_no_key_answered_ok() {
    let dir = tempfile::tempdir().expect("temp dir");
    let listen = format!("127.0.0.1:{}", free_port());
    let env = [("IDEM_RESP__LISTEN", listen.as_str())];
    let start = || Idem::serve_until_logged(dir.path(), &[], &env, None, "idem Redis protocol listening");
    let mut idem = start();
    let addr: SocketAddr = listen.parse().expect("addr");
    let acknowledged = Arc::new(Mutex::new(Vec::<String>::new()));
    let writers: Vec<_> = (0..16)
        .map(|w| {
            let acknowledged = Arc::clone(&acknowledged);
            tokio::spawn(async move {
                let mut redis = Client::connect(addr).await;
                for round in 0.. {
                    let keys: Vec<String> = (0..16).map(|i| format!("w{w}-{round}-{i}")).collect();
                    for key in &keys {
                        redis.send(&[b"SET", key.as_bytes(), b"v", b"NX"]).await;
                    }
                    for key in keys {
                        match redis.try_read().await {
                            Some(R::Simple(ok)) if ok == "OK" => acknowledged.lock().expect("lock").push(key),
                            Some(other) => panic!("SET NX of a new key answered {other:?}"),
                            None => return, // idem is gone
                        }
                    }
                }
            })
        })
        .collect();
    let deadline = Instant::now() + Duration::from_secs(20);
    while acknowledged.lock().expect("lock").len() < 5_000 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    idem.kill9();
    for writer in writers {
        writer.await.expect("writer");
    }
    let acknowledged = acknowledged.lock().expect("lock").clone();
    assert!(acknowledged.len() >= 1_000, "the load ran: {} acknowledged", acknowledged.len());

    let _idem = start();
    let mut redis = Client::connect(addr).await;
    for chunk in acknowledged.chunks(1_000) {
        let mut exists: Vec<&str> = vec!["EXISTS"];
        exists.extend(chunk.iter().map(String::as_str));
        assert_eq!(redis.call(&exists).await, R::Int(chunk.len() as i64), "acknowledged keys lost after kill -9");
    }
}

//! One client's session: the protocol it speaks, who it authenticated as, its name; the
//! connection commands (`HELLO`, `AUTH`, `PING`, `CLIENT …`, …) answered here, the data commands
//! handed to [`super::data`]. Before `AUTH` (when idem has tokens) a client may only authenticate,
//! as with Redis's `requirepass`; a token's `can` and `namespaces` then decide what it may do.

use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use idem_core::{ClaimOutcome, ClaimStore, ClaimThen, Clock, Namespace, NewClaim, StoreError};

use super::data::{self, Answers};
use super::reply::{Protocol, Reply};
use super::script::Scripts;
use super::server::{Direct, Resp};
use crate::config::Can;
use crate::web::auth::Caller;

/// The Redis version whose replies idem follows, for clients that read it from `HELLO` or `INFO`.
const REDIS_VERSION: &str = "7.2.0";

/// What a data command runs with.
pub struct Context<'a> {
    pub claims: &'a dyn ClaimStore,
    pub namespace: &'a Namespace,
    pub clock: &'a dyn Clock,
    pub caller: &'a Caller,
    /// The largest value a `SET` may store (`limits.max_body_bytes`).
    pub max_value: usize,
    /// The scripts run or loaded, for `EVALSHA`.
    pub scripts: &'a Scripts,
}

impl Context<'_> {
    pub fn may_read(&self) -> Result<(), Reply> {
        self.may(Can::Read)
    }

    pub fn may_write(&self) -> Result<(), Reply> {
        self.may(Can::Write)
    }

    fn may(&self, need: Can) -> Result<(), Reply> {
        if matches!(self.caller, Caller::Anonymous) {
            return Err(noauth());
        }
        if !self.caller.can(need) {
            return Err(Reply::error(format!(
                "NOPERM token {} has can = \"{}\": this command needs can = \"{}\"",
                self.caller.name(),
                role(self.caller),
                need.as_str()
            )));
        }
        if !self.caller.sees_namespace(self.namespace.as_str()) {
            return Err(Reply::error(format!(
                "NOPERM token {} may not use namespace {}, where [resp] keeps its keys",
                self.caller.name(),
                self.namespace
            )));
        }
        Ok(())
    }
}

fn role(caller: &Caller) -> &'static str {
    match caller {
        Caller::Token(grant) => grant.can.as_str(),
        Caller::Open => "admin",
        Caller::Anonymous => "none",
    }
}

fn noauth() -> Reply {
    Reply::error("NOAUTH Authentication required.")
}

fn wrong_arity(name: &str) -> Reply {
    Reply::error(format!("ERR wrong number of arguments for '{}' command", name.to_ascii_lowercase()))
}

/// The most claims of a pipeline run as one store call.
const MOST_TOGETHER: usize = 1000;

/// What the connection does after a reply.
#[derive(Debug, PartialEq, Eq)]
pub enum Then {
    Continue,
    /// `QUIT`: the reply, then the connection closes.
    Close,
}

pub struct Session {
    shared: Arc<Resp>,
    pub protocol: Protocol,
    caller: Caller,
    id: u64,
    name: Option<Bytes>,
    library: (Option<Bytes>, Option<Bytes>),
}

impl Session {
    pub fn new(shared: Arc<Resp>, id: u64) -> Self {
        let caller = shared.unauthenticated();
        Self { shared, protocol: Protocol::Resp2, caller, id, name: None, library: (None, None) }
    }

    /// Whether the client may run commands (`AUTH` done, or idem has no tokens).
    pub fn authenticated(&self) -> bool {
        !matches!(self.caller, Caller::Anonymous)
    }

    /// Runs commands in order (a pipeline as it was read), writing each reply to `out` in the
    /// protocol in force after it. Consecutive commands that only claim a key run as one store
    /// call ([`data::pending`]): one durable write for them all, the same replies.
    pub async fn run_all(&mut self, commands: Vec<Vec<Bytes>>, out: &mut BytesMut) -> Then {
        let mut group = Vec::new();
        for command in commands {
            if let Some(pending) = self.pending(&command) {
                group.push(pending);
                if group.len() == MOST_TOGETHER {
                    self.claim_together(&mut group, out).await;
                }
                continue;
            }
            self.claim_together(&mut group, out).await;
            let (reply, then) = self.run(command).await;
            reply.encode(self.protocol, out);
            if then == Then::Close {
                return then;
            }
        }
        self.claim_together(&mut group, out).await;
        Then::Continue
    }

    fn pending(&self, command: &[Bytes]) -> Option<Result<data::Pending, Reply>> {
        let (first, args) = command.split_first()?;
        if matches!(self.caller, Caller::Anonymous) || first.len() > 5 {
            return None;
        }
        data::pending(&self.context(), &String::from_utf8_lossy(first).to_ascii_uppercase(), args)
    }

    /// Runs the claims gathered in `group` (emptying it) and writes the replies of its commands.
    async fn claim_together(&self, group: &mut Vec<Result<data::Pending, Reply>>, out: &mut BytesMut) {
        if group.is_empty() {
            return;
        }
        let (claims, answers) = Answers::split(group.drain(..));
        let result = if claims.is_empty() { Ok(Vec::new()) } else { self.claims(claims).await };
        for reply in answers.replies(self.shared.namespace.as_str(), result) {
            reply.encode(self.protocol, out);
        }
    }

    /// The claims of a pipeline in one store call.
    async fn claims(&self, claims: Vec<NewClaim>) -> Result<Vec<ClaimOutcome>, StoreError> {
        self.shared.claims.claim(&self.shared.namespace, claims).await
    }

    /// The commands as one run of claims, when that is all they are.
    pub fn only_claims(&self, commands: &[Vec<Bytes>]) -> Option<Vec<Result<data::Pending, Reply>>> {
        if commands.is_empty() || commands.len() > MOST_TOGETHER {
            return None;
        }
        commands.iter().map(|command| self.pending(command)).collect()
    }

    /// Runs a run of claims ([`Session::only_claims`]) and has `direct` write their replies from
    /// whichever thread learns the outcome ([`ClaimStore::claim_then`]): this task does not wait
    /// for them. When the store cannot, this task waits and hands them over itself.
    pub async fn claim_direct(&self, group: Vec<Result<data::Pending, Reply>>, direct: &Arc<Direct>) {
        let (claims, answers) = Answers::split(group);
        let (protocol, ns, direct) = (self.protocol, self.shared.namespace.clone(), Arc::clone(direct));
        direct.begin();
        let then: ClaimThen = Box::new(move |result| {
            let mut out = BytesMut::new();
            for reply in answers.replies(ns.as_str(), result) {
                reply.encode(protocol, &mut out);
            }
            direct.deliver(&out);
        });
        if claims.is_empty() {
            return then(Ok(Vec::new()));
        }
        if let Err((claims, then)) = self.shared.claims.claim_then(&self.shared.namespace, claims, then) {
            then(self.claims(claims).await);
        }
    }

    fn context(&self) -> Context<'_> {
        let shared = &self.shared;
        Context {
            claims: shared.claims.as_ref(),
            namespace: &shared.namespace,
            clock: shared.clock.as_ref(),
            caller: &self.caller,
            max_value: shared.max_value,
            scripts: &shared.scripts,
        }
    }

    /// Runs one command (its name first).
    pub async fn run(&mut self, command: Vec<Bytes>) -> (Reply, Then) {
        let Some((first, args)) = command.split_first() else { return (Reply::ok(), Then::Continue) };
        let name = String::from_utf8_lossy(first).to_ascii_uppercase();
        let reply = match name.as_str() {
            "QUIT" => return (Reply::ok(), Then::Close),
            "AUTH" => self.auth(args),
            "HELLO" => self.hello(args),
            "RESET" => {
                *self = Session::new(Arc::clone(&self.shared), self.id);
                Reply::Simple("RESET".into())
            }
            _ if matches!(self.caller, Caller::Anonymous) => noauth(),
            "PING" => match args {
                [] => Reply::Simple("PONG".into()),
                [message] => Reply::Bulk(message.clone()),
                _ => wrong_arity(&name),
            },
            "ECHO" => match args {
                [message] => Reply::Bulk(message.clone()),
                _ => wrong_arity(&name),
            },
            "SELECT" => select(args),
            "CLIENT" => self.client(args),
            "COMMAND" => command_info(args),
            "INFO" => Reply::Bulk(self.info().into()),
            "CONFIG" => config(args),
            _ => self.data(&name, first, args).await,
        };
        (reply, Then::Continue)
    }

    async fn data(&self, name: &str, first: &Bytes, args: &[Bytes]) -> Reply {
        match data::run(&self.context(), name, args).await {
            Some(reply) => reply,
            None => unknown_command(first, args),
        }
    }

    /// `AUTH [username] password`: the password is one of idem's tokens; the user is `default`.
    fn auth(&mut self, args: &[Bytes]) -> Reply {
        let (user, password) = match args {
            [password] => (&b"default"[..], password),
            [user, password] => (&user[..], password),
            _ => return wrong_arity("AUTH"),
        };
        match self.shared.authenticate(user, password) {
            Ok(caller) => {
                self.caller = caller;
                Reply::ok()
            }
            Err(reply) => reply,
        }
    }

    /// `HELLO [protover [AUTH username password] [SETNAME clientname]]`: the protocol switched (the
    /// reply already in it), and what the server is.
    fn hello(&mut self, args: &[Bytes]) -> Reply {
        let protocol = match args.first() {
            None => self.protocol,
            Some(version) => match std::str::from_utf8(version).ok().and_then(|v| v.parse::<i64>().ok()) {
                Some(2) => Protocol::Resp2,
                Some(3) => Protocol::Resp3,
                Some(_) => return Reply::error("NOPROTO unsupported protocol version"),
                None => return Reply::error("ERR Protocol version is not an integer or out of range"),
            },
        };
        let (mut caller, mut name) = (None, None);
        let mut options = args.iter().skip(1);
        while let Some(option) = options.next() {
            match String::from_utf8_lossy(option).to_ascii_uppercase().as_str() {
                "AUTH" => match (options.next(), options.next()) {
                    (Some(user), Some(password)) => match self.shared.authenticate(user, password) {
                        Ok(found) => caller = Some(found),
                        Err(reply) => return reply,
                    },
                    _ => return Reply::error(format!("ERR Syntax error in HELLO option '{}'", lossy(option))),
                },
                "SETNAME" => match options.next() {
                    Some(given) => name = Some(given.clone()),
                    None => return Reply::error(format!("ERR Syntax error in HELLO option '{}'", lossy(option))),
                },
                _ => return Reply::error(format!("ERR Syntax error in HELLO option '{}'", lossy(option))),
            }
        }
        if let Some(caller) = caller {
            self.caller = caller;
        }
        if matches!(self.caller, Caller::Anonymous) {
            return Reply::error(
                "NOAUTH HELLO must be called with the client already authenticated, otherwise the HELLO <proto> AUTH \
                 <user> <pass> option can be used to authenticate the client and select the RESP protocol version at \
                 the same time",
            );
        }
        if let Some(name) = name {
            if let Err(reply) = check_name(&name) {
                return reply;
            }
            self.name = Some(name);
        }
        self.protocol = protocol;
        let field = |key: &'static str, value: Reply| (Reply::bulk(key), value);
        Reply::Map(vec![
            field("server", Reply::bulk("idem")),
            field("version", Reply::bulk(REDIS_VERSION)),
            field("idem_version", Reply::bulk(env!("CARGO_PKG_VERSION"))),
            field("proto", Reply::Integer(if protocol == Protocol::Resp3 { 3 } else { 2 })),
            field("id", Reply::Integer(self.id as i64)),
            field("mode", Reply::bulk("standalone")),
            field("role", Reply::bulk("master")),
            field("modules", Reply::Array(Vec::new())),
        ])
    }

    /// `CLIENT ID | SETNAME | GETNAME | SETINFO | INFO | NO-EVICT | NO-TOUCH`.
    fn client(&mut self, args: &[Bytes]) -> Reply {
        let Some((sub, rest)) = args.split_first() else { return wrong_arity("CLIENT") };
        let sub = String::from_utf8_lossy(sub).to_ascii_uppercase();
        match (sub.as_str(), rest) {
            ("ID", []) => Reply::Integer(self.id as i64),
            ("GETNAME", []) => self.name.clone().map_or(Reply::Null, Reply::Bulk),
            ("SETNAME", [name]) => match check_name(name) {
                Ok(()) => {
                    self.name = (!name.is_empty()).then(|| name.clone());
                    Reply::ok()
                }
                Err(reply) => reply,
            },
            ("SETINFO", [attribute, value]) => match String::from_utf8_lossy(attribute).to_ascii_uppercase().as_str() {
                "LIB-NAME" => {
                    self.library.0 = Some(value.clone());
                    Reply::ok()
                }
                "LIB-VER" => {
                    self.library.1 = Some(value.clone());
                    Reply::ok()
                }
                _ => Reply::error(format!("ERR Unrecognized option '{}'", lossy(attribute))),
            },
            ("INFO", []) => Reply::Bulk(format!("{}\n", self.describe()).into()),
            ("NO-EVICT" | "NO-TOUCH", [_]) => Reply::ok(),
            ("ID" | "GETNAME" | "SETNAME" | "SETINFO" | "INFO" | "NO-EVICT" | "NO-TOUCH", _) => {
                Reply::error(format!("ERR wrong number of arguments for 'client|{}' command", sub.to_ascii_lowercase()))
            }
            _ => Reply::error(format!("ERR unknown subcommand '{}'. Try CLIENT HELP.", lossy(&Bytes::from(sub)))),
        }
    }

    /// `CLIENT INFO`'s line.
    fn describe(&self) -> String {
        let text = |b: &Option<Bytes>| b.as_deref().map(String::from_utf8_lossy).unwrap_or_default().into_owned();
        format!(
            "id={} name={} db=0 resp={} user={} lib-name={} lib-ver={}",
            self.id,
            text(&self.name),
            if self.protocol == Protocol::Resp3 { 3 } else { 2 },
            self.caller.name(),
            text(&self.library.0),
            text(&self.library.1)
        )
    }

    fn info(&self) -> String {
        format!(
            "# Server\r\nredis_version:{REDIS_VERSION}\r\nidem_version:{}\r\nredis_mode:standalone\r\n\r\n# Keyspace\r\n",
            env!("CARGO_PKG_VERSION")
        )
    }
}

/// `SELECT 0`: idem has one database.
fn select(args: &[Bytes]) -> Reply {
    let [index] = args else { return wrong_arity("SELECT") };
    match std::str::from_utf8(index).ok().and_then(|i| i.parse::<i64>().ok()) {
        Some(0) => Reply::ok(),
        Some(_) => Reply::error("ERR DB index is out of range"),
        None => Reply::error("ERR value is not an integer or out of range"),
    }
}

/// `CONFIG GET`: no Redis settings to show (redis-benchmark asks for some, and carries on without);
/// idem's own settings are its config file's.
fn config(args: &[Bytes]) -> Reply {
    match args.first().map(|a| String::from_utf8_lossy(a).to_ascii_uppercase()).as_deref() {
        Some("GET") if args.len() > 1 => Reply::Map(Vec::new()),
        _ => Reply::error("ERR idem's settings are in its config file, not CONFIG (docs/reference/config.md)"),
    }
}

/// `COMMAND`: no command table is described (clients here do not need one).
fn command_info(args: &[Bytes]) -> Reply {
    match args.first().map(|a| String::from_utf8_lossy(a).to_ascii_uppercase()).as_deref() {
        Some("COUNT") => Reply::Integer(0),
        Some("DOCS") => Reply::Map(Vec::new()),
        _ => Reply::Array(Vec::new()),
    }
}

/// Redis's rule for client names: no spaces, newlines or other special characters.
fn check_name(name: &[u8]) -> Result<(), Reply> {
    if name.iter().all(|b| (b'!'..=b'~').contains(b)) {
        return Ok(());
    }
    Err(Reply::error("ERR Client names cannot contain spaces, newlines or special characters."))
}

fn lossy(bytes: &Bytes) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Redis's text for a command it does not know, and where idem's are listed.
fn unknown_command(name: &Bytes, args: &[Bytes]) -> Reply {
    let shown: String =
        args.iter().take(8).map(|a| format!("'{}' ", lossy(a).chars().take(128).collect::<String>())).collect();
    Reply::error(format!(
        "ERR unknown command '{}', with args beginning with: {shown}(the commands idem runs: docs/reference/redis.md)",
        lossy(name).chars().take(128).collect::<String>()
    ))
}

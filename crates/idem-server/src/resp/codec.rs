//! RESP, Redis's wire protocol, in both directions: the commands a client sends (multibulk, or an
//! inline line typed by hand into `telnet`) and the replies idem sends back (RESP2, or RESP3 once
//! a client asks for it with `HELLO 3`).
//!
//! Parsing follows Redis's `networking.c` (`processMultibulkBuffer`, `processInlineBuffer`,
//! `sdssplitargs`, `string2ll`), so that a client sees what Redis would show it: the same inputs
//! are accepted, and a malformed one gets the same `Protocol error: …` text, after which the caller
//! sends [`ProtocolError::reply`] and closes the connection. Whatever a client sends:
//!
//! - **Nothing panics, and memory follows the bytes.** A declared count or length is checked
//!   against [`Limits`] as soon as its line is complete, and nothing is reserved on its word: a
//!   `*1000000` header costs nothing until its arguments arrive.
//! - **How the bytes are split does not matter.** Every answer depends only on the bytes so far,
//!   so a command fed one byte at a time parses as it does in one piece. (Redis's line-length
//!   checks depend on where its reads happen to fall; here a line is too long whenever it is.)
//!
//! Replies are [`super::reply`]'s.

use std::ops::Range;

use bytes::{Buf, Bytes, BytesMut};

use super::reply::Reply;

/// How much a client may declare or send in one command; past any limit it gets Redis's protocol
/// error and the connection is closed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Arguments in one multibulk command (`*<n>`); more is `invalid multibulk length`.
    pub max_args: usize,
    /// Bytes in one argument (`$<len>`, Redis's `proto-max-bulk-len`); more is `invalid bulk
    /// length`.
    pub max_bulk: usize,
    /// Bytes in one line: an inline command, or a `*<n>` or `$<len>` line (Redis's
    /// `PROTO_INLINE_MAX_SIZE`). A line's bytes before its `\n` (inline) or `\r` (header) count.
    pub max_inline: usize,
    /// The client has not authenticated (idem has tokens, and no `AUTH` yet): as Redis, at most
    /// [`UNAUTHENTICATED_ARGS`] arguments of [`UNAUTHENTICATED_BULK`] bytes, so that anyone who
    /// can connect cannot make idem hold large commands.
    pub unauthenticated: bool,
}

/// Redis's bounds for a client that has not authenticated.
pub const UNAUTHENTICATED_ARGS: usize = 10;
pub const UNAUTHENTICATED_BULK: usize = 16 * 1024;

impl Default for Limits {
    /// Redis's own: 1 Mi arguments (its cap before 6.0), 512 MiB per argument, 64 KiB per line.
    fn default() -> Self {
        Self { max_args: 1024 * 1024, max_bulk: 512 * 1024 * 1024, max_inline: 64 * 1024, unauthenticated: false }
    }
}

/// Input Redis would refuse; it displays as the text Redis replies with (after `ERR `).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProtocolError {
    /// An inline line longer than [`Limits::max_inline`].
    #[error("Protocol error: too big inline request")]
    TooBigInlineRequest,
    /// An inline line whose quotes do not close, or close with no space after them.
    #[error("Protocol error: unbalanced quotes in request")]
    UnbalancedQuotes,
    /// A `*<n>` line longer than [`Limits::max_inline`].
    #[error("Protocol error: too big mbulk count string")]
    TooBigMultibulkCount,
    /// A `*<n>` that is not a number, or more than [`Limits::max_args`].
    #[error("Protocol error: invalid multibulk length")]
    InvalidMultibulkLength,
    /// A `$<len>` line longer than [`Limits::max_inline`].
    #[error("Protocol error: too big bulk count string")]
    TooBigBulkCount,
    /// An argument that does not start with `$`: the byte it starts with.
    #[error("{}", expected_dollar(*.0))]
    ExpectedDollar(u8),
    /// A `$<len>` that is not a number, is negative, or is more than [`Limits::max_bulk`].
    #[error("Protocol error: invalid bulk length")]
    InvalidBulkLength,
    /// More than [`UNAUTHENTICATED_ARGS`] arguments before `AUTH`.
    #[error("Protocol error: unauthenticated multibulk length")]
    UnauthenticatedMultibulkLength,
    /// An argument of more than [`UNAUTHENTICATED_BULK`] bytes before `AUTH`.
    #[error("Protocol error: unauthenticated bulk length")]
    UnauthenticatedBulkLength,
}

impl ProtocolError {
    /// What the client is sent before the connection closes: `-ERR Protocol error: …`.
    pub fn reply(&self) -> Reply {
        Reply::Error(format!("ERR {self}"))
    }
}

/// Redis formats the byte with `%c` into a C string, then turns CR and LF into spaces so that the
/// reply stays on one line: a NUL therefore ends the message right there.
fn expected_dollar(got: u8) -> String {
    let shown = match got {
        0 => return "Protocol error: expected '$', got '".to_owned(),
        b'\r' | b'\n' => ' ',
        // A byte past ASCII cannot be sent raw in a `String`: it goes out as its Latin-1 character.
        _ => char::from(got),
    };
    format!("Protocol error: expected '$', got '{shown}'")
}

/// Takes one command off the front of `buf`: its arguments, or `None` while the command is
/// incomplete, with none of it consumed. Empty inline lines, `*0` and `*-1` before it are consumed
/// and skipped, as Redis does. An error means the connection must be closed.
///
/// This reads the unfinished command from its start on every call; a connection should keep a
/// [`Parser`], which remembers how far it got.
pub fn parse(buf: &mut BytesMut, limits: &Limits) -> Result<Option<Vec<Bytes>>, ProtocolError> {
    Parser::default().parse(buf, limits)
}

/// [`parse`] for one connection: it remembers the arguments of an unfinished multibulk command,
/// so a command that arrives in many small reads is scanned once rather than once per read (a
/// client trickling a million empty arguments would otherwise cost quadratic time).
///
/// Between calls the caller may only append to the buffer; what it consumes, it consumes through
/// [`Parser::parse`].
#[derive(Debug, Default)]
pub struct Parser {
    unfinished: Option<Unfinished>,
}

/// A multibulk command whose `*<n>` line has been read, with the arguments found so far.
#[derive(Debug)]
struct Unfinished {
    /// How many arguments the `*<n>` line announced.
    count: usize,
    /// Where each argument found so far lies in the buffer.
    args: Vec<Range<usize>>,
    /// Where the next argument's `$<len>` line starts.
    next: usize,
}

/// What one step of parsing found at the front of the buffer.
enum Read {
    Incomplete,
    /// An empty inline line, `*0` or `*-1`: consumed, no command.
    Skipped,
    Command(Vec<Bytes>),
}

impl Parser {
    /// See [`parse`]; the same answers, with the work done on earlier calls kept.
    pub fn parse(&mut self, buf: &mut BytesMut, limits: &Limits) -> Result<Option<Vec<Bytes>>, ProtocolError> {
        loop {
            let Some(&first) = buf.first() else { return Ok(None) };
            // Like Redis, the first byte decides: `*` is multibulk, anything else an inline line.
            let read = if first == b'*' {
                self.multibulk(buf, limits)
            } else {
                self.unfinished = None;
                inline(buf, limits)
            };
            match read? {
                Read::Incomplete => return Ok(None),
                Read::Skipped => continue,
                Read::Command(args) => return Ok(Some(args)),
            }
        }
    }

    /// A multibulk command at the front of `buf`, resumed where the last call stopped.
    fn multibulk(&mut self, buf: &mut BytesMut, limits: &Limits) -> Result<Read, ProtocolError> {
        // A buffer shorter than what was read before is not the same buffer: start again.
        let resumed = self.unfinished.take().filter(|unfinished| unfinished.next <= buf.len());
        let mut command = match resumed {
            Some(unfinished) => unfinished,
            None => match header(buf, limits)? {
                Header::Incomplete => return Ok(Read::Incomplete),
                Header::Empty { len } => {
                    buf.advance(len);
                    return Ok(Read::Skipped);
                }
                // Room for a few arguments only: the rest is reserved as their bytes arrive.
                Header::Count { count, next } => Unfinished { count, args: Vec::with_capacity(count.min(16)), next },
            },
        };
        while command.args.len() < command.count {
            let Some((arg, next)) = bulk(buf, command.next, limits)? else {
                self.unfinished = Some(command);
                return Ok(Read::Incomplete);
            };
            command.args.push(arg);
            command.next = next;
        }
        // `bulk` never returns a range or position past the end of `buf`.
        let bytes = buf.split_to(command.next).freeze();
        Ok(Read::Command(command.args.into_iter().map(|range| bytes.slice(range)).collect()))
    }
}

/// What a `*<n>` line says.
enum Header {
    Incomplete,
    /// `*0` or a negative count: a command with nothing in it, `len` bytes long.
    Empty {
        len: usize,
    },
    /// `count` arguments follow, the first at `next`.
    Count {
        count: usize,
        next: usize,
    },
}

/// The `*<n>` line at the front of `buf`, which starts with `*`.
fn header(buf: &[u8], limits: &Limits) -> Result<Header, ProtocolError> {
    let Some((line, next)) = line_at(buf, 0, limits.max_inline, ProtocolError::TooBigMultibulkCount)? else {
        return Ok(Header::Incomplete);
    };
    let digits = line.get(1..).unwrap_or_default();
    let count = string_to_i64(digits).ok_or(ProtocolError::InvalidMultibulkLength)?;
    if count <= 0 {
        return Ok(Header::Empty { len: next });
    }
    if limits.unauthenticated && count > UNAUTHENTICATED_ARGS as i64 {
        return Err(ProtocolError::UnauthenticatedMultibulkLength);
    }
    let count = usize::try_from(count).ok().filter(|&count| count <= limits.max_args);
    let count = count.ok_or(ProtocolError::InvalidMultibulkLength)?;
    Ok(Header::Count { count, next })
}

/// The argument whose `$<len>` line starts at `start`: where its bytes lie and where the next
/// line starts, or `None` until all of it and the two bytes that end it have arrived. Like Redis,
/// those two bytes are taken to be `\r\n` without a look.
fn bulk(buf: &[u8], start: usize, limits: &Limits) -> Result<Option<(Range<usize>, usize)>, ProtocolError> {
    let Some((line, data)) = line_at(buf, start, limits.max_inline, ProtocolError::TooBigBulkCount)? else {
        return Ok(None);
    };
    // An empty line starts with its `\r`.
    let (&marker, digits) = line.split_first().ok_or(ProtocolError::ExpectedDollar(b'\r'))?;
    if marker != b'$' {
        return Err(ProtocolError::ExpectedDollar(marker));
    }
    let len = string_to_i64(digits).and_then(|len| usize::try_from(len).ok());
    if limits.unauthenticated && len.is_some_and(|len| len > UNAUTHENTICATED_BULK) {
        return Err(ProtocolError::UnauthenticatedBulkLength);
    }
    let len = len.filter(|&len| len <= limits.max_bulk).ok_or(ProtocolError::InvalidBulkLength)?;
    let end = data.saturating_add(len);
    let next = end.saturating_add(2);
    Ok((next <= buf.len()).then_some((data..end, next)))
}

/// The header line that starts at `start`, up to its `\r`, and where the line after it starts;
/// `None` until the byte after the `\r` has arrived (Redis takes it to be the `\n` unseen). A
/// line longer than `max` is `too_big`, found without scanning past `max`.
fn line_at(
    buf: &[u8],
    start: usize,
    max: usize,
    too_big: ProtocolError,
) -> Result<Option<(&[u8], usize)>, ProtocolError> {
    let rest = buf.get(start..).unwrap_or_default();
    let window = rest.get(..max.saturating_add(1)).unwrap_or(rest);
    match window.iter().position(|&byte| byte == b'\r') {
        Some(cr) if cr + 2 <= rest.len() => Ok(Some((&rest[..cr], start + cr + 2))),
        Some(_) => Ok(None),
        None if rest.len() > max => Err(too_big),
        None => Ok(None),
    }
}

/// An inline command at the front of `buf`: one line, ending in `\n` or `\r\n`, split as
/// `redis-cli` users expect. An empty line is consumed and skipped.
fn inline(buf: &mut BytesMut, limits: &Limits) -> Result<Read, ProtocolError> {
    let window = buf.len().min(limits.max_inline.saturating_add(1));
    let Some(newline) = buf[..window].iter().position(|&byte| byte == b'\n') else {
        return if buf.len() > limits.max_inline {
            Err(ProtocolError::TooBigInlineRequest)
        } else {
            Ok(Read::Incomplete)
        };
    };
    let line = &buf[..newline];
    let args = split_args(line.strip_suffix(b"\r").unwrap_or(line))?;
    buf.advance(newline + 1);
    Ok(if args.is_empty() { Read::Skipped } else { Read::Command(args) })
}

/// Redis's `sdssplitargs`: arguments separated by blanks; `"…"` with the escapes `\xHH`, `\n`,
/// `\r`, `\t`, `\b`, `\a` and `\<any>`; `'…'` with only `\'`. A closing quote must be followed by
/// a blank or the end. Redis reads the line as a C string, so a NUL ends it.
fn split_args(line: &[u8]) -> Result<Vec<Bytes>, ProtocolError> {
    let line = line.split(|&byte| byte == 0).next().unwrap_or_default();
    let mut args = Vec::new();
    let mut at = 0;
    loop {
        while line.get(at).is_some_and(|&byte| is_c_space(byte)) {
            at += 1;
        }
        if at >= line.len() {
            return Ok(args);
        }
        let (arg, next) = token(line, at)?;
        args.push(Bytes::from(arg));
        at = next;
    }
}

/// How the token being read is quoted.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Quoted {
    No,
    Double,
    Single,
}

/// The one argument that starts at `start` (not a blank), and where reading goes on after it.
fn token(line: &[u8], start: usize) -> Result<(Vec<u8>, usize), ProtocolError> {
    // Past the end reads as the C string's terminating NUL.
    let byte = |at: usize| line.get(at).copied().unwrap_or(0);
    let closes = |at: usize| byte(at + 1) == 0 || is_c_space(byte(at + 1));
    let mut arg = Vec::new();
    let mut quoted = Quoted::No;
    let mut at = start;
    loop {
        let c = byte(at);
        match quoted {
            Quoted::No => match c {
                0 => return Ok((arg, at)),
                b' ' | b'\n' | b'\r' | b'\t' => return Ok((arg, at + 1)),
                b'"' => quoted = Quoted::Double,
                b'\'' => quoted = Quoted::Single,
                _ => arg.push(c),
            },
            Quoted::Double => match (c, byte(at + 1), hex(byte(at + 2)).zip(hex(byte(at + 3)))) {
                (0, _, _) => return Err(ProtocolError::UnbalancedQuotes),
                (b'\\', b'x', Some((high, low))) => {
                    arg.push(high * 16 + low);
                    at += 3;
                }
                (b'\\', escaped, _) if escaped != 0 => {
                    arg.push(unescape(escaped));
                    at += 1;
                }
                (b'"', _, _) if closes(at) => return Ok((arg, at + 1)),
                (b'"', _, _) => return Err(ProtocolError::UnbalancedQuotes),
                _ => arg.push(c),
            },
            Quoted::Single => match (c, byte(at + 1)) {
                (0, _) => return Err(ProtocolError::UnbalancedQuotes),
                (b'\\', b'\'') => {
                    arg.push(b'\'');
                    at += 1;
                }
                (b'\'', _) if closes(at) => return Ok((arg, at + 1)),
                (b'\'', _) => return Err(ProtocolError::UnbalancedQuotes),
                _ => arg.push(c),
            },
        }
        at += 1;
    }
}

/// C's `isspace` in the C locale.
fn is_c_space(byte: u8) -> bool {
    matches!(byte, b' ' | b'\t' | b'\n' | 0x0b | 0x0c | b'\r')
}

fn hex(byte: u8) -> Option<u8> {
    char::from(byte).to_digit(16).and_then(|digit| u8::try_from(digit).ok())
}

/// The byte a backslash escape inside `"…"` stands for.
fn unescape(escaped: u8) -> u8 {
    match escaped {
        b'n' => b'\n',
        b'r' => b'\r',
        b't' => b'\t',
        b'b' => 0x08,
        b'a' => 0x07,
        other => other,
    }
}

/// Redis's `string2ll`: an optional `-`, then digits with no leading zero (or `0` alone), 20
/// bytes at most, in range. No `+`, no blanks, no `-0`.
fn string_to_i64(text: &[u8]) -> Option<i64> {
    if text.is_empty() || text.len() > 20 {
        return None;
    }
    if text == b"0" {
        return Some(0);
    }
    let (negative, digits) = match text.split_first() {
        Some((b'-', digits)) => (true, digits),
        _ => (false, text),
    };
    if !digits.first().is_some_and(|first| (b'1'..=b'9').contains(first)) {
        return None;
    }
    let mut magnitude: u64 = 0;
    for &digit in digits {
        if !digit.is_ascii_digit() {
            return None;
        }
        magnitude = magnitude.checked_mul(10)?.checked_add(u64::from(digit - b'0'))?;
    }
    let magnitude = i128::from(magnitude);
    i64::try_from(if negative { -magnitude } else { magnitude }).ok()
}

#[cfg(test)]
mod tests {
    use bytes::BufMut;

    use super::super::reply::Protocol;
    use super::super::reply::tests::encoded;
    use super::*;

    #[test]
    fn a_protocol_error_is_replied_as_redis_does() {
        for protocol in [Protocol::Resp2, Protocol::Resp3] {
            let reply = encoded(&ProtocolError::InvalidBulkLength.reply(), protocol);
            assert_eq!(reply, "-ERR Protocol error: invalid bulk length\r\n");
        }
    }

    fn args(list: &[&[u8]]) -> Vec<Bytes> {
        list.iter().map(|arg| Bytes::copy_from_slice(arg)).collect()
    }

    fn multibulk(command: &[Bytes]) -> Vec<u8> {
        let mut out = format!("*{}\r\n", command.len()).into_bytes();
        for arg in command {
            out.extend(format!("${}\r\n", arg.len()).bytes());
            out.extend_from_slice(arg);
            out.extend_from_slice(b"\r\n");
        }
        out
    }

    /// Every command in `input`, parsed with the default limits; the input must end after one.
    fn parse_all(input: &[u8]) -> Result<Vec<Vec<Bytes>>, ProtocolError> {
        let mut buf = BytesMut::from(input);
        let mut commands = Vec::new();
        while let Some(command) = parse(&mut buf, &Limits::default())? {
            commands.push(command);
        }
        assert!(buf.is_empty(), "left over: {buf:?}");
        Ok(commands)
    }

    fn parse_one(input: &[u8]) -> Result<Option<Vec<Bytes>>, ProtocolError> {
        parse(&mut BytesMut::from(input), &Limits::default())
    }

    fn error_of(input: &[u8], limits: &Limits) -> String {
        match parse(&mut BytesMut::from(input), limits) {
            Err(error) => error.to_string(),
            other => panic!("{input:?} parsed as {other:?}"),
        }
    }

    #[test]
    fn a_multibulk_command() {
        let input = b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$5\r\nvalue\r\n";
        assert_eq!(parse_all(input), Ok(vec![args(&[b"SET", b"k", b"value"])]));
    }

    #[test]
    fn every_prefix_is_incomplete_and_consumes_nothing() {
        let inputs: [&[u8]; 3] =
            [b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$4\r\na\r\nb\r\n", b"SET k \"a b\"\r\n", b"*2\r\n$0\r\n\r\n$1\r\n\0\r\n"];
        for input in inputs {
            let expected = parse_one(input).unwrap().unwrap();
            for cut in 0..input.len() {
                let mut buf = BytesMut::from(&input[..cut]);
                assert_eq!(parse(&mut buf, &Limits::default()), Ok(None), "{:?}", &input[..cut]);
                assert_eq!(&buf[..], &input[..cut], "a prefix was consumed");
            }
            // The same, one byte at a time into a connection's parser.
            let mut parser = Parser::default();
            let mut buf = BytesMut::new();
            for (at, &byte) in input.iter().enumerate() {
                buf.put_u8(byte);
                let parsed = parser.parse(&mut buf, &Limits::default()).unwrap();
                if at + 1 < input.len() {
                    assert_eq!(parsed, None);
                    assert_eq!(buf.len(), at + 1);
                } else {
                    assert_eq!(parsed.as_ref(), Some(&expected));
                    assert!(buf.is_empty());
                }
            }
        }
    }

    #[test]
    fn pipelined_commands_come_out_one_at_a_time() {
        let mut buf =
            BytesMut::from(&b"*1\r\n$4\r\nPING\r\nECHO hi\r\n*2\r\n$3\r\nGET\r\n$1\r\nk\r\n*1\r\n$4\r\nPI"[..]);
        let limits = Limits::default();
        assert_eq!(parse(&mut buf, &limits), Ok(Some(args(&[b"PING"]))));
        assert_eq!(parse(&mut buf, &limits), Ok(Some(args(&[b"ECHO", b"hi"]))));
        assert_eq!(parse(&mut buf, &limits), Ok(Some(args(&[b"GET", b"k"]))));
        assert_eq!(parse(&mut buf, &limits), Ok(None));
        assert_eq!(&buf[..], b"*1\r\n$4\r\nPI");
    }

    #[test]
    fn values_are_binary_safe() {
        let command = args(&[b"SET", b"\0", b"\r\n", b"a\r\n$1\r\nb", b"", b"*1\r\n"]);
        assert_eq!(parse_all(&multibulk(&command)), Ok(vec![command]));
    }

    #[test]
    fn empty_commands_are_skipped() {
        let input = b"\r\n\n  \t \r\n*0\r\n*-1\r\n*-9223372036854775808\r\nPING\n";
        assert_eq!(parse_all(input), Ok(vec![args(&[b"PING"])]));
        assert_eq!(parse_all(b"\n\r\n*0\r\n"), Ok(vec![]));
    }

    #[test]
    fn inline_commands_split_as_redis_does() {
        let cases: [(&[u8], &[&[u8]]); 10] = [
            (b"PING\r\n", &[b"PING"]),
            (b"  SET\tk  v \r\n", &[b"SET", b"k", b"v"]),
            (b"SET k \"a b\"\n", &[b"SET", b"k", b"a b"]),
            (b"ECHO \"\\x41\\x4a\\n\\r\\t\\b\\a\\\\\\\"\\q\\x4\"\n", &[b"ECHO", b"AJ\n\r\t\x08\x07\\\"qx4"]),
            (b"ECHO 'it\\'s \\n \"x\"'\n", &[b"ECHO", b"it's \\n \"x\""]),
            (b"ECHO \"\" ''\n", &[b"ECHO", b"", b""]),
            (b"ECHO a\"b c\" d\n", &[b"ECHO", b"ab c", b"d"]),
            (b"ECHO a\rb\x0bc\n", &[b"ECHO", b"a", b"b\x0bc"]),
            (b"ECHO a\0b c\n", &[b"ECHO", b"a"]),
            (b"\x0bECHO\x0c\n", &[b"ECHO\x0c"]),
        ];
        for (input, expected) in cases {
            assert_eq!(parse_all(input), Ok(vec![args(expected)]), "{}", String::from_utf8_lossy(input));
        }
    }

    #[test]
    fn unbalanced_quotes() {
        for input in [
            &b"ECHO \"a\n"[..],
            b"ECHO 'a\r\n",
            b"ECHO \"a\"x\n",
            b"ECHO 'a'x\n",
            b"ECHO \"a\\\"\n",
            b"ECHO 'a\\'\n",
            b"ECHO a\"b\"c\n",
        ] {
            assert_eq!(error_of(input, &Limits::default()), "Protocol error: unbalanced quotes in request");
        }
    }

    #[test]
    fn malformed_counts_and_lengths() {
        let limits = Limits::default();
        for input in [&b"*abc\r\n"[..], b"*+1\r\n", b"*01\r\n", b"* 1\r\n", b"*-0\r\n", b"*\r\n", b"*1 \r\n"] {
            assert_eq!(error_of(input, &limits), "Protocol error: invalid multibulk length", "{input:?}");
        }
        assert_eq!(error_of(b"*99999999999999999999\r\n", &limits), "Protocol error: invalid multibulk length");
        for input in [&b"*1\r\n$-1\r\n"[..], b"*1\r\n$abc\r\n", b"*1\r\n$\r\n", b"*1\r\n$01\r\n", b"*1\r\n$+1\r\n"] {
            assert_eq!(error_of(input, &limits), "Protocol error: invalid bulk length", "{input:?}");
        }
        assert_eq!(error_of(b"*1\r\nx\r\n", &limits), "Protocol error: expected '$', got 'x'");
        assert_eq!(error_of(b"*2\r\n$1\r\na\r\n:1\r\n", &limits), "Protocol error: expected '$', got ':'");
        assert_eq!(error_of(b"*1\r\n\r\n", &limits), "Protocol error: expected '$', got ' '");
        assert_eq!(error_of(b"*1\r\n\n\r\n", &limits), "Protocol error: expected '$', got ' '");
        assert_eq!(error_of(b"*1\r\n\0\r\n", &limits), "Protocol error: expected '$', got '");
        // Like Redis, nothing is said until the line is complete.
        assert_eq!(parse_one(b"*1\r\nx"), Ok(None));
        assert_eq!(parse_one(b"*1\r\nx\r"), Ok(None));
    }

    #[test]
    fn lines_longer_than_the_limit() {
        let limits = Limits::default();
        let line = |prefix: &[u8], len: usize, end: &[u8]| {
            let mut input = prefix.to_vec();
            input.resize(prefix.len() + len, b'1');
            input.extend_from_slice(end);
            input
        };
        let inline = "Protocol error: too big inline request";
        assert_eq!(parse_one(&line(b"", 64 * 1024, b"")), Ok(None));
        assert_eq!(error_of(&line(b"", 64 * 1024 + 1, b""), &limits), inline);
        assert!(parse_one(&line(b"", 64 * 1024, b"\n")).unwrap().is_some());
        assert_eq!(error_of(&line(b"", 64 * 1024 + 1, b"\n"), &limits), inline);
        // Counts: `*` and its digits make the line.
        let mbulk = "Protocol error: too big mbulk count string";
        assert_eq!(parse_one(&line(b"*", 64 * 1024 - 1, b"")), Ok(None));
        assert_eq!(error_of(&line(b"*", 64 * 1024, b""), &limits), mbulk);
        assert_eq!(error_of(&line(b"*", 64 * 1024, b"\r\n"), &limits), mbulk);
        assert_eq!(error_of(&line(b"*", 64 * 1024 - 1, b"\r\n"), &limits), "Protocol error: invalid multibulk length");
        let bulk = "Protocol error: too big bulk count string";
        assert_eq!(parse_one(&line(b"*1\r\n$", 64 * 1024 - 1, b"")), Ok(None));
        assert_eq!(error_of(&line(b"*1\r\n$", 64 * 1024, b""), &limits), bulk);
        assert_eq!(error_of(&line(b"*1\r\n$", 64 * 1024 - 1, b"\r\n"), &limits), "Protocol error: invalid bulk length");
    }

    #[test]
    fn declared_sizes_past_the_limits_fail_before_the_bytes_arrive() {
        let limits = Limits::default();
        assert_eq!(error_of(b"*1\r\n$536870913\r\n", &limits), "Protocol error: invalid bulk length");
        assert_eq!(parse_one(b"*1\r\n$536870912\r\n"), Ok(None));
        assert_eq!(error_of(b"*1048577\r\n", &limits), "Protocol error: invalid multibulk length");
        assert_eq!(error_of(b"*9223372036854775807\r\n", &limits), "Protocol error: invalid multibulk length");
        assert_eq!(parse_one(b"*1048576\r\n$1\r\na\r\n"), Ok(None));
        let small = Limits { max_args: 2, max_bulk: 3, max_inline: 8, unauthenticated: false };
        assert_eq!(error_of(b"*3\r\n", &small), "Protocol error: invalid multibulk length");
        assert_eq!(error_of(b"*2\r\n$4\r\n", &small), "Protocol error: invalid bulk length");
        assert_eq!(error_of(b"GET 12345\r\n", &small), "Protocol error: too big inline request");
        let mut buf = BytesMut::from(&b"*2\r\n$3\r\nGET\r\n$3\r\nabc\r\n"[..]);
        assert_eq!(parse(&mut buf, &small), Ok(Some(args(&[b"GET", b"abc"]))));
    }

    #[test]
    fn a_parser_does_not_read_a_trickled_command_again_from_its_start() {
        // Reading from the start on each of these 50 000 reads would scan 1.25 billion arguments.
        let count = 50_000;
        let mut input = format!("*{count}\r\n").into_bytes();
        input.extend(b"$0\r\n\r\n".repeat(count));
        let (mut parser, mut buf) = (Parser::default(), BytesMut::new());
        let mut parsed = None;
        for chunk in input.chunks(6) {
            buf.extend_from_slice(chunk);
            parsed = parser.parse(&mut buf, &Limits::default()).unwrap();
        }
        assert_eq!(parsed.map(|args| args.len()), Some(count));
    }

    /// A deterministic source of test input (xorshift64*), in place of a property-test crate.
    struct Random(u64);

    impl Random {
        fn below(&mut self, n: usize) -> usize {
            self.0 ^= self.0 >> 12;
            self.0 ^= self.0 << 25;
            self.0 ^= self.0 >> 27;
            (self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 33) as usize % n.max(1)
        }

        /// Bytes weighted towards the ones the protocol gives a meaning to.
        fn bytes(&mut self, max_len: usize) -> Vec<u8> {
            const SPECIAL: &[u8] = b"\r\n\0*$ \"'\\x1-";
            let len = self.below(max_len + 1);
            (0..len)
                .map(|_| if self.below(2) == 0 { SPECIAL[self.below(SPECIAL.len())] } else { self.below(256) as u8 })
                .collect()
        }

        /// A multibulk command with a few of its bytes replaced, to reach the errors past its start.
        fn damaged_command(&mut self) -> Vec<u8> {
            let command: Vec<Bytes> = (0..1 + self.below(3)).map(|_| Bytes::from(self.bytes(6))).collect();
            let mut input = multibulk(&command);
            for _ in 0..1 + self.below(3) {
                let at = self.below(input.len());
                input[at] = self.bytes(1).first().copied().unwrap_or(b'-');
            }
            input
        }

        /// `input` cut at random places.
        fn chunks<'a>(&mut self, input: &'a [u8]) -> Vec<&'a [u8]> {
            let mut chunks = Vec::new();
            let mut rest = input;
            while !rest.is_empty() {
                let (chunk, tail) = rest.split_at(1 + self.below(rest.len().min(9)));
                chunks.push(chunk);
                rest = tail;
            }
            chunks
        }
    }

    /// Feeds `chunks` to one parser as reads would, taking every command as soon as it is whole;
    /// stops at the first error.
    fn feed(chunks: &[&[u8]], limits: &Limits) -> (Vec<Vec<Bytes>>, Option<ProtocolError>) {
        let mut parser = Parser::default();
        let mut buf = BytesMut::new();
        let mut commands = Vec::new();
        for chunk in chunks {
            buf.extend_from_slice(chunk);
            loop {
                let before = buf.clone();
                match parser.parse(&mut buf, limits) {
                    Ok(Some(command)) => commands.push(command),
                    Ok(None) => {
                        // Only empty commands skipped before it may have gone.
                        assert!(before.ends_with(&buf), "an incomplete command was consumed");
                        break;
                    }
                    Err(error) => return (commands, Some(error)),
                }
            }
        }
        (commands, None)
    }

    #[test]
    fn random_commands_split_anywhere_parse_back() {
        let mut random = Random(0x1de4_5eed);
        for _ in 0..500 {
            let commands: Vec<Vec<Bytes>> = (0..1 + random.below(4))
                .map(|_| (0..1 + random.below(6)).map(|_| Bytes::from(random.bytes(40))).collect())
                .collect();
            let input: Vec<u8> = commands.iter().flat_map(|command| multibulk(command)).collect();
            let chunks = random.chunks(&input);
            assert_eq!(feed(&chunks, &Limits::default()), (commands, None), "{input:?} in {chunks:?}");
        }
    }

    #[test]
    fn any_bytes_parse_the_same_however_they_are_split() {
        let mut random = Random(0xbad_b17e5);
        let limits = Limits { max_args: 4, max_bulk: 16, max_inline: 24, unauthenticated: false };
        for round in 0..4000 {
            let input = if round % 2 == 0 { random.bytes(80) } else { random.damaged_command() };
            let whole = feed(&[&input], &limits);
            let chunks = random.chunks(&input);
            assert_eq!(feed(&chunks, &limits), whole, "{input:?} in {chunks:?}");
            let bytes: Vec<&[u8]> = input.chunks(1).collect();
            assert_eq!(feed(&bytes, &limits), whole, "{input:?} byte by byte");
        }
    }

    #[test]
    fn before_auth_commands_are_held_to_redis_bounds() {
        let before = Limits { unauthenticated: true, ..Limits::default() };
        let eleven = multibulk(&args(&[&b"a"[..]; 11]));
        assert_eq!(error_of(&eleven, &before), "Protocol error: unauthenticated multibulk length");
        let big = format!("*2\r\n$3\r\nGET\r\n${}\r\n", UNAUTHENTICATED_BULK + 1);
        assert_eq!(error_of(big.as_bytes(), &before), "Protocol error: unauthenticated bulk length");
        let ten = multibulk(&args(&[&[b'x'; UNAUTHENTICATED_BULK][..]; 10]));
        let parsed = parse(&mut BytesMut::from(&ten[..]), &before);
        assert_eq!(parsed.map(|c| c.map(|c| c.len())), Ok(Some(10)), "within the bounds");
        assert!(parse(&mut BytesMut::from(&eleven[..]), &Limits::default()).is_ok(), "no bound once authenticated");
    }
}

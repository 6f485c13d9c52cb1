//! Replies in RESP, Redis's wire protocol: a [`Reply`] written in the [`Protocol`] the connection
//! speaks. RESP3's richer types fall back to what Redis sends a RESP2 client (a map as a flat
//! array, a boolean as 0 or 1, …).

use std::borrow::Cow;

use bytes::{BufMut, Bytes, BytesMut};

/// The version of the protocol a connection speaks: RESP2 until the client sends `HELLO 3`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Protocol {
    #[default]
    Resp2,
    Resp3,
}

/// One reply, in terms both protocols can write; [`Reply::encode`] picks the bytes.
#[derive(Debug, Clone, PartialEq)]
pub enum Reply {
    /// `+OK`: a status line. CR and LF in it are sent as spaces, so it stays one line.
    Simple(Cow<'static, str>),
    /// `-ERR …`, `-WRONGTYPE …`: the whole text after the `-`, code first. CR and LF are sent as
    /// spaces, as Redis does.
    Error(String),
    Integer(i64),
    /// A binary-safe string.
    Bulk(Bytes),
    /// No value: RESP2's null bulk string, RESP3's null.
    Null,
    /// No array (what Redis sends for some timeouts and aborted transactions): RESP2's null
    /// array, RESP3's null.
    NullArray,
    Array(Vec<Reply>),
    /// Key-value pairs: RESP3's map, a flat array of keys and values in RESP2.
    Map(Vec<(Reply, Reply)>),
    /// RESP3's double, written as Redis writes it; a bulk string of that text in RESP2.
    Double(f64),
    /// RESP3's boolean; the integer 1 or 0 in RESP2.
    Boolean(bool),
    /// RESP3's verbatim string with its three-letter format (`txt`, `mkd`); just the text, as a
    /// bulk string, in RESP2.
    Verbatim {
        format: [u8; 3],
        text: Bytes,
    },
    /// RESP3's set; an array in RESP2.
    Set(Vec<Reply>),
}

impl Reply {
    /// `+OK`.
    pub fn ok() -> Self {
        Self::Simple(Cow::Borrowed("OK"))
    }

    /// An error reply; `code_and_text` is all of it after the `-`, e.g. `"ERR syntax error"`.
    pub fn error(code_and_text: impl Into<String>) -> Self {
        Self::Error(code_and_text.into())
    }

    /// A bulk string.
    pub fn bulk(value: impl Into<Bytes>) -> Self {
        Self::Bulk(value.into())
    }

    /// Appends this reply to `out`, as `protocol` writes it.
    pub fn encode(&self, protocol: Protocol, out: &mut BytesMut) {
        let resp3 = protocol == Protocol::Resp3;
        match self {
            Self::Simple(text) => put_line(out, b'+', text.as_bytes()),
            Self::Error(text) => put_line(out, b'-', text.as_bytes()),
            Self::Integer(n) => put_integer(out, b':', *n),
            Self::Bulk(bytes) => put_bulk(out, bytes),
            Self::Null | Self::NullArray if resp3 => out.put_slice(b"_\r\n"),
            Self::Null => out.put_slice(b"$-1\r\n"),
            Self::NullArray => out.put_slice(b"*-1\r\n"),
            Self::Array(items) => put_aggregate(out, b'*', items, protocol),
            Self::Set(items) => put_aggregate(out, if resp3 { b'~' } else { b'*' }, items, protocol),
            Self::Map(pairs) => {
                if resp3 {
                    put_length(out, b'%', pairs.len());
                } else {
                    put_length(out, b'*', pairs.len().saturating_mul(2));
                }
                for (key, value) in pairs {
                    key.encode(protocol, out);
                    value.encode(protocol, out);
                }
            }
            Self::Double(value) if resp3 => put_line(out, b',', format_double(*value).as_bytes()),
            Self::Double(value) => put_bulk(out, format_double(*value).as_bytes()),
            Self::Boolean(value) if resp3 => out.put_slice(if *value { b"#t\r\n" } else { b"#f\r\n" }),
            Self::Boolean(value) => out.put_slice(if *value { b":1\r\n" } else { b":0\r\n" }),
            Self::Verbatim { format, text } if resp3 => {
                put_length(out, b'=', text.len().saturating_add(4));
                out.put_slice(format);
                out.put_u8(b':');
                out.put_slice(text);
                out.put_slice(b"\r\n");
            }
            Self::Verbatim { text, .. } => put_bulk(out, text),
        }
    }
}

/// `<marker><text>\r\n`, with CR and LF in `text` sent as spaces.
fn put_line(out: &mut BytesMut, marker: u8, text: &[u8]) {
    out.put_u8(marker);
    out.extend(text.iter().map(|&byte| if byte == b'\r' || byte == b'\n' { b' ' } else { byte }));
    out.put_slice(b"\r\n");
}

fn put_bulk(out: &mut BytesMut, bytes: &[u8]) {
    put_length(out, b'$', bytes.len());
    out.put_slice(bytes);
    out.put_slice(b"\r\n");
}

fn put_aggregate(out: &mut BytesMut, marker: u8, items: &[Reply], protocol: Protocol) {
    put_length(out, marker, items.len());
    for item in items {
        item.encode(protocol, out);
    }
}

fn put_length(out: &mut BytesMut, marker: u8, len: usize) {
    put_decimal(out, marker, false, u64::try_from(len).unwrap_or(u64::MAX));
}

fn put_integer(out: &mut BytesMut, marker: u8, n: i64) {
    put_decimal(out, marker, n < 0, n.unsigned_abs());
}

/// `<marker>[-]<digits>\r\n`, without going through a `String`.
fn put_decimal(out: &mut BytesMut, marker: u8, negative: bool, mut magnitude: u64) {
    let mut digits = [0u8; 20];
    let mut start = digits.len();
    loop {
        start -= 1;
        // A digit: `magnitude % 10` is below 10.
        digits[start] = b'0' + (magnitude % 10) as u8;
        magnitude /= 10;
        if magnitude == 0 {
            break;
        }
    }
    out.put_u8(marker);
    if negative {
        out.put_u8(b'-');
    }
    out.put_slice(&digits[start..]);
    out.put_slice(b"\r\n");
}

/// A double as Redis 7 writes it (`d2string`): `nan`, `inf`, `-inf`, `0`, `-0`; a whole number up
/// to 2^62 as an integer; anything else in the fewest digits that read back as the same double,
/// in `%g`'s shape (an exponent below -4 or from 17 up is written `1.5e-07`, `1e+300`).
fn format_double(value: f64) -> String {
    const WHOLE: f64 = (i64::MAX / 2) as f64;
    if value.is_nan() {
        return "nan".to_owned();
    }
    if value.is_infinite() {
        return if value > 0.0 { "inf" } else { "-inf" }.to_owned();
    }
    if value == 0.0 {
        return if value.is_sign_negative() { "-0" } else { "0" }.to_owned();
    }
    if (-WHOLE..=WHOLE).contains(&value) && value.fract() == 0.0 {
        // Whole and within ±2^62: the conversion is exact.
        return (value as i64).to_string();
    }
    let scientific = format!("{value:e}");
    let (mantissa, exponent) = scientific.split_once('e').unwrap_or((&scientific, "0"));
    match exponent.parse::<i32>() {
        Ok(exponent) if !(-4..17).contains(&exponent) => {
            let sign = if exponent < 0 { '-' } else { '+' };
            format!("{mantissa}e{sign}{:02}", exponent.unsigned_abs())
        }
        _ => value.to_string(),
    }
}

#[cfg(test)]
pub(in crate::resp) mod tests {
    use super::*;

    /// `reply`'s bytes in `protocol`, as text (the codec's tests use it too).
    pub(in crate::resp) fn encoded(reply: &Reply, protocol: Protocol) -> String {
        let mut out = BytesMut::new();
        reply.encode(protocol, &mut out);
        String::from_utf8_lossy(&out).into_owned()
    }

    /// Asserts the bytes of `reply` in RESP2, then in RESP3.
    #[track_caller]
    fn assert_encodes(reply: Reply, resp2: &str, resp3: &str) {
        assert_eq!(encoded(&reply, Protocol::Resp2), resp2, "RESP2 of {reply:?}");
        assert_eq!(encoded(&reply, Protocol::Resp3), resp3, "RESP3 of {reply:?}");
    }

    #[test]
    fn simple_strings_and_errors_stay_on_one_line() {
        assert_encodes(Reply::ok(), "+OK\r\n", "+OK\r\n");
        assert_encodes(Reply::Simple("PONG".to_owned().into()), "+PONG\r\n", "+PONG\r\n");
        assert_encodes(Reply::Simple("a\r\nb".into()), "+a  b\r\n", "+a  b\r\n");
        let unknown = "ERR unknown command 'FOO', with args beginning with: ";
        assert_encodes(Reply::error(unknown), &format!("-{unknown}\r\n"), &format!("-{unknown}\r\n"));
        let wrongtype = "WRONGTYPE Operation against a key holding the wrong kind of value";
        assert_encodes(Reply::error(wrongtype), &format!("-{wrongtype}\r\n"), &format!("-{wrongtype}\r\n"));
        assert_encodes(Reply::error("ERR a\nb"), "-ERR a b\r\n", "-ERR a b\r\n");
    }

    #[test]
    fn integers() {
        assert_encodes(Reply::Integer(0), ":0\r\n", ":0\r\n");
        assert_encodes(Reply::Integer(-42), ":-42\r\n", ":-42\r\n");
        assert_encodes(Reply::Integer(i64::MAX), ":9223372036854775807\r\n", ":9223372036854775807\r\n");
        assert_encodes(Reply::Integer(i64::MIN), ":-9223372036854775808\r\n", ":-9223372036854775808\r\n");
    }

    #[test]
    fn bulk_strings_are_binary_safe() {
        assert_encodes(Reply::bulk("hello"), "$5\r\nhello\r\n", "$5\r\nhello\r\n");
        assert_encodes(Reply::bulk(""), "$0\r\n\r\n", "$0\r\n\r\n");
        let mut out = BytesMut::new();
        Reply::bulk(&b"a\0\r\nb"[..]).encode(Protocol::Resp3, &mut out);
        assert_eq!(&out[..], b"$5\r\na\0\r\nb\r\n");
    }

    #[test]
    fn nulls() {
        assert_encodes(Reply::Null, "$-1\r\n", "_\r\n");
        assert_encodes(Reply::NullArray, "*-1\r\n", "_\r\n");
    }

    #[test]
    fn arrays_sets_and_maps() {
        let items = vec![Reply::bulk("a"), Reply::Integer(1), Reply::Array(vec![]), Reply::Null];
        assert_encodes(
            Reply::Array(items.clone()),
            "*4\r\n$1\r\na\r\n:1\r\n*0\r\n$-1\r\n",
            "*4\r\n$1\r\na\r\n:1\r\n*0\r\n_\r\n",
        );
        assert_encodes(Reply::Set(items), "*4\r\n$1\r\na\r\n:1\r\n*0\r\n$-1\r\n", "~4\r\n$1\r\na\r\n:1\r\n*0\r\n_\r\n");
        let map =
            Reply::Map(vec![(Reply::bulk("server"), Reply::bulk("idem")), (Reply::bulk("proto"), Reply::Integer(3))]);
        assert_encodes(
            map,
            "*4\r\n$6\r\nserver\r\n$4\r\nidem\r\n$5\r\nproto\r\n:3\r\n",
            "%2\r\n$6\r\nserver\r\n$4\r\nidem\r\n$5\r\nproto\r\n:3\r\n",
        );
        assert_encodes(Reply::Map(vec![]), "*0\r\n", "%0\r\n");
    }

    #[test]
    fn doubles_as_redis_writes_them() {
        assert_encodes(Reply::Double(3.25), "$4\r\n3.25\r\n", ",3.25\r\n");
        assert_encodes(Reply::Double(10.0), "$2\r\n10\r\n", ",10\r\n");
        assert_encodes(Reply::Double(-0.0), "$2\r\n-0\r\n", ",-0\r\n");
        assert_encodes(Reply::Double(0.0), "$1\r\n0\r\n", ",0\r\n");
        assert_encodes(Reply::Double(f64::INFINITY), "$3\r\ninf\r\n", ",inf\r\n");
        assert_encodes(Reply::Double(f64::NEG_INFINITY), "$4\r\n-inf\r\n", ",-inf\r\n");
        assert_encodes(Reply::Double(f64::NAN), "$3\r\nnan\r\n", ",nan\r\n");
        assert_encodes(Reply::Double(0.1), "$3\r\n0.1\r\n", ",0.1\r\n");
        assert_encodes(Reply::Double(1e300), "$6\r\n1e+300\r\n", ",1e+300\r\n");
        assert_encodes(Reply::Double(-1.5e-7), "$8\r\n-1.5e-07\r\n", ",-1.5e-07\r\n");
        assert_encodes(Reply::Double(0.0001), "$6\r\n0.0001\r\n", ",0.0001\r\n");
    }

    #[test]
    fn booleans_and_verbatim_strings() {
        assert_encodes(Reply::Boolean(true), ":1\r\n", "#t\r\n");
        assert_encodes(Reply::Boolean(false), ":0\r\n", "#f\r\n");
        let verbatim = Reply::Verbatim { format: *b"txt", text: Bytes::from_static(b"Some string") };
        assert_encodes(verbatim, "$11\r\nSome string\r\n", "=15\r\ntxt:Some string\r\n");
    }
}

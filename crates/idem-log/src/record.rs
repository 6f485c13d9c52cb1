//! The log's records and how they are framed on disk.
//!
//! A frame is `[body length: u32 LE][CRC-32 of the body: u32 LE][body]`; the body's first byte is
//! its kind. A group commit writes its records followed by one [`Record::Commit`] frame, so that
//! recovery applies a group only when all of it reached the disk. The commit frame says how many
//! records the group has and how many bytes they take, so that a commit frame found anywhere tells
//! where its group began: recovery uses it to tell a torn last group from damage with whole
//! groups after it, and `idem repair` to find the next intact group after damage. (Logs written
//! before idem 0.1's manifest have commit frames with the count only; they are still read.)
//!
//! A padding frame covers bytes `idem repair` took out of the log (a damaged stretch), so that
//! every other record keeps its offset: tombstones name records by their place.
//!
//! Kinds added later carry more and are read beside the old ones: a claim with a client token's
//! digest is a `CLAIM_TOKEN` (a claim without one is still written as a `CLAIM`, byte for byte as
//! before), and a leased key is written as a `REQUEST_FENCED`, with its fencing number and its
//! client token's digest (a `REQUEST` of an older log reads as fence 0, no token).

use idem_core::ClaimId;

/// Why a record's bytes do not read as a record. Shown to operators (in `idem check` and
/// `idem repair` reports, and start-up's refusal) in these words.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Malformed {
    /// The body ends before a field it must hold.
    #[error("record ends early")]
    Short,
    /// A text field is not UTF-8.
    #[error(transparent)]
    NotUtf8(#[from] std::str::Utf8Error),
    #[error("unknown record kind {0}")]
    UnknownKind(u8),
    /// Bytes left over after the record's last field.
    #[error("{0} bytes after the record")]
    Trailing(usize),
    /// A header claiming no body, or more than [`MAX_BODY`].
    #[error("impossible record length {0}")]
    ImpossibleLength(usize),
    #[error("checksum mismatch")]
    ChecksumMismatch,
}

/// Where a record starts: the segment it is in and its byte offset there.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Loc {
    pub segment: u32,
    pub offset: u32,
}

impl Loc {
    pub fn pack(self) -> u64 {
        (u64::from(self.segment) << 32) | u64::from(self.offset)
    }

    pub fn unpack(packed: u64) -> Self {
        Self { segment: (packed >> 32) as u32, offset: packed as u32 }
    }
}

/// "Never expires", as an expiry in milliseconds.
pub const NEVER: i64 = i64::MAX;

/// A stored claim.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClaimRec {
    pub ns: String,
    pub id: ClaimId,
    /// The parts as `Parts::encode` writes them (each followed by NUL).
    pub parts: Vec<u8>,
    pub data: Option<String>,
    pub created_at: i64,
    /// Milliseconds, or [`NEVER`].
    pub expires_at: i64,
    /// The digest of the client token it was claimed with.
    pub client: Option<[u8; 16]>,
}

/// A leased key: held by `token` until `until`, or completed with a result kept until `until`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestRec {
    pub id: ClaimId,
    pub fingerprint: [u8; 32],
    pub completed: bool,
    pub token: [u8; 16],
    pub until: i64,
    /// What the begin attached while held; the result once completed.
    pub body: Vec<u8>,
    /// The digest of the client token of the begin that took it.
    pub client: Option<[u8; 16]>,
    /// The fencing number of the begin that took it.
    pub fence: u64,
}

impl RequestRec {
    /// Until when it is kept ([`idem_core::request::kept_until`]).
    pub fn kept_until(&self) -> i64 {
        idem_core::request::kept_until(self.completed, self.until)
    }
}

/// What a tombstone removes: the record at `target`, which would otherwise be live until `until`.
/// Recovery applies a tombstone only to the record it names, so a tombstone copied forward by
/// compaction can never remove a newer record of the same key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Gone {
    pub target: Loc,
    pub until: i64,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Record {
    Claim(ClaimRec),
    ClaimGone {
        ns: String,
        id: ClaimId,
        gone: Gone,
    },
    Request(RequestRec),
    RequestGone {
        id: ClaimId,
        gone: Gone,
    },
    /// Ends a group of `count` records taking `group_bytes` bytes before this frame (`None` only
    /// in logs written before the manifest).
    Commit {
        count: u32,
        group_bytes: Option<u32>,
    },
}

const CLAIM: u8 = 1;
const CLAIM_GONE: u8 = 2;
const REQUEST: u8 = 3;
const REQUEST_GONE: u8 = 4;
const COMMIT: u8 = 5;
const PAD: u8 = 6;
const CLAIM_TOKEN: u8 = 7;
const REQUEST_FENCED: u8 = 8;

/// Bytes of a frame's header.
pub const HEADER: usize = 8;
/// Largest body a frame may have; a header claiming more is damage.
pub const MAX_BODY: usize = 1 << 30;
/// The body length of a commit frame, and of one written before the manifest.
pub const COMMIT_BODY: usize = 9;
pub const COMMIT_BODY_V1: usize = 5;
/// The length of a commit frame as written now.
#[cfg(test)]
pub const COMMIT_FRAME: usize = HEADER + COMMIT_BODY;

impl Record {
    /// Appends this record's frame to `out`; answers the frame's length.
    pub fn encode_into(&self, out: &mut Vec<u8>) -> usize {
        if let Record::Claim(c) = self {
            let data = c.data.as_deref();
            let fields = ClaimFields {
                ns: &c.ns,
                id: &c.id,
                parts: &c.parts,
                data,
                created_at: c.created_at,
                expires_at: c.expires_at,
                client: c.client.as_ref(),
            };
            return encode_claim(out, fields);
        }
        let start = out.len();
        out.extend_from_slice(&[0; HEADER]);
        match self {
            Record::Claim(_) => {}
            Record::ClaimGone { ns, id, gone } => {
                out.push(CLAIM_GONE);
                put_str(out, ns);
                out.extend_from_slice(&id.0);
                put_gone(out, gone);
            }
            Record::Request(r) => {
                out.push(REQUEST_FENCED);
                out.extend_from_slice(&r.id.0);
                out.extend_from_slice(&r.fingerprint);
                out.push(u8::from(r.completed));
                out.extend_from_slice(&r.token);
                out.extend_from_slice(&r.until.to_le_bytes());
                put_bytes(out, &r.body);
                out.extend_from_slice(&r.fence.to_le_bytes());
                put_client(out, r.client.as_ref());
            }
            Record::RequestGone { id, gone } => {
                out.push(REQUEST_GONE);
                out.extend_from_slice(&id.0);
                put_gone(out, gone);
            }
            Record::Commit { count, group_bytes } => {
                out.push(COMMIT);
                out.extend_from_slice(&count.to_le_bytes());
                if let Some(bytes) = group_bytes {
                    out.extend_from_slice(&bytes.to_le_bytes());
                }
            }
        }
        seal(out, start)
    }

    #[cfg(test)]
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::new();
        self.encode_into(&mut out);
        out
    }

    /// Decodes a body whose checksum has been verified.
    pub fn decode(body: &[u8]) -> Result<Self, Malformed> {
        let mut r = Reader { bytes: body, at: 0 };
        let record = match r.u8()? {
            kind @ (CLAIM | CLAIM_TOKEN) => {
                let ns = r.string()?;
                let id = r.id()?;
                let parts = r.bytes()?.to_vec();
                let data = match r.u8()? {
                    0 => None,
                    _ => Some(r.string()?),
                };
                let (created_at, expires_at) = (r.i64()?, r.i64()?);
                let client = if kind == CLAIM_TOKEN { Some(r.array()?) } else { None };
                Record::Claim(ClaimRec { ns, id, parts, data, created_at, expires_at, client })
            }
            CLAIM_GONE => Record::ClaimGone { ns: r.string()?, id: r.id()?, gone: r.gone()? },
            kind @ (REQUEST | REQUEST_FENCED) => {
                let (id, fingerprint, completed, token) = (r.id()?, r.array()?, r.u8()? != 0, r.array()?);
                let (until, body) = (r.i64()?, r.bytes()?.to_vec());
                let (fence, client) = match kind {
                    REQUEST => (0, None),
                    _ => (u64::from_le_bytes(r.array()?), r.client()?),
                };
                Record::Request(RequestRec { id, fingerprint, completed, token, until, body, client, fence })
            }
            REQUEST_GONE => Record::RequestGone { id: r.id()?, gone: r.gone()? },
            COMMIT => {
                let count = u32::from_le_bytes(r.array()?);
                let group_bytes = if body.len() == COMMIT_BODY { Some(u32::from_le_bytes(r.array()?)) } else { None };
                Record::Commit { count, group_bytes }
            }
            kind => return Err(Malformed::UnknownKind(kind)),
        };
        r.end()?;
        Ok(record)
    }
}

/// A claim record's fields, borrowed: what [`encode_claim`] writes without building a [`ClaimRec`].
pub struct ClaimFields<'a> {
    pub ns: &'a str,
    pub id: &'a ClaimId,
    pub parts: &'a [u8],
    pub data: Option<&'a str>,
    pub created_at: i64,
    pub expires_at: i64,
    pub client: Option<&'a [u8; 16]>,
}

/// Appends a claim record's frame to `out`; answers the frame's length.
pub fn encode_claim(out: &mut Vec<u8>, c: ClaimFields<'_>) -> usize {
    let start = out.len();
    out.extend_from_slice(&[0; HEADER]);
    out.push(if c.client.is_some() { CLAIM_TOKEN } else { CLAIM });
    put_str(out, c.ns);
    out.extend_from_slice(&c.id.0);
    put_bytes(out, c.parts);
    match c.data {
        Some(data) => {
            out.push(1);
            put_bytes(out, data.as_bytes());
        }
        None => out.push(0),
    }
    out.extend_from_slice(&c.created_at.to_le_bytes());
    out.extend_from_slice(&c.expires_at.to_le_bytes());
    if let Some(client) = c.client {
        out.extend_from_slice(client);
    }
    seal(out, start)
}

/// Fills in the header of the frame that starts at `start`; answers the frame's length.
fn seal(out: &mut [u8], start: usize) -> usize {
    let body_len = out.len() - start - HEADER;
    let crc = crc32fast::hash(&out[start + HEADER..]);
    out[start..start + 4].copy_from_slice(&(body_len as u32).to_le_bytes());
    out[start + 4..start + HEADER].copy_from_slice(&crc.to_le_bytes());
    out.len() - start
}

/// What a commit frame says of its group.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CommitInfo {
    pub count: u32,
    /// Bytes of the group's records, before the commit frame (`None` in a pre-manifest log).
    pub group_bytes: Option<u32>,
}

/// A commit frame's body read, or `None` for any other record.
pub fn commit_info(body: &[u8]) -> Option<CommitInfo> {
    match body {
        [COMMIT, a, b, c, d] => Some(CommitInfo { count: u32::from_le_bytes([*a, *b, *c, *d]), group_bytes: None }),
        [COMMIT, a, b, c, d, e, f, g, h] => Some(CommitInfo {
            count: u32::from_le_bytes([*a, *b, *c, *d]),
            group_bytes: Some(u32::from_le_bytes([*e, *f, *g, *h])),
        }),
        _ => None,
    }
}

/// Is this body a padding frame's?
pub fn is_pad(body: &[u8]) -> bool {
    body.first() == Some(&PAD)
}

/// A padding frame exactly `len` bytes long (`len > HEADER`).
pub fn pad_frame(len: usize) -> Vec<u8> {
    let mut out = vec![0; len.max(HEADER + 1)];
    out[HEADER] = PAD;
    seal(&mut out, 0);
    out
}

/// What start-up needs of a claim record, borrowed from the segment's bytes (no allocation).
pub struct ClaimView<'a> {
    pub ns: &'a str,
    pub id: ClaimId,
    pub parts: &'a [u8],
    pub expires_at: i64,
}

/// A claim record's view, or `None` for any other kind of record.
pub fn claim_view(body: &[u8]) -> Result<Option<ClaimView<'_>>, Malformed> {
    let Some(kind @ (&CLAIM | &CLAIM_TOKEN)) = body.first() else { return Ok(None) };
    let mut r = Reader { bytes: body, at: 1 };
    let ns = std::str::from_utf8(r.bytes()?)?;
    let id = r.id()?;
    let parts = r.bytes()?;
    if r.u8()? != 0 {
        std::str::from_utf8(r.bytes()?)?;
    }
    let _created_at = r.i64()?;
    let expires_at = r.i64()?;
    if *kind == CLAIM_TOKEN {
        r.take(16)?;
    }
    r.end()?;
    Ok(Some(ClaimView { ns, id, parts, expires_at }))
}

/// One frame read from a buffer.
pub enum Frame<'a> {
    /// A frame whose checksum holds, and its length.
    Valid { body: &'a [u8], len: usize },
    /// The buffer ends inside the frame.
    Short,
    /// The header or the checksum is wrong.
    Damaged(Malformed),
}

/// Reads the frame at the start of `buf`.
pub fn frame(buf: &[u8]) -> Frame<'_> {
    let Some(header) = buf.get(..HEADER) else { return Frame::Short };
    let len = u32::from_le_bytes([header[0], header[1], header[2], header[3]]) as usize;
    let crc = u32::from_le_bytes([header[4], header[5], header[6], header[7]]);
    if len == 0 || len > MAX_BODY {
        return Frame::Damaged(Malformed::ImpossibleLength(len));
    }
    let Some(body) = buf.get(HEADER..HEADER + len) else { return Frame::Short };
    if crc32fast::hash(body) != crc {
        return Frame::Damaged(Malformed::ChecksumMismatch);
    }
    Frame::Valid { body, len: HEADER + len }
}

/// The valid commit frame at the start of `buf`, with its length. Cheap to ask at every byte
/// offset: it rejects on the length and the kind before computing a checksum.
pub fn commit_frame_at(buf: &[u8]) -> Option<(CommitInfo, usize)> {
    let len = u32::from_le_bytes(buf.get(..4)?.try_into().ok()?) as usize;
    if (len != COMMIT_BODY && len != COMMIT_BODY_V1) || buf.get(HEADER) != Some(&COMMIT) {
        return None;
    }
    match frame(buf) {
        Frame::Valid { body, len } => commit_info(body).map(|info| (info, len)),
        _ => None,
    }
}

/// Is there a valid commit frame at the start of `buf`?
#[cfg(test)]
pub fn is_commit_frame(buf: &[u8]) -> bool {
    commit_frame_at(buf).is_some()
}

fn put_bytes(out: &mut Vec<u8>, bytes: &[u8]) {
    out.extend_from_slice(&(bytes.len() as u32).to_le_bytes());
    out.extend_from_slice(bytes);
}

fn put_str(out: &mut Vec<u8>, s: &str) {
    put_bytes(out, s.as_bytes());
}

fn put_client(out: &mut Vec<u8>, client: Option<&[u8; 16]>) {
    match client {
        Some(client) => {
            out.push(1);
            out.extend_from_slice(client);
        }
        None => out.push(0),
    }
}

fn put_gone(out: &mut Vec<u8>, gone: &Gone) {
    out.extend_from_slice(&gone.target.pack().to_le_bytes());
    out.extend_from_slice(&gone.until.to_le_bytes());
}

struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], Malformed> {
        let end = self.at.checked_add(n).filter(|end| *end <= self.bytes.len()).ok_or(Malformed::Short)?;
        let out = &self.bytes[self.at..end];
        self.at = end;
        Ok(out)
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N], Malformed> {
        let mut out = [0; N];
        out.copy_from_slice(self.take(N)?);
        Ok(out)
    }

    fn u8(&mut self) -> Result<u8, Malformed> {
        Ok(self.take(1)?[0])
    }

    fn i64(&mut self) -> Result<i64, Malformed> {
        Ok(i64::from_le_bytes(self.array()?))
    }

    fn id(&mut self) -> Result<ClaimId, Malformed> {
        Ok(ClaimId(self.array()?))
    }

    fn bytes(&mut self) -> Result<&'a [u8], Malformed> {
        let len = u32::from_le_bytes(self.array()?) as usize;
        self.take(len)
    }

    fn string(&mut self) -> Result<String, Malformed> {
        Ok(std::str::from_utf8(self.bytes()?)?.to_owned())
    }

    /// Every byte read: anything left is not part of the record.
    fn end(&self) -> Result<(), Malformed> {
        match self.bytes.len() - self.at {
            0 => Ok(()),
            left => Err(Malformed::Trailing(left)),
        }
    }

    fn client(&mut self) -> Result<Option<[u8; 16]>, Malformed> {
        Ok(match self.u8()? {
            0 => None,
            _ => Some(self.array()?),
        })
    }

    fn gone(&mut self) -> Result<Gone, Malformed> {
        Ok(Gone { target: Loc::unpack(u64::from_le_bytes(self.array()?)), until: self.i64()? })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn samples() -> Vec<Record> {
        let id = ClaimId([7; 32]);
        let gone = Gone { target: Loc { segment: 3, offset: 99 }, until: 1234 };
        vec![
            Record::Claim(ClaimRec {
                ns: "orders".into(),
                id,
                parts: b"a\0b\0".to_vec(),
                data: Some("{\"x\":1}".into()),
                created_at: 5,
                expires_at: NEVER,
                client: None,
            }),
            Record::Claim(ClaimRec {
                ns: "survey".into(),
                id,
                parts: b"a\0".to_vec(),
                data: None,
                created_at: 6,
                expires_at: 99,
                client: Some([3; 16]),
            }),
            Record::Claim(ClaimRec {
                ns: "n".into(),
                id,
                parts: b"a\0".to_vec(),
                data: None,
                created_at: 1,
                expires_at: 9,
                client: None,
            }),
            Record::ClaimGone { ns: "n".into(), id, gone },
            Record::Request(RequestRec {
                id,
                fingerprint: [1; 32],
                completed: true,
                token: [2; 16],
                until: 77,
                body: vec![0, 1, 2],
                client: Some([4; 16]),
                fence: 1_764_000_000_000_123,
            }),
            Record::Request(RequestRec {
                id,
                fingerprint: [1; 32],
                completed: false,
                token: [2; 16],
                until: 78,
                body: Vec::new(),
                client: None,
                fence: 9,
            }),
            Record::RequestGone { id, gone },
            Record::Commit { count: 4, group_bytes: Some(321) },
            Record::Commit { count: 4, group_bytes: None },
        ]
    }

    #[test]
    fn every_record_round_trips() {
        for record in samples() {
            let bytes = record.encode();
            let Frame::Valid { body, len } = frame(&bytes) else { panic!("frame of {record:?} is valid") };
            assert_eq!(len, bytes.len());
            assert_eq!(Record::decode(body).expect("decodes"), record);
        }
    }

    #[test]
    fn an_older_logs_requests_read_as_fence_zero_without_a_token() {
        // A REQUEST as idem wrote it before fencing numbers and client tokens.
        let mut body = vec![REQUEST];
        body.extend_from_slice(&[7; 32]);
        body.extend_from_slice(&[1; 32]);
        body.push(0);
        body.extend_from_slice(&[2; 16]);
        body.extend_from_slice(&55i64.to_le_bytes());
        body.extend_from_slice(&0u32.to_le_bytes());
        let Ok(Record::Request(rec)) = Record::decode(&body) else { panic!("an old request decodes") };
        assert_eq!((rec.fence, rec.client, rec.until, rec.token), (0, None, 55, [2; 16]));
    }

    #[test]
    fn start_up_reads_both_kinds_of_claim() {
        for record in samples() {
            let Record::Claim(rec) = &record else { continue };
            let bytes = record.encode();
            let Frame::Valid { body, .. } = frame(&bytes) else { panic!("valid") };
            let view = claim_view(body).expect("reads").expect("a claim");
            assert_eq!(
                (view.ns, view.id, view.parts, view.expires_at),
                (&rec.ns[..], rec.id, &rec.parts[..], rec.expires_at)
            );
        }
    }

    #[test]
    fn a_flipped_bit_or_a_short_buffer_is_never_read_as_data() {
        let bytes = samples()[0].encode();
        for cut in 0..bytes.len() {
            assert!(matches!(frame(&bytes[..cut]), Frame::Short | Frame::Damaged(_)), "cut at {cut}");
        }
        for i in 0..bytes.len() {
            let mut damaged = bytes.clone();
            damaged[i] ^= 0x10;
            assert!(!matches!(frame(&damaged), Frame::Valid { .. }), "bit flip at {i} went unnoticed");
        }
    }

    #[test]
    fn commit_frames_are_recognised_and_nothing_else_is() {
        let commit = Record::Commit { count: 3, group_bytes: Some(99) }.encode();
        assert_eq!(commit.len(), COMMIT_FRAME);
        assert_eq!(commit_frame_at(&commit), Some((CommitInfo { count: 3, group_bytes: Some(99) }, COMMIT_FRAME)));
        assert!(is_commit_frame(&Record::Commit { count: 3, group_bytes: None }.encode()));
        for record in &samples()[..7] {
            assert!(!is_commit_frame(&record.encode()));
        }
        assert!(!is_commit_frame(&pad_frame(40)));
    }

    #[test]
    fn padding_frames_are_valid_frames_of_the_length_asked() {
        for len in [HEADER + 1, 13, 4096] {
            let pad = pad_frame(len);
            let Frame::Valid { body, len: got } = frame(&pad) else { panic!("a padding frame is valid") };
            assert_eq!(got, len);
            assert!(is_pad(body) && commit_info(body).is_none());
        }
    }
}

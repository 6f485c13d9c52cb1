//! Bodies, read with a bound: the one request-body limit of idem (`limits.max_body_bytes`) as the
//! proxy, the tower layer and the `/v1` API all apply it, and the body that passes on a response
//! too large to store (what was read of it, then the rest).

use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http::Response;
use http_body::{Body, Frame};
use http_body_util::{BodyExt, LengthLimitError, Limited};

use crate::problem::Problem;
use crate::{BoxError, GatewayBody};

/// Why a request body could not be taken.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BodyError {
    /// Larger than the limit, in bytes: 413.
    TooLarge(usize),
    /// The client broke off or sent a malformed body: 400.
    Unreadable,
}

impl BodyError {
    pub fn problem(&self) -> Problem {
        match self {
            Self::TooLarge(_) => Problem::PayloadTooLarge,
            Self::Unreadable => Problem::InvalidRequest,
        }
    }

    /// What the client is told; a 413 names the setting that decides it.
    pub fn detail(&self) -> String {
        match self {
            Self::TooLarge(limit) => {
                format!("the request body is larger than limits.max_body_bytes ({limit} bytes)")
            }
            Self::Unreadable => "the request body could not be read".to_owned(),
        }
    }

    /// The problem+json answer.
    pub fn into_response(self) -> Response<GatewayBody> {
        self.problem().answer(&self.detail())
    }
}

/// A body its `Content-Length` already declares too large: refused before a byte of it is read,
/// so that a client sending `Expect: 100-continue` is never invited to send it.
pub fn declared_too_large(headers: &http::HeaderMap, limit: usize) -> Option<BodyError> {
    let declared = headers.get(http::header::CONTENT_LENGTH)?.to_str().ok()?.trim().parse::<u64>().ok()?;
    (declared > limit as u64).then_some(BodyError::TooLarge(limit))
}

/// Reads a whole request body of at most `limit` bytes.
pub async fn read_limited<B>(body: B, limit: usize) -> Result<Bytes, BodyError>
where
    B: Body<Data = Bytes>,
    B::Error: Into<BoxError>,
{
    match Limited::new(body, limit).collect().await {
        Ok(collected) => Ok(collected.to_bytes()),
        Err(e) if e.downcast_ref::<LengthLimitError>().is_some() => Err(BodyError::TooLarge(limit)),
        Err(_) => Err(BodyError::Unreadable),
    }
}

/// A body that yields chunks already read, then the rest of the original body.
pub struct Prefixed {
    pub prefix: Vec<Bytes>,
    pub rest: GatewayBody,
}

impl Body for Prefixed {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        if !self.prefix.is_empty() {
            let chunk = self.prefix.remove(0);
            return Poll::Ready(Some(Ok(Frame::data(chunk))));
        }
        Pin::new(&mut self.rest).poll_frame(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::Full;

    #[tokio::test]
    async fn the_limit_is_inclusive_and_named() {
        let body = |n: usize| Full::new(Bytes::from(vec![b'x'; n]));
        assert_eq!(read_limited(body(10), 10).await.map(|b| b.len()), Ok(10));
        let err = read_limited(body(11), 10).await.unwrap_err();
        let problem = err.problem();
        assert_eq!((problem.status(), problem.kind()), (http::StatusCode::PAYLOAD_TOO_LARGE, "payload-too-large"));
        assert!(err.detail().contains("limits.max_body_bytes (10 bytes)"), "{}", err.detail());
    }
}

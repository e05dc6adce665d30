//! A response body put together from pieces without copying the large ones.
//!
//! A `tools/call` answer is the JSON-RPC envelope around the upstream's result text, which
//! arrives as one [`Bytes`] slice of the frame it came in. [`Chunks`] copies the small pieces
//! (the envelope, keys, members an era rewrites) into shared buffers and keeps every large
//! piece as the slice it is; [`chunks_response`] sends them as a body of exact length
//! (`Content-Length`, as before), which hyper writes with vectored writes: the result's bytes
//! go from the worker's frame to the client's socket without another copy.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::pin::Pin;
use std::task::{Context, Poll};

use axum::body::Body;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::Response;
use bytes::Bytes;
use http_body::{Frame, SizeHint};

/// Pieces shorter than this are copied together; longer ones are kept as they are.
const COPY_BELOW: usize = 16 * 1024;

/// A body being assembled (see the module documentation).
#[derive(Debug, Default)]
pub(crate) struct Chunks {
    done: Vec<Bytes>,
    open: Vec<u8>,
}

impl Chunks {
    /// Appends a copy of `piece`.
    pub(crate) fn extend(&mut self, piece: &[u8]) {
        self.open.extend_from_slice(piece);
    }

    /// Appends one byte.
    pub(crate) fn push(&mut self, byte: u8) {
        self.open.push(byte);
    }

    /// Appends `piece` as it is if it is large, else a copy of it.
    pub(crate) fn append(&mut self, piece: &Bytes) {
        if piece.len() < COPY_BELOW {
            self.extend(piece);
            return;
        }
        self.close();
        self.done.push(piece.clone());
    }

    fn close(&mut self) {
        if !self.open.is_empty() {
            self.done.push(Bytes::from(std::mem::take(&mut self.open)));
        }
    }

    /// The pieces in order.
    pub(crate) fn finish(mut self) -> Vec<Bytes> {
        self.close();
        self.done
    }

    /// All of it in one buffer (an event-stream event is one).
    pub(crate) fn into_vec(self) -> Vec<u8> {
        let pieces = self.finish();
        if let [only] = pieces.as_slice() {
            return only.to_vec();
        }
        let mut out = Vec::with_capacity(pieces.iter().map(Bytes::len).sum());
        for piece in &pieces {
            out.extend_from_slice(piece);
        }
        out
    }
}

/// `status` with `chunks` as an `application/json` body of exact length.
pub(crate) fn chunks_response(status: StatusCode, chunks: Chunks) -> Response {
    let mut response = Response::new(Body::new(ChunkedBody::new(chunks.finish())));
    *response.status_mut() = status;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
}

/// A body of known pieces: one data frame each, exact size known up front.
struct ChunkedBody {
    pieces: VecDeque<Bytes>,
    remaining: u64,
}

impl ChunkedBody {
    fn new(pieces: Vec<Bytes>) -> Self {
        let remaining = pieces.iter().map(|p| p.len() as u64).sum();
        Self {
            pieces: pieces.into(),
            remaining,
        }
    }
}

impl http_body::Body for ChunkedBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        self: Pin<&mut Self>,
        _: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        let this = self.get_mut();
        let next = this.pieces.pop_front().map(|piece| {
            this.remaining -= piece.len() as u64;
            Ok(Frame::data(piece))
        });
        Poll::Ready(next)
    }

    fn is_end_stream(&self) -> bool {
        self.pieces.is_empty()
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::with_exact(self.remaining)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_pieces_are_copied_together_and_large_ones_kept() {
        let large = Bytes::from(vec![b'x'; COPY_BELOW]);
        let mut chunks = Chunks::default();
        chunks.extend(b"{\"result\":");
        chunks.append(&Bytes::from_static(b"[1]"));
        chunks.push(b',');
        chunks.append(&large);
        chunks.push(b'}');
        let pieces = chunks.finish();
        assert_eq!(pieces.len(), 3);
        assert_eq!(&pieces[0][..], b"{\"result\":[1],");
        assert_eq!(pieces[1].as_ptr(), large.as_ptr(), "not copied");
        assert_eq!(&pieces[2][..], b"}");
    }

    #[tokio::test]
    async fn the_body_has_its_exact_length_and_every_byte_in_order() {
        use http_body_util_free::collect;
        let large = Bytes::from(vec![b'y'; 2 * COPY_BELOW]);
        let mut chunks = Chunks::default();
        chunks.extend(b"<");
        chunks.append(&large);
        chunks.extend(b">");
        let expected = {
            let mut v = b"<".to_vec();
            v.extend_from_slice(&large);
            v.push(b'>');
            v
        };
        let body = ChunkedBody::new(chunks.finish());
        assert_eq!(
            http_body::Body::size_hint(&body).exact(),
            Some(expected.len() as u64)
        );
        assert_eq!(collect(body).await, expected);
    }

    /// Reads a body to its end (no http-body-util in the tree for one test).
    mod http_body_util_free {
        use super::*;

        pub(super) async fn collect(mut body: ChunkedBody) -> Vec<u8> {
            let mut out = Vec::new();
            while let Some(Ok(frame)) =
                std::future::poll_fn(|cx| http_body::Body::poll_frame(Pin::new(&mut body), cx))
                    .await
            {
                if let Ok(data) = frame.into_data() {
                    out.extend_from_slice(&data);
                }
            }
            assert!(http_body::Body::is_end_stream(&body));
            out
        }
    }
}

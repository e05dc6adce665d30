//! The frame data plane of plain tool calls: a worker's second local endpoint
//! ([`crate::transport::worker_data_endpoint`]) carries `tutti.worker.v1` messages as
//! length-prefixed frames instead of gRPC, one call at a time per connection.
//!
//! A frame is a 4-byte big-endian body length, one [`Kind`] byte, then the body: a prost
//! encoding of the kind's message (no second schema). The frontend sends [`Kind::Call`]
//! (`CallToolRequest`); the worker answers [`Kind::Reply`] (`CallToolReply`) or
//! [`Kind::Status`] (a `CallError` whose `code` is the gRPC status code and `message` its
//! message: exactly what `CallTool` would have failed with). Anything else, a body over
//! [`MAX_FRAME_BYTES`], or bytes while a call is in flight end the connection.
//!
//! Big results: a reply whose result is `result_bytes` is written without copying
//! the result into the frame buffer ([`write_reply`]: the header and the reply's other fields,
//! then the result, in one vectored write), and read into one buffer that is handed on as
//! [`Bytes`] ([`take_body`]), so that decoding slices the result out of it instead of copying.

use std::io;

use bytes::{Buf, Bytes, BytesMut};
use prost::Message;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use crate::worker::{CallError, CallToolReply, call_tool_reply};

/// The frontend's switch: `grpc` sends every tool call over gRPC, `frames` (the default)
/// sends plain calls as frames where the worker has a frame endpoint. Passed from the
/// kernel's environment to the frontend ([`tutti_rules::child_env`], where it is spelled).
pub const DATA_PLANE_ENV: &str = tutti_rules::child_env::DATA_PLANE_ENV;

/// Largest frame body (the gRPC hop's message limit).
pub const MAX_FRAME_BYTES: usize = 64 * 1024 * 1024;

/// Length and kind in front of every body.
pub const HEADER_BYTES: usize = 5;

/// What a first read asks for: a typical call or reply fits, so it is one `read(2)`.
const FIRST_READ: usize = 8 * 1024;

/// What a frame's body is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// `CallToolRequest`, frontend → worker.
    Call = 1,
    /// `CallToolReply`, worker → frontend.
    Reply = 2,
    /// `CallError` carrying a gRPC status (code, message), worker → frontend.
    Status = 3,
}

impl Kind {
    fn from_byte(byte: u8) -> io::Result<Self> {
        match byte {
            1 => Ok(Self::Call),
            2 => Ok(Self::Reply),
            3 => Ok(Self::Status),
            other => Err(invalid(format!("unknown frame kind {other}"))),
        }
    }
}

fn invalid(what: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, what)
}

/// Encodes `message` as one frame into `buf` (cleared first) and writes it with one
/// `write_all`.
pub async fn write_frame<W: AsyncWrite + Unpin>(
    w: &mut W,
    kind: Kind,
    message: &impl Message,
    buf: &mut Vec<u8>,
) -> io::Result<()> {
    let len = message.encoded_len();
    let prefix = frame_prefix(len)?;
    buf.clear();
    buf.reserve(HEADER_BYTES + len);
    buf.extend_from_slice(&prefix.to_be_bytes());
    buf.push(kind as u8);
    message
        .encode(buf)
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e.to_string()))?;
    w.write_all(buf).await
}

/// The field number of `CallToolReply.result_bytes` (worker.proto).
pub const RESULT_BYTES_TAG: u32 = 4;

/// Writes a [`Kind::Reply`] frame. A result in `result_bytes` does not go through `buf`: the
/// frame header, the reply's other fields and the result field's key and length are encoded
/// into `buf`, then `buf` and the result leave in one vectored write. The same message as
/// [`write_frame`] would send (a decoder takes fields in any order; this one puts the result
/// last), minus a copy of the result.
pub async fn write_reply<W: AsyncWrite + Unpin>(
    w: &mut W,
    reply: &CallToolReply,
    buf: &mut Vec<u8>,
) -> io::Result<()> {
    let Some(call_tool_reply::Outcome::ResultBytes(result)) = &reply.outcome else {
        return write_frame(w, Kind::Reply, reply, buf).await;
    };
    let rest = CallToolReply {
        outcome: None,
        generation: reply.generation,
    };
    let len = rest.encoded_len()
        + prost::encoding::key_len(RESULT_BYTES_TAG)
        + prost::encoding::encoded_len_varint(result.len() as u64)
        + result.len();
    let prefix = frame_prefix(len)?;
    buf.clear();
    buf.reserve(HEADER_BYTES + len - result.len());
    buf.extend_from_slice(&prefix.to_be_bytes());
    buf.push(Kind::Reply as u8);
    rest.encode(buf)
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e.to_string()))?;
    prost::encoding::encode_key(
        RESULT_BYTES_TAG,
        prost::encoding::WireType::LengthDelimited,
        buf,
    );
    prost::encoding::encode_varint(result.len() as u64, buf);
    let mut frame = Buf::chain(buf.as_slice(), result.as_ref());
    w.write_all_buf(&mut frame).await
}

/// A body length as the frame's length prefix, or why it cannot be sent.
fn frame_prefix(len: usize) -> io::Result<u32> {
    u32::try_from(len)
        .ok()
        .filter(|_| len <= MAX_FRAME_BYTES)
        .ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("a frame of {len} bytes is over the {MAX_FRAME_BYTES}-byte limit"),
            )
        })
}

/// Reads one frame into `buf` (cleared first): `Ok(None)` when the peer closed the
/// connection between frames, else its kind; the body is [`body`]`(buf)`. Bytes past the
/// frame are an error (one call at a time per connection). A frame longer than the first
/// read is read into `buf` sized for it once (zeroed once, never grown or copied again).
pub async fn read_frame<R: AsyncRead + Unpin>(
    r: &mut R,
    buf: &mut Vec<u8>,
) -> io::Result<Option<Kind>> {
    buf.clear();
    buf.reserve(FIRST_READ);
    while buf.len() < HEADER_BYTES {
        if r.read_buf(buf).await? == 0 {
            return if buf.is_empty() {
                Ok(None)
            } else {
                Err(io::ErrorKind::UnexpectedEof.into())
            };
        }
    }
    let (kind, total) = header(buf)?;
    if buf.len() > total {
        return Err(invalid("bytes after a frame; one call at a time".into()));
    }
    // The rest is read into place: `read_buf` into spare capacity would zero what is left of
    // it on every read (a 1 MiB reply arrives in several), `read_exact` into an initialised
    // slice does not.
    let filled = buf.len();
    buf.resize(total, 0);
    r.read_exact(&mut buf[filled..]).await?;
    Ok(Some(kind))
}

/// A connection's buffer for the frames it receives, handed on as [`Bytes`] ([`read_body`]).
/// Its allocation is used again once every `Bytes` of the last frame is gone, so a stream of
/// large replies is read into memory that is mapped already: a fresh megabyte per reply cost a
/// page fault per 4 KiB, the frontend's largest item in the 1 MiB profile.
#[derive(Debug, Default)]
pub struct FrameBuffer(BytesMut);

/// A frame longer than this does not keep its allocation for the next one.
const KEEP_AT_MOST: usize = 2 * 1024 * 1024;

/// [`read_frame`] into `buf`: the frame's kind and its body, which is a slice of `buf`'s
/// allocation (not a copy); decoding a [`CallToolReply`] from it slices `result_bytes` out.
pub async fn read_body<R: AsyncRead + Unpin>(
    r: &mut R,
    buf: &mut FrameBuffer,
) -> io::Result<Option<(Kind, Bytes)>> {
    let b = &mut buf.0;
    b.clear();
    // Reading into initialised bytes: `read_buf` into spare capacity would zero all of it on
    // every read.
    b.resize(FIRST_READ, 0);
    let mut filled = 0;
    while filled < HEADER_BYTES {
        let n = r.read(&mut b[filled..]).await?;
        if n == 0 {
            return if filled == 0 {
                Ok(None)
            } else {
                Err(io::ErrorKind::UnexpectedEof.into())
            };
        }
        filled += n;
    }
    let (kind, total) = header(b)?;
    if filled > total {
        return Err(invalid("bytes after a frame; one call at a time".into()));
    }
    b.truncate(filled);
    b.resize(total, 0);
    r.read_exact(&mut b[filled..]).await?;
    let frame = b.split().freeze();
    if total > KEEP_AT_MOST {
        buf.0 = BytesMut::new();
    }
    Ok(Some((kind, frame.slice(HEADER_BYTES..))))
}

/// The kind and whole length (header included) of the frame whose header starts `buf`.
fn header(buf: &[u8]) -> io::Result<(Kind, usize)> {
    let len = usize::try_from(u32::from_be_bytes([buf[0], buf[1], buf[2], buf[3]]))
        .map_err(|_| invalid("frame length".into()))?;
    if len > MAX_FRAME_BYTES {
        return Err(invalid(format!(
            "a frame of {len} bytes is over the {MAX_FRAME_BYTES}-byte limit"
        )));
    }
    Ok((Kind::from_byte(buf[4])?, HEADER_BYTES + len))
}

/// Decodes a body [`read_body`] returned as `M`.
pub fn decode_body<M: Message + Default>(body: Bytes) -> io::Result<M> {
    M::decode(body).map_err(|e| invalid(format!("undecodable frame: {e}")))
}

/// The body of the frame [`read_frame`] left in `buf`.
pub fn body(buf: &[u8]) -> &[u8] {
    buf.get(HEADER_BYTES..).unwrap_or_default()
}

/// Decodes the body of the frame [`read_frame`] left in `buf` as `M`.
pub fn decode<M: Message + Default>(buf: &[u8]) -> io::Result<M> {
    M::decode(body(buf)).map_err(|e| invalid(format!("undecodable frame: {e}")))
}

/// A gRPC status as the body of a [`Kind::Status`] frame.
pub fn status_body(status: &tonic::Status) -> CallError {
    CallError {
        code: status.code() as i32,
        message: status.message().to_owned(),
        data_json: String::new(),
        reason: String::new(),
    }
}

/// The gRPC status a [`Kind::Status`] frame carries.
pub fn status_of(body: CallError) -> tonic::Status {
    tonic::Status::new(tonic::Code::from_i32(body.code), body.message)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::worker::{CallToolReply, CallToolRequest, call_tool_reply};

    #[tokio::test]
    async fn frames_round_trip_and_end_cleanly() {
        let (mut a, mut b) = tokio::io::duplex(64);
        let request = CallToolRequest {
            generation: 7,
            call_id: "c1".into(),
            tool: "echo".into(),
            arguments_json: "x".repeat(1000),
            ..Default::default()
        };
        let reply = CallToolReply {
            outcome: Some(call_tool_reply::Outcome::ResultJson("{}".into())),
            generation: 7,
        };
        // One frame at a time, as on a real connection (the reply follows the call).
        let (read, next) = tokio::sync::oneshot::channel::<()>();
        let writer = tokio::spawn(async move {
            let mut buf = Vec::new();
            write_frame(&mut a, Kind::Call, &request, &mut buf).await?;
            let _ = next.await;
            write_frame(&mut a, Kind::Reply, &reply, &mut buf).await?;
            Ok::<_, io::Error>(request)
        });
        let mut buf = Vec::new();
        assert_eq!(
            read_frame(&mut b, &mut buf).await.ok(),
            Some(Some(Kind::Call))
        );
        let got = CallToolRequest::decode(body(&buf)).ok();
        let _ = read.send(());
        assert_eq!(
            read_frame(&mut b, &mut buf).await.ok(),
            Some(Some(Kind::Reply))
        );
        assert_eq!(
            CallToolReply::decode(body(&buf)).ok().map(|r| r.generation),
            Some(7)
        );
        let sent = writer.await.ok().and_then(Result::ok);
        assert_eq!(got, sent);
        // The writer is gone: a clean end between frames.
        assert_eq!(read_frame(&mut b, &mut buf).await.ok(), Some(None));
    }

    #[tokio::test]
    async fn a_result_reply_is_the_same_message_without_copying_the_result() {
        let result = Bytes::from(format!(r#"{{"content":"{}"}}"#, "z".repeat(100_000)));
        let reply = CallToolReply {
            outcome: Some(call_tool_reply::Outcome::ResultBytes(result.clone())),
            generation: 300,
        };
        let (mut a, mut b) = tokio::io::duplex(1 << 20);
        let mut buf = Vec::new();
        write_reply(&mut a, &reply, &mut buf).await.ok();
        assert!(buf.len() < 64, "the result did not go through the buffer");
        drop(a);
        let mut got = FrameBuffer::default();
        let Ok(Some((Kind::Reply, body))) = read_body(&mut b, &mut got).await else {
            panic!("no reply frame");
        };
        // Exactly as long as prost's own encoding, and decodes to the same reply, whose
        // result is a slice of the frame's buffer.
        assert_eq!(body.len(), reply.encoded_len());
        let frame = body.as_ptr() as usize..body.as_ptr() as usize + body.len();
        let decoded = decode_body::<CallToolReply>(body).ok();
        assert_eq!(decoded, Some(reply.clone()));
        let Some(call_tool_reply::Outcome::ResultBytes(text)) = decoded.and_then(|r| r.outcome)
        else {
            panic!("no result");
        };
        assert!(frame.contains(&(text.as_ptr() as usize)), "not copied");
        // Any other reply (here the string field) is written as `write_frame` writes it.
        let json = CallToolReply {
            outcome: Some(call_tool_reply::Outcome::ResultJson("{}".into())),
            generation: 1,
        };
        let (mut a, mut b) = tokio::io::duplex(64);
        write_reply(&mut a, &json, &mut buf).await.ok();
        drop(a);
        let Ok(Some((Kind::Reply, body))) = read_body(&mut b, &mut got).await else {
            panic!("no reply frame");
        };
        assert_eq!(decode_body::<CallToolReply>(body).ok(), Some(json));
        // The peer is gone: a clean end between frames.
        assert!(matches!(read_body(&mut b, &mut got).await, Ok(None)));
    }

    #[tokio::test]
    async fn a_frame_buffer_is_used_again_once_its_frames_are_gone() {
        let reply = CallToolReply {
            outcome: Some(call_tool_reply::Outcome::ResultBytes(Bytes::from(vec![
                b'a';
                100_000
            ]))),
            generation: 2,
        };
        let (mut a, mut b) = tokio::io::duplex(1 << 20);
        let mut buf = Vec::new();
        for _ in 0..3 {
            write_reply(&mut a, &reply, &mut buf).await.ok();
        }
        let mut got = FrameBuffer::default();
        let body = |read: io::Result<Option<(Kind, Bytes)>>| read.ok().flatten().map(|(_, b)| b);
        let first = body(read_body(&mut b, &mut got).await);
        let at = first.as_ref().map(|b| b.as_ptr() as usize);
        // The first is still held: the second goes elsewhere.
        let second = body(read_body(&mut b, &mut got).await);
        let second_at = second.as_ref().map(|b| b.as_ptr() as usize);
        assert!(second_at.is_some());
        assert_ne!(second_at, at);
        drop(second);
        // The second is gone: the third lands in its allocation.
        let third = body(read_body(&mut b, &mut got).await);
        assert_eq!(third.map(|b| b.as_ptr() as usize), second_at);
        drop(first);
    }

    #[tokio::test]
    async fn bad_frames_are_errors() {
        for bytes in [
            vec![0, 0, 0, 1, 9, 0],          // unknown kind
            vec![0xff, 0xff, 0xff, 0xff, 1], // over the limit
            vec![0, 0, 0, 4, 1, 0],          // cut short
            vec![0, 0, 0, 0, 2, 1],          // a byte after the frame
            vec![0, 0],                      // header cut short
        ] {
            let mut buf = Vec::new();
            let read = read_frame(&mut bytes.as_slice(), &mut buf).await;
            assert!(read.is_err(), "{bytes:?} read as {read:?}");
            let read = read_body(&mut bytes.as_slice(), &mut FrameBuffer::default()).await;
            assert!(read.is_err(), "{bytes:?} read as {read:?}");
        }
    }

    #[test]
    fn statuses_keep_code_and_message() {
        let status = tonic::Status::failed_precondition("generation 3 is not served here");
        let back = status_of(status_body(&status));
        assert_eq!(back.code(), tonic::Code::FailedPrecondition);
        assert_eq!(back.message(), "generation 3 is not served here");
    }
}

//! Property tests of the frame codec ([`crate::frames`]) over generated messages and bytes:
//! every message comes back as it was sent, the zero-copy reply writer sends the same message
//! as the plain one, and no byte string a peer may send makes a reader panic, hang or take
//! more memory than the frame it announces (never more than `MAX_FRAME_BYTES`).

use bytes::Bytes;
use proptest::prelude::*;
use prost::Message as _;

use crate::frames::{
    FrameBuffer, HEADER_BYTES, Kind, MAX_FRAME_BYTES, body, decode_body, read_body, read_frame,
    write_frame, write_reply,
};
use crate::worker::{CallToolReply, CallToolRequest, call_tool_reply};

fn block_on<F: std::future::Future>(f: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap_or_else(|e| panic!("runtime: {e}"))
        .block_on(f)
}

fn request() -> impl Strategy<Value = CallToolRequest> {
    (
        any::<u64>(),
        "\\PC{0,16}",
        "\\PC{0,16}",
        "\\PC{0,300}",
        any::<u32>(),
        any::<bool>(),
    )
        .prop_map(
            |(generation, call_id, tool, arguments_json, timeout_ms, relay_requests)| {
                CallToolRequest {
                    generation,
                    call_id,
                    tool,
                    arguments_json,
                    timeout_ms,
                    relay_requests,
                    ..Default::default()
                }
            },
        )
}

/// The bytes a reader gets when a writer sends `frame`, read in pieces of `chunk` bytes (a
/// socket delivers a frame in any split).
fn read_in_pieces(frame: Vec<u8>, chunk: usize) -> (std::io::Result<Option<Kind>>, Vec<u8>) {
    block_on(async move {
        let (mut tx, mut rx) = tokio::io::duplex(chunk.max(1));
        let writer = tokio::spawn(async move {
            use tokio::io::AsyncWriteExt as _;
            let _ = tx.write_all(&frame).await;
        });
        let mut buf = Vec::new();
        let got = read_frame(&mut rx, &mut buf).await;
        // A reader that stopped early (a bad header) leaves bytes unread: closing its end
        // ends the writer's wait for room.
        drop(rx);
        let _ = writer.await;
        (got, buf)
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn a_call_comes_back_as_it_was_sent(call in request(), chunk in 1usize..64) {
        let mut frame = Vec::new();
        block_on(write_frame(&mut Vec::new(), Kind::Call, &call, &mut frame)).unwrap_or_else(|e| panic!("{e}"));
        let (got, buf) = read_in_pieces(frame, chunk);
        prop_assert_eq!(got.ok(), Some(Some(Kind::Call)));
        prop_assert_eq!(CallToolRequest::decode(body(&buf)).ok(), Some(call));
    }

    /// `write_reply` (result bytes after the rest, in one vectored write) and `write_frame`
    /// send the same message: both read back to the same reply.
    #[test]
    fn the_zero_copy_reply_is_the_same_message(result in prop::collection::vec(any::<u8>(), 0..2000), generation in any::<u64>()) {
        let reply = CallToolReply {
            outcome: Some(call_tool_reply::Outcome::ResultBytes(Bytes::from(result))),
            generation,
        };
        let (mut plain, mut vectored) = (Vec::new(), Vec::new());
        block_on(async {
            write_frame(&mut plain, Kind::Reply, &reply, &mut Vec::new()).await?;
            write_reply(&mut vectored, &reply, &mut Vec::new()).await
        }).unwrap_or_else(|e| panic!("{e}"));
        let mut buf = FrameBuffer::default();
        let read = block_on(read_body(&mut vectored.as_slice(), &mut buf)).unwrap_or_else(|e| panic!("{e}"));
        let Some((Kind::Reply, got)) = read else { panic!("no reply frame: {read:?}") };
        prop_assert_eq!(decode_body::<CallToolReply>(got).ok(), Some(reply));
        prop_assert_eq!(plain.len(), vectored.len());
    }

    /// Any bytes at all: an error or a frame, never a panic or a wait for more than the peer
    /// sent (the writer closes after its bytes), and never a buffer larger than what the
    /// frame's header announces within the limit.
    #[test]
    fn any_bytes_are_a_frame_or_an_error(bytes in prop::collection::vec(any::<u8>(), 0..64), chunk in 1usize..16) {
        let (got, buf) = read_in_pieces(bytes.clone(), chunk);
        if let Ok(Some(_)) = got {
            prop_assert_eq!(buf.len(), bytes.len());
        }
        let announced = bytes
            .get(..4)
            .map_or(0, |h| u32::from_be_bytes([h[0], h[1], h[2], h[3]]) as usize);
        prop_assert!(buf.len() <= HEADER_BYTES + announced.min(MAX_FRAME_BYTES).max(bytes.len()));
    }

    /// A header announcing more than the limit is refused before anything is read or
    /// reserved for the body.
    #[test]
    fn a_frame_over_the_limit_is_refused_at_its_header(excess in 1u32..1024, kind in 1u8..4) {
        let len = u32::try_from(MAX_FRAME_BYTES).unwrap_or(u32::MAX).saturating_add(excess);
        let mut frame = len.to_be_bytes().to_vec();
        frame.push(kind);
        let (got, buf) = read_in_pieces(frame, 8);
        prop_assert!(got.is_err());
        prop_assert!(buf.capacity() < 1024 * 1024, "reserved {} bytes", buf.capacity());
    }
}

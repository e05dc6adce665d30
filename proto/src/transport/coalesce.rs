//! Writes held back by one turn of the scheduler, so a gRPC request leaves in one write.
//!
//! Why: hyper's HTTP/2 client sends a request in two steps. The connection task writes the
//! HEADERS frame as soon as it opens the stream; the request body (the protobuf message) is
//! sent by a separate task once the new stream has flow-control capacity, which h2 grants only
//! when the connection task opens it, and the connection task then writes the DATA frames in a
//! second system call. The worker on the other end was woken by the first write, read the bare
//! headers, went back to sleep, and was woken again by the second: on one CPU that is two extra
//! context switches per call, measured at ~25 µs of the frontend → worker hop
//! (docs/PERFORMANCE.md, "One call's system calls, one write per request").
//!
//! Here the first write after a completed one returns `Pending` and wakes its own task at once,
//! so every task that is already runnable (the body task among them) runs before the bytes go
//! out; h2 then finds the DATA frames queued, puts them behind the headers in its buffer, and
//! the next attempt writes both in one system call. The cost is one more poll of the writing
//! task per batch; no bytes are buffered here and nothing waits on a timer.

use std::io::{self, IoSlice};
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// An I/O object whose writes are held back for one scheduler turn (see the module docs).
/// Reads, flushes and shutdown pass straight through.
pub struct CoalescedWrites<T> {
    inner: T,
    /// The current batch has yielded once; the next write goes through.
    yielded: bool,
}

impl<T> CoalescedWrites<T> {
    pub fn new(inner: T) -> Self {
        Self {
            inner,
            yielded: false,
        }
    }

    /// `true` when this write should yield first (and the task was woken to come back).
    fn yield_first(&mut self, cx: &mut Context<'_>) -> bool {
        if self.yielded {
            return false;
        }
        self.yielded = true;
        cx.waker().wake_by_ref();
        true
    }

    /// Runs one write on the inner stream once the batch has yielded. A write that finished
    /// (or failed) ends the batch; one that waits for space keeps it, so it is not held back a
    /// second time.
    fn write_with(
        &mut self,
        cx: &mut Context<'_>,
        write: impl FnOnce(Pin<&mut T>, &mut Context<'_>) -> Poll<io::Result<usize>>,
    ) -> Poll<io::Result<usize>>
    where
        T: Unpin,
    {
        if self.yield_first(cx) {
            return Poll::Pending;
        }
        let result = write(Pin::new(&mut self.inner), cx);
        if result.is_ready() {
            self.yielded = false;
        }
        result
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for CoalescedWrites<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for CoalescedWrites<T> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.write_with(cx, |inner, cx| inner.poll_write(cx, buf))
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        self.write_with(cx, |inner, cx| inner.poll_write_vectored(cx, bufs))
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};
    use tokio::io::{AsyncReadExt, AsyncWriteExt, DuplexStream};

    /// Every write that reached the inner stream, in order.
    type Writes = Arc<Mutex<Vec<Vec<u8>>>>;

    /// Records the bytes of every write that reached the inner stream.
    struct Recorder {
        inner: DuplexStream,
        writes: Writes,
    }

    impl AsyncRead for Recorder {
        fn poll_read(
            mut self: Pin<&mut Self>,
            cx: &mut Context<'_>,
            buf: &mut ReadBuf<'_>,
        ) -> Poll<io::Result<()>> {
            Pin::new(&mut self.inner).poll_read(cx, buf)
        }
    }

    impl AsyncWrite for Recorder {
        fn poll_write(
            mut self: Pin<&mut Self>,
            cx: &mut Context<'_>,
            buf: &[u8],
        ) -> Poll<io::Result<usize>> {
            let this = &mut *self;
            let result = Pin::new(&mut this.inner).poll_write(cx, buf);
            if let Poll::Ready(Ok(n)) = result
                && let Ok(mut w) = this.writes.lock()
            {
                w.push(buf[..n].to_vec());
            }
            result
        }
        fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
            Pin::new(&mut self.inner).poll_flush(cx)
        }
        fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
            Pin::new(&mut self.inner).poll_shutdown(cx)
        }
    }

    /// The server's end of an in-memory connection is a `Recorder` too.
    impl tonic::transport::server::Connected for Recorder {
        type ConnectInfo = ();
        fn connect_info(&self) -> Self::ConnectInfo {}
    }

    fn recorded(buffer: usize) -> (CoalescedWrites<Recorder>, DuplexStream, Writes) {
        let (a, b) = tokio::io::duplex(buffer);
        let writes = Arc::new(Mutex::new(Vec::new()));
        let conn = CoalescedWrites::new(Recorder {
            inner: a,
            writes: Arc::clone(&writes),
        });
        (conn, b, writes)
    }

    /// The first write of a batch yields once (waking itself), the retry goes through, and
    /// the batch starts again after it: bytes are never lost, duplicated or reordered.
    #[tokio::test]
    async fn each_write_yields_once_and_then_goes_through() {
        let (mut conn, mut peer, writes) = recorded(1024);
        let waker = futures_util::task::noop_waker();
        let mut cx = Context::from_waker(&waker);
        assert!(Pin::new(&mut conn).poll_write(&mut cx, b"one").is_pending());
        assert!(matches!(
            Pin::new(&mut conn).poll_write(&mut cx, b"one"),
            Poll::Ready(Ok(3))
        ));
        assert!(Pin::new(&mut conn).poll_write(&mut cx, b"two").is_pending());
        assert!(matches!(
            Pin::new(&mut conn).poll_write(&mut cx, b"two"),
            Poll::Ready(Ok(3))
        ));
        let mut got = [0u8; 6];
        peer.read_exact(&mut got).await.expect("read");
        assert_eq!(&got, b"onetwo");
        assert_eq!(writes.lock().map(|w| w.len()).unwrap_or(0), 2);
    }

    /// What the wrapper is for: a writer that flushes as soon as it has bytes, while another
    /// task that is already runnable adds more (hyper's h2 connection task and its body task).
    /// Held back one turn, both land in one write; a plain stream would take two.
    #[tokio::test(flavor = "current_thread")]
    async fn bytes_queued_by_a_runnable_task_join_the_same_write() {
        let (conn, mut peer, writes) = recorded(1024);
        let queue = Arc::new(Mutex::new(Vec::<u8>::new()));
        let q = Arc::clone(&queue);
        let body = tokio::spawn(async move {
            if let Ok(mut q) = q.lock() {
                q.extend_from_slice(b"DATA");
            }
        });
        let mut conn = conn;
        if let Ok(mut q) = queue.lock() {
            q.extend_from_slice(b"HEADERS|");
        }
        // Like h2's connection task: whatever is queued when the write is attempted goes out.
        std::future::poll_fn(|cx| {
            let pending = queue.lock().map(|q| q.clone()).unwrap_or_default();
            match Pin::new(&mut conn).poll_write(cx, &pending) {
                Poll::Ready(result) => {
                    let n = result.expect("write");
                    if let Ok(mut q) = queue.lock() {
                        q.drain(..n);
                    }
                    Poll::Ready(())
                }
                Poll::Pending => Poll::Pending,
            }
        })
        .await;
        body.await.expect("body task");
        let writes = writes.lock().map(|w| w.clone()).unwrap_or_default();
        assert_eq!(writes, vec![b"HEADERS|DATA".to_vec()], "one write for both");
        let mut got = [0u8; 12];
        peer.read_exact(&mut got).await.expect("read");
        assert_eq!(&got, b"HEADERS|DATA");
    }

    /// A write larger than the stream's buffer still completes (the wrapper yields once per
    /// batch, not once per partial write), and reads pass straight through.
    #[tokio::test]
    async fn large_writes_complete_and_reads_pass_through() {
        let (mut conn, mut peer, _writes) = recorded(64 * 1024);
        let data: Vec<u8> = (0..4 * 1024 * 1024u32).map(|i| (i % 251) as u8).collect();
        let expected = data.clone();
        let writer = tokio::spawn(async move {
            conn.write_all(&data).await.expect("write all");
            conn.flush().await.expect("flush");
            let mut back = [0u8; 4];
            conn.read_exact(&mut back).await.expect("read back");
            assert_eq!(&back, b"done");
        });
        let mut got = vec![0u8; expected.len()];
        peer.read_exact(&mut got).await.expect("read all");
        assert!(got == expected, "bytes arrived changed or out of order");
        peer.write_all(b"done").await.expect("reply");
        writer.await.expect("writer task");
    }

    /// The (type, stream id) of each HTTP/2 frame in one write: a 9-byte head (length u24,
    /// type, flags, stream id u31), then the payload.
    fn http2_frames(bytes: &[u8]) -> Vec<(u8, u32)> {
        let mut frames = Vec::new();
        let mut at = 0;
        while at + 9 <= bytes.len() {
            let len = usize::from(bytes[at]) << 16
                | usize::from(bytes[at + 1]) << 8
                | usize::from(bytes[at + 2]);
            let stream = u32::from_be_bytes([
                bytes[at + 5] & 0x7f,
                bytes[at + 6],
                bytes[at + 7],
                bytes[at + 8],
            ]);
            frames.push((bytes[at + 3], stream));
            at += 9 + len;
        }
        frames
    }

    /// The wrapper on the path it was made for: a unary gRPC call through tonic and hyper's
    /// HTTP/2 client sends the request's HEADERS and DATA frames in one write. Without the
    /// wrapper the same call takes two (the reason it exists).
    #[tokio::test(flavor = "current_thread")]
    async fn a_unary_grpc_request_leaves_in_one_write() {
        use crate::transport::stub::Stub;
        use crate::worker::CancelRequest;
        use crate::worker::worker_client::WorkerClient;
        use crate::worker::worker_server::WorkerServer;

        let (client_io, server_io) = tokio::io::duplex(64 * 1024);
        let writes = Arc::new(Mutex::new(Vec::new()));
        let client_io = CoalescedWrites::new(Recorder {
            inner: client_io,
            writes: Arc::clone(&writes),
        });
        let server = tokio::spawn(
            tonic::transport::Server::builder()
                .add_service(WorkerServer::new(Stub))
                .serve_with_incoming(futures_util::stream::iter([Ok::<_, io::Error>(Recorder {
                    inner: server_io,
                    writes: Writes::default(),
                })])),
        );
        let slot = Arc::new(Mutex::new(Some(client_io)));
        let channel = tonic::transport::Endpoint::from_static("http://test")
            .connect_with_connector(tower::service_fn(move |_: tonic::transport::Uri| {
                let io = slot.lock().ok().and_then(|mut s| s.take());
                async move {
                    io.map(hyper_util::rt::TokioIo::new)
                        .ok_or_else(|| io::Error::other("one connection only"))
                }
            }))
            .await
            .expect("connect");
        let mut client = WorkerClient::new(channel);
        let cancel = || CancelRequest {
            generation: 1,
            call_id: "c".repeat(40),
        };
        // The first call also carries the connection's preface and settings.
        client.cancel(cancel()).await.expect("first call");
        if let Ok(mut w) = writes.lock() {
            w.clear();
        }
        client.cancel(cancel()).await.expect("second call");

        let writes = writes.lock().map(|w| w.clone()).unwrap_or_default();
        let carrying_the_request: Vec<Vec<(u8, u32)>> = writes
            .iter()
            .map(|w| http2_frames(w))
            .filter(|frames| frames.iter().any(|(_, stream)| *stream != 0))
            .collect();
        assert_eq!(
            carrying_the_request.len(),
            1,
            "the request went out in {} writes: {carrying_the_request:?}",
            carrying_the_request.len()
        );
        let frames = &carrying_the_request[0];
        assert!(
            frames.iter().any(|(kind, _)| *kind == 1),
            "HEADERS: {frames:?}"
        );
        assert!(
            frames.iter().any(|(kind, _)| *kind == 0),
            "DATA: {frames:?}"
        );
        server.abort();
    }
}

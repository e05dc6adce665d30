//! A Unix domain socket connection registered with the event loop for *read* readiness only.
//!
//! Why: tokio registers a socket for both directions, edge-triggered. On a Unix domain socket
//! the kernel signals `EPOLLOUT` to the writer every time the peer reads (freeing buffer space
//! wakes the writer's waiters; TCP only does that after the sender ran low), so every gRPC
//! exchange woke the frontend and the worker once more for nothing: strace showed three epoll
//! wake-ups per tools/call in each process, two carrying data and one bare `EPOLLOUT`.
//!
//! Here writes go straight to the socket. Only when one would block is a duplicate of the
//! descriptor registered for writability, and it is dropped (deregistered) again as soon as a
//! write went through. Local gRPC frames rarely fill the socket buffer, so in the steady state
//! each process wakes once per message it receives.
//!
//! Writes use plain `write(2)`: a peer that closed gives `EPIPE`, not a signal, because Rust
//! programs start with `SIGPIPE` ignored (none of our binaries changes that).

use std::io::{self, IoSlice, Read, Write};
use std::net::Shutdown;
use std::os::unix::net::UnixStream;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use tokio::io::unix::AsyncFd;
use tokio::io::{AsyncRead, AsyncWrite, Interest, ReadBuf};

/// See the module documentation.
pub struct UdsConn {
    /// The socket, registered for readability only.
    read: AsyncFd<UnixStream>,
    /// A duplicate of the socket registered for writability, present only while a write is
    /// waiting for buffer space.
    write: Option<AsyncFd<UnixStream>>,
}

impl UdsConn {
    pub(super) fn new(stream: UnixStream) -> io::Result<Self> {
        stream.set_nonblocking(true)?;
        Ok(Self {
            read: register(stream, Interest::READABLE)?,
            write: None,
        })
    }

    /// Sets the socket's send buffer (`SO_SNDBUF`; the kernel caps the size).
    pub(super) fn set_send_buffer(&self, bytes: usize) -> io::Result<()> {
        socket2::SockRef::from(self.read.get_ref()).set_send_buffer_size(bytes)
    }

    /// Runs one non-blocking write operation; waits for writability only if it would block.
    fn poll_write_op(
        &mut self,
        cx: &mut Context<'_>,
        mut op: impl FnMut(&UnixStream) -> io::Result<usize>,
    ) -> Poll<io::Result<usize>> {
        loop {
            if let Some(waiter) = &self.write {
                let mut guard = ready!(waiter.poll_write_ready(cx))?;
                let attempt = guard.try_io(|s| op(s.get_ref()));
                drop(guard);
                match attempt {
                    Ok(result) => {
                        // Written (or failed for good): stop listening for EPOLLOUT.
                        self.write = None;
                        return Poll::Ready(result);
                    }
                    // Still full: the guard cleared the readiness, wait for the next edge.
                    Err(_would_block) => continue,
                }
            }
            match op(self.read.get_ref()) {
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    // Registering reports the current state at once, so space freed between
                    // the failed write and this call is not missed.
                    let dup = self.read.get_ref().try_clone()?;
                    self.write = Some(register(dup, Interest::WRITABLE)?);
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                result => return Poll::Ready(result),
            }
        }
    }
}

/// Registers a socket with the current runtime's reactor for one kind of readiness. (tokio's
/// registration is `unsafe` because `AsRawFd` alone does not prove the descriptor is owned.)
fn register(stream: UnixStream, interest: Interest) -> io::Result<AsyncFd<UnixStream>> {
    // SAFETY: `UnixStream` owns its descriptor, which therefore stays open and refers to the
    // same socket until the stream is dropped; the `AsyncFd` owns the stream, never hands it
    // out mutably or replaces it, and `as_raw_fd` always returns that one descriptor.
    let registered = unsafe { AsyncFd::register_with_interest(stream, interest) };
    Ok(registered?)
}

impl AsyncRead for UdsConn {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        loop {
            let mut guard = ready!(this.read.poll_read_ready(cx))?;
            let unfilled = buf.initialize_unfilled();
            let wanted = unfilled.len();
            match guard.try_io(|s| {
                let mut socket = s.get_ref();
                socket.read(unfilled)
            }) {
                Ok(Ok(n)) => {
                    // A short read drained the socket (as tokio's own sockets assume): the
                    // next read would only return EWOULDBLOCK, so skip that system call.
                    if n > 0 && n < wanted {
                        guard.clear_ready();
                    }
                    buf.advance(n);
                    return Poll::Ready(Ok(()));
                }
                Ok(Err(e)) if e.kind() == io::ErrorKind::Interrupted => {}
                Ok(Err(e)) => return Poll::Ready(Err(e)),
                Err(_would_block) => {}
            }
        }
    }
}

impl AsyncWrite for UdsConn {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.get_mut().poll_write_op(cx, |mut s| s.write(buf))
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        self.get_mut()
            .poll_write_op(cx, |mut s| s.write_vectored(bufs))
    }

    fn is_write_vectored(&self) -> bool {
        true
    }

    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        // Every write is a system call; there is nothing buffered here.
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.read.get_ref().shutdown(Shutdown::Write) {
            Err(e) if e.kind() == io::ErrorKind::NotConnected => Poll::Ready(Ok(())),
            other => Poll::Ready(other),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    fn pair() -> (UdsConn, UdsConn) {
        let (a, b) = UnixStream::pair().expect("socketpair");
        (
            UdsConn::new(a).expect("register a"),
            UdsConn::new(b).expect("register b"),
        )
    }

    #[tokio::test]
    async fn bytes_go_both_ways_and_shutdown_ends_the_peer_read() {
        let (mut a, mut b) = pair();
        a.write_all(b"ping").await.expect("write");
        let mut got = [0u8; 4];
        b.read_exact(&mut got).await.expect("read");
        assert_eq!(&got, b"ping");
        b.write_all(b"pong").await.expect("write back");
        a.read_exact(&mut got).await.expect("read back");
        assert_eq!(&got, b"pong");
        a.shutdown().await.expect("shutdown");
        let mut rest = Vec::new();
        b.read_to_end(&mut rest).await.expect("read to end");
        assert!(rest.is_empty());
    }

    /// Far more than a socket buffer holds: the writer must block, wait for writability on
    /// its duplicate descriptor, and finish once the reader drains; nothing lost or reordered.
    #[tokio::test]
    async fn a_write_larger_than_the_socket_buffer_waits_for_the_reader() {
        let (mut a, mut b) = pair();
        let data: Vec<u8> = (0..8 * 1024 * 1024u32).map(|i| (i % 251) as u8).collect();
        let expected = data.clone();
        let writer = tokio::spawn(async move {
            a.write_all(&data).await.expect("write all");
            assert!(
                a.write.is_none(),
                "the write registration is dropped after use"
            );
            a.shutdown().await.expect("shutdown");
        });
        let mut got = Vec::new();
        b.read_to_end(&mut got).await.expect("read to end");
        writer.await.expect("writer task");
        assert_eq!(got.len(), expected.len());
        assert!(got == expected, "bytes arrived changed or out of order");
    }

    #[tokio::test]
    async fn a_write_to_a_closed_peer_fails_instead_of_hanging() {
        let (mut a, b) = pair();
        drop(b);
        let big = vec![0u8; 4 * 1024 * 1024];
        let err = a.write_all(&big).await.expect_err("peer is gone");
        assert_eq!(err.kind(), io::ErrorKind::BrokenPipe);
    }
}

//! Local IPC endpoints for tonic: one code path for Unix domain sockets and Windows named
//! pipes (via `interprocess`). Endpoint names are derived from the state directory, so every
//! process of one runtime finds the others without configuration.

use std::io;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::task::{Context, Poll};

use futures_util::Stream;
use hyper_util::rt::TokioIo;
use interprocess::local_socket::tokio::{Listener, Stream as LocalStream, prelude::*};
use interprocess::local_socket::{ListenerOptions, Name};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tonic::transport::server::Connected;
use tonic::transport::{Channel, Endpoint as TonicEndpoint, Uri};

mod coalesce;
#[cfg(test)]
mod stub;
#[cfg(unix)]
#[allow(unsafe_code)] // one commented call: tokio's fd registration
mod uds;

use coalesce::CoalescedWrites;

/// Errors of the local transport.
#[derive(Debug, thiserror::Error)]
pub enum TransportError {
    #[error("cannot create the runtime directory {path}: {source}")]
    RunDir { path: PathBuf, source: io::Error },
    #[error("cannot listen on {endpoint}: {source}")]
    Bind { endpoint: String, source: io::Error },
    #[error("cannot connect to {endpoint}: {source}")]
    Connect {
        endpoint: String,
        source: tonic::transport::Error,
    },
    #[error("cannot connect to {endpoint}: {source}")]
    Open { endpoint: String, source: io::Error },
    #[error("invalid endpoint name {endpoint}: {source}")]
    Name { endpoint: String, source: io::Error },
}

/// A named local endpoint: a socket file path on Unix, a pipe name on Windows.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct LocalEndpoint(String);

impl LocalEndpoint {
    pub fn from_wire(s: impl Into<String>) -> Self {
        Self(s.into())
    }
    pub fn as_str(&self) -> &str {
        &self.0
    }
    fn name(&self) -> Result<Name<'_>, TransportError> {
        imp::name(&self.0).map_err(|source| TransportError::Name {
            endpoint: self.0.clone(),
            source,
        })
    }
}

impl std::fmt::Display for LocalEndpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// `<state>/run`, created owner-only (0700 on Unix).
pub fn run_dir(state_dir: &Path) -> Result<PathBuf, TransportError> {
    let dir = tutti_rules::state_dir::layout::run(state_dir);
    imp::create_private_dir(&dir).map_err(|source| TransportError::RunDir {
        path: dir.clone(),
        source,
    })?;
    Ok(dir)
}

/// The kernel's control-plane endpoint for a state directory.
pub fn kernel_endpoint(state_dir: &Path) -> LocalEndpoint {
    imp::endpoint(state_dir, "kernel")
}

/// The endpoint a worker of one generation listens on. Each generation gets its own name,
/// so a stale route can never reach a newer process. Generations are unique across
/// connectors, so the name needs no key: a socket path must fit `sun_path` (108 bytes on
/// Linux), and `<state>/run/w-<gen>.sock` is no longer than the kernel's own
/// `<state>/run/kernel.sock` for any generation below 2^28 (the kernel hands out small ones).
pub fn worker_endpoint(state_dir: &Path, generation: u64) -> LocalEndpoint {
    imp::endpoint(state_dir, &format!("w-{generation:x}"))
}

/// Where the worker of `generation` serves plain tool calls as frames ([`crate::frames`]):
/// beside its gRPC endpoint, as short (`d-<gen>`).
pub fn worker_data_endpoint(state_dir: &Path, generation: u64) -> LocalEndpoint {
    imp::endpoint(state_dir, &format!("d-{generation:x}"))
}

/// Opens a plain byte stream to a local endpoint (no coalescing, no HTTP/2): the frame data
/// plane writes each frame whole itself.
pub async fn open_stream(endpoint: &LocalEndpoint) -> Result<IpcConn, TransportError> {
    let failed = |source: io::Error| TransportError::Open {
        endpoint: endpoint.0.clone(),
        source,
    };
    let stream = LocalStream::connect(endpoint.name()?)
        .await
        .map_err(failed)?;
    IpcConn::new(stream).map_err(failed)
}

/// Removes what is left of an endpoint whose server is gone: its socket file on Unix (a
/// process killed by a signal cannot remove its own); nothing on Windows, where a named pipe
/// ends with its last handle. Best effort: a missing file is fine.
pub fn remove_endpoint(endpoint: &LocalEndpoint) {
    if cfg!(unix) {
        let _ = std::fs::remove_file(&endpoint.0);
    }
}

/// Listens on `endpoint` (owner-only) and yields connections for tonic's
/// `serve_with_incoming*`.
pub fn bind(endpoint: &LocalEndpoint) -> Result<Incoming, TransportError> {
    bind_granting(endpoint, None)
}

/// [`bind`], and on Windows the pipe also admits `grant` (see [`crate::pipe_access`]).
/// Unix ignores `grant`: the socket file is the owner's only, in a 0700 directory.
pub fn bind_granting(
    endpoint: &LocalEndpoint,
    grant: Option<&crate::pipe_access::UserSid>,
) -> Result<Incoming, TransportError> {
    let bind_err = |source| TransportError::Bind {
        endpoint: endpoint.0.clone(),
        source,
    };
    let opts = ListenerOptions::new()
        .name(endpoint.name()?)
        .try_overwrite(true);
    let opts = imp::owner_only(opts, grant).map_err(bind_err)?;
    let listener = opts.create_tokio().map_err(bind_err)?;
    Ok(Incoming {
        inner: Box::pin(futures_util::stream::unfold(
            listener,
            |l: Listener| async move {
                let next = l.accept().await.and_then(IpcConn::new);
                Some((next, l))
            },
        )),
    })
}

/// The origin given to tonic on local connections. The authority is not used for routing:
/// the socket decides where bytes go.
const ORIGIN: &str = "http://tutti.local";

/// Opens a socket to a local endpoint, its writes held back one scheduler turn ([`coalesce`])
/// so each request leaves in one write. Every client connection is made here.
async fn dial(name: Name<'_>) -> io::Result<CoalescedWrites<IpcConn>> {
    let stream = LocalStream::connect(name).await?;
    Ok(CoalescedWrites::new(IpcConn::new(stream)?))
}

/// Connects a tonic channel to a local endpoint ([`dial`]). The channel reconnects lazily.
pub async fn connect(endpoint: &LocalEndpoint) -> Result<Channel, TransportError> {
    let target = endpoint.clone();
    let channel = TonicEndpoint::from_static(ORIGIN)
        .connect_with_connector(tower::service_fn(move |_: Uri| {
            let target = target.clone();
            async move {
                let name = target
                    .name()
                    .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e.to_string()))?;
                Ok::<_, io::Error>(TokioIo::new(dial(name).await?))
            }
        }))
        .await
        .map_err(|source| TransportError::Connect {
            endpoint: endpoint.0.clone(),
            source,
        })?;
    Ok(channel)
}

/// One HTTP/2 connection to a local endpoint, for the data plane's per-call path: tonic's
/// generated clients run on it directly (`WorkerClient::with_origin(conn, origin())`), without
/// the `Channel`'s request queue and worker task (each call went through a buffer task before
/// it reached the connection). No reconnection: when the peer goes, calls fail and the owner
/// opens a new one. Cheap to clone (clones share the connection).
#[derive(Clone)]
pub struct Connection {
    send: hyper::client::conn::http2::SendRequest<tonic::body::Body>,
}

impl Connection {
    /// Connects to `endpoint` and completes the HTTP/2 handshake; the connection is driven by
    /// a task of its own that ends when the peer closes or every clone is dropped.
    pub async fn open(endpoint: &LocalEndpoint) -> Result<Connection, TransportError> {
        let failed = |source: io::Error| TransportError::Open {
            endpoint: endpoint.0.clone(),
            source,
        };
        let io = TokioIo::new(dial(endpoint.name()?).await.map_err(failed)?);
        let (send, connection) =
            hyper::client::conn::http2::Builder::new(hyper_util::rt::TokioExecutor::new())
                .handshake(io)
                .await
                .map_err(|e| failed(io::Error::other(e)))?;
        tokio::spawn(async move {
            if let Err(e) = connection.await {
                tracing::debug!(error = %e, "local gRPC connection ended");
            }
        });
        Ok(Connection { send })
    }

    /// The origin to give tonic's clients (the authority is not used for routing).
    pub fn origin() -> Uri {
        Uri::from_static(ORIGIN)
    }
}

impl tower::Service<http::Request<tonic::body::Body>> for Connection {
    type Response = http::Response<hyper::body::Incoming>;
    type Error = hyper::Error;
    type Future =
        Pin<Box<dyn std::future::Future<Output = Result<Self::Response, hyper::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), hyper::Error>> {
        self.send.poll_ready(cx)
    }

    fn call(&mut self, request: http::Request<tonic::body::Body>) -> Self::Future {
        Box::pin(self.send.send_request(request))
    }
}

/// Incoming connections of a bound endpoint.
pub struct Incoming {
    inner: Pin<Box<dyn Stream<Item = io::Result<IpcConn>> + Send>>,
}

impl Stream for Incoming {
    type Item = io::Result<IpcConn>;
    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.inner.as_mut().poll_next(cx)
    }
}

/// One local-socket connection (a newtype so tonic's `Connected` can be implemented). On Unix
/// it is a [`uds::UdsConn`] (read interest only, see there); on Windows the named pipe stream.
pub struct IpcConn(imp::Conn);

impl IpcConn {
    fn new(stream: LocalStream) -> io::Result<Self> {
        imp::conn(stream).map(Self)
    }

    /// Asks for a send buffer of `bytes` (Linux caps it at `net.core.wmem_max`): a large
    /// frame then leaves in one write instead of one per buffer-full, each waiting for the
    /// reader to wake and make room. Best effort; a no-op on Windows, where a named
    /// pipe's buffers are fixed when it is created.
    pub fn widen_send_buffer(&self, bytes: usize) {
        imp::widen_send_buffer(&self.0, bytes);
    }
}

/// A connection closes where it is dropped, in its runtime (see `imp::close_in_place`).
impl Drop for IpcConn {
    fn drop(&mut self) {
        imp::close_in_place(&self.0);
    }
}

impl Connected for IpcConn {
    type ConnectInfo = ();
    fn connect_info(&self) -> Self::ConnectInfo {}
}

impl AsyncRead for IpcConn {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_read(cx, buf)
    }
}

impl AsyncWrite for IpcConn {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.0).poll_write(cx, buf)
    }
    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.0).poll_write_vectored(cx, bufs)
    }
    fn is_write_vectored(&self) -> bool {
        self.0.is_write_vectored()
    }
    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_flush(cx)
    }
    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_shutdown(cx)
    }
}

#[cfg(unix)]
mod imp {
    use super::LocalEndpoint;
    use interprocess::local_socket::{GenericFilePath, ListenerOptions, Name, ToFsName};
    use interprocess::os::unix::local_socket::ListenerOptionsExt;
    use std::io;
    use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
    use std::path::Path;

    pub(super) type Conn = super::uds::UdsConn;

    pub(super) fn conn(stream: interprocess::local_socket::tokio::Stream) -> io::Result<Conn> {
        match stream {
            interprocess::local_socket::tokio::Stream::UdSocket(s) => {
                let fd = std::os::fd::OwnedFd::try_from(s)?;
                Conn::new(std::os::unix::net::UnixStream::from(fd))
            }
        }
    }

    pub(super) fn name(s: &str) -> io::Result<Name<'_>> {
        s.to_fs_name::<GenericFilePath>()
    }

    /// A socket closes with its last descriptor: nothing to do.
    pub(super) fn close_in_place(_: &Conn) {}

    pub(super) fn widen_send_buffer(conn: &Conn, bytes: usize) {
        if let Err(e) = conn.set_send_buffer(bytes) {
            tracing::debug!(error = %e, "cannot widen a socket's send buffer");
        }
    }

    pub(super) fn endpoint(state_dir: &Path, stem: &str) -> LocalEndpoint {
        LocalEndpoint(
            tutti_rules::state_dir::layout::run(state_dir)
                .join(format!("{stem}.sock"))
                .to_string_lossy()
                .into_owned(),
        )
    }

    pub(super) fn owner_only<'a>(
        opts: ListenerOptions<'a>,
        _grant: Option<&crate::pipe_access::UserSid>,
    ) -> io::Result<ListenerOptions<'a>> {
        Ok(opts.mode(0o600))
    }

    pub(super) fn create_private_dir(dir: &Path) -> io::Result<()> {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)?;
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
    }
}

#[cfg(windows)]
mod imp {
    use super::LocalEndpoint;
    use interprocess::local_socket::{GenericNamespaced, ListenerOptions, Name, ToNsName};
    use interprocess::os::windows::local_socket::ListenerOptionsExt;
    use interprocess::os::windows::security_descriptor::SecurityDescriptor;
    use std::io;
    use std::path::Path;
    use widestring::U16CString;

    pub(super) type Conn = interprocess::local_socket::tokio::Stream;

    pub(super) fn conn(stream: Conn) -> io::Result<Conn> {
        Ok(stream)
    }

    pub(super) fn name(s: &str) -> io::Result<Name<'_>> {
        s.to_ns_name::<GenericNamespaced>()
    }

    /// A named pipe's buffers are fixed when it is created.
    pub(super) fn widen_send_buffer(_: &Conn, _: usize) {}

    /// interprocess hands a pipe it has written to and not seen flushed (its local-socket
    /// stream's flush is a no-op, so: every pipe that carried a byte) to its "linger pool": a
    /// thread that calls `FlushFileBuffers` (on Windows: waits until the peer has read
    /// everything) and then drops the pipe there. That drop cancels the pipe's pending read,
    /// and mio frees the pipe, closing its handle, only once the loop that owns the pipe takes
    /// the cancellation's completion off its port (`CancelIoEx` does not wait for it). When
    /// that runtime is shutting down or gone, its last drain of the port does not wait either:
    /// a completion that comes later is never taken, and the handle stays open for good
    /// (tokio-rs/mio#1944, open; Windows and Wine alike), so the peer never learns that we
    /// went (a call to a stopped in-process peer hung in about a third of the runs
    /// under Wine, where a cancellation issued by another thread than the read's is posted
    /// late; a cancellation by the reading thread was always taken).
    /// Marked flushed, the stream is closed where it is dropped, in its runtime. Nothing
    /// written is lost: mio never cancels a write in flight (the pipe stays open until it
    /// completes), and bytes in the pipe stay readable after our end closes.
    pub(super) fn close_in_place(conn: &Conn) {
        let interprocess::local_socket::tokio::Stream::NamedPipe(pipe) = conn;
        pipe.inner().assume_flushed();
    }

    /// Pipe names are global: qualify them by a hash of the state directory.
    pub(super) fn endpoint(state_dir: &Path, stem: &str) -> LocalEndpoint {
        use std::hash::{Hash, Hasher};
        let mut h = std::collections::hash_map::DefaultHasher::new();
        state_dir.hash(&mut h);
        LocalEndpoint(format!("tutti-{:016x}-{stem}", h.finish()))
    }

    /// The pipe's DACL ([`crate::pipe_access::pipe_sddl`]): protected, GENERIC_ALL to OWNER
    /// RIGHTS, i.e. to the pipe's owner, the default owner of the creating token (the user;
    /// BUILTIN\Administrators for an elevated token; SYSTEM for a LocalSystem service), and
    /// to `grant` if given. (interprocess opens the first instance with
    /// FILE_FLAG_FIRST_PIPE_INSTANCE, so a squatter's pipe of the same name fails `bind`.)
    pub(super) fn owner_only<'a>(
        opts: ListenerOptions<'a>,
        grant: Option<&crate::pipe_access::UserSid>,
    ) -> io::Result<ListenerOptions<'a>> {
        let sddl = U16CString::from_str(crate::pipe_access::pipe_sddl(grant))
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e.to_string()))?;
        let sd = SecurityDescriptor::deserialize(&sddl)?;
        Ok(opts.security_descriptor(sd))
    }

    pub(super) fn create_private_dir(dir: &Path) -> io::Result<()> {
        std::fs::create_dir_all(dir)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::worker::CancelRequest;
    use crate::worker::worker_client::WorkerClient;
    use crate::worker::worker_server::WorkerServer;
    use std::time::Duration;

    /// A worker-like server on a runtime of its own; dropping the handle ends the runtime and
    /// with it every connection, as a worker process exiting would.
    struct Peer {
        stop: Option<tokio::sync::oneshot::Sender<()>>,
        thread: Option<std::thread::JoinHandle<()>>,
    }

    impl Peer {
        fn start(endpoint: &LocalEndpoint) -> Peer {
            let endpoint = endpoint.clone();
            let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
            let (ready, listening) = std::sync::mpsc::channel();
            let thread = std::thread::spawn(move || {
                let runtime = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .expect("runtime");
                runtime.block_on(async move {
                    let incoming = bind(&endpoint).expect("bind");
                    let _ = ready.send(());
                    let serve = tonic::transport::Server::builder()
                        .add_service(WorkerServer::new(stub::Stub))
                        .serve_with_incoming(incoming);
                    // Not a graceful shutdown: that would wait for the client to hang up.
                    tokio::select! {
                        _ = serve => {}
                        _ = stopped => {}
                    }
                });
                // The runtime is dropped here: every connection task ends, sockets close.
            });
            listening.recv().expect("the peer listens");
            Peer {
                stop: Some(stop),
                thread: Some(thread),
            }
        }
    }

    impl Drop for Peer {
        fn drop(&mut self) {
            if let Some(stop) = self.stop.take() {
                let _ = stop.send(());
            }
            if let Some(thread) = self.thread.take() {
                let _ = thread.join();
            }
        }
    }

    /// The pipe of a kernel that admits a user (its service's installer) is created with the
    /// extra ACE and accepts connections (Wine runs everything as one user: that a second
    /// user gets in and a third does not is `pipe_access`'s unit tests' part).
    #[cfg(windows)]
    #[tokio::test]
    async fn a_pipe_that_admits_a_user_is_created_and_connectable() {
        let sid = crate::winuser::current_user_sid().expect("the current user's SID");
        let dir = std::env::temp_dir().join(format!("tutti-grant-{}", std::process::id()));
        let endpoint = kernel_endpoint(&dir);
        let mut incoming = bind_granting(&endpoint, Some(&sid)).expect("bind with a grant");
        let accept = tokio::spawn(async move {
            use futures_util::StreamExt as _;
            incoming.next().await.map(|c| c.is_ok())
        });
        let name = endpoint.name().expect("name");
        dial(name).await.expect("connect to the granted pipe");
        let accepted = tokio::time::timeout(Duration::from_secs(10), accept).await;
        assert!(matches!(accepted, Ok(Ok(Some(true)))), "{accepted:?}");
    }

    /// Accepts one connection on a runtime of its own, writes `LAST_WORDS` to it and, once
    /// told to stop, drops the runtime with the connection still in it (a process exiting).
    fn write_then_go(
        endpoint: &LocalEndpoint,
    ) -> (
        tokio::sync::oneshot::Receiver<()>,
        tokio::sync::oneshot::Sender<()>,
        std::thread::JoinHandle<()>,
    ) {
        let endpoint = endpoint.clone();
        let (ready, listening) = std::sync::mpsc::channel();
        let (written, on_written) = tokio::sync::oneshot::channel();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let thread = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("runtime");
            runtime.block_on(async move {
                use futures_util::StreamExt as _;
                use tokio::io::AsyncWriteExt as _;
                let mut incoming = bind(&endpoint).expect("bind");
                let _ = ready.send(());
                let mut conn = incoming
                    .next()
                    .await
                    .expect("a connection")
                    .expect("accept");
                conn.write_all(LAST_WORDS).await.expect("write");
                conn.flush().await.expect("flush");
                // The loop takes the write's completion (the bytes are in the pipe by now): a
                // write still in flight when a runtime goes would keep a Windows pipe open for
                // good (mio frees a pipe only from its loop), which a process exit does not.
                tokio::time::sleep(Duration::from_millis(100)).await;
                let _ = written.send(());
                let _ = stopped.await;
                // Leave `conn` to the runtime's drop, as a process exit leaves it to the OS.
                tokio::spawn(async move {
                    let _conn = conn;
                    std::future::pending::<()>().await
                });
            });
        });
        listening.recv().expect("the peer listens");
        (on_written, stop, thread)
    }

    const LAST_WORDS: &[u8] = b"the last words before the peer goes";

    /// What a peer wrote just before it went arrives, and then the end, though nobody read it
    /// before the peer's runtime was gone: a connection closed where it is dropped
    /// (`imp::close_in_place`) loses nothing that was written.
    #[tokio::test(flavor = "current_thread")]
    async fn what_a_peer_wrote_before_it_went_arrives_and_then_the_end() {
        let dir = tempfile::tempdir().expect("tempdir");
        run_dir(dir.path()).expect("run dir");
        let endpoint = worker_endpoint(dir.path(), 2);
        let (written, stop, thread) = write_then_go(&endpoint);
        let mut conn = dial(endpoint.name().expect("name")).await.expect("dial");
        written.await.expect("the peer wrote");
        let _ = stop.send(());
        thread.join().expect("the peer's thread");
        let mut got = Vec::new();
        let read = tokio::time::timeout(
            Duration::from_secs(5),
            tokio::io::AsyncReadExt::read_to_end(&mut conn, &mut got),
        )
        .await;
        assert!(
            matches!(read, Ok(Ok(_))),
            "the end of a peer that went must arrive: {read:?} after {:?}",
            String::from_utf8_lossy(&got)
        );
        assert_eq!(got, LAST_WORDS);
    }

    async fn cancel(conn: &Connection) -> Result<(), tonic::Status> {
        let mut client = WorkerClient::with_origin(conn.clone(), Connection::origin());
        client
            .cancel(CancelRequest {
                generation: 1,
                call_id: "c".to_owned(),
            })
            .await
            .map(|_| ())
    }

    /// A direct connection carries calls, concurrent ones included; when the peer goes, a call
    /// fails at once instead of hanging, nobody accepts a new connection, and a connection to
    /// the restarted peer works.
    #[tokio::test(flavor = "current_thread")]
    async fn a_direct_connection_fails_when_the_peer_goes_and_can_be_reopened() {
        let dir = tempfile::tempdir().expect("tempdir");
        run_dir(dir.path()).expect("run dir");
        let endpoint = worker_endpoint(dir.path(), 1);
        let peer = Peer::start(&endpoint);
        let conn = Connection::open(&endpoint).await.expect("open");
        cancel(&conn).await.expect("first call");
        let (a, b) = tokio::join!(cancel(&conn), cancel(&conn));
        a.expect("concurrent call a");
        b.expect("concurrent call b");

        drop(peer);
        let after = tokio::time::timeout(Duration::from_secs(5), cancel(&conn))
            .await
            .expect("a call to a peer that went away must not hang");
        assert!(after.is_err(), "the peer is gone: {after:?}");
        assert!(
            Connection::open(&endpoint).await.is_err(),
            "nobody listens any more"
        );

        let _peer = Peer::start(&endpoint);
        let again = Connection::open(&endpoint).await.expect("reopen");
        cancel(&again).await.expect("a call on the new connection");
    }
}

//! `tutti-mcp-frontend`: the local Streamable HTTP MCP server named `connector`
//! (SPEC §5), serving both MCP eras (2025-06-18 legacy, 2026-07-28 modern) on
//! `http://127.0.0.1:<port>/mcp/connector`.
//!
//! It follows the kernel's route table (`WatchRoutes`), verifies bearer tokens with the
//! kernel (keeping verified ones in a cache whose revocations the kernel waits for, see
//! `session/sessions.rs`), and sends each `tools/call` straight to the worker that owns
//! the tool's generation. It never decides which generation is live.
#![forbid(unsafe_code)]

mod app;
mod backend;
mod call;
mod catalog;
mod era;
mod error;
mod frames;
mod http;
mod observe;
mod rpc;
mod session;
mod watcher;

use std::future::Future;
use std::net::{Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tutti_rules::{atomic_file, timing};

pub use backend::{Backend, ConfirmVia, Forward, Identity, ResourceUpdates, RouteStream};
pub use error::Error;
pub use session::ids::parse_key as parse_session_id_key;

use app::App;
use watcher::WatchEnd;

/// Default `tools/list` page size.
pub const DEFAULT_PAGE_SIZE: usize = 1000;
/// How long in-flight requests may take to finish once the frontend is stopping
/// ([`timing::FRONTEND_DRAIN`]: longer than the workers drain calls at shutdown, so a call cut
/// off there still gets its `[MCP_UNAVAILABLE]` answer through here).
const DRAIN: Duration = timing::FRONTEND_DRAIN;
/// How long to retry binding a port that is still held (a crashed predecessor).
const BIND_RETRY: Duration = Duration::from_secs(3);

/// What `tutti-mcp-frontend` needs to run.
#[derive(Clone, Debug)]
pub struct Config {
    /// The runtime's state directory; `run/frontend.json` is written below it.
    pub state_dir: PathBuf,
    /// Port on 127.0.0.1; `0` picks a free one.
    pub port: u16,
    /// `tools/list` page size.
    pub page_size: usize,
    /// The kernel's key for `Mcp-Session-Id`s (SPEC §11); `None`: a random one of this process.
    pub session_id_key: Option<[u8; 32]>,
}

impl Config {
    pub fn new(state_dir: PathBuf, port: u16) -> Self {
        Self {
            state_dir,
            port,
            page_size: DEFAULT_PAGE_SIZE,
            session_id_key: None,
        }
    }
}

/// Options of [`serve`].
#[derive(Clone, Debug)]
pub struct ServeOptions {
    pub page_size: usize,
    /// As [`Config::session_id_key`].
    pub session_id_key: Option<[u8; 32]>,
}

impl Default for ServeOptions {
    fn default() -> Self {
        Self {
            page_size: DEFAULT_PAGE_SIZE,
            session_id_key: None,
        }
    }
}

/// Runs the frontend until SIGTERM/SIGINT (Ctrl-C) or the kernel's shutdown event
/// (`Ok`), or until the kernel's route stream is lost for good (`Err`).
pub async fn run(config: Config) -> Result<(), Error> {
    // Every client connection holds a descriptor.
    tutti_os::rlimit::raise_open_files_limit();
    let listener = match inherited_listener()? {
        Some(listener) => listener,
        None => bind(config.port).await?,
    };
    let addr = listener.local_addr().map_err(|source| Error::Bind {
        addr: SocketAddr::from((Ipv4Addr::LOCALHOST, config.port)),
        source,
    })?;
    write_frontend_file(&config.state_dir, addr.port())?;
    tracing::info!(url = %endpoint_url(addr.port()), "MCP frontend listening");
    let backend = Arc::new(backend::GrpcBackend::new(&config.state_dir));
    serve(
        listener,
        backend,
        ServeOptions {
            page_size: config.page_size,
            session_id_key: config.session_id_key,
        },
        shutdown_signal(),
    )
    .await
}

/// Serves the MCP endpoint on `listener` with `backend` until `shutdown` resolves, the
/// backend's route stream announces shutdown (`Ok`), or the route stream is lost (`Err`).
/// On the way out every listen stream ends with its final result and in-flight requests
/// get up to 12 s to finish.
pub async fn serve(
    listener: TcpListener,
    backend: Arc<dyn Backend>,
    options: ServeOptions,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), Error> {
    let session_ids = session::ids::SessionIds::new(options.session_id_key);
    let app = Arc::new(App::new(backend, options.page_size, session_ids));
    let router = axum::Router::new()
        .fallback(http::handle)
        .with_state(app.clone());
    let stopping = app.stopping.subscribe();
    let mut server = tokio::spawn(accept(listener, router, stopping, HEADER_READ_TIMEOUT));
    let mut watcher = tokio::spawn(watcher::run(app.clone()));

    let outcome = tokio::select! {
        () = shutdown => {
            tracing::info!("stop signal received");
            Ok(())
        }
        end = &mut watcher => match end {
            Ok(WatchEnd::Shutdown) => {
                tracing::info!("the runtime is shutting down");
                Ok(())
            }
            Ok(WatchEnd::Lost(e)) => Err(e),
            Err(e) => Err(Error::Task { task: "route watcher", detail: e.to_string() }),
        },
        served = &mut server => {
            return match served {
                Ok(Ok(())) => Ok(()),
                Ok(Err(source)) => Err(Error::Serve { source }),
                Err(e) => Err(Error::Task { task: "http server", detail: e.to_string() }),
            };
        }
    };

    app.stop();
    watcher.abort();
    if tokio::time::timeout(DRAIN, &mut server).await.is_err() {
        tracing::warn!(
            drain_s = DRAIN.as_secs(),
            "in-flight requests did not finish in time; exiting anyway"
        );
        server.abort();
    }
    outcome
}

/// How long a connection may take to send the headers of its next request (hyper's timer;
/// it also ends a keep-alive connection idle that long). A client that opens connections and
/// never completes a request cannot hold the frontend's descriptors: loopback is open to
/// every local user, not only to agents with a token.
const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(30);

/// The most a connection buffers while reading a request (hyper's default is about 400 KiB):
/// headers must fit; a body streams through it.
const CONNECTION_BUFFER_BYTES: usize = 64 * 1024;

/// Accepts connections and serves each with hyper's HTTP/1 server until `stopping` turns
/// true; then stops accepting and waits for the connections to finish their requests (idle
/// ones close at once). The caller bounds that wait.
async fn accept(
    listener: TcpListener,
    router: axum::Router,
    mut stopping: tokio::sync::watch::Receiver<bool>,
    header_read_timeout: Duration,
) -> std::io::Result<()> {
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(hyper_util::rt::TokioTimer::new())
        .header_read_timeout(header_read_timeout)
        .max_buf_size(CONNECTION_BUFFER_BYTES);
    let admission = http::admission::Admission::default();
    let graceful = hyper_util::server::graceful::GracefulShutdown::new();
    let stop = async move {
        // The guard it returns is dropped at once (it is not `Send`).
        let _ = stopping.wait_for(|s| *s).await;
    };
    tokio::pin!(stop);
    let mut errors = AcceptErrors::default();
    loop {
        let (tcp, _) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(conn) => conn,
                // Out of descriptors, a connection reset before it was accepted, …: the
                // listener itself is fine; pause briefly instead of spinning.
                Err(e) => {
                    errors.failed(&e, std::time::Instant::now());
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            _ = &mut stop => break,
        };
        errors.recovered();
        // Over the connection cap: closed at once (dropped), nothing read.
        let Some((slot, proof)) = admission.admit() else {
            continue;
        };
        // Responses are written whole; no Nagle delay on the keep-alive connection.
        if let Err(e) = tcp.set_nodelay(true) {
            tracing::debug!(error = %e, "cannot set TCP_NODELAY");
        }
        // Each request carries its connection's proof, which a valid session token redeems.
        let service = tower::ServiceExt::map_request(
            router.clone(),
            move |mut request: axum::http::Request<hyper::body::Incoming>| {
                request.extensions_mut().insert(proof.clone());
                request
            },
        );
        let service = hyper_util::service::TowerToHyperService::new(service);
        let connection =
            graceful.watch(http.serve_connection(hyper_util::rt::TokioIo::new(tcp), service));
        tokio::spawn(http::admission::serve_within(slot, connection));
        // The new connection's task runs before the next accept: a backlog full of a flood's
        // connections is not accepted in one burst that evicts an agent's connection before
        // its first request was even read.
        tokio::task::yield_now().await;
    }
    drop(listener);
    graceful.shutdown().await;
    Ok(())
}

/// How often a burst of accept errors that goes on is summed up in the log.
const ACCEPT_ERROR_REPORT: Duration = Duration::from_secs(10);

/// Accept errors come in bursts (out of descriptors: every retry fails alike, 20 a second).
/// The first error of a burst is logged; the rest are counted and summed up in one line
/// every [`ACCEPT_ERROR_REPORT`] while the burst lasts and once when it ends.
#[derive(Debug, Default)]
struct AcceptErrors {
    /// When the current burst's last line was written; `None` outside a burst.
    reported: Option<std::time::Instant>,
    /// Errors since that line.
    unreported: u64,
}

/// What [`AcceptErrors`] logs for one event.
#[derive(Debug, PartialEq, Eq)]
enum AcceptLog {
    Nothing,
    First,
    /// This many more errors since the last line.
    More(u64),
}

impl AcceptErrors {
    fn on_error(&mut self, now: std::time::Instant) -> AcceptLog {
        match self.reported {
            None => {
                self.reported = Some(now);
                AcceptLog::First
            }
            Some(at) => {
                self.unreported += 1;
                if now.duration_since(at) < ACCEPT_ERROR_REPORT {
                    return AcceptLog::Nothing;
                }
                self.reported = Some(now);
                AcceptLog::More(std::mem::take(&mut self.unreported))
            }
        }
    }

    fn on_accept(&mut self) -> AcceptLog {
        if self.reported.take().is_none() {
            return AcceptLog::Nothing;
        }
        AcceptLog::More(std::mem::take(&mut self.unreported))
    }

    fn failed(&mut self, error: &std::io::Error, now: std::time::Instant) {
        match self.on_error(now) {
            AcceptLog::Nothing => {}
            AcceptLog::First => tracing::warn!(
                %error,
                "cannot accept a connection (further errors are counted, not logged, until one is accepted)"
            ),
            AcceptLog::More(more) => tracing::warn!(
                more,
                %error,
                "still cannot accept connections"
            ),
        }
    }

    fn recovered(&mut self) {
        if let AcceptLog::More(more) = self.on_accept() {
            tracing::warn!(
                more,
                "accepting connections again after a burst of accept errors"
            );
        }
    }
}

fn endpoint_url(port: u16) -> String {
    format!("http://127.0.0.1:{port}{}", http::ENDPOINT_PATH)
}

/// The listening socket the kernel handed over (Unix: descriptor 3 with `LISTEN_FDS=1`, see
/// ARCHITECTURE.md), if any. The kernel binds the frontend's port once and passes the same
/// socket to every frontend it starts, so the port is never free for another process to take
/// between two frontends. Refused unless it is a TCP listener on a loopback address.
fn inherited_listener() -> Result<Option<TcpListener>, Error> {
    let inherited = imp::inherited_listener().map_err(|source| Error::Inherit { source })?;
    let Some(listener) = inherited else {
        return Ok(None);
    };
    let addr = listener
        .local_addr()
        .map_err(|source| Error::Inherit { source })?;
    if !addr.ip().is_loopback() {
        return Err(Error::Inherit {
            source: std::io::Error::other(format!(
                "the inherited listener is bound to {addr}, not to a loopback address"
            )),
        });
    }
    listener
        .set_nonblocking(true)
        .and_then(|()| TcpListener::from_std(listener))
        .map(Some)
        .map_err(|source| Error::Inherit { source })
}

async fn bind(port: u16) -> Result<TcpListener, Error> {
    let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    let started = tokio::time::Instant::now();
    loop {
        match TcpListener::bind(addr).await {
            Ok(listener) => return Ok(listener),
            Err(e)
                if port != 0
                    && e.kind() == std::io::ErrorKind::AddrInUse
                    && started.elapsed() < BIND_RETRY =>
            {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(source) => return Err(Error::Bind { addr, source }),
        }
    }
}

/// Writes `<state>/run/frontend.json` atomically ([`atomic_file::write`], in the owner-only
/// `run/` directory).
fn write_frontend_file(state_dir: &Path, port: u16) -> Result<(), Error> {
    tutti_proto::transport::run_dir(state_dir)?;
    let path = tutti_rules::state_dir::layout::frontend_json(state_dir);
    let body = serde_json::json!({
        "url": endpoint_url(port),
        "port": port,
        "pid": std::process::id(),
    });
    atomic_file::write(&path, body.to_string().as_bytes(), None)
        .map_err(|source| Error::StateFile { path, source })
}

/// Resolves on SIGTERM or SIGINT (Unix) / Ctrl-C (Windows).
async fn shutdown_signal() {
    imp::shutdown_signal().await;
}

#[cfg(unix)]
mod imp {
    use tokio::signal::unix::{SignalKind, signal};

    pub(super) fn inherited_listener() -> std::io::Result<Option<std::net::TcpListener>> {
        use nix::fcntl::{FcntlArg, FdFlag, fcntl};
        let listener = listenfd::ListenFd::from_env().take_tcp_listener(0)?;
        if let Some(listener) = &listener {
            // Inherited without close-on-exec; nothing we might start gets it.
            fcntl(listener, FcntlArg::F_SETFD(FdFlag::FD_CLOEXEC)).map_err(std::io::Error::from)?;
        }
        Ok(listener)
    }

    pub(super) async fn shutdown_signal() {
        let (term, int) = (
            signal(SignalKind::terminate()),
            signal(SignalKind::interrupt()),
        );
        match (term, int) {
            (Ok(mut term), Ok(mut int)) => {
                tokio::select! {
                    _ = term.recv() => {}
                    _ = int.recv() => {}
                }
            }
            _ => {
                tracing::warn!("cannot install signal handlers; only Ctrl-C stops the frontend");
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
}

#[cfg(windows)]
mod imp {
    /// Windows: the frontend binds its port itself (ARCHITECTURE.md, "The frontend's port").
    pub(super) fn inherited_listener() -> std::io::Result<Option<std::net::TcpListener>> {
        Ok(None)
    }

    pub(super) async fn shutdown_signal() {
        if tokio::signal::ctrl_c().await.is_err() {
            std::future::pending::<()>().await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// A connection that never completes its request headers is closed after the header
    /// timeout; a complete request on another connection is served meanwhile and after.
    #[tokio::test]
    async fn a_connection_that_never_sends_its_headers_is_closed() {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let router = axum::Router::new().fallback(|| async { "ok" });
        let (stop, stopping) = tokio::sync::watch::channel(false);
        let server = tokio::spawn(accept(
            listener,
            router,
            stopping,
            Duration::from_millis(300),
        ));
        let mut slow = tokio::net::TcpStream::connect(addr).await.expect("connect");
        slow.write_all(b"POST /mcp/connector HTTP/1.1\r\nHost: 127.0.0.1\r\n")
            .await
            .expect("partial headers");
        let get = |addr| async move {
            let mut c = tokio::net::TcpStream::connect(addr).await.expect("connect");
            c.write_all(b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
                .await
                .expect("request");
            let mut answer = String::new();
            c.read_to_string(&mut answer).await.expect("answer");
            answer
        };
        assert!(get(addr).await.ends_with("ok"));
        let mut rest = Vec::new();
        let closed = tokio::time::timeout(Duration::from_secs(5), slow.read_to_end(&mut rest))
            .await
            .expect("the slow connection must be closed by the header timeout");
        assert!(closed.is_ok() || rest.is_empty(), "{closed:?}");
        assert!(get(addr).await.ends_with("ok"));
        let _ = stop.send(true);
        tokio::time::timeout(Duration::from_secs(5), server)
            .await
            .expect("the accept loop ends when stopping")
            .expect("task")
            .expect("io");
    }

    #[test]
    fn accept_errors_are_logged_once_per_burst_with_a_count() {
        let t0 = std::time::Instant::now();
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        let mut errors = AcceptErrors::default();
        assert_eq!(errors.on_accept(), AcceptLog::Nothing, "no burst yet");
        assert_eq!(errors.on_error(at(0)), AcceptLog::First);
        for ms in (50..9_950).step_by(50) {
            assert_eq!(errors.on_error(at(ms)), AcceptLog::Nothing);
        }
        assert_eq!(errors.on_error(at(10_000)), AcceptLog::More(199));
        assert_eq!(errors.on_error(at(10_050)), AcceptLog::Nothing);
        assert_eq!(errors.on_accept(), AcceptLog::More(1));
        assert_eq!(errors.on_accept(), AcceptLog::Nothing);
        assert_eq!(errors.on_error(at(20_000)), AcceptLog::First, "a new burst");
    }

    #[test]
    fn frontend_file_is_written_atomically() {
        let dir = std::env::temp_dir().join(format!("tutti-fe-test-{}", std::process::id()));
        write_frontend_file(&dir, 4242).expect("written");
        let text = std::fs::read_to_string(dir.join("run").join("frontend.json")).expect("read");
        let v: serde_json::Value = serde_json::from_str(&text).expect("json");
        assert_eq!(v["url"], "http://127.0.0.1:4242/mcp/connector");
        assert_eq!(v["port"], 4242);
        assert_eq!(v["pid"], std::process::id());
        let leftovers = std::fs::read_dir(dir.join("run"))
            .expect("dir")
            .filter_map(Result::ok)
            .filter(|e| e.file_name().to_string_lossy().contains(".tmp-"))
            .count();
        assert_eq!(leftovers, 0);
        let _ = std::fs::remove_dir_all(&dir);
    }
}

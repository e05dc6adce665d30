//! `tutti-floor-front --stack tokio`: the floor's front on the runtime's stack, built as the
//! runtime's frontend is: a current-thread tokio runtime, hyper's HTTP/1 server (with the same
//! header read timer) serving an axum `Router`, `POST /mcp` taking the body as `Bytes`. Per
//! request it does the JSON work the runtime cannot skip ([`route_json`]: parse, read the
//! method and tool name, strip the `<key>_` prefix, serialize again), sends one frame to the
//! worker over a pooled tokio `UnixStream` (one call per connection at a time, as the runtime's
//! frame pool) and answers with the worker's answer frame as the body. Nothing else: no
//! token, no session, no answer parsing. What the runtime spends beyond this is its own code.

use std::io;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{Context, Result};
use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::net::{TcpListener, UnixStream};
use tutti_tests::floor::{VERIFY, canned_result, read_frame_async, route_json, write_frame_async};

use crate::args::Args;

/// Idle connections kept per socket (the runtime's frame pool keeps 8 per worker).
const IDLE: usize = 8;

/// The runtime frontend's header read timeout (it also ends idle keep-alive connections).
const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(30);

pub fn main(args: Args) -> Result<()> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?
        .block_on(serve(args))
}

/// Idle frame connections to one Unix socket.
struct Pool {
    path: PathBuf,
    idle: Mutex<Vec<UnixStream>>,
}

impl Pool {
    fn new(path: PathBuf) -> Pool {
        Pool {
            path,
            idle: Mutex::new(Vec::new()),
        }
    }

    /// One frame out, one back (appended to `answer`), on an idle connection or a new one.
    /// The connection goes back to the pool only after a whole answer.
    async fn round_trip(&self, msg: &[u8], answer: &mut Vec<u8>) -> io::Result<()> {
        let pooled = self.lock().pop();
        let mut conn = match pooled {
            Some(conn) => conn,
            None => UnixStream::connect(&self.path).await?,
        };
        write_frame_async(&mut conn, msg).await?;
        if !read_frame_async(&mut conn, answer).await? {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                format!("{} closed the connection mid-call", self.path.display()),
            ));
        }
        let mut idle = self.lock();
        if idle.len() < IDLE {
            idle.push(conn);
        }
        Ok(())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<UnixStream>> {
        // A poisoned pool only ever holds connections; keep using it.
        self.idle.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// What every request needs: the connector key and the pools (none with `--trivial`).
struct Front {
    key: String,
    worker: Option<Pool>,
    verifier: Option<Pool>,
}

async fn serve(args: Args) -> Result<()> {
    let listener = TcpListener::bind(&args.listen)
        .await
        .with_context(|| format!("binding {}", args.listen))?;
    let front = Front {
        key: args.key,
        worker: args.worker.filter(|_| !args.trivial).map(Pool::new),
        verifier: args.verifier.map(Pool::new),
    };
    let router = Router::new()
        .route("/mcp", post(mcp))
        .with_state(Arc::new(front));
    println!("listening on http://{}/mcp", listener.local_addr()?);
    std::io::Write::flush(&mut std::io::stdout())?;
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(HEADER_READ_TIMEOUT);
    loop {
        let (tcp, _) = match listener.accept().await {
            Ok(conn) => conn,
            Err(e) => {
                eprintln!("tutti-floor-front: accept failed: {e}");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        // Responses are written whole; no Nagle delay (as the runtime's frontend).
        let _ = tcp.set_nodelay(true);
        let service = TowerToHyperService::new(router.clone());
        let connection = http.serve_connection(TokioIo::new(tcp), service);
        tokio::spawn(async move {
            if let Err(e) = connection.await {
                eprintln!("tutti-floor-front: connection ended: {e}");
            }
        });
    }
}

/// `POST /mcp`: the worker's answer as a JSON body; `400` for a request that cannot be
/// routed, `502` when the worker or verifier fails.
async fn mcp(State(front): State<Arc<Front>>, body: Bytes) -> Response {
    match answer(&front, &body).await {
        Ok(json) => ([(header::CONTENT_TYPE, "application/json")], json).into_response(),
        Err(e) if e.kind() == io::ErrorKind::InvalidData => {
            (StatusCode::BAD_REQUEST, e.to_string()).into_response()
        }
        Err(e) => (StatusCode::BAD_GATEWAY, e.to_string()).into_response(),
    }
}

async fn answer(front: &Front, body: &[u8]) -> io::Result<Vec<u8>> {
    let Some(worker) = &front.worker else {
        return Ok(canned_result(body));
    };
    if let Some(verifier) = &front.verifier {
        let mut verdict = Vec::new();
        verifier.round_trip(VERIFY, &mut verdict).await?;
    }
    let msg = route_json(body, &front.key)?;
    let mut reply = Vec::new();
    worker.round_trip(&msg, &mut reply).await?;
    Ok(reply)
}

//! The bridge's HTTP/1.1 connections to the frontend: hyper's client connection on loopback
//! TCP, kept open and used again for the next message. No pool machinery beyond a list of
//! idle connections: a message takes one (or opens one) and gives it back once its answer was
//! read to the end; an event stream holds its connection while it runs.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use hyper::body::Incoming;
use hyper::client::conn::http1::{self, SendRequest};
use hyper::header::{HOST, HeaderValue};
use hyper::{HeaderMap, Method, Request, Response, Uri};
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;

const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// Why a request got no answer.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Failure {
    /// It never left: no frontend took the connection, or the connection gave it back unsent.
    Unsent,
    /// The connection broke after the request went out: the frontend may have acted on it.
    Cut,
}

/// Where a request goes: the frontend's `host:port` and path, from the `http://` URL the
/// kernel hands out with a token.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Endpoint {
    authority: String,
    host: HeaderValue,
    path: Uri,
}

impl Endpoint {
    /// The endpoint of an `http://host:port/path` URL; `None` for anything else.
    pub(super) fn of(url: &str) -> Option<Endpoint> {
        let uri: Uri = url.parse().ok()?;
        let authority = match (uri.scheme_str(), uri.authority()) {
            (Some("http"), Some(authority)) => authority.as_str().to_owned(),
            _ => return None,
        };
        let path = uri
            .path_and_query()
            .map_or("/", |p| p.as_str())
            .parse()
            .ok()?;
        Some(Endpoint {
            host: HeaderValue::from_str(&authority).ok()?,
            authority,
            path,
        })
    }
}

type Idle = Arc<Mutex<Vec<(String, SendRequest<String>)>>>;

/// The idle connections, each with the `host:port` it is connected to.
#[derive(Clone, Default)]
pub(super) struct Connections {
    idle: Idle,
}

/// An answer's head (its body streams from it) and the connection it came on.
pub(super) struct Answer {
    pub(super) response: Response<Incoming>,
    lease: Lease,
}

impl Answer {
    /// Takes the answer apart: its body was read to the end when the lease is given back.
    pub(super) fn into_parts(self) -> (Response<Incoming>, Lease) {
        (self.response, self.lease)
    }
}

/// A connection in use. Dropped, it closes; [`Lease::reuse`] keeps it for the next message.
pub(super) struct Lease {
    idle: Idle,
    authority: String,
    sender: SendRequest<String>,
}

impl Lease {
    /// The answer was read to its end: the connection can carry the next message.
    pub(super) fn reuse(self) {
        if let Ok(mut idle) = self.idle.lock() {
            idle.push((self.authority, self.sender));
        }
    }
}

impl Connections {
    /// Sends one request on a kept connection to `endpoint`, or on a new one.
    pub(super) async fn send(
        &self,
        endpoint: &Endpoint,
        method: Method,
        mut headers: HeaderMap,
        body: String,
    ) -> Result<Answer, Failure> {
        headers.insert(HOST, endpoint.host.clone());
        let mut request = Request::new(body);
        *request.method_mut() = method;
        *request.uri_mut() = endpoint.path.clone();
        *request.headers_mut() = headers;
        // A kept connection the frontend closed meanwhile gives the request back unsent: it
        // goes out on the next one, or on a new connection.
        while let Some(sender) = self.take_idle(&endpoint.authority).await {
            match self.try_on(sender, &endpoint.authority, request).await {
                Ok(answer) => return Ok(answer),
                Err(Some(unsent)) => request = unsent,
                Err(None) => return Err(Failure::Cut),
            }
        }
        let sender = connect(&endpoint.authority).await?;
        match self.try_on(sender, &endpoint.authority, request).await {
            Ok(answer) => Ok(answer),
            Err(Some(_)) => Err(Failure::Unsent),
            Err(None) => Err(Failure::Cut),
        }
    }

    /// The request on one connection; `Err(Some(request))` when it was not sent.
    async fn try_on(
        &self,
        mut sender: SendRequest<String>,
        authority: &str,
        request: Request<String>,
    ) -> Result<Answer, Option<Request<String>>> {
        match sender.try_send_request(request).await {
            Ok(response) => Ok(Answer {
                response,
                lease: Lease {
                    idle: self.idle.clone(),
                    authority: authority.to_owned(),
                    sender,
                },
            }),
            Err(mut failed) => Err(failed.take_message()),
        }
    }

    /// The most recently used idle connection to `authority` that is still open.
    async fn take_idle(&self, authority: &str) -> Option<SendRequest<String>> {
        let kept =
            |idle: &Vec<(String, SendRequest<String>)>| idle.iter().any(|(a, _)| a == authority);
        if !self.idle.lock().is_ok_and(|idle| kept(&idle)) {
            return None;
        }
        // Until the runtime's I/O driver has run, a connection whose frontend died a moment
        // ago (its end already on the socket) still looks open, and a request sent on it is
        // cut off unread: a `tools/call` would be answered as lost though it never left. The
        // yield lets each connection's task see its end first. It narrows the window, it does
        // not close it (an end that arrives after the yield is still a lost call), and it costs
        // one pass of the scheduler per reused connection, not measured.
        tokio::task::yield_now().await;
        loop {
            let mut sender = {
                let mut idle = self.idle.lock().ok()?;
                let at = idle.iter().rposition(|(a, _)| a == authority)?;
                idle.swap_remove(at).1
            };
            // Given back after its answer's end: ready at once, unless it closed since.
            if !sender.is_closed() && sender.ready().await.is_ok() {
                return Some(sender);
            }
        }
    }
}

/// A new connection to `authority`, its I/O driven by a task of its own.
async fn connect(authority: &str) -> Result<SendRequest<String>, Failure> {
    let tcp = tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(authority))
        .await
        .map_err(|_| Failure::Unsent)?
        .map_err(|_| Failure::Unsent)?;
    // A message leaves in one write: no Nagle delay on the kept connection.
    if let Err(e) = tcp.set_nodelay(true) {
        tracing::debug!(error = %e, "cannot set TCP_NODELAY");
    }
    let (sender, connection) = http1::handshake(TokioIo::new(tcp))
        .await
        .map_err(|_| Failure::Unsent)?;
    tokio::spawn(async move {
        if let Err(e) = connection.await {
            tracing::debug!(error = %e, "a connection to the frontend ended");
        }
    });
    Ok(sender)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_http_url_gives_its_authority_and_path_and_others_are_refused() {
        let endpoint = Endpoint::of("http://127.0.0.1:4711/mcp/connector");
        assert_eq!(
            endpoint
                .as_ref()
                .map(|e| (e.authority.as_str(), e.path.to_string())),
            Some(("127.0.0.1:4711", "/mcp/connector".to_owned()))
        );
        assert_eq!(
            endpoint.map(|e| e.host),
            Some(HeaderValue::from_static("127.0.0.1:4711"))
        );
        assert!(Endpoint::of("https://127.0.0.1:4711/mcp").is_none());
        assert!(Endpoint::of("/mcp/connector").is_none());
    }

    /// A frontend stand-in on a real socket: one connection after the other, each serving
    /// its number of requests and then closed; then it stops listening.
    async fn stand_in(listener: tokio::net::TcpListener, per_connection: &[usize]) {
        use tokio::io::{AsyncBufReadExt as _, AsyncWriteExt as _, BufReader};
        for &requests in per_connection {
            let Ok((tcp, _)) = listener.accept().await else {
                return;
            };
            let mut tcp = BufReader::new(tcp);
            for _ in 0..requests {
                let mut line = String::new();
                while line != "\r\n" {
                    line.clear();
                    if tcp.read_line(&mut line).await.map_or(true, |n| n == 0) {
                        return;
                    }
                }
                let answer = "HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n{}";
                if tcp.get_mut().write_all(answer.as_bytes()).await.is_err() {
                    return;
                }
            }
        }
    }

    async fn post(connections: &Connections, endpoint: &Endpoint) -> Result<String, Failure> {
        use http_body_util::BodyExt as _;
        let answer = connections
            .send(endpoint, Method::POST, HeaderMap::new(), "{}".into())
            .await?;
        let (response, lease) = answer.into_parts();
        let body = response
            .into_body()
            .collect()
            .await
            .map_err(|_| Failure::Cut)?;
        lease.reuse();
        Ok(String::from_utf8_lossy(&body.to_bytes()).into_owned())
    }

    #[tokio::test]
    async fn a_read_answer_keeps_its_connection_a_closed_one_is_replaced_and_none_is_unsent() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await;
        let listener = listener.unwrap_or_else(|e| panic!("bind: {e}"));
        let address = listener.local_addr().unwrap_or_else(|e| panic!("{e}"));
        let Some(endpoint) = Endpoint::of(&format!("http://{address}/mcp")) else {
            panic!("{address}")
        };
        let server = tokio::spawn(async move { stand_in(listener, &[2, 1]).await });
        let connections = Connections::default();
        // A second message on a new connection would wait forever: the stand-in reads the
        // first connection until its second request.
        let within = |what| tokio::time::timeout(Duration::from_secs(10), what);
        for _ in 0..2 {
            let answer = within(post(&connections, &endpoint)).await;
            assert_eq!(answer, Ok(Ok("{}".to_owned())), "on the kept connection");
        }
        // The first connection closes now; once that is seen, a new one carries the message.
        let settle = || tokio::time::sleep(Duration::from_millis(100));
        settle().await;
        let answer = within(post(&connections, &endpoint)).await;
        assert_eq!(answer, Ok(Ok("{}".to_owned())), "on a new connection");
        assert!(server.await.is_ok());
        settle().await;
        assert_eq!(post(&connections, &endpoint).await, Err(Failure::Unsent));
    }
}

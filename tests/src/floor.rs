//! The architectural floor of `tutti-bench`: the leanest chain with the runtime's
//! process layout, built only for the benchmark.
//!
//! ```text
//! client ──HTTP/1.1──► tutti-floor-front ──UDS, length-prefixed frames──► tutti-floor-worker
//!        ──stdio (JSON-RPC lines)──► the upstream, and back
//! ```
//!
//! Blocking I/O, a thread per connection, no JSON parsing beyond what routing needs (the
//! front strips the connector's `<key>_` prefix from the tool name with a byte search; the
//! worker passes lines through). Its latency and CPU per call are what any implementation of
//! the design (a frontend process, an isolated worker process, a stdio upstream) can reach on
//! the machine it runs on; the runtime is reported as a ratio to it.
//!
//! Frame: a 4-byte big-endian length, then that many bytes (one JSON-RPC message).
//!
//! Not a product: no authentication, no validation, one call at a time per upstream. Unix
//! only (Unix sockets); the binaries say so elsewhere.
//!
//! `--stack tokio` (both binaries) is the same chain on the runtime's own stack: current-thread
//! tokio runtimes, axum/hyper for HTTP, the request parsed and serialized again with
//! serde_json ([`route_json`]), tokio sockets and pipes ([`write_frame_async`],
//! [`read_frame_async`]). The runtime against it is the cost of our code; it against the
//! blocking floor is the cost of the stack the design fixes.

use std::io::{self, BufRead, Read, Write};

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

/// Largest frame either side accepts (the bench's largest result is 1 MiB of text).
pub const MAX_FRAME: usize = 64 << 20;

/// Which I/O stack the floor's binaries run on (`--stack`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Stack {
    /// Blocking I/O, a thread per connection, no JSON parsing beyond routing.
    Blocking,
    /// Current-thread tokio runtimes, axum/hyper, serde_json: the runtime's stack.
    Tokio,
}

impl Stack {
    /// The `--stack` value that selects it.
    pub fn arg(self) -> &'static str {
        match self {
            Stack::Blocking => "blocking",
            Stack::Tokio => "tokio",
        }
    }
}

/// The worker's `initialize` request to its upstream (one line).
pub const INITIALIZE: &[u8] = b"{\"jsonrpc\":\"2.0\",\"id\":0,\"method\":\"initialize\",\"params\":{\"protocolVersion\":\"2025-06-18\",\"capabilities\":{},\"clientInfo\":{\"name\":\"tutti-floor\",\"version\":\"1\"}}}\n";

/// The notification that follows the upstream's answer to [`INITIALIZE`] (one line).
pub const INITIALIZED: &[u8] = b"{\"jsonrpc\":\"2.0\",\"method\":\"notifications/initialized\"}\n";

/// What a verification frame carries: a stand-in for a session token of the runtime's size.
pub const VERIFY: &[u8] = b"tutti_s1_0123456789abcdef0123456789abcdef0123456789abcdef";

/// Writes `msg` as one frame with one `write` (length and body in one buffer).
pub fn write_frame(w: &mut impl Write, msg: &[u8]) -> io::Result<()> {
    let mut buf = Vec::with_capacity(4 + msg.len());
    buf.extend_from_slice(&frame_len(msg.len())?.to_be_bytes());
    buf.extend_from_slice(msg);
    w.write_all(&buf)
}

/// A frame's length prefix; too large a message is an error, not a truncated prefix.
pub fn frame_len(n: usize) -> io::Result<u32> {
    if n > MAX_FRAME {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("message of {n} bytes exceeds the floor's {MAX_FRAME}-byte frame limit"),
        ));
    }
    u32::try_from(n).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))
}

/// Reads a frame's length prefix; `None` at a clean end of stream.
pub fn read_frame_len(r: &mut impl Read) -> io::Result<Option<usize>> {
    let mut len = [0u8; 4];
    match r.read_exact(&mut len) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(e) => return Err(e),
    }
    checked_len(len).map(Some)
}

/// A received length prefix, refused above [`MAX_FRAME`].
fn checked_len(prefix: [u8; 4]) -> io::Result<usize> {
    let n = u32::from_be_bytes(prefix) as usize;
    if n > MAX_FRAME {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("frame of {n} bytes exceeds the floor's {MAX_FRAME}-byte limit"),
        ));
    }
    Ok(n)
}

/// Appends one frame's body to `buf`; returns `false` at a clean end of stream.
pub fn read_frame_into(r: &mut impl Read, buf: &mut Vec<u8>) -> io::Result<bool> {
    let Some(n) = read_frame_len(r)? else {
        return Ok(false);
    };
    let start = buf.len();
    buf.resize(start + n, 0);
    r.read_exact(&mut buf[start..])?;
    Ok(true)
}

/// [`write_frame`] on a tokio stream: one `write` of length and body.
pub async fn write_frame_async(w: &mut (impl AsyncWrite + Unpin), msg: &[u8]) -> io::Result<()> {
    let mut buf = Vec::with_capacity(4 + msg.len());
    buf.extend_from_slice(&frame_len(msg.len())?.to_be_bytes());
    buf.extend_from_slice(msg);
    w.write_all(&buf).await
}

/// [`read_frame_into`] on a tokio stream: appends one frame's body to `buf`; `false` at a
/// clean end of stream.
pub async fn read_frame_async(
    r: &mut (impl AsyncRead + Unpin),
    buf: &mut Vec<u8>,
) -> io::Result<bool> {
    let mut prefix = [0u8; 4];
    match r.read_exact(&mut prefix).await {
        Ok(_) => {}
        Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(false),
        Err(e) => return Err(e),
    }
    let n = checked_len(prefix)?;
    let start = buf.len();
    buf.resize(start + n, 0);
    r.read_exact(&mut buf[start..]).await?;
    Ok(true)
}

/// One HTTP/1.1 request's body (Content-Length only); `None` when the client closed the
/// connection between requests.
pub fn read_http_body(r: &mut impl BufRead, line: &mut String) -> io::Result<Option<Vec<u8>>> {
    line.clear();
    if r.read_line(line)? == 0 {
        return Ok(None);
    }
    let mut length = None;
    loop {
        line.clear();
        if r.read_line(line)? == 0 {
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
        let l = line.trim_end();
        if l.is_empty() {
            break;
        }
        if let Some((name, value)) = l.split_once(':')
            && name.eq_ignore_ascii_case("content-length")
        {
            length = value.trim().parse::<usize>().ok();
        }
    }
    let n = length.ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::InvalidData,
            "the floor needs a Content-Length body",
        )
    })?;
    if n > MAX_FRAME {
        return Err(io::Error::new(io::ErrorKind::InvalidData, "body too large"));
    }
    let mut body = vec![0; n];
    r.read_exact(&mut body)?;
    Ok(Some(body))
}

/// The head of a `200 OK` JSON answer of `len` bytes.
pub fn http_ok_head(len: usize) -> String {
    format!("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {len}\r\n\r\n")
}

/// Routing: `"name":"<key>_tool"` becomes `"name":"tool"` (the first `"name":"` of the
/// message, which for the bench's `tools/call` is the tool's). Messages without it pass as is.
pub fn strip_tool_prefix(body: &mut Vec<u8>, key: &str) {
    const NAME: &[u8] = b"\"name\":\"";
    let Some(at) = find(body, NAME) else {
        return;
    };
    let start = at + NAME.len();
    let prefix_len = key.len() + 1;
    if body.len() >= start + prefix_len
        && &body[start..start + key.len()] == key.as_bytes()
        && body[start + key.len()] == b'_'
    {
        body.drain(start..start + prefix_len);
    }
}

/// Routing on the runtime's stack: the JSON work the runtime cannot skip on a request, and no
/// more. The body is parsed into a [`serde_json::Value`], its `method` read (it must be a
/// string), for `tools/call` its `params.name` (a string) loses the connector's `<key>_`
/// prefix, and the message is serialized again. Invalid JSON or a missing method or tool name
/// is an `InvalidData` error (the front answers `400`).
pub fn route_json(body: &[u8], key: &str) -> io::Result<Vec<u8>> {
    let invalid = |what: String| io::Error::new(io::ErrorKind::InvalidData, what);
    let mut msg: serde_json::Value =
        serde_json::from_slice(body).map_err(|e| invalid(format!("not JSON: {e}")))?;
    let method = msg.get("method").and_then(serde_json::Value::as_str);
    let is_call = method.ok_or_else(|| invalid("no method".into()))? == "tools/call";
    if is_call {
        let name = msg
            .pointer_mut("/params/name")
            .filter(|n| n.is_string())
            .ok_or_else(|| invalid("tools/call without params.name".into()))?;
        let tool = name
            .as_str()
            .and_then(|n| n.strip_prefix(key))
            .and_then(|n| n.strip_prefix('_'))
            .map(str::to_owned);
        if let Some(tool) = tool {
            *name = serde_json::Value::String(tool);
        }
    }
    serde_json::to_vec(&msg).map_err(|e| invalid(e.to_string()))
}

/// The trivial server's answer to `body`: a canned `tools/call` result with the request's id,
/// as a whole HTTP response (head and body).
pub fn canned_response(body: &[u8]) -> Vec<u8> {
    let json = canned_result(body);
    let mut reply = http_ok_head(json.len()).into_bytes();
    reply.extend_from_slice(&json);
    reply
}

/// The JSON of [`canned_response`].
pub fn canned_result(body: &[u8]) -> Vec<u8> {
    let mut json = Vec::with_capacity(96);
    json.extend_from_slice(b"{\"jsonrpc\":\"2.0\",\"id\":");
    json.extend_from_slice(request_id(body));
    json.extend_from_slice(b",\"result\":{\"content\":[{\"type\":\"text\",\"text\":\"x\"}]}}");
    json
}

/// The bytes of the JSON-RPC id (`"id":<value>`, up to the next `,` or `}`), for the trivial
/// server's canned answer; `null` when there is none.
pub fn request_id(body: &[u8]) -> &[u8] {
    const ID: &[u8] = b"\"id\":";
    let Some(at) = find(body, ID) else {
        return b"null";
    };
    let rest = &body[at + ID.len()..];
    let end = rest
        .iter()
        .position(|&b| b == b',' || b == b'}')
        .unwrap_or(rest.len());
    &rest[..end]
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_round_trip_and_end_cleanly() -> io::Result<()> {
        let mut wire = Vec::new();
        write_frame(&mut wire, b"{\"a\":1}")?;
        write_frame(&mut wire, b"")?;
        let mut r = &wire[..];
        let mut buf = Vec::new();
        assert!(read_frame_into(&mut r, &mut buf)?);
        assert_eq!(buf, b"{\"a\":1}");
        buf.clear();
        assert!(read_frame_into(&mut r, &mut buf)?);
        assert!(buf.is_empty());
        assert!(!read_frame_into(&mut r, &mut buf)?);
        Ok(())
    }

    #[test]
    fn an_oversized_frame_is_refused() {
        let wire = ((MAX_FRAME + 1) as u32).to_be_bytes();
        assert!(read_frame_len(&mut &wire[..]).is_err());
        assert!(frame_len(MAX_FRAME + 1).is_err());
    }

    #[test]
    fn routing_strips_only_the_connector_prefix() {
        let mut b = br#"{"id":7,"method":"tools/call","params":{"name":"bench_echo"}}"#.to_vec();
        strip_tool_prefix(&mut b, "bench");
        assert_eq!(
            b,
            br#"{"id":7,"method":"tools/call","params":{"name":"echo"}}"#
        );
        let mut other = br#"{"params":{"name":"benchmark"}}"#.to_vec();
        strip_tool_prefix(&mut other, "bench");
        assert_eq!(other, br#"{"params":{"name":"benchmark"}}"#);
        assert_eq!(request_id(br#"{"jsonrpc":"2.0","id":42,"x":1}"#), b"42");
        assert_eq!(request_id(br#"{"jsonrpc":"2.0"}"#), b"null");
    }

    #[test]
    fn json_routing_strips_the_prefix_and_refuses_what_it_cannot_route() -> io::Result<()> {
        let call = br#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"bench_echo","arguments":{"message":"x"}}}"#;
        let routed: serde_json::Value = serde_json::from_slice(&route_json(call, "bench")?)?;
        assert_eq!(routed["params"]["name"], "echo");
        assert_eq!(routed["params"]["arguments"]["message"], "x");
        assert_eq!(routed["id"], 7);
        let other =
            br#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"benchmark"}}"#;
        let routed: serde_json::Value = serde_json::from_slice(&route_json(other, "bench")?)?;
        assert_eq!(routed["params"]["name"], "benchmark");
        let list = br#"{"jsonrpc":"2.0","id":2,"method":"tools/list"}"#;
        assert!(route_json(list, "bench").is_ok());
        for bad in [
            &b"{"[..],
            br#"{"id":1}"#,
            br#"{"id":1,"method":"tools/call","params":{}}"#,
            br#"{"id":1,"method":"tools/call","params":{"name":3}}"#,
        ] {
            let e = route_json(bad, "bench").err();
            assert_eq!(e.map(|e| e.kind()), Some(io::ErrorKind::InvalidData));
        }
        Ok(())
    }

    #[tokio::test(flavor = "current_thread")]
    async fn async_frames_round_trip_and_end_cleanly() -> io::Result<()> {
        let (mut a, mut b) = tokio::io::duplex(1024);
        write_frame_async(&mut a, b"{\"a\":1}").await?;
        write_frame_async(&mut a, b"").await?;
        a.write_all(&((MAX_FRAME + 1) as u32).to_be_bytes()).await?;
        drop(a);
        let mut buf = Vec::new();
        assert!(read_frame_async(&mut b, &mut buf).await?);
        assert_eq!(buf, b"{\"a\":1}");
        buf.clear();
        assert!(read_frame_async(&mut b, &mut buf).await?);
        assert!(buf.is_empty());
        assert!(read_frame_async(&mut b, &mut buf).await.is_err());
        let (a, mut b) = tokio::io::duplex(16);
        drop(a);
        assert!(!read_frame_async(&mut b, &mut buf).await?);
        Ok(())
    }

    #[test]
    fn an_http_request_body_is_read_by_its_length() -> io::Result<()> {
        let req = b"POST /mcp HTTP/1.1\r\nHost: x\r\ncontent-length: 2\r\n\r\n{}POST";
        let mut r = io::BufReader::new(&req[..]);
        let mut line = String::new();
        assert_eq!(
            read_http_body(&mut r, &mut line)?.as_deref(),
            Some(&b"{}"[..])
        );
        let mut empty = io::BufReader::new(&b""[..]);
        assert!(read_http_body(&mut empty, &mut line)?.is_none());
        Ok(())
    }
}

//! The architectural floor of `tutti-bench` (issue 26): the leanest chain with the runtime's
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

use std::io::{self, BufRead, Read, Write};

/// Largest frame either side accepts (the bench's largest result is 1 MiB of text).
pub const MAX_FRAME: usize = 64 << 20;

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
    let n = u32::from_be_bytes(len) as usize;
    if n > MAX_FRAME {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("frame of {n} bytes exceeds the floor's {MAX_FRAME}-byte limit"),
        ));
    }
    Ok(Some(n))
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

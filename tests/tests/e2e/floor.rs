//! The benchmark's architectural floor (`tutti-floor-front` + `tutti-floor-worker`)
//! on both its stacks: the blocking one and the runtime's (`--stack tokio`). Each must carry a
//! `tools/call` to the fixture upstream and back with the connector prefix stripped, on one
//! keep-alive connection, with and without the token check hop; the tokio front refuses a
//! request it cannot route. The bench's rows are only meaningful if these hold.
#![cfg(unix)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::Value;
use tutti_tests::{bin, fixture_bin};

/// A child killed and reaped when dropped.
struct Proc(Child);

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts `name ARGS` and returns it with its first stdout line.
fn start(name: &str, args: &[&str]) -> (Proc, String) {
    let mut child = Command::new(bin(name))
        .args(args)
        .stdout(Stdio::piped())
        .spawn()
        .expect("start");
    let mut line = String::new();
    BufReader::new(child.stdout.take().expect("stdout"))
        .read_line(&mut line)
        .expect("first line");
    (Proc(child), line.trim_end().to_owned())
}

/// The worker serving `socket` on `stack` (`extra`: `--verifier`, or the upstream).
fn worker(stack: &str, socket: &Path, extra: &[&str]) -> Proc {
    let socket = socket.to_str().expect("utf-8 path");
    let mut args = vec!["--stack", stack, "--socket", socket];
    args.extend(extra);
    let (proc, line) = start("tutti-floor-worker", &args);
    assert_eq!(line, "ready", "tutti-floor-worker --stack {stack}");
    proc
}

/// The front on `stack` with `args`; returns it and its `host:port`.
fn front(stack: &str, args: &[&str]) -> (Proc, String) {
    let mut all = vec!["--stack", stack];
    all.extend(args);
    let (proc, line) = start("tutti-floor-front", &all);
    let authority = line
        .strip_prefix("listening on http://")
        .and_then(|l| l.strip_suffix("/mcp"))
        .unwrap_or_else(|| panic!("unexpected first line {line:?}"))
        .to_owned();
    (proc, authority)
}

/// One keep-alive HTTP/1.1 connection.
struct Conn {
    out: TcpStream,
    reader: BufReader<TcpStream>,
    authority: String,
}

impl Conn {
    fn open(authority: &str) -> Conn {
        let stream = TcpStream::connect(authority).expect("connect");
        stream
            .set_read_timeout(Some(Duration::from_secs(20)))
            .expect("timeout");
        Conn {
            out: stream.try_clone().expect("clone"),
            reader: BufReader::new(stream),
            authority: authority.to_owned(),
        }
    }

    /// POSTs `body` to `/mcp`; the status, the content type and the body.
    fn post(&mut self, body: &str) -> (u16, String, Vec<u8>) {
        write!(
            self.out,
            "POST /mcp HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
            self.authority,
            body.len()
        )
        .expect("send");
        let mut line = String::new();
        self.reader.read_line(&mut line).expect("status line");
        let status = line
            .split_whitespace()
            .nth(1)
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| panic!("bad status line {line:?}"));
        let (mut length, mut content_type) = (0, String::new());
        loop {
            line.clear();
            self.reader.read_line(&mut line).expect("header");
            let l = line.trim_end();
            if l.is_empty() {
                break;
            }
            let (name, value) = l.split_once(':').expect("header line");
            if name.eq_ignore_ascii_case("content-length") {
                length = value.trim().parse().expect("length");
            } else if name.eq_ignore_ascii_case("content-type") {
                content_type = value.trim().to_owned();
            }
        }
        let mut body = vec![0; length];
        self.reader.read_exact(&mut body).expect("body");
        (status, content_type, body)
    }
}

fn echo_call(id: u64, message: &str) -> String {
    format!(
        r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"bench_echo","arguments":{{"message":"{message}"}}}}}}"#
    )
}

/// Two calls on one connection come back as the fixture's echo results, with their ids.
fn assert_echoes(authority: &str, what: &str) {
    let mut conn = Conn::open(authority);
    for (id, message) in [(7, "floor-one"), (8, "floor-two")] {
        let (status, content_type, body) = conn.post(&echo_call(id, message));
        let text = String::from_utf8_lossy(&body);
        assert_eq!(status, 200, "{what}: {text}");
        assert_eq!(content_type, "application/json", "{what}");
        let answer: Value = serde_json::from_slice(&body).expect("a JSON answer");
        assert_eq!(answer["id"], id, "{what}: {text}");
        assert!(answer.get("error").is_none(), "{what}: {text}");
        assert!(
            answer["result"].to_string().contains(message),
            "{what}: the echo of {message} in {text}"
        );
    }
}

#[test]
fn both_stacks_carry_a_call_to_the_upstream_and_back() {
    let fixture = fixture_bin();
    let fixture = fixture.to_str().expect("utf-8 path");
    for stack in ["blocking", "tokio"] {
        let dir = tempfile::tempdir().expect("tempdir");
        let socket = dir.path().join("floor.sock");
        let verify = dir.path().join("verify.sock");
        let _worker = worker(stack, &socket, &["--", fixture, "--tools", "echo,big"]);
        let _verifier = worker(stack, &verify, &["--verifier"]);
        let socket = socket.to_str().expect("utf-8 path");
        let (_front, authority) = front(stack, &["--worker", socket]);
        assert_echoes(&authority, stack);
        let verify = verify.to_str().expect("utf-8 path");
        let (_checked, authority) = front(stack, &["--worker", socket, "--verifier", verify]);
        assert_echoes(&authority, &format!("{stack} with the check hop"));
    }
}

#[test]
fn the_trivial_server_answers_on_both_stacks() {
    for stack in ["blocking", "tokio"] {
        let (_front, authority) = front(stack, &["--trivial"]);
        let (status, content_type, body) = Conn::open(&authority).post(&echo_call(42, "x"));
        assert_eq!((status, content_type.as_str()), (200, "application/json"));
        let answer: Value = serde_json::from_slice(&body).expect("a JSON answer");
        assert_eq!(answer["id"], 42, "{stack}");
        assert!(answer["result"]["content"].is_array(), "{stack}");
    }
}

#[test]
fn the_tokio_front_refuses_what_it_cannot_route() {
    let dir = tempfile::tempdir().expect("tempdir");
    let socket = dir.path().join("floor.sock");
    let fixture = fixture_bin();
    let fixture = fixture.to_str().expect("utf-8 path");
    let _worker = worker("tokio", &socket, &["--", fixture, "--tools", "echo"]);
    let socket = socket.to_str().expect("utf-8 path");
    let (_front, authority) = front("tokio", &["--worker", socket]);
    let mut conn = Conn::open(&authority);
    for bad in [
        "{",
        r#"{"jsonrpc":"2.0","id":1}"#,
        r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{}}"#,
    ] {
        assert_eq!(conn.post(bad).0, 400, "{bad}");
    }
    // The connection and the worker still serve a good call after them.
    let (status, _, body) = conn.post(&echo_call(3, "after"));
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
}

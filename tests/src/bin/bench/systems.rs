//! The systems `tutti-bench` compares the runtime with, started as processes:
//! the architectural floor (`tutti-floor-front` + `tutti-floor-worker`, see
//! `tutti_tests::floor`) on its blocking stack and on the runtime's (`--stack tokio`), a
//! trivial HTTP server (`tutti-floor-front --trivial`), and mcp-hub
//! 4.2.1 (the best peer; Node, HTTP+SSE transport) with a minimal blocking client for it.
//! Every system fronts the same fixture upstream (`tutti-fixture-server --tools echo,big`).

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use tutti_tests::floor::Stack;

/// mcp-hub's pinned version (scripts/install-test-tools installs it into `.tools/npm-bench`).
pub const MCP_HUB: &str = "mcp-hub 4.2.1";

/// A child process killed (and reaped) when dropped.
pub struct Proc(pub Child);

impl Proc {
    pub fn pid(&self) -> u32 {
        self.0.id()
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Reads the first stdout line of a starting child (its readiness line).
fn first_line(stdout: Option<ChildStdout>, what: &str) -> Result<String> {
    let out = stdout.with_context(|| format!("{what}: no stdout"))?;
    let mut line = String::new();
    BufReader::new(out).read_line(&mut line)?;
    if line.is_empty() {
        bail!("{what} exited before it was ready");
    }
    Ok(line.trim_end().to_string())
}

fn upstream_args(fixture: &Path) -> Vec<String> {
    vec![
        fixture.display().to_string(),
        "--tools".into(),
        "echo,big".into(),
    ]
}

/// The floor: its two processes (the worker runs the upstream), and with `verify` a third
/// that the front asks once per request before the worker (the runtime's token check hop).
/// `stack`: every process of it runs on that I/O stack.
pub struct Floor {
    pub url: String,
    pub front: Proc,
    pub worker: Proc,
    pub verifier: Option<Proc>,
    _dir: tempfile::TempDir,
}

impl Floor {
    pub fn start(
        bin: impl Fn(&str) -> PathBuf,
        fixture: &Path,
        verify: bool,
        stack: Stack,
    ) -> Result<Floor> {
        let dir = tempfile::tempdir()?;
        let socket = dir.path().join("floor.sock");
        let on_stack = ["--stack".to_string(), stack.arg().to_string()];
        let mut upstream = on_stack.to_vec();
        upstream.push("--".to_string());
        upstream.extend(upstream_args(fixture));
        let worker = start_worker(&bin, &socket, &upstream)?;
        let mut front_args = on_stack.to_vec();
        front_args.extend(["--worker".to_string(), socket.display().to_string()]);
        let verifier = if verify {
            let socket = dir.path().join("verify.sock");
            let mut args = on_stack.to_vec();
            args.push("--verifier".to_string());
            let v = start_worker(&bin, &socket, &args)?;
            front_args.extend(["--verifier".to_string(), socket.display().to_string()]);
            Some(v)
        } else {
            None
        };
        let front_args: Vec<&str> = front_args.iter().map(String::as_str).collect();
        let (front, url) = start_front(&bin, &front_args)?;
        Ok(Floor {
            url,
            front,
            worker,
            verifier,
            _dir: dir,
        })
    }

    /// Its processes (for CPU time): front, worker, then the verifier if any.
    pub fn pids(&self) -> Vec<u32> {
        let mut pids = vec![self.front.pid(), self.worker.pid()];
        pids.extend(self.verifier.as_ref().map(Proc::pid));
        pids
    }
}

/// `tutti-floor-worker --socket SOCKET ARGS`, once it is ready.
fn start_worker(bin: impl Fn(&str) -> PathBuf, socket: &Path, args: &[String]) -> Result<Proc> {
    let mut child = Command::new(bin("tutti-floor-worker"))
        .arg("--socket")
        .arg(socket)
        .args(args)
        .stdout(Stdio::piped())
        .spawn()
        .context("starting tutti-floor-worker")?;
    let ready = first_line(child.stdout.take(), "tutti-floor-worker");
    let proc = Proc(child);
    if ready? != "ready" {
        bail!("tutti-floor-worker: unexpected first line");
    }
    Ok(proc)
}

/// `tutti-floor-front` with `args`; returns it and its MCP URL.
pub fn start_front(bin: impl Fn(&str) -> PathBuf, args: &[&str]) -> Result<(Proc, String)> {
    let mut child = Command::new(bin("tutti-floor-front"))
        .args(args)
        .stdout(Stdio::piped())
        .spawn()
        .context("starting tutti-floor-front")?;
    let line = first_line(child.stdout.take(), "tutti-floor-front");
    let proc = Proc(child);
    let url = line?
        .strip_prefix("listening on ")
        .context("tutti-floor-front: unexpected first line")?
        .to_string();
    Ok((proc, url))
}

/// mcp-hub serving the fixture as server `echo` (tools `echo__<tool>`), started offline:
/// its marketplace cache is written fresh first, so it does not try to fetch the public list
/// (docs/BENCHMARKS.md). It listens on every interface without authentication; it runs only
/// while the bench does.
pub struct Hub {
    pub proc: Proc,
    pub port: u16,
    _dir: tempfile::TempDir,
}

impl Hub {
    /// `package`: mcp-hub's package directory (with `dist/cli.js`).
    pub fn start(node: &Path, package: &Path, fixture: &Path, port: u16) -> Result<Hub> {
        let dir = tempfile::tempdir()?;
        let cache = dir.path().join("xdg/mcp-hub/cache");
        std::fs::create_dir_all(&cache)?;
        let now_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)?
            .as_millis();
        let registry = serde_json::json!({
            "registry": {"version": "local", "generatedAt": 0, "totalServers": 1, "servers": [
                {"id": "local", "name": "local", "description": "", "tags": [], "category": "local"}]},
            "lastFetchedAt": now_ms as u64, "serverDocumentation": {}});
        std::fs::write(cache.join("registry.json"), registry.to_string())?;
        let args = upstream_args(fixture);
        let config =
            serde_json::json!({"mcpServers": {"echo": {"command": args[0], "args": args[1..]}}});
        let config_path = dir.path().join("mcp-hub.json");
        std::fs::write(&config_path, config.to_string())?;
        let child = Command::new(node)
            .arg(package.join("dist/cli.js"))
            .args(["--port", &port.to_string(), "--config"])
            .arg(&config_path)
            .env("XDG_DATA_HOME", dir.path().join("xdg"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .context("starting mcp-hub")?;
        Ok(Hub {
            proc: Proc(child),
            port,
            _dir: dir,
        })
    }

    /// A client session, once the hub answers and lists the fixture's tools (it connects
    /// its servers after it starts listening).
    pub fn client(&self) -> Result<SseClient> {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let attempt = SseClient::connect(self.port).and_then(|mut c| {
                let tools = c.request("tools/list", "{}")?;
                if tools.contains("\"echo__echo\"") {
                    Ok(c)
                } else {
                    bail!("mcp-hub does not list echo__echo yet")
                }
            });
            match attempt {
                Ok(c) => return Ok(c),
                Err(e) if Instant::now() > deadline => {
                    return Err(e.context("mcp-hub did not come up within 30 s"));
                }
                Err(_) => std::thread::sleep(Duration::from_millis(200)),
            }
        }
    }
}

/// A minimal blocking client of the HTTP+SSE transport (2024-11-05), mcp-hub's: one
/// connection holds the `GET /mcp` event stream, another POSTs to the `endpoint` it names
/// (answered `202 Accepted`); each answer arrives on the stream.
pub struct SseClient {
    authority: String,
    endpoint: String,
    events: BufReader<Box<dyn Read + Send>>,
    post: Option<(TcpStream, BufReader<TcpStream>)>,
    next_id: u64,
}

impl SseClient {
    fn connect(port: u16) -> Result<SseClient> {
        let authority = format!("127.0.0.1:{port}");
        let mut stream = TcpStream::connect(&authority)?;
        stream.set_read_timeout(Some(Duration::from_secs(30)))?;
        write!(
            stream,
            "GET /mcp HTTP/1.1\r\nHost: {authority}\r\nAccept: text/event-stream\r\n\r\n"
        )?;
        let mut reader = BufReader::new(stream);
        let (status, chunked) = read_head(&mut reader)?.context("no answer to GET /mcp")?;
        if status != 200 {
            bail!("GET /mcp: HTTP {status}");
        }
        let events: Box<dyn Read + Send> = if chunked {
            Box::new(Chunked {
                inner: reader,
                left: 0,
            })
        } else {
            Box::new(reader)
        };
        let mut c = SseClient {
            authority,
            endpoint: String::new(),
            events: BufReader::new(events),
            post: None,
            next_id: 1,
        };
        let (event, data) = c.next_event()?;
        if event != "endpoint" {
            bail!("mcp-hub's first event is {event:?}, not the endpoint");
        }
        c.endpoint = data;
        c.request(
            "initialize",
            r#"{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"bench","version":"1"}}"#,
        )?;
        c.send(r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#)?;
        Ok(c)
    }

    /// A fresh connection for the POSTs (Node closes keep-alive connections idle for 5 s,
    /// and a block of calls may wait longer than that for its turn).
    pub fn reconnect(&mut self) -> Result<()> {
        let stream = TcpStream::connect(&self.authority)?;
        stream.set_nodelay(true)?;
        stream.set_read_timeout(Some(Duration::from_secs(30)))?;
        self.post = Some((stream.try_clone()?, BufReader::new(stream)));
        Ok(())
    }

    /// POSTs one message; it must be accepted.
    fn send(&mut self, body: &str) -> Result<()> {
        if self.post.is_none() {
            self.reconnect()?;
        }
        let (stream, reader) = self.post.as_mut().context("no connection")?;
        write!(
            stream,
            "POST {} HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
            self.endpoint,
            self.authority,
            body.len()
        )?;
        let (status, chunked) = read_head(reader)?.context("mcp-hub closed the connection")?;
        if chunked {
            let mut sink = Vec::new();
            Chunked {
                inner: &mut *reader,
                left: 0,
            }
            .read_to_end(&mut sink)?;
        }
        if !(200..300).contains(&status) {
            bail!("mcp-hub answered a POST with HTTP {status}");
        }
        Ok(())
    }

    /// One request; returns its answer's JSON text (an error answer is an error).
    pub fn request(&mut self, method: &str, params: &str) -> Result<String> {
        let id = self.next_id;
        self.next_id += 1;
        self.send(&format!(
            r#"{{"jsonrpc":"2.0","id":{id},"method":"{method}","params":{params}}}"#
        ))?;
        let want = format!("\"id\":{id}");
        loop {
            let (event, data) = self.next_event()?;
            if event == "message" && data.contains(&want) {
                if !data.contains("\"result\"") || data.contains("\"error\":{") {
                    bail!("mcp-hub answered {method} with {data}");
                }
                return Ok(data);
            }
        }
    }

    /// `n` timed `tools/call`s of `tool` after `warmup` untimed ones.
    pub fn tool_calls(
        &mut self,
        tool: &str,
        arguments: &str,
        n: usize,
        warmup: usize,
    ) -> Result<Vec<Duration>> {
        self.reconnect()?;
        let params = format!(r#"{{"name":"{tool}","arguments":{arguments}}}"#);
        let mut v = Vec::with_capacity(n);
        for i in 0..n + warmup {
            let t = Instant::now();
            self.request("tools/call", &params)?;
            if i >= warmup {
                v.push(t.elapsed());
            }
        }
        Ok(v)
    }

    /// The next event's type and data.
    fn next_event(&mut self) -> Result<(String, String)> {
        let (mut event, mut data) = (String::from("message"), String::new());
        let mut line = String::new();
        loop {
            line.clear();
            if self.events.read_line(&mut line)? == 0 {
                bail!("mcp-hub closed the event stream");
            }
            let l = line.trim_end_matches(['\r', '\n']);
            if l.is_empty() {
                if !data.is_empty() {
                    return Ok((event, data));
                }
            } else if let Some(v) = l.strip_prefix("event:") {
                event = v.trim().to_string();
            } else if let Some(v) = l.strip_prefix("data:") {
                data.push_str(v.trim_start());
            }
        }
    }
}

/// Reads a response's status line and headers: `(status, chunked)`; `None` at end of stream.
fn read_head(r: &mut impl BufRead) -> Result<Option<(u16, bool)>> {
    let mut line = String::new();
    if r.read_line(&mut line)? == 0 {
        return Ok(None);
    }
    let status = line
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .with_context(|| format!("bad status line {line:?}"))?;
    let mut chunked = false;
    loop {
        line.clear();
        if r.read_line(&mut line)? == 0 {
            bail!("connection closed in the response head");
        }
        let l = line.trim_end();
        if l.is_empty() {
            return Ok(Some((status, chunked)));
        }
        if let Some((name, value)) = l.split_once(':')
            && name.eq_ignore_ascii_case("transfer-encoding")
            && value.trim().eq_ignore_ascii_case("chunked")
        {
            chunked = true;
        }
    }
}

/// The body of a chunked response as a byte stream (ends at the last chunk).
struct Chunked<R> {
    inner: R,
    left: usize,
}

impl<R: BufRead> Read for Chunked<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        if self.left == 0 {
            let mut line = String::new();
            self.inner.read_line(&mut line)?;
            if line.trim().is_empty() {
                // The CRLF after the previous chunk.
                line.clear();
                self.inner.read_line(&mut line)?;
            }
            let size = usize::from_str_radix(line.trim(), 16).map_err(|_| {
                std::io::Error::new(std::io::ErrorKind::InvalidData, "bad chunk size")
            })?;
            if size == 0 {
                line.clear();
                self.inner.read_line(&mut line)?;
                return Ok(0);
            }
            self.left = size;
        }
        let n = buf.len().min(self.left);
        let n = self.inner.read(&mut buf[..n])?;
        if n == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        self.left -= n;
        Ok(n)
    }
}

//! `tutti-bench --tool-search` (SPEC §15): what a session's `tools/list` costs in
//! bytes and approximate tokens with `--tools all` and with `--tools search`, at 20, 100, 400
//! and 2,000 tools, and the latency of `tutti_search_tools` at 2,000 tools.

use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use serde_json::{Value, json};
use tutti_tests::{Runtime, RuntimeOptions, fixture_connector};

/// One blocking HTTP/1.1 keep-alive connection to the frontend (the bench's raw client).
pub(super) trait Post {
    /// One POST with extra header lines; the status and the body.
    fn post(&mut self, extra_headers: &str, body: &str) -> Result<(u16, Vec<u8>)>;
}

/// Opens a [`Post`] connection to `url` with a bearer `token`.
pub(super) type Connect = fn(&str, &str) -> Result<Box<dyn Post>>;

/// Tool-set sizes of the table: `--many N - 2` generated tools plus `echo` and `add`.
const SIZES: [usize; 4] = [20, 100, 400, 2000];
/// Queries cycled through by the latency row (a mix of hits and misses).
const QUERIES: [&str; 6] = [
    "echo the message back",
    "generated fixture tool number 1234",
    "add two numbers",
    "tool 0042",
    "parameter p0777",
    "nothing matches this query",
];
const WARMUP: usize = 100;

/// One row per size, then the latency; printed and returned as Markdown.
pub(super) fn run(smoke: bool, connect: Connect) -> Result<String> {
    let mut rt = Runtime::start(RuntimeOptions::default());
    let mut md = String::from(
        "| tools | tools/list, `--tools all` | tools/list, `--tools search` | saved |\n|---|---|---|---|\n",
    );
    let sizes: &[usize] = if smoke { &SIZES[..2] } else { &SIZES };
    let mut search_token = String::new();
    for (i, &n) in sizes.iter().enumerate() {
        let key = format!("s{i}");
        let many = (n - 2).to_string();
        rt.install_ok(
            &fixture_connector(&key, &["--tools", "echo,add", "--many", &many]),
            &[],
        );
        rt.wait_status(&key, "ready", Duration::from_secs(60));
        let all = issue(&rt, "all")?;
        search_token = issue(&rt, "search")?;
        let (all_bytes, listed) = list_bytes(connect(rt.frontend_url(), &all)?)?;
        if listed != n {
            bail!("{key}: listed {listed} tools, expected {n}");
        }
        let (search_bytes, two) = list_bytes(connect(rt.frontend_url(), &search_token)?)?;
        if two != 2 {
            bail!("search session listed {two} tools");
        }
        let row = format!(
            "| {n} | {} | {} | {:.1} % |\n",
            size(all_bytes),
            size(search_bytes),
            100.0 * (1.0 - search_bytes as f64 / all_bytes as f64)
        );
        print!("{row}");
        md.push_str(&row);
        if i + 1 < sizes.len() {
            rt.tutti_ok(&["connector", "uninstall", &key]);
        }
    }
    let n = if smoke { 50 } else { 5000 };
    let (first, latencies) = search_latency(connect(rt.frontend_url(), &search_token)?, n)?;
    let mut sorted = latencies;
    sorted.sort();
    let pct = |p: f64| sorted[((sorted.len() as f64 - 1.0) * p).round() as usize];
    let tools = sizes.last().copied().unwrap_or_default();
    let line = format!(
        "\ntutti_search_tools at {tools} tools, legacy era, one keep-alive connection: \
         p50 {:.0} µs · p90 {:.0} µs · p99 {:.0} µs (n={}); the first search of the table \
         (builds the index) {:.1} ms\n",
        pct(0.5).as_secs_f64() * 1e6,
        pct(0.9).as_secs_f64() * 1e6,
        pct(0.99).as_secs_f64() * 1e6,
        sorted.len(),
        first.as_secs_f64() * 1e3,
    );
    print!("{line}");
    md.push_str(&line);
    Ok(md)
}

fn size(bytes: usize) -> String {
    format!("{bytes} B ≈ {} tokens", bytes / 4)
}

fn issue(rt: &Runtime, mode: &str) -> Result<String> {
    let out = rt.tutti_ok(&[
        "session",
        "issue",
        "--workspace",
        "bench",
        "--session",
        mode,
        "--tools",
        mode,
    ]);
    let v: Value = serde_json::from_str(out.trim()).context("binding JSON")?;
    v["mcpServers"][0]["headers"]["Authorization"]
        .as_str()
        .and_then(|a| a.strip_prefix("Bearer "))
        .map(str::to_owned)
        .context("no bearer token in the binding")
}

/// Bytes of every `tools/list` page's `tools` array (what a client puts in a model's
/// request), and how many tools they hold.
fn list_bytes(mut http: Box<dyn Post>) -> Result<(usize, usize)> {
    let (mut bytes, mut count, mut cursor) = (0, 0, Value::Null);
    for id in 1.. {
        let params = if cursor.is_null() {
            json!({})
        } else {
            json!({"cursor": cursor})
        };
        let body = json!({"jsonrpc": "2.0", "id": id, "method": "tools/list", "params": params});
        let (status, reply) =
            http.post("MCP-Protocol-Version: 2025-06-18\r\n", &body.to_string())?;
        let reply: Value = serde_json::from_slice(&reply).context("tools/list reply")?;
        if status != 200 {
            bail!("tools/list: HTTP {status}: {reply}");
        }
        let tools = &reply["result"]["tools"];
        bytes += tools.to_string().len();
        count += tools.as_array().map_or(0, Vec::len);
        cursor = reply["result"]["nextCursor"].clone();
        if cursor.is_null() {
            break;
        }
    }
    Ok((bytes, count))
}

/// The first search (index build included), then `n` timed searches after [`WARMUP`].
fn search_latency(mut http: Box<dyn Post>, n: usize) -> Result<(Duration, Vec<Duration>)> {
    let mut call = |id: usize| -> Result<Duration> {
        let query = QUERIES[id % QUERIES.len()];
        let body = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
            "params": {"name": "tutti_search_tools", "arguments": {"query": query}}});
        let t = Instant::now();
        let (status, reply) =
            http.post("MCP-Protocol-Version: 2025-06-18\r\n", &body.to_string())?;
        let elapsed = t.elapsed();
        let text = String::from_utf8_lossy(&reply);
        if status != 200 || !text.contains("\"structuredContent\"") {
            bail!("search failed: HTTP {status}: {text}");
        }
        Ok(elapsed)
    };
    let first = call(0)?;
    let mut v = Vec::with_capacity(n);
    for i in 1..=(n + WARMUP) {
        let d = call(i)?;
        if i > WARMUP {
            v.push(d);
        }
    }
    Ok((first, v))
}

//! The connectors the soak installs, their releases (each upgrade a new version), and the
//! sessions its clients hold.

use std::collections::HashMap;
use std::path::PathBuf;

use anyhow::{Context, Result, bail};
use serde_json::{Value, json};
use tutti_tests::{FixtureHttp, Runtime, tools_dir};

use super::world::{CALL_MS, Shared, WORKSPACE, lock, now_ms};

/// Connectors the chaos may kill, stop, upgrade and uninstall.
pub const CHURNED: [&str; 4] = ["fa", "fb", "time", "remote"];
/// The connector nothing but a kernel kill touches: its worker lives through the second
/// half, so its memory and descriptors are measured.
pub const STEADY: &str = "steady";
/// Connectors whose worker the chaos may uninstall (and install again a moment later).
pub const REMOVABLE: [&str; 3] = ["fa", "fb", "remote"];

/// The sessions of the HTTP clients: `(session, modern era?, search mode?)`.
pub const SESSIONS: [(&str, bool, bool); 3] = [
    ("legacy", false, false),
    ("modern", true, false),
    ("search", false, true),
];
/// The bridge's session (it asks the kernel for its own tokens).
pub const BRIDGE_SESSION: &str = "bridge";

/// What the connectors need beyond the runtime: the real upstream's program, the remote
/// fixture, and each connector's current version.
pub struct Fleet {
    time_server: PathBuf,
    remote: FixtureHttp,
    versions: HashMap<&'static str, u32>,
    /// Where every fixture upstream records the messages it receives (`--record`).
    records: PathBuf,
}

impl Fleet {
    /// Starts the remote fixture; fails when the real upstream is not installed. The
    /// fixtures record what they receive under `records`.
    pub fn start(records: PathBuf) -> Result<Fleet> {
        let time_server = tools_dir().join("venv").join("bin").join("mcp-server-time");
        if !time_server.is_file() {
            bail!(
                "{} is missing: run scripts/install-test-tools",
                time_server.display()
            );
        }
        std::fs::create_dir_all(&records)?;
        let remote_record = records.join("remote.jsonl").to_string_lossy().into_owned();
        Ok(Fleet {
            time_server,
            remote: FixtureHttp::start(&["--tools", "echo", "--record", &remote_record]),
            versions: HashMap::new(),
            records,
        })
    }

    /// The release of `key` at version `1.0.<n>`.
    fn manifest(&self, rt: &Runtime, key: &str, n: u32) -> Value {
        let mut m = match key {
            "time" => json!({
                "key": key, "name": "Time", "description": "mcp-server-time from PyPI",
                "mcp": {"transport": "stdio", "command": self.time_server.to_string_lossy(), "args": []},
            }),
            "remote" => json!({
                "key": key, "name": "Remote", "description": "The fixture as a remote HTTP upstream",
                "mcp": {"transport": "http", "url": self.remote.url},
            }),
            _ => {
                let doc = format!("{key}://doc");
                let record = self.records.join(format!("{key}.jsonl"));
                rt.private_fixture_connector(
                    key,
                    &[
                        "--tools",
                        "whoami,echo",
                        "--prompt",
                        "hello",
                        "--resource",
                        &doc,
                        "--record",
                        &record.to_string_lossy(),
                    ],
                )
            }
        };
        m["version"] = json!(format!("1.0.{n}"));
        m["timeouts"] = json!({"startMs": 20000, "callMs": CALL_MS});
        // A short open time, so that a circuit opened by a stopped worker is tried again
        // within the run.
        m["circuit"] = json!({"failures": 5, "windowMs": 30000, "openMs": 3000});
        m
    }

    /// Installs the next version of `key` (its first, or an upgrade).
    pub fn install(&mut self, rt: &mut Runtime, key: &'static str) -> Result<()> {
        let n = {
            let n = self.versions.entry(key).or_insert(0);
            *n += 1;
            *n
        };
        let manifest = self.manifest(rt, key, n);
        let out = rt.install_dir(&manifest, &[]);
        if !out.status.success() {
            bail!(
                "install of {key} 1.0.{n} failed: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
        Ok(())
    }
}

/// The echo calls the fixture upstreams received (each client's message is unique), and
/// each message that arrived more than once: a call the runtime sent twice.
pub fn received_twice(records: &std::path::Path) -> (usize, Vec<String>) {
    let mut seen: HashMap<String, usize> = HashMap::new();
    for entry in std::fs::read_dir(records).into_iter().flatten().flatten() {
        let text = std::fs::read_to_string(entry.path()).unwrap_or_default();
        for line in text.lines() {
            let Ok(m) = serde_json::from_str::<Value>(line) else {
                continue;
            };
            if m["method"] == "tools/call" && m["params"]["name"] == "echo" {
                let message = m["params"]["arguments"]["message"].as_str().unwrap_or("");
                *seen.entry(message.to_owned()).or_default() += 1;
            }
        }
    }
    let total = seen.values().sum();
    let mut twice: Vec<String> = seen
        .into_iter()
        .filter(|(_, n)| *n > 1)
        .map(|(m, n)| format!("echo {m:?} reached its upstream {n} times"))
        .collect();
    twice.sort();
    (total, twice)
}

/// Installs every connector and waits until each is ready.
pub fn install_all(rt: &mut Runtime, fleet: &mut Fleet) -> Result<()> {
    for key in CHURNED.into_iter().chain([STEADY]) {
        fleet.install(rt, key)?;
    }
    for key in CHURNED.into_iter().chain([STEADY]) {
        rt.wait_status(key, "ready", std::time::Duration::from_secs(40));
    }
    Ok(())
}

/// Issues a token for `session` (`--tools search` for the search session) and puts it in
/// the book.
pub fn issue(rt: &Runtime, shared: &Shared, session: &'static str) -> Result<()> {
    let search = SESSIONS
        .iter()
        .any(|(s, _, search)| *s == session && *search);
    let mut args = vec![
        "session",
        "issue",
        "--workspace",
        WORKSPACE,
        "--session",
        session,
        "--format",
        "runtime",
    ];
    if search {
        args.extend(["--tools", "search"]);
    }
    let out = rt.tutti(&args);
    let at = now_ms();
    if !out.status.success() {
        bail!(
            "tutti session issue for {session} failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    let binding: Value = serde_json::from_slice(&out.stdout).context("session issue: not JSON")?;
    let token = binding["mcpServers"][0]["headers"]["Authorization"]
        .as_str()
        .and_then(|a| a.strip_prefix("Bearer "))
        .context("session issue: no bearer token in the binding")?;
    lock(&shared.tokens).issued(session, token.to_owned(), at);
    Ok(())
}

/// Revokes `session`'s token (the book keeps no token for it until it is issued again).
pub fn revoke(rt: &Runtime, shared: &Shared, session: &'static str) -> Result<()> {
    let out = rt.tutti(&[
        "session",
        "revoke",
        "--workspace",
        WORKSPACE,
        "--session",
        session,
    ]);
    let at = now_ms();
    if !out.status.success() {
        bail!(
            "tutti session revoke for {session} failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    lock(&shared.tokens).end(session, at);
    Ok(())
}

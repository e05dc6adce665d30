//! The stdio bridge as a client that launches its servers as commands uses it: `tutti
//! mcp-stdio` with its stdin and stdout on pipes, one JSON-RPC message a line, in front of the
//! runtime the other echo rows measure. Its row minus the runtime's legacy row is what the
//! bridge adds to a call.

use std::io::{BufRead, BufReader, Write};
use std::process::{ChildStdin, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use serde_json::{Value, json};

use super::systems::Proc;

pub struct Bridge {
    proc: Proc,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
    next_id: u64,
}

impl Bridge {
    /// Starts the bridge from `cmd` (`tutti --state-dir … mcp-stdio …`) and initializes a
    /// 2025-06-18 session through it.
    pub fn start(mut cmd: Command) -> Result<Bridge> {
        let mut child = cmd
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .context("cannot run tutti mcp-stdio")?;
        let (Some(stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
            bail!("tutti mcp-stdio: no pipes");
        };
        let mut bridge = Bridge {
            proc: Proc(child),
            stdin,
            stdout: BufReader::new(stdout),
            next_id: 1,
        };
        let init = json!({"protocolVersion": "2025-06-18", "capabilities": {},
            "clientInfo": {"name": "tutti-bench", "version": "1"}});
        bridge.request("initialize", init)?;
        bridge.send(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))?;
        Ok(bridge)
    }

    pub fn pid(&self) -> u32 {
        self.proc.pid()
    }

    fn send(&mut self, message: &Value) -> Result<()> {
        let mut line = message.to_string();
        line.push('\n');
        self.stdin.write_all(line.as_bytes())?;
        self.stdin.flush()?;
        Ok(())
    }

    /// Sends a request and reads lines until its answer (notifications from the session's
    /// stream may come in between); an error answer is an error.
    fn request(&mut self, method: &str, params: Value) -> Result<Value> {
        let id = self.next_id;
        self.next_id += 1;
        self.send(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}))?;
        let mut line = String::new();
        loop {
            line.clear();
            if self.stdout.read_line(&mut line)? == 0 {
                bail!("tutti mcp-stdio closed its output during {method}");
            }
            let Ok(message) = serde_json::from_str::<Value>(&line) else {
                continue;
            };
            if message["id"] != json!(id) {
                continue;
            }
            if message.get("error").is_some() || message["result"]["isError"] == json!(true) {
                bail!("{method} through the bridge failed: {}", line.trim());
            }
            return Ok(message);
        }
    }

    /// `n` timed calls of `tool` after `warmup` untimed ones.
    pub fn tool_calls(
        &mut self,
        tool: &str,
        arguments: &Value,
        n: usize,
        warmup: usize,
    ) -> Result<Vec<Duration>> {
        let mut v = Vec::with_capacity(n);
        for i in 0..(n + warmup) {
            let t = Instant::now();
            self.request("tools/call", json!({"name": tool, "arguments": arguments}))?;
            if i >= warmup {
                v.push(t.elapsed());
            }
        }
        Ok(v)
    }
}

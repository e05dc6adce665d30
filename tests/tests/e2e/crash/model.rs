//! What the crash loop does and expects: the connectors and their releases, the commands it
//! interrupts, and each connector's state before and after a command.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde_json::{Value, json};
use tutti_tests::Runtime;
use tutti_tests::rng::Rng;

/// Two connectors without a worker (a CLI each) and one with an MCP upstream (the fixture),
/// whose first offer after every start commits and pins.
pub const KEYS: [&str; 3] = ["ca", "cb", "mx"];
/// Releases per connector (`1.0.0`, `2.0.0`, `3.0.0`), each with other payload bytes.
pub const VERSIONS: usize = 3;
/// The secret every release declares: `connect` stores it, `disconnect` deletes it.
pub const SECRET: &str = "CRASH_TOKEN";
/// Payload files per release and their size: enough that copying and hashing a release
/// takes a while, so kills land inside the copy as well as around it.
const PAYLOAD_FILES: usize = 32;
const PAYLOAD_BYTES: usize = 2048;

pub fn version_name(v: usize) -> String {
    format!("{}.0.0", v + 1)
}

/// One connector as the test expects it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Conn {
    /// Index of its release (`version_name`).
    pub version: usize,
    pub connected: bool,
    /// The value stored for [`SECRET`], if any.
    pub secret: Option<String>,
}

pub type State = BTreeMap<String, Conn>;

/// The release folders the commands install from, written once.
pub struct Sources {
    dirs: BTreeMap<(String, usize), PathBuf>,
}

impl Sources {
    pub fn write(rt: &mut Runtime) -> Sources {
        let mut dirs = BTreeMap::new();
        for key in KEYS {
            for v in 0..VERSIONS {
                let manifest = manifest(rt, key, v);
                let payload: Vec<(String, Vec<u8>)> = (0..PAYLOAD_FILES)
                    .map(|i| {
                        let name = format!("data/p{i:03}.bin");
                        let byte = (i + v * 7 + key.len()) as u8;
                        (name, vec![byte; PAYLOAD_BYTES])
                    })
                    .collect();
                let tool = format!("#!/bin/sh\necho {key} {}\n", version_name(v));
                let mut files: Vec<(&str, &[u8])> = payload
                    .iter()
                    .map(|(n, b)| (n.as_str(), b.as_slice()))
                    .collect();
                files.push(("bin/tool", tool.as_bytes()));
                dirs.insert((key.to_owned(), v), rt.write_release(&manifest, &files));
            }
        }
        Sources { dirs }
    }

    fn dir(&self, key: &str, v: usize) -> String {
        self.dirs
            .get(&(key.to_owned(), v))
            .map(|d| d.to_string_lossy().into_owned())
            .unwrap_or_else(|| panic!("no source for {key} {v}"))
    }
}

fn manifest(rt: &Runtime, key: &str, v: usize) -> Value {
    let mut m = if key.starts_with('m') {
        let mut m = rt.private_fixture_connector(key, &["--tools", "echo,add"]);
        m["mcp"]["secrets"] = json!([SECRET]);
        m
    } else {
        json!({
            "key": key,
            "name": format!("Crash {key}"),
            "description": "A CLI connector the crash loop installs",
            "cli": {"entrypoint": "bin/tool", "secrets": [SECRET]},
        })
    };
    m["version"] = json!(version_name(v));
    m
}

/// A `tutti` command line and its environment.
pub type Command = (Vec<String>, Vec<(String, String)>);

/// A command the loop runs and kills the kernel during.
#[derive(Clone, Debug)]
pub enum Op {
    Install {
        key: String,
        version: usize,
    },
    Upgrade {
        key: String,
        version: usize,
    },
    Uninstall {
        key: String,
    },
    Connect {
        key: String,
        value: String,
    },
    Disconnect {
        key: String,
    },
    /// No command: the kill lands on a kernel at rest or finishing work of its own (a
    /// worker's first offer committing and pinning after the last start).
    Idle,
    /// The kill lands on a kernel starting (reclaiming what the last kill left).
    Starting,
}

impl Op {
    /// A command that makes sense in `state`.
    pub fn pick(rng: &mut Rng, state: &State, iteration: usize) -> Op {
        let key = KEYS[rng.index(KEYS.len())].to_owned();
        let Some(conn) = state.get(&key) else {
            return match rng.below(10) {
                0 => Op::Idle,
                1 => Op::Starting,
                _ => Op::Install {
                    key,
                    version: rng.below(VERSIONS as u64) as usize,
                },
            };
        };
        match rng.below(20) {
            0..=4 => {
                let step = 1 + rng.below(VERSIONS as u64 - 1) as usize;
                let version = (conn.version + step) % VERSIONS;
                Op::Upgrade { key, version }
            }
            5..=7 => Op::Uninstall { key },
            8..=12 => {
                let value = format!("crash-secret-{iteration}-{}", rng.below(1 << 30));
                Op::Connect { key, value }
            }
            13..=15 => Op::Disconnect { key },
            16..=17 => Op::Idle,
            _ => Op::Starting,
        }
    }

    pub fn kind(&self) -> &'static str {
        match self {
            Op::Install { .. } => "install",
            Op::Upgrade { .. } => "upgrade",
            Op::Uninstall { .. } => "uninstall",
            Op::Connect { .. } => "connect",
            Op::Disconnect { .. } => "disconnect",
            Op::Idle => "idle",
            Op::Starting => "starting",
        }
    }

    /// The `tutti` arguments and environment of the command (`None`: no command).
    pub fn command(&self, sources: &Sources) -> Option<Command> {
        let args = |a: &[&str]| a.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
        Some(match self {
            Op::Install { key, version } | Op::Upgrade { key, version } => {
                let dir = sources.dir(key, *version);
                (args(&["connector", "install", &dir, "--yes"]), Vec::new())
            }
            Op::Uninstall { key } => (args(&["connector", "uninstall", key]), Vec::new()),
            Op::Connect { key, value } => (
                args(&["connector", "connect", key, "--from-env", SECRET]),
                vec![(SECRET.to_owned(), value.clone())],
            ),
            Op::Disconnect { key } => (args(&["connector", "disconnect", key]), Vec::new()),
            Op::Idle | Op::Starting => return None,
        })
    }

    /// The state once the command is done.
    pub fn apply(&self, state: &State) -> State {
        let mut next = state.clone();
        match self {
            Op::Install { key, version } => {
                next.insert(
                    key.clone(),
                    Conn {
                        version: *version,
                        connected: true,
                        secret: None,
                    },
                );
            }
            Op::Upgrade { key, version } => {
                if let Some(c) = next.get_mut(key) {
                    c.version = *version;
                }
            }
            Op::Uninstall { key } => {
                next.remove(key);
            }
            Op::Connect { key, value } => {
                if let Some(c) = next.get_mut(key) {
                    c.connected = true;
                    c.secret = Some(value.clone());
                }
            }
            Op::Disconnect { key } => {
                if let Some(c) = next.get_mut(key) {
                    c.connected = false;
                    c.secret = None;
                }
            }
            Op::Idle | Op::Starting => {}
        }
        next
    }
}

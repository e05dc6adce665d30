//! The steps of a schedule and what a run counts.

use std::fmt;

/// The connectors every schedule drives: two with MCP, one CLI-only (no worker).
pub const KEYS: [&str; 3] = ["alpha", "beta", "cli"];

/// One step of a schedule. Indices pick among what exists when the step runs (a worker
/// index wraps over the connector's workers alive then), so a shrunk schedule still runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    Install {
        c: usize,
    },
    Upgrade {
        c: usize,
        new_secret: bool,
    },
    Uninstall {
        c: usize,
    },
    Connect {
        c: usize,
    },
    Disconnect {
        c: usize,
    },
    /// A manual retry (`connect` again): `Input::Reload`.
    Reload {
        c: usize,
    },
    /// A worker offers tool set `set` (0: {a}, 1: {a, b}, 2: {a changed}, 3: {}, 4: refused).
    Offer {
        c: usize,
        pick: usize,
        set: u8,
    },
    /// A worker process exits on its own.
    Exit {
        c: usize,
        pick: usize,
    },
    /// A worker reports (0 auth failed, 1 OAuth refresh failed, 2 upstream unavailable (the
    /// circuit's failure fence, the exit follows), 3 start failed, 4 re-initialized).
    Report {
        c: usize,
        pick: usize,
        kind: u8,
    },
    /// `tutti connector approve`, with the reviewed hash or a stale one.
    Approve {
        c: usize,
        stale: bool,
    },
    /// The spawner fails (or works again) for this connector.
    Spawner {
        c: usize,
        broken: bool,
    },
    /// The clock moves on; due timers fire and stopping workers exit.
    Advance {
        ms: u64,
    },
    /// Runtime shutdown and start again.
    Shutdown,
}

impl fmt::Display for Action {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let k = |c: &usize| KEYS[*c % KEYS.len()];
        match self {
            Action::Install { c } => write!(f, "install {}", k(c)),
            Action::Upgrade { c, new_secret } => {
                write!(f, "upgrade {} (needs a new secret: {new_secret})", k(c))
            }
            Action::Uninstall { c } => write!(f, "uninstall {}", k(c)),
            Action::Connect { c } => write!(f, "connect {}", k(c)),
            Action::Disconnect { c } => write!(f, "disconnect {}", k(c)),
            Action::Reload { c } => write!(f, "reload {}", k(c)),
            Action::Offer { c, pick, set } => {
                write!(f, "worker #{pick} of {} offers set {set}", k(c))
            }
            Action::Exit { c, pick } => write!(f, "worker #{pick} of {} exits", k(c)),
            Action::Report { c, pick, kind } => {
                write!(f, "worker #{pick} of {} reports kind {kind}", k(c))
            }
            Action::Approve { c, stale } => write!(f, "approve {} (stale hash: {stale})", k(c)),
            Action::Spawner { c, broken } => write!(f, "spawner of {} broken: {broken}", k(c)),
            Action::Advance { ms } => write!(f, "clock +{ms} ms"),
            Action::Shutdown => write!(f, "shutdown and start again"),
        }
    }
}

/// What a run that held every invariant did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Summary {
    pub steps: u64,
    /// Lifecycle inputs stepped (actions, timers, exits, answers to effects).
    pub inputs: u64,
    pub spawns: u64,
    pub commits: u64,
    pub fences: u64,
    pub restarts: u64,
    pub crash_loops: u64,
}

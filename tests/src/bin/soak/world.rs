//! What the soak's clients, chaos and watchers share: the runtime's current URL and kernel,
//! the session tokens the clients hold, the outages the chaos caused, and the record of every
//! call. Times that are compared with the audit log are wall-clock milliseconds
//! ([`now_ms`]), the clock the runtime stamps its records with.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU32, Ordering};
use std::sync::{Mutex, MutexGuard, RwLock};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// `timeouts.callMs` of every connector the soak installs.
pub const CALL_MS: u64 = 2000;
/// How long past `callMs` a call may stay unanswered before it counts as a hang.
pub const GRACE: Duration = Duration::from_secs(5);
/// The workspace every soak session is issued under.
pub const WORKSPACE: &str = "soak";
/// How long after its install a connector's worker is taken to be running and reached.
pub const SETTLE_MS: i64 = 2000;

/// Unix time in milliseconds.
pub fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

/// A lock that survives a panicking holder (the soak reports; it never stops halfway).
pub fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// What was called: the audit record's `kind` and `tool` follow from it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// `tools/call` of a connector's tool (also through `tutti_call_tool`).
    Tool,
    Prompt,
    Resource,
    /// `tutti_search_tools`: answered by the frontend itself, never audited.
    Search,
}

/// How a call ended, as its client saw it.
#[derive(Clone, Debug, PartialEq)]
pub enum Answer {
    /// A result. `refused`: a search session's `tutti_call_tool` answered with the direct
    /// call's error as an `isError` result (`_meta["tutti/error"]`: code and message).
    Result {
        is_error: bool,
        refused: Option<(i64, String)>,
    },
    /// A JSON-RPC error; `bound`: `error.data.tutti.connector` is set (the call resolved
    /// to a binding).
    Rpc {
        status: u16,
        code: i64,
        message: String,
        bound: bool,
    },
    /// An HTTP status without a JSON-RPC error (401, 503, …).
    Http { status: u16, body: String },
    /// The request could not be sent or its answer not read (the frontend went away).
    Transport(String),
    /// No answer within `callMs` + [`GRACE`] (time the soak kept the runtime down aside).
    Hang,
}

/// The worker whose upstream answered (`whoami`, the fixture's prompt and resource).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Answerer {
    pub upstream_pid: u32,
    pub worker_pid: u32,
    /// `TUTTI_WORKER_KEY` and `TUTTI_WORKER_GENERATION` of the worker; `None` when it was
    /// gone before the soak could read them.
    pub worker: Option<(String, u64)>,
}

/// One call a client made.
#[derive(Clone, Debug)]
pub struct Call {
    pub client: &'static str,
    /// The session its token was issued for (the audit record's `session`).
    pub session: &'static str,
    pub kind: Kind,
    /// The audit record's `tool`: the local tool or prompt name, or the URI.
    pub target: String,
    pub connector: &'static str,
    /// The serial of the token it carried (`None`: the bridge holds its own).
    pub token: Option<u64>,
    pub start_ms: i64,
    pub end_ms: i64,
    pub answer: Answer,
    pub answerer: Option<Answerer>,
    /// An echo that came back with another text than the one sent.
    pub wrong_echo: Option<String>,
}

/// One session's token as its client should use it now (no `Debug`: it holds a bearer token,
/// which a report must never print).
#[derive(Clone, Default)]
pub struct Held {
    pub serial: u64,
    /// `None` while revoked and not reissued yet.
    pub token: Option<String>,
}

/// Every client's current token, and when each earlier token stopped being valid.
#[derive(Default)]
pub struct TokenBook {
    held: HashMap<&'static str, Held>,
    /// Token serial → the wall time (ms) from which it must be refused: when the command
    /// that revoked or replaced it returned, or when its kernel was killed.
    pub revoked: HashMap<u64, i64>,
    next: u64,
}

impl TokenBook {
    pub fn held(&self, session: &str) -> Held {
        self.held.get(session).cloned().unwrap_or_default()
    }

    /// A new token for `session`, issued by a command that returned at `at_ms`.
    pub fn issued(&mut self, session: &'static str, token: String, at_ms: i64) {
        self.end(session, at_ms);
        self.next += 1;
        self.held.insert(
            session,
            Held {
                serial: self.next,
                token: Some(token),
            },
        );
    }

    /// `session`'s token ended at `at_ms` (revoked, or its kernel killed).
    pub fn end(&mut self, session: &'static str, at_ms: i64) {
        if let Some(h) = self.held.get_mut(session)
            && h.token.take().is_some()
        {
            self.revoked.entry(h.serial).or_insert(at_ms);
        }
    }

    pub fn sessions(&self) -> Vec<&'static str> {
        self.held.keys().copied().collect()
    }
}

/// A span of wall time (ms) in which the soak kept the runtime down on purpose (from a
/// kernel's SIGKILL until `tutti up` showed the frontend again and tokens were reissued).
#[derive(Clone, Copy, Debug)]
pub struct Outage {
    pub from_ms: i64,
    pub to_ms: Option<i64>,
}

/// How much of `[from, to]` an outage covered, in ms.
pub fn overlap(outages: &[Outage], from: i64, to: i64) -> i64 {
    outages
        .iter()
        .map(|o| {
            let end = o.to_ms.unwrap_or(to).min(to);
            (end - o.from_ms.max(from)).max(0)
        })
        .sum()
}

/// What the soak's threads share.
pub struct Shared {
    pub state_dir: PathBuf,
    pub url: RwLock<String>,
    pub kernel_pid: AtomicU32,
    pub bridge_pid: AtomicU32,
    pub tokens: Mutex<TokenBook>,
    pub outages: Mutex<Vec<Outage>>,
    /// When a frontend died (its SIGKILL, or its kernel's): stamped before the signal and
    /// after the process was seen gone, wall ms.
    pub frontend_deaths: Mutex<Vec<(i64, i64)>>,
    /// Wall times (ms) of the kernel SIGKILLs: every generation live then ended then.
    pub kernel_kills: Mutex<Vec<i64>>,
    /// Every worker seen (pid → key, generation), for answers whose worker is gone by the
    /// time the client reads it.
    pub workers: Mutex<HashMap<u32, (String, u64)>>,
    /// Processes that outlived what should have taken them along, one line each.
    pub orphans: Mutex<Vec<String>>,
    /// Chaos steps that did not do what they should (a runtime that did not come back).
    pub faults: Mutex<Vec<String>>,
    /// How many chaos actions of each kind ran.
    pub actions: Mutex<BTreeMap<&'static str, usize>>,
    /// From when (wall ms) every connector is installed and has had [`SETTLE_MS`] to start
    /// its worker; `i64::MAX` while one is uninstalled. The leak judgement takes a process's
    /// floor from the samples taken then, so a connector away for a moment is no dip.
    pub whole_from_ms: AtomicI64,
    /// Clients and watchers stop when this is set.
    pub stop: AtomicBool,
    /// When the soak began (wall ms), for the offsets of its log lines.
    pub began_ms: i64,
}

impl Shared {
    pub fn new(state_dir: PathBuf, url: String, kernel_pid: u32) -> Shared {
        Shared {
            state_dir,
            url: RwLock::new(url),
            kernel_pid: AtomicU32::new(kernel_pid),
            bridge_pid: AtomicU32::new(0),
            tokens: Mutex::default(),
            outages: Mutex::default(),
            frontend_deaths: Mutex::default(),
            kernel_kills: Mutex::default(),
            workers: Mutex::default(),
            orphans: Mutex::default(),
            faults: Mutex::default(),
            actions: Mutex::default(),
            whole_from_ms: AtomicI64::new(0),
            stop: AtomicBool::new(false),
            began_ms: now_ms(),
        }
    }

    pub fn url(&self) -> String {
        self.url
            .read()
            .map(|u| u.clone())
            .unwrap_or_else(|e| e.into_inner().clone())
    }

    /// A connector was uninstalled: the set is not whole until [`Shared::reinstalled`].
    pub fn uninstalled(&self) {
        self.whole_from_ms.store(i64::MAX, Ordering::Relaxed);
    }

    /// Every connector is installed again (as of `now_ms()`), its worker starting.
    pub fn reinstalled(&self) {
        self.whole_from_ms
            .store(now_ms() + SETTLE_MS, Ordering::Relaxed);
    }

    /// Whether every connector was installed and settled at `at_ms`.
    pub fn whole_at(&self, at_ms: i64) -> bool {
        at_ms >= self.whole_from_ms.load(Ordering::Relaxed)
    }

    pub fn stopping(&self) -> bool {
        self.stop.load(Ordering::Relaxed)
    }

    /// Whether a call that started at `start_ms` has waited past `callMs` + [`GRACE`], not
    /// counting the time the runtime was down on purpose since.
    pub fn overdue(&self, start_ms: i64) -> bool {
        let now = now_ms();
        let down = overlap(&lock(&self.outages), start_ms, now);
        let limit = CALL_MS as i64 + GRACE.as_millis() as i64;
        now - start_ms - down > limit
    }

    /// Counts one chaos action and logs it with its time into the run.
    pub fn count(&self, action: &'static str) {
        *lock(&self.actions).entry(action).or_default() += 1;
        let at = (now_ms() - self.began_ms) as f64 / 1000.0;
        eprintln!("tutti-soak: {at:7.1} s {action}");
    }

    pub fn fault(&self, what: String) {
        eprintln!("tutti-soak: {what}");
        lock(&self.faults).push(what);
    }
}

/// Reads a worker's key and generation from its environment, if it is still there.
pub fn worker_of(pid: u32) -> Option<(String, u64)> {
    let env = tutti_tests::proc_tree::environ(pid)?;
    let get = |name: &str| env.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone());
    let key = get("TUTTI_WORKER_KEY")?;
    let generation = get("TUTTI_WORKER_GENERATION")?.parse().ok()?;
    Some((key, generation))
}

/// A pause that ends early when the soak stops.
pub fn nap(shared: &Shared, d: Duration) {
    let end = std::time::Instant::now() + d;
    while !shared.stopping() {
        let left = end.saturating_duration_since(std::time::Instant::now());
        if left.is_zero() {
            return;
        }
        std::thread::sleep(left.min(Duration::from_millis(100)));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn overlap_counts_only_the_covered_part() {
        let o = [
            Outage {
                from_ms: 100,
                to_ms: Some(200),
            },
            Outage {
                from_ms: 500,
                to_ms: None,
            },
        ];
        assert_eq!(overlap(&o, 0, 50), 0);
        assert_eq!(overlap(&o, 150, 300), 50);
        assert_eq!(overlap(&o, 0, 600), 200);
    }

    #[test]
    fn a_replaced_token_is_revoked_when_the_command_returned() {
        let mut book = TokenBook::default();
        book.issued("a", "t1".into(), 10);
        let first = book.held("a").serial;
        book.issued("a", "t2".into(), 20);
        assert_eq!(book.revoked.get(&first), Some(&20));
        assert_eq!(book.held("a").token.as_deref(), Some("t2"));
        book.end("a", 30);
        assert!(book.held("a").token.is_none());
        // Ending it again keeps the first time.
        book.end("a", 40);
        assert_eq!(book.revoked.get(&book.held("a").serial), Some(&30));
    }
}

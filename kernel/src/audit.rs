//! `logs/audit.jsonl`: one JSON object per line, append-only, rotated by size. Writing is off
//! every hot path: records go through a bounded channel to one writer task; when the channel
//! is full the record is dropped and counted (shown by `tutti status`), never waited for.
//! Only names and outcomes are written: never argument or result values, tokens or secrets.

use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use serde::Serialize;
use serde_json::Value;
use tokio::sync::mpsc;

const CAPACITY: usize = 4096;
/// Rotate when the file grows past this (the previous file is kept as `audit.jsonl.1`).
const MAX_BYTES: u64 = 16 * 1024 * 1024;

pub struct Audit {
    tx: mpsc::Sender<Value>,
    /// Records dropped by the kernel: the queue was full, or writing them failed.
    dropped: Arc<AtomicU64>,
    /// Records dropped by the frontend before they reached the kernel.
    frontend_dropped: AtomicU64,
}

impl Audit {
    /// Starts the writer task. `TUTTI_AUDIT_STALL_MS` (test knob) makes the writer sleep
    /// that long per record before writing them, to prove a slow disk never slows calls down.
    pub fn start(path: PathBuf) -> Audit {
        let (tx, rx) = mpsc::channel(CAPACITY);
        let stall = std::env::var("TUTTI_AUDIT_STALL_MS")
            .ok()
            .and_then(|v| v.parse::<u64>().ok())
            .map(Duration::from_millis);
        let dropped = Arc::new(AtomicU64::new(0));
        match repair_torn_tail(&path) {
            Ok(0) => {}
            Ok(torn) => tracing::warn!(
                path = %path.display(),
                bytes = torn,
                "the audit log ended in a record a crash cut short; removed it"
            ),
            Err(e) => {
                tracing::warn!(path = %path.display(), error = %e, "cannot check the end of the audit log")
            }
        }
        tokio::spawn(writer(
            Sink::new(path, MAX_BYTES, dropped.clone()),
            rx,
            stall,
        ));
        Audit {
            tx,
            dropped,
            frontend_dropped: AtomicU64::new(0),
        }
    }

    /// Queues one record; adds the time.
    pub fn record(&self, event: Event) {
        match &event {
            Event::Fence { connector, .. } => crate::telemetry::otel_counts::fence(connector),
            Event::Commit { connector, .. } => crate::telemetry::otel_counts::commit(connector),
            _ => {}
        }
        if self.tx.try_send(event.record(&now_rfc3339())).is_err() {
            self.dropped.fetch_add(1, Ordering::Relaxed);
        }
    }

    pub fn note_frontend_dropped(&self, total: u64) {
        self.frontend_dropped.fetch_max(total, Ordering::Relaxed);
    }

    pub fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed) + self.frontend_dropped.load(Ordering::Relaxed)
    }
}

/// Every kind of audit record. The serialised form is one `audit.jsonl` line: the fields
/// below (names as written), `event` (the variant's name in snake case) and `time`, with
/// the keys in alphabetical order. Only names and outcomes: never values, tokens or secrets.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum Event {
    /// The trust step of an install: what the user confirmed (names and the launch line).
    Install {
        connector: String,
        version: String,
        sha256: String,
        upgraded: bool,
        #[serde(rename = "confirmedLaunch")]
        confirmed_launch: Vec<String>,
        #[serde(rename = "allowCommands")]
        allow_commands: Vec<String>,
        #[serde(rename = "allowEnv")]
        allow_env: Vec<String>,
    },
    Uninstall {
        connector: String,
    },
    /// An install that the skill scan would have refused, allowed by the user
    /// (`--allow-skill-findings`): what was found, one `file:line: what` line each.
    SkillFindingsAllowed {
        connector: String,
        sha256: String,
        findings: Vec<String>,
    },
    /// Secrets stored by name (never their values), and the declared ones still missing.
    Connect {
        connector: String,
        secrets: Vec<String>,
        missing: Vec<String>,
    },
    Disconnect {
        connector: String,
    },
    /// An OAuth login completed (SPEC §10): the scopes asked for and when the access token
    /// expires (Unix ms, 0 unknown). Never a token or code.
    OauthLogin {
        connector: String,
        scopes: Vec<String>,
        #[serde(rename = "expiresUnixMs")]
        expires_unix_ms: i64,
    },
    /// An access token was refreshed (`rotated`: a new refresh token replaced the old one).
    OauthRefresh {
        connector: String,
        rotated: bool,
        #[serde(rename = "expiresUnixMs")]
        expires_unix_ms: i64,
    },
    OauthRefreshFailed {
        connector: String,
        reason: String,
    },
    /// `disconnect` of an OAuth connector: whether the server offered revocation and it
    /// succeeded (`outcome`: revoked | not_offered | failed: …).
    OauthRevoke {
        connector: String,
        outcome: String,
    },
    /// What a worker was told to run: names of environment variables and headers only.
    Launch {
        connector: String,
        generation: u64,
        transport: String,
        argv: Vec<String>,
        cwd: String,
        url: String,
        env: Vec<String>,
        headers: Vec<String>,
    },
    Commit {
        connector: String,
        generation: u64,
        tools: usize,
        superseded: Option<u64>,
    },
    Refuse {
        connector: String,
        generation: u64,
        reason: String,
    },
    Fence {
        connector: String,
        generation: u64,
        reason: String,
    },
    Reinit {
        connector: String,
        generation: u64,
        reason: String,
    },
    UpgradeAbandoned {
        connector: String,
        version: String,
        current: String,
        reason: String,
    },
    SessionIssue {
        workspace: String,
        session: String,
    },
    SessionRevoke {
        workspace: String,
        session: String,
        all: bool,
        revoked: u32,
    },
    /// One tool call, as the frontend recorded it.
    Call {
        #[serde(rename = "callTime")]
        call_time: i64,
        workspace: String,
        session: String,
        tool: String,
        connector: String,
        generation: u64,
        risk: String,
        #[serde(rename = "durationUs")]
        duration_us: u64,
        outcome: String,
        #[serde(rename = "errorCode")]
        error_code: Option<i32>,
        /// What was called when it is not a tool: `prompt` (`tool` is the prompt's
        /// local name), `resource` (`tool` is the URI without query or fragment), `completion`.
        #[serde(skip_serializing_if = "Option::is_none")]
        kind: Option<String>,
        /// Relayed upstream requests, `<method>:<outcome>` (never contents).
        #[serde(skip_serializing_if = "Vec::is_empty")]
        relayed: Vec<String>,
        /// The person's decision on a confirmed high-risk call.
        #[serde(skip_serializing_if = "Option::is_none")]
        confirmation: Option<String>,
        /// Which channel answered the confirmation (person | agent).
        #[serde(rename = "confirmedVia", skip_serializing_if = "Option::is_none")]
        confirmed_via: Option<String>,
    },
    /// A high-risk call held for the person's confirmation (SPEC §12): `state` is pending,
    /// allowed, denied, expired or withdrawn (its call went away); `channel` names who
    /// answered (person | agent).
    Confirmation {
        id: String,
        workspace: String,
        session: String,
        connector: String,
        tool: String,
        state: String,
        #[serde(skip_serializing_if = "Option::is_none")]
        channel: Option<String>,
    },
    /// An offer of a pinned release that adds or changes definitions was held (SPEC §12).
    Hold {
        connector: String,
        generation: u64,
        /// The pin's hash and the held offer's (`sha256:…`).
        pinned: String,
        offered: String,
        /// `added …; changed …; removed …` (names only).
        changes: String,
    },
    /// `tutti connector approve`: the held offer committed and is the new pin.
    Approve {
        connector: String,
        generation: u64,
        pinned: String,
        changes: String,
    },
    /// `install --trust-updates`: the connector is opted out of review.
    TrustUpdates {
        connector: String,
        version: String,
    },
    /// A connector's circuit breaker changed state (`open`, `half_open`, `closed`).
    Circuit {
        connector: String,
        state: String,
        failures: u32,
        reason: String,
    },
}

impl Event {
    /// The record as written (keys sorted: `serde_json`'s map is ordered).
    pub fn record(&self, time: &str) -> Value {
        let mut v = serde_json::to_value(self).unwrap_or_else(|e| {
            // Only plain strings, numbers and lists: cannot fail; say so if it ever does.
            serde_json::json!({"event": "unrecordable", "error": e.to_string()})
        });
        if let Value::Object(m) = &mut v {
            m.insert("time".into(), Value::String(time.into()));
        }
        v
    }
}

/// Most records written with one `write`: whatever is queued when the writer wakes, up to this.
const BATCH_MAX: usize = 256;

async fn writer(mut sink: Sink, mut rx: mpsc::Receiver<Value>, stall: Option<Duration>) {
    let mut batch = Vec::with_capacity(BATCH_MAX);
    // Records arrive in bursts (the frontend ships a batch per 10 ms window): everything queued
    // goes out in one write, not one write per record.
    while rx.recv_many(&mut batch, BATCH_MAX).await > 0 {
        if let Some(d) = stall {
            tokio::time::sleep(d.saturating_mul(batch.len() as u32)).await;
        }
        sink.reopen_if_replaced();
        for record in batch.drain(..) {
            sink.push(&record.to_string());
        }
        sink.flush();
    }
}

/// The audit file as the writer sees it: the open file (if any), its size, the whole lines
/// not written yet, and whether writing is failing (one error line per failure burst).
struct Sink {
    path: PathBuf,
    max_bytes: u64,
    file: Option<std::fs::File>,
    size: u64,
    buf: String,
    /// Records in `buf`.
    pending: u64,
    failing: bool,
    dropped: Arc<AtomicU64>,
}

impl Sink {
    fn new(path: PathBuf, max_bytes: u64, dropped: Arc<AtomicU64>) -> Sink {
        Sink {
            // A file left by the last run counts: a nearly full one rotates before the first
            // batch that would take it past `max_bytes`, not one batch late.
            size: len_at(&path),
            path,
            max_bytes,
            file: None,
            buf: String::new(),
            pending: 0,
            failing: false,
            dropped,
        }
    }

    /// Adds one record, rotating first when it would take the file past `max_bytes`.
    fn push(&mut self, line: &str) {
        if self.size + (self.buf.len() + line.len() + 1) as u64 > self.max_bytes {
            self.flush();
            // Not open yet (the first batch after a start): a file left at `path` rotates too.
            if self.file.take().is_some() || self.size > 0 {
                let _ = std::fs::rename(&self.path, self.path.with_extension("jsonl.1"));
            }
            self.size = 0;
        }
        self.buf.push_str(line);
        self.buf.push('\n');
        self.pending += 1;
    }

    /// Drops the open file when `path` no longer names it (removed, replaced or moved by
    /// someone else): the next write opens the file at `path` again instead of appending to
    /// a file nobody can read.
    fn reopen_if_replaced(&mut self) {
        if let Some(f) = &self.file
            && !names_file(&self.path, f)
        {
            self.file = None;
            self.size = len_at(&self.path);
        }
    }

    /// Appends the pending lines (one write), opening the file first if it is not open. On
    /// failure the records are counted as dropped and the file is opened again next time.
    fn flush(&mut self) {
        if self.pending == 0 {
            return;
        }
        match self.write_pending() {
            Ok(()) => {
                self.size += self.buf.len() as u64;
                if self.failing {
                    self.failing = false;
                    tracing::info!(path = %self.path.display(), "the audit log is written again");
                }
            }
            Err(e) => {
                self.file = None;
                self.dropped.fetch_add(self.pending, Ordering::Relaxed);
                if !self.failing {
                    self.failing = true;
                    tracing::error!(
                        path = %self.path.display(),
                        error = %e,
                        "cannot write the audit log; records are dropped and counted (`tutti status`) until it can be written again"
                    );
                }
            }
        }
        self.buf.clear();
        self.pending = 0;
    }

    fn write_pending(&mut self) -> std::io::Result<()> {
        let file = match &mut self.file {
            Some(f) => f,
            None => {
                let f = crate::housekeeping::open_log(&self.path)?;
                self.size = f.metadata()?.len();
                self.file.insert(f)
            }
        };
        file.write_all(self.buf.as_bytes())
    }
}

/// A kernel killed in the middle of a write (a large batch is written in pieces, and a kill
/// ends the write between them) leaves a last line without its newline: a record cut short.
/// It is cut off at start, before anything is appended, so every line of the file stays one
/// whole record (the next one would otherwise be glued to the fragment). Returns how many
/// bytes were cut (0 when the file ends with a newline, is empty or does not exist).
fn repair_torn_tail(path: &std::path::Path) -> std::io::Result<u64> {
    use std::io::{Read, Seek, SeekFrom};
    let mut opts = std::fs::OpenOptions::new();
    opts.read(true).write(true);
    // As `housekeeping::open_log`: never through a link, never blocking on a FIFO.
    #[cfg(unix)]
    {
        use nix::fcntl::OFlag;
        use std::os::unix::fs::OpenOptionsExt;
        opts.custom_flags((OFlag::O_NOFOLLOW | OFlag::O_NONBLOCK).bits());
    }
    let mut file = match opts.open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(0),
        Err(e) => return Err(e),
    };
    let meta = file.metadata()?;
    if !meta.is_file() {
        return Ok(0);
    }
    let len = meta.len();
    let mut end = len;
    let mut chunk = vec![0u8; 64 * 1024];
    while end > 0 {
        let start = end.saturating_sub(chunk.len() as u64);
        let part = &mut chunk[..(end - start) as usize];
        file.seek(SeekFrom::Start(start))?;
        file.read_exact(part)?;
        if let Some(i) = part.iter().rposition(|b| *b == b'\n') {
            end = start + i as u64 + 1;
            break;
        }
        end = start;
    }
    if end < len {
        file.set_len(end)?;
        file.sync_all()?;
    }
    Ok(len - end)
}

/// The length of the file at `path` (0 when there is none or it cannot be read).
fn len_at(path: &std::path::Path) -> u64 {
    std::fs::metadata(path).map_or(0, |m| m.len())
}

/// Whether `path` still names the open file `file` (same device and inode; always true where
/// that cannot be told).
fn names_file(path: &std::path::Path, file: &std::fs::File) -> bool {
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        match (std::fs::symlink_metadata(path), file.metadata()) {
            (Ok(a), Ok(b)) => a.dev() == b.dev() && a.ino() == b.ino(),
            _ => false,
        }
    }
    #[cfg(not(unix))]
    {
        let _ = (path, file);
        true
    }
}

fn now_rfc3339() -> String {
    let d = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    let secs = d.as_secs() as i64;
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    let (y, m, dd) = civil_from_days(days);
    format!(
        "{y:04}-{m:02}-{dd:02}T{:02}:{:02}:{:02}.{:03}Z",
        rem / 3600,
        (rem % 3600) / 60,
        rem % 60,
        d.subsec_millis()
    )
}

/// Days since 1970-01-01 → (year, month, day), proleptic Gregorian (H. Hinnant's algorithm).
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (if m <= 2 { y + 1 } else { y }, m, d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates() {
        assert_eq!(civil_from_days(0), (1970, 1, 1));
        assert_eq!(civil_from_days(20_786), (2026, 11, 29));
        assert_eq!(civil_from_days(11_016), (2000, 2, 29));
    }

    fn lines(path: &std::path::Path) -> Vec<u64> {
        std::fs::read_to_string(path)
            .unwrap_or_default()
            .lines()
            .map(|l| {
                let v: Value = serde_json::from_str(l).expect("each line is one JSON object");
                v["n"].as_u64().expect("n")
            })
            .collect()
    }

    #[tokio::test]
    async fn queued_records_are_written_whole_in_order_and_rotated_by_size() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("audit.jsonl");
        let (tx, rx) = mpsc::channel(CAPACITY);
        // 300 records queued before the writer runs: more than one batch.
        for n in 0..300u64 {
            tx.try_send(serde_json::json!({ "n": n })).expect("queued");
        }
        drop(tx);
        // `{"n":123}` plus a newline is at most 10 bytes: about 100 lines per file.
        let dropped = Arc::new(AtomicU64::new(0));
        writer(Sink::new(path.clone(), 1000, dropped.clone()), rx, None).await;
        assert_eq!(dropped.load(Ordering::Relaxed), 0);
        let (old, new) = (lines(&path.with_extension("jsonl.1")), lines(&path));
        assert!(std::fs::metadata(&path).expect("audit file").len() <= 1000);
        assert!(!old.is_empty() && !new.is_empty(), "rotated at least once");
        // The newest lines are in the live file, the ones before them in `.1`, none cut.
        assert_eq!(new.last(), Some(&299));
        let kept: Vec<u64> = old.iter().chain(&new).copied().collect();
        let first = kept[0];
        assert_eq!(kept, (first..300).collect::<Vec<_>>());
    }

    #[test]
    #[cfg_attr(
        windows,
        ignore = "under Wine 8 a removed file keeps its name while the writer holds it open, so the replacement it checks for never appears"
    )]
    fn failed_writes_are_counted_and_the_file_is_opened_again() -> std::io::Result<()> {
        let dir = tempfile::tempdir()?;
        let path = dir.path().join("audit.jsonl");
        // Not writable at start: a directory stands where the file should be.
        std::fs::create_dir(&path)?;
        let dropped = Arc::new(AtomicU64::new(0));
        let mut sink = Sink::new(path.clone(), 1 << 20, dropped.clone());
        sink.push(r#"{"n":0}"#);
        sink.push(r#"{"n":1}"#);
        sink.flush();
        assert_eq!(dropped.load(Ordering::Relaxed), 2);
        assert!(sink.failing);
        std::fs::remove_dir(&path)?;
        sink.push(r#"{"n":2}"#);
        sink.flush();
        assert_eq!(lines(&path), vec![2]);
        assert!(!sink.failing);
        // Removed behind the writer's back: the next batch goes to a new file at the path.
        std::fs::remove_file(&path)?;
        sink.reopen_if_replaced();
        sink.push(r#"{"n":3}"#);
        sink.flush();
        assert_eq!(lines(&path), vec![3]);
        assert_eq!(dropped.load(Ordering::Relaxed), 2);
        Ok(())
    }

    #[test]
    fn a_torn_last_record_is_cut_off_and_whole_ones_are_kept() -> std::io::Result<()> {
        let dir = tempfile::tempdir()?;
        let path = dir.path().join("audit.jsonl");
        assert_eq!(repair_torn_tail(&path)?, 0, "no file");
        let whole = "{\"event\":\"install\"}\n{\"event\":\"commit\"}\n";
        std::fs::write(&path, whole)?;
        assert_eq!(repair_torn_tail(&path)?, 0);
        assert_eq!(std::fs::read_to_string(&path)?, whole);
        std::fs::write(&path, format!("{whole}{{\"event\":\"unin"))?;
        assert_eq!(repair_torn_tail(&path)?, 14);
        assert_eq!(std::fs::read_to_string(&path)?, whole);
        // A fragment longer than one read chunk, and a file that is only a fragment.
        let long = "x".repeat(200 * 1024);
        std::fs::write(&path, format!("{whole}{long}"))?;
        assert_eq!(repair_torn_tail(&path)?, long.len() as u64);
        assert_eq!(std::fs::read_to_string(&path)?, whole);
        std::fs::write(&path, &long)?;
        assert_eq!(repair_torn_tail(&path)?, long.len() as u64);
        assert_eq!(std::fs::read_to_string(&path)?, "");
        Ok(())
    }

    #[test]
    fn a_nearly_full_file_from_the_last_run_rotates_before_the_first_batch() -> std::io::Result<()>
    {
        let dir = tempfile::tempdir()?;
        let path = dir.path().join("audit.jsonl");
        // The last run left 99 lines of 10 bytes: 990 of 1000 bytes.
        let old: String = (100..199).map(|n| format!("{{\"n\":{n}}}\n")).collect();
        std::fs::write(&path, &old)?;
        let mut sink = Sink::new(path.clone(), 1000, Arc::new(AtomicU64::new(0)));
        // 11 bytes each: the first already does not fit.
        sink.push(r#"{"n":1000}"#);
        sink.push(r#"{"n":1001}"#);
        sink.flush();
        assert!(std::fs::metadata(&path)?.len() <= 1000);
        assert_eq!(
            lines(&path.with_extension("jsonl.1")),
            (100..199).collect::<Vec<_>>()
        );
        assert_eq!(lines(&path), vec![1000, 1001]);
        Ok(())
    }

    /// The line `event` is written as at `T`.
    fn line(event: Event) -> String {
        event.record("T").to_string()
    }

    #[test]
    fn install_line() {
        let e = Event::Install {
            connector: "k".into(),
            version: "1.0.0".into(),
            sha256: "ab".into(),
            upgraded: false,
            confirmed_launch: vec!["node".into(), "s.js".into()],
            allow_commands: vec!["/bin/x".into()],
            allow_env: vec![],
        };
        assert_eq!(
            line(e),
            r#"{"allowCommands":["/bin/x"],"allowEnv":[],"confirmedLaunch":["node","s.js"],"connector":"k","event":"install","sha256":"ab","time":"T","upgraded":false,"version":"1.0.0"}"#
        );
    }

    #[test]
    fn uninstall_and_disconnect_lines() {
        for (e, want) in [
            (
                Event::Uninstall {
                    connector: "k".into(),
                },
                r#"{"connector":"k","event":"uninstall","time":"T"}"#,
            ),
            (
                Event::Disconnect {
                    connector: "k".into(),
                },
                r#"{"connector":"k","event":"disconnect","time":"T"}"#,
            ),
        ] {
            assert_eq!(line(e), want);
        }
    }

    #[test]
    fn connect_line() {
        let e = Event::Connect {
            connector: "k".into(),
            secrets: vec!["A".into()],
            missing: vec!["B".into()],
        };
        assert_eq!(
            line(e),
            r#"{"connector":"k","event":"connect","missing":["B"],"secrets":["A"],"time":"T"}"#
        );
    }

    #[test]
    fn launch_line() {
        let e = Event::Launch {
            connector: "k".into(),
            generation: 7,
            transport: "stdio".into(),
            argv: vec!["/bin/node".into(), "s.js".into()],
            cwd: "/r".into(),
            url: String::new(),
            env: vec!["PATH".into(), "TOKEN".into()],
            headers: vec![],
        };
        assert_eq!(
            line(e),
            r#"{"argv":["/bin/node","s.js"],"connector":"k","cwd":"/r","env":["PATH","TOKEN"],"event":"launch","generation":7,"headers":[],"time":"T","transport":"stdio","url":""}"#
        );
    }

    #[test]
    fn commit_line_with_and_without_a_superseded_generation() {
        let first = Event::Commit {
            connector: "k".into(),
            generation: 3,
            tools: 2,
            superseded: None,
        };
        assert_eq!(
            line(first),
            r#"{"connector":"k","event":"commit","generation":3,"superseded":null,"time":"T","tools":2}"#
        );
        let update = Event::Commit {
            connector: "k".into(),
            generation: 4,
            tools: 0,
            superseded: Some(3),
        };
        assert_eq!(
            line(update),
            r#"{"connector":"k","event":"commit","generation":4,"superseded":3,"time":"T","tools":0}"#
        );
    }

    #[test]
    fn refuse_line() {
        let refuse = Event::Refuse {
            connector: "k".into(),
            generation: 2,
            reason: "generation 2 refused: x".into(),
        };
        assert_eq!(
            line(refuse),
            r#"{"connector":"k","event":"refuse","generation":2,"reason":"generation 2 refused: x","time":"T"}"#
        );
    }

    #[test]
    fn fence_line() {
        let fence = Event::Fence {
            connector: "k".into(),
            generation: 2,
            reason: "worker exited".into(),
        };
        assert_eq!(
            line(fence),
            r#"{"connector":"k","event":"fence","generation":2,"reason":"worker exited","time":"T"}"#
        );
    }

    #[test]
    fn reinit_line() {
        let reinit = Event::Reinit {
            connector: "k".into(),
            generation: 2,
            reason: "session expired".into(),
        };
        assert_eq!(
            line(reinit),
            r#"{"connector":"k","event":"reinit","generation":2,"reason":"session expired","time":"T"}"#
        );
    }

    #[test]
    fn upgrade_abandoned_line() {
        let e = Event::UpgradeAbandoned {
            connector: "k".into(),
            version: "2.0.0".into(),
            current: "1.0.0".into(),
            reason: "it did not start".into(),
        };
        assert_eq!(
            line(e),
            r#"{"connector":"k","current":"1.0.0","event":"upgrade_abandoned","reason":"it did not start","time":"T","version":"2.0.0"}"#
        );
    }

    #[test]
    fn session_issue_line() {
        let issue = Event::SessionIssue {
            workspace: "w".into(),
            session: "s".into(),
        };
        assert_eq!(
            line(issue),
            r#"{"event":"session_issue","session":"s","time":"T","workspace":"w"}"#
        );
    }

    #[test]
    fn session_revoke_line() {
        let revoke = Event::SessionRevoke {
            workspace: String::new(),
            session: String::new(),
            all: true,
            revoked: 3,
        };
        assert_eq!(
            line(revoke),
            r#"{"all":true,"event":"session_revoke","revoked":3,"session":"","time":"T","workspace":""}"#
        );
    }

    #[test]
    fn call_line_with_and_without_an_error_code() {
        let call = |error_code| Event::Call {
            call_time: 1_700_000_000_000,
            workspace: "w".into(),
            session: "s".into(),
            tool: "k__echo".into(),
            connector: "k".into(),
            generation: 5,
            risk: "low".into(),
            duration_us: 420,
            outcome: "ok".into(),
            error_code,
            kind: None,
            relayed: Vec::new(),
            confirmation: None,
            confirmed_via: None,
        };
        assert_eq!(
            line(call(None)),
            r#"{"callTime":1700000000000,"connector":"k","durationUs":420,"errorCode":null,"event":"call","generation":5,"outcome":"ok","risk":"low","session":"s","time":"T","tool":"k__echo","workspace":"w"}"#
        );
        assert_eq!(
            line(call(Some(-32001))),
            r#"{"callTime":1700000000000,"connector":"k","durationUs":420,"errorCode":-32001,"event":"call","generation":5,"outcome":"ok","risk":"low","session":"s","time":"T","tool":"k__echo","workspace":"w"}"#
        );
    }
}

//! `logs/audit.jsonl`: one JSON object per line, append-only, rotated by size. Writing is off
//! every hot path: records go through a bounded channel to one writer task; when the channel
//! is full the record is dropped and counted (shown by `tutti status`), never waited for.
//! Only names and outcomes are written: never argument or result values, tokens or secrets.

use std::io::Write;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use serde_json::Value;
use tokio::sync::mpsc;

const CAPACITY: usize = 4096;
/// Rotate when the file grows past this (the previous file is kept as `audit.jsonl.1`).
const MAX_BYTES: u64 = 16 * 1024 * 1024;

pub struct Audit {
    tx: mpsc::Sender<Value>,
    dropped: AtomicU64,
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
        tokio::spawn(writer(path, rx, stall, MAX_BYTES));
        Audit {
            tx,
            dropped: AtomicU64::new(0),
            frontend_dropped: AtomicU64::new(0),
        }
    }

    /// Queues one record (`event` plus fields); adds the time.
    pub fn record(&self, event: &str, mut fields: Value) {
        if let Value::Object(m) = &mut fields {
            m.insert("event".into(), Value::String(event.into()));
            m.insert("time".into(), Value::String(now_rfc3339()));
        }
        if self.tx.try_send(fields).is_err() {
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

/// Most records written with one `write`: whatever is queued when the writer wakes, up to this.
const BATCH_MAX: usize = 256;

async fn writer(
    path: PathBuf,
    mut rx: mpsc::Receiver<Value>,
    stall: Option<Duration>,
    max_bytes: u64,
) {
    let open = |p: &PathBuf| {
        std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(p)
            .ok()
    };
    let mut file = open(&path);
    let mut size = std::fs::metadata(&path).map(|m| m.len()).unwrap_or(0);
    let mut batch = Vec::with_capacity(BATCH_MAX);
    let mut buf = String::new();
    // Records arrive in bursts (the frontend ships a batch per 10 ms window): everything queued
    // goes out in one write, not one write per record.
    while rx.recv_many(&mut batch, BATCH_MAX).await > 0 {
        if let Some(d) = stall {
            tokio::time::sleep(d.saturating_mul(batch.len() as u32)).await;
        }
        for record in batch.drain(..) {
            let line = record.to_string();
            if size + (buf.len() + line.len() + 1) as u64 > max_bytes {
                write(&mut file, &mut buf);
                let _ = std::fs::rename(&path, path.with_extension("jsonl.1"));
                file = open(&path);
                size = 0;
            }
            buf.push_str(&line);
            buf.push('\n');
        }
        size += write(&mut file, &mut buf);
    }
}

/// Appends `buf` (whole lines) to the file and empties it; the bytes written.
fn write(file: &mut Option<std::fs::File>, buf: &mut String) -> u64 {
    let written = match file.as_mut() {
        Some(f) if !buf.is_empty() => match f.write_all(buf.as_bytes()) {
            Ok(()) => buf.len() as u64,
            Err(_) => 0,
        },
        _ => 0,
    };
    buf.clear();
    written
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
        writer(path.clone(), rx, None, 1000).await;
        let (old, new) = (lines(&path.with_extension("jsonl.1")), lines(&path));
        assert!(std::fs::metadata(&path).expect("audit file").len() <= 1000);
        assert!(!old.is_empty() && !new.is_empty(), "rotated at least once");
        // The newest lines are in the live file, the ones before them in `.1`, none cut.
        assert_eq!(new.last(), Some(&299));
        let kept: Vec<u64> = old.iter().chain(&new).copied().collect();
        let first = kept[0];
        assert_eq!(kept, (first..300).collect::<Vec<_>>());
    }
}

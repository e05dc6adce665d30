//! `logs/audit.jsonl` read as it grows, across the kernel's rotation (the file is renamed to
//! `audit.jsonl.1` at 16 MiB and a new one begun), so that no record of a long run is missed:
//! the call records, and the commits and fences that tell which generation was live when.

use std::io::{Read, Seek, SeekFrom};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::Value;

use super::world::{Shared, lock, nap};

/// A call record of the frontend (`event: call`).
#[derive(Clone, Debug, PartialEq)]
pub struct CallRecord {
    /// `callTime`: Unix ms when the frontend recorded it.
    pub at_ms: i64,
    pub workspace: String,
    pub session: String,
    pub tool: String,
    pub connector: String,
    pub generation: u64,
    pub outcome: String,
}

/// A generation becoming live (`commit`, with the one it superseded) or ending (`fence`).
#[derive(Clone, Debug, PartialEq)]
pub enum RouteRecord {
    Commit {
        at_ms: i64,
        connector: String,
        generation: u64,
        superseded: Option<u64>,
    },
    Fence {
        at_ms: i64,
        connector: String,
        generation: u64,
    },
}

/// What the soak keeps of the audit log.
#[derive(Default)]
pub struct Audit {
    pub calls: Vec<CallRecord>,
    pub routes: Vec<RouteRecord>,
    /// Lines that were not JSON.
    pub unreadable: usize,
}

/// Unix ms of the kernel's `YYYY-MM-DDTHH:MM:SS.fffZ`.
pub fn rfc3339_ms(s: &str) -> Option<i64> {
    chrono::DateTime::parse_from_rfc3339(s)
        .ok()
        .map(|t| t.timestamp_millis())
}

impl Audit {
    /// Keeps what one line says.
    pub fn take(&mut self, line: &str) {
        let Ok(v) = serde_json::from_str::<Value>(line) else {
            self.unreadable += 1;
            return;
        };
        let text = |k: &str| v[k].as_str().unwrap_or("").to_owned();
        let generation = v["generation"].as_u64().unwrap_or(0);
        let at_ms = v["time"].as_str().and_then(rfc3339_ms).unwrap_or(0);
        match v["event"].as_str() {
            Some("call") => self.calls.push(CallRecord {
                at_ms: v["callTime"].as_i64().unwrap_or(0),
                workspace: text("workspace"),
                session: text("session"),
                tool: text("tool"),
                connector: text("connector"),
                generation,
                outcome: text("outcome"),
            }),
            Some("commit") => self.routes.push(RouteRecord::Commit {
                at_ms,
                connector: text("connector"),
                generation,
                superseded: v["superseded"].as_u64(),
            }),
            Some("fence") => self.routes.push(RouteRecord::Fence {
                at_ms,
                connector: text("connector"),
                generation,
            }),
            _ => {}
        }
    }
}

/// Where the tail stands: the file it reads (by inode) and how far.
#[derive(Default)]
pub struct Tail {
    inode: Option<u64>,
    offset: u64,
    partial: Vec<u8>,
}

/// Appends the complete lines of `path` from `offset` to `audit`; the new offset.
fn read_from(path: &Path, offset: u64, partial: &mut Vec<u8>, audit: &mut Audit) -> u64 {
    let Ok(mut f) = std::fs::File::open(path) else {
        return offset;
    };
    if f.seek(SeekFrom::Start(offset)).is_err() {
        return offset;
    }
    let mut bytes = Vec::new();
    let read = f.read_to_end(&mut bytes).unwrap_or(0) as u64;
    partial.extend_from_slice(&bytes);
    if let Some(end) = partial.iter().rposition(|b| *b == b'\n') {
        let lines: Vec<u8> = partial.drain(..=end).collect();
        for line in String::from_utf8_lossy(&lines).lines() {
            if !line.trim().is_empty() {
                audit.take(line);
            }
        }
    }
    offset + read
}

impl Tail {
    /// Reads what was added since the last step; when the file was rotated, first the rest
    /// of the rotated one.
    pub fn step(&mut self, path: &Path, audit: &mut Audit) {
        let Ok(meta) = std::fs::metadata(path) else {
            return;
        };
        if self.inode.is_some_and(|i| i != meta.ino()) {
            let rotated = path.with_extension("jsonl.1");
            if std::fs::metadata(&rotated).is_ok_and(|m| Some(m.ino()) == self.inode) {
                read_from(&rotated, self.offset, &mut self.partial, audit);
            }
            self.partial.clear();
            self.offset = 0;
        }
        self.inode = Some(meta.ino());
        self.offset = read_from(path, self.offset, &mut self.partial, audit);
    }
}

/// The audit log's path in `state`.
pub fn path(state: &Path) -> PathBuf {
    tutti_rules::state_dir::layout::audit_log(state)
}

/// Reads the audit log every half second until the soak stops.
pub fn tailer(
    shared: Arc<Shared>,
    audit: Arc<Mutex<Audit>>,
    tail: Arc<Mutex<Tail>>,
) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        let file = path(&shared.state_dir);
        while !shared.stopping() {
            lock(&tail).step(&file, &mut lock(&audit));
            nap(&shared, Duration::from_millis(500));
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_and_records_are_read() {
        assert_eq!(rfc3339_ms("1970-01-01T00:00:01.500Z"), Some(1500));
        let mut a = Audit::default();
        a.take(r#"{"event":"call","callTime":5,"workspace":"w","session":"s","tool":"fa_echo","connector":"fa","generation":7,"outcome":"ok","time":"T"}"#);
        a.take(r#"{"event":"commit","connector":"fa","generation":8,"superseded":7,"tools":2,"time":"1970-01-01T00:00:00.010Z"}"#);
        a.take(r#"{"event":"fence","connector":"fa","generation":8,"reason":"x","time":"1970-01-01T00:00:00.020Z"}"#);
        a.take("not json");
        assert_eq!(a.calls.len(), 1);
        assert_eq!(a.calls[0].generation, 7);
        assert_eq!(
            a.routes,
            vec![
                RouteRecord::Commit {
                    at_ms: 10,
                    connector: "fa".into(),
                    generation: 8,
                    superseded: Some(7)
                },
                RouteRecord::Fence {
                    at_ms: 20,
                    connector: "fa".into(),
                    generation: 8
                }
            ]
        );
        assert_eq!(a.unreadable, 1);
    }

    #[test]
    fn a_rotation_loses_no_line() -> std::io::Result<()> {
        let dir = tempfile::tempdir()?;
        let file = dir.path().join("audit.jsonl");
        let line = |n: i64| format!("{{\"event\":\"call\",\"callTime\":{n}}}\n");
        std::fs::write(&file, line(1))?;
        let (mut tail, mut audit) = (Tail::default(), Audit::default());
        tail.step(&file, &mut audit);
        // Written, then rotated, then a new file begun, all between two steps; and a line
        // cut in half.
        std::fs::OpenOptions::new()
            .append(true)
            .open(&file)
            .and_then(|mut f| std::io::Write::write_all(&mut f, line(2).as_bytes()))?;
        std::fs::rename(&file, file.with_extension("jsonl.1"))?;
        std::fs::write(&file, format!("{}{{\"event\":\"ca", line(3)))?;
        tail.step(&file, &mut audit);
        std::fs::OpenOptions::new()
            .append(true)
            .open(&file)
            .and_then(|mut f| std::io::Write::write_all(&mut f, b"ll\",\"callTime\":4}\n"))?;
        tail.step(&file, &mut audit);
        let times: Vec<i64> = audit.calls.iter().map(|c| c.at_ms).collect();
        assert_eq!(times, [1, 2, 3, 4]);
        Ok(())
    }
}

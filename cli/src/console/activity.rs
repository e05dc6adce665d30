//! The live activity view: a server-sent event stream of the audit log
//! (`logs/audit.jsonl`, written by the kernel), read by this console from the state dir.
//! Each event is one record reduced to names and outcomes (the audit log holds nothing
//! else: never arguments, results, tokens or secrets), filtered by connector and outcome.

use std::convert::Infallible;
use std::io::{Read, Seek, SeekFrom};
use std::path::PathBuf;
use std::time::Duration;

use axum::extract::{Query, State};
use axum::response::sse::{Event, KeepAlive, Sse};
use futures_util::Stream;
use serde_json::{Map, Value};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;

use super::access::Shared;

/// How often the file is read for new records (a call shows within a second).
const POLL: Duration = Duration::from_millis(200);
/// The records shown at once when the view opens.
const BACKLOG: usize = 100;
/// The fields a view shows.
const FIELDS: [&str; 12] = [
    "time",
    "event",
    "connector",
    "tool",
    "risk",
    "outcome",
    "durationUs",
    "generation",
    "reason",
    "workspace",
    "session",
    "version",
];

#[derive(serde::Deserialize, Clone, Default)]
pub(crate) struct Filter {
    #[serde(default)]
    connector: String,
    #[serde(default)]
    outcome: String,
}

impl Filter {
    fn accepts(&self, record: &Value) -> bool {
        let field = |name: &str| record.get(name).and_then(Value::as_str).unwrap_or("");
        (self.connector.is_empty() || field("connector") == self.connector)
            && (self.outcome.is_empty() || field("outcome") == self.outcome)
    }
}

/// Only the named fields of a record.
fn reduced(record: &Value) -> Value {
    let mut out = Map::new();
    for name in FIELDS {
        if let Some(v) = record.get(name) {
            out.insert(name.to_owned(), v.clone());
        }
    }
    Value::Object(out)
}

pub(crate) async fn events(
    State(c): State<Shared>,
    Query(filter): Query<Filter>,
) -> Sse<impl Stream<Item = Result<Event, Infallible>>> {
    let (tx, rx) = mpsc::channel(256);
    let path = tutti_rules::state_dir::layout::audit_log(&c.state_dir);
    tokio::spawn(tail(path, filter, tx));
    Sse::new(ReceiverStream::new(rx)).keep_alive(KeepAlive::default())
}

/// Sends the last records, then every new one, until the page goes away.
async fn tail(path: PathBuf, filter: Filter, tx: mpsc::Sender<Result<Event, Infallible>>) {
    let mut reader = Tail {
        path,
        offset: 0,
        partial: String::new(),
    };
    let backlog: Vec<Value> = reader
        .read_new()
        .into_iter()
        .filter(|r| filter.accepts(r))
        .collect();
    let skip = backlog.len().saturating_sub(BACKLOG);
    for record in backlog.into_iter().skip(skip) {
        if !send(&tx, &record).await {
            return;
        }
    }
    loop {
        tokio::select! {
            _ = tokio::time::sleep(POLL) => {}
            _ = tx.closed() => return,
        }
        for record in reader.read_new() {
            if filter.accepts(&record) && !send(&tx, &record).await {
                return;
            }
        }
    }
}

async fn send(tx: &mpsc::Sender<Result<Event, Infallible>>, record: &Value) -> bool {
    let event = Event::default()
        .event("audit")
        .data(reduced(record).to_string());
    tx.send(Ok(event)).await.is_ok()
}

/// The audit file from where it was last read (from the start after a rotation).
struct Tail {
    path: PathBuf,
    offset: u64,
    partial: String,
}

impl Tail {
    fn read_new(&mut self) -> Vec<Value> {
        let Ok(mut file) = std::fs::File::open(&self.path) else {
            return Vec::new();
        };
        let len = file.metadata().map(|m| m.len()).unwrap_or(0);
        if len < self.offset {
            // Rotated: the new file is read from its start.
            self.offset = 0;
            self.partial.clear();
        }
        let mut bytes = Vec::new();
        if file.seek(SeekFrom::Start(self.offset)).is_err() || file.read_to_end(&mut bytes).is_err()
        {
            return Vec::new();
        }
        self.offset += bytes.len() as u64;
        self.partial.push_str(&String::from_utf8_lossy(&bytes));
        let Some(end) = self.partial.rfind('\n') else {
            return Vec::new();
        };
        let complete: String = self.partial.drain(..=end).collect();
        complete
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_are_reduced_and_filtered() {
        let r = serde_json::json!({"event": "call", "connector": "a", "outcome": "ok", "tool": "a_x", "extra": "no"});
        assert_eq!(reduced(&r).get("extra"), None);
        assert_eq!(reduced(&r).get("tool"), Some(&Value::from("a_x")));
        let f = Filter {
            connector: "a".into(),
            outcome: String::new(),
        };
        assert!(f.accepts(&r));
        let f = Filter {
            connector: String::new(),
            outcome: "tool_error".into(),
        };
        assert!(!f.accepts(&r));
    }
}

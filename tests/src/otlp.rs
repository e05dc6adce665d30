//! The OTLP/HTTP receiver of the observability tests: `tests/py/otlp_receiver.py`,
//! which decodes what arrives with the official `opentelemetry-proto` package from PyPI
//! (pinned in `scripts/install-test-tools`), run with the test venv's Python. Each request it
//! decoded is a line of its capture file: the message in protobuf's JSON mapping (camelCase
//! fields, 64-bit integers as strings), trace and span ids in hex. Killed when dropped.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::channel;
use std::time::Duration;

use serde_json::Value;

use crate::py::py_script;
use crate::support::require_python;

/// How long the receiver may take to listen (Python's start on a loaded machine).
const LISTENING: Duration = Duration::from_secs(30);

/// A running receiver.
pub struct OtlpReceiver {
    child: Child,
    port: u16,
    capture: PathBuf,
    _dir: tempfile::TempDir,
}

impl OtlpReceiver {
    /// Starts the receiver on 127.0.0.1:`port` (0: a free port) and waits until it listens.
    pub fn start(port: u16) -> OtlpReceiver {
        let python = require_python();
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("a temporary directory: {e}"));
        let capture = dir.path().join("otlp.jsonl");
        let stderr = dir.path().join("otlp.stderr");
        let mut child = Command::new(&python)
            .arg(py_script("otlp_receiver.py"))
            .arg(port.to_string())
            .arg(&capture)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(
                std::fs::File::create(&stderr)
                    .unwrap_or_else(|e| panic!("cannot create {}: {e}", stderr.display())),
            )
            .spawn()
            .unwrap_or_else(|e| panic!("cannot run {}: {e}", python.display()));
        let stdout = child
            .stdout
            .take()
            .unwrap_or_else(|| panic!("the receiver's stdout"));
        let (tx, rx) = channel();
        std::thread::spawn(move || {
            let mut line = String::new();
            let _ = BufReader::new(stdout).read_line(&mut line);
            let _ = tx.send(line);
        });
        let line = rx.recv_timeout(LISTENING).unwrap_or_default();
        let Some(port) = line
            .trim()
            .strip_prefix("listening on ")
            .and_then(|p| p.parse().ok())
        else {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "the OTLP receiver did not start listening (run scripts/install-test-tools for opentelemetry-proto): {line:?}\n{}",
                std::fs::read_to_string(&stderr).unwrap_or_default()
            );
        };
        OtlpReceiver {
            child,
            port,
            capture,
            _dir: dir,
        }
    }

    /// `http://127.0.0.1:PORT`, for `OTEL_EXPORTER_OTLP_ENDPOINT`.
    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// The capture file (one JSON line per request), e.g. for a secret scan.
    pub fn capture_file(&self) -> &std::path::Path {
        &self.capture
    }

    /// What arrived so far.
    pub fn captured(&self) -> Captured {
        let text = std::fs::read_to_string(&self.capture).unwrap_or_default();
        let mut c = Captured::default();
        for line in text.lines() {
            let Ok(mut v) = serde_json::from_str::<Value>(line) else {
                continue;
            };
            c.hits += 1;
            let request = v["request"].take();
            match v["path"].as_str() {
                Some("/v1/traces") if !request.is_null() => c.traces.push(request),
                Some("/v1/metrics") if !request.is_null() => c.metrics.push(request),
                _ => {}
            }
        }
        c
    }
}

impl Drop for OtlpReceiver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// What a receiver decoded, in arrival order.
#[derive(Debug, Default)]
pub struct Captured {
    /// `ExportTraceServiceRequest`s.
    pub traces: Vec<Value>,
    /// `ExportMetricsServiceRequest`s.
    pub metrics: Vec<Value>,
    /// Every request, whatever its path and whether it decoded.
    pub hits: usize,
}

/// A resource's attribute `key` as a string.
fn resource_attr(resource: &Value, key: &str) -> Option<String> {
    attr(&resource["resource"]["attributes"], key)
}

/// Attribute `key` of an OTLP attribute list, as a string.
pub fn attr(attributes: &Value, key: &str) -> Option<String> {
    attributes.as_array()?.iter().find_map(|a| {
        (a["key"] == key).then(|| {
            let v = &a["value"];
            v["stringValue"]
                .as_str()
                .map(str::to_owned)
                .unwrap_or_else(|| v.to_string())
        })
    })
}

/// A number data point's value (`asInt` is a string in the JSON mapping).
pub fn point_value(point: &Value) -> i64 {
    let int = &point["asInt"];
    int.as_str()
        .and_then(|s| s.parse().ok())
        .or_else(|| int.as_i64())
        .or_else(|| point["asDouble"].as_f64().map(|d| d as i64))
        .unwrap_or(0)
}

impl Captured {
    /// Every span received, with its resource's `service.name`.
    pub fn spans(&self) -> Vec<(String, Value)> {
        let mut out = Vec::new();
        for rs in self
            .traces
            .iter()
            .flat_map(|r| r["resourceSpans"].as_array().into_iter().flatten())
        {
            let service = resource_attr(rs, "service.name").unwrap_or_default();
            for ss in rs["scopeSpans"].as_array().into_iter().flatten() {
                for span in ss["spans"].as_array().into_iter().flatten() {
                    out.push((service.clone(), span.clone()));
                }
            }
        }
        out
    }

    /// The sum and gauge data points of metric `name`, per export in arrival order, from the
    /// processes whose `tutti.process.role` is `role` (any with `None`).
    pub fn metric_points(&self, role: Option<&str>, name: &str) -> Vec<Vec<Value>> {
        let mut out = Vec::new();
        for rm in self
            .metrics
            .iter()
            .flat_map(|r| r["resourceMetrics"].as_array().into_iter().flatten())
        {
            if role.is_some_and(|r| resource_attr(rm, "tutti.process.role").as_deref() != Some(r)) {
                continue;
            }
            let metrics = rm["scopeMetrics"]
                .as_array()
                .into_iter()
                .flatten()
                .flat_map(|s| s["metrics"].as_array().into_iter().flatten());
            for m in metrics.filter(|m| m["name"] == name) {
                let points = if m["sum"].is_object() {
                    &m["sum"]["dataPoints"]
                } else {
                    &m["gauge"]["dataPoints"]
                };
                out.push(points.as_array().cloned().unwrap_or_default());
            }
        }
        out
    }

    /// The kernel's metric `name` as last exported: the value per `tutti.connector` ("" for
    /// a metric without one). Panics on any other attribute (only connector keys may be
    /// exported by the kernel).
    pub fn kernel_metric(&self, name: &str) -> BTreeMap<String, i64> {
        let mut out = BTreeMap::new();
        for p in self.metric_points(Some("kernel"), name).iter().flatten() {
            let attributes = p["attributes"].as_array().cloned().unwrap_or_default();
            for a in &attributes {
                assert_eq!(a["key"], "tutti.connector", "{name}: attribute {a}");
            }
            let key = attr(&p["attributes"], "tutti.connector").unwrap_or_default();
            out.insert(key, point_value(p));
        }
        out
    }

    /// Everything decoded, as text (for the secret scans).
    pub fn text(&self) -> String {
        let json = |v: &Vec<Value>| serde_json::to_string(v).unwrap_or_default();
        json(&self.traces) + &json(&self.metrics)
    }
}

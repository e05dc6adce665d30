//! The manifest's `circuit` settings (SPEC §12): `{"failures": N, "windowMs": W,
//! "openMs": O}`, each optional, defaults 5 failures within 30 s and 30 s open. The breaker
//! itself runs in the frontend (`mcp-frontend/src/call/circuit.rs`); the kernel validates the
//! settings at install and hands them on with the route.

use serde_json::{Map, Value};

pub const DEFAULT_FAILURES: u32 = 5;
pub const DEFAULT_WINDOW_MS: u32 = 30_000;
pub const DEFAULT_OPEN_MS: u32 = 30_000;
/// More failures than this before opening would never open in practice.
pub const MAX_FAILURES: u32 = 10_000;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Settings {
    pub failures: u32,
    pub window_ms: u32,
    pub open_ms: u32,
}

impl Default for Settings {
    fn default() -> Settings {
        Settings {
            failures: DEFAULT_FAILURES,
            window_ms: DEFAULT_WINDOW_MS,
            open_ms: DEFAULT_OPEN_MS,
        }
    }
}

/// `circuit` of a manifest's root: the settings, or one `(field, problem)` per problem.
pub fn parse(root: &Map<String, Value>) -> Result<Settings, Vec<(String, String)>> {
    let mut s = Settings::default();
    let Some(v) = root.get("circuit") else {
        return Ok(s);
    };
    let Some(obj) = v.as_object() else {
        return Err(vec![("circuit".into(), "must be an object".into())]);
    };
    let mut problems = Vec::new();
    for name in obj.keys() {
        if !["failures", "windowMs", "openMs"].contains(&name.as_str()) {
            problems.push((
                format!("circuit.{name}"),
                "unknown setting (failures, windowMs and openMs are)".to_string(),
            ));
        }
    }
    let slots = [
        ("failures", &mut s.failures, MAX_FAILURES),
        ("windowMs", &mut s.window_ms, u32::MAX),
        ("openMs", &mut s.open_ms, u32::MAX),
    ];
    for (field, slot, max) in slots {
        let Some(v) = obj.get(field) else { continue };
        match v.as_u64() {
            Some(n) if n > 0 && n <= u64::from(max) => *slot = n as u32,
            _ => problems.push((
                format!("circuit.{field}"),
                format!("must be a positive integer, at most {max}, got {v}"),
            )),
        }
    }
    if problems.is_empty() {
        Ok(s)
    } else {
        Err(problems)
    }
}

/// The last circuit state a frontend reported for a connector (closed: none).
#[derive(Clone, Debug)]
pub struct CircuitSeen {
    pub state: String,
    pub failures: u32,
    pub retry_at_unix_ms: i64,
}

impl CircuitSeen {
    /// What `status` shows: `circuit open after N failures; retry in S s`.
    pub fn note(&self, key: &str, now_unix_ms: i64) -> String {
        if self.state != "open" {
            return format!("{key}: circuit half-open: one trial call decides");
        }
        let secs = (self.retry_at_unix_ms.saturating_sub(now_unix_ms).max(0) + 999) / 1000;
        format!(
            "{key}: circuit open after {} failures; retry in {secs} s",
            self.failures
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn root(v: Value) -> Map<String, Value> {
        v.as_object().cloned().unwrap_or_default()
    }

    #[test]
    fn defaults_and_overrides() {
        assert_eq!(parse(&root(json!({}))), Ok(Settings::default()));
        let s = parse(&root(json!({"circuit": {"failures": 2, "openMs": 500}})));
        assert_eq!(
            s,
            Ok(Settings {
                failures: 2,
                window_ms: DEFAULT_WINDOW_MS,
                open_ms: 500
            })
        );
    }

    #[test]
    fn each_bad_setting_is_named() {
        let bad = parse(&root(
            json!({"circuit": {"failures": 0, "windowMs": "1s", "open": 1}}),
        ))
        .err()
        .unwrap_or_default();
        let fields: Vec<&str> = bad.iter().map(|(f, _)| f.as_str()).collect();
        assert_eq!(
            fields,
            ["circuit.open", "circuit.failures", "circuit.windowMs"]
        );
        assert!(parse(&root(json!({"circuit": 5}))).is_err());
        assert!(parse(&root(json!({"circuit": {"failures": 10_001}}))).is_err());
    }
}

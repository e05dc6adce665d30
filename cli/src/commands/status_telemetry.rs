//! `tutti status`: spans the frontend and the workers dropped because their OpenTelemetry
//! export queue was full. Shown only when some were: `telemetryDropped` in
//! `--json`, one line in the table.

use std::collections::BTreeMap;

use serde::Serialize;
use tutti_proto::kernel::StatusReply;

/// `telemetryDropped` of `status --json`.
#[derive(Debug, Serialize, PartialEq, Eq)]
pub(super) struct TelemetryDroppedJson {
    /// Every process's drops since the kernel started.
    total: u64,
    frontend: u64,
    /// Connector key -> what its workers dropped (only connectors that dropped some).
    connectors: BTreeMap<String, u64>,
}

impl TelemetryDroppedJson {
    /// `None` when nothing was dropped (export off, or a receiver that keeps up).
    pub(super) fn of(reply: &StatusReply) -> Option<TelemetryDroppedJson> {
        (reply.telemetry_dropped > 0).then(|| TelemetryDroppedJson {
            total: reply.telemetry_dropped,
            frontend: reply.frontend_telemetry_dropped,
            connectors: reply
                .connectors
                .iter()
                .filter(|c| c.telemetry_dropped > 0)
                .map(|c| (c.key.clone(), c.telemetry_dropped))
                .collect(),
        })
    }

    /// The table's line, with its newline.
    pub(super) fn line(&self) -> String {
        let mut by = vec![format!("frontend {}", self.frontend)];
        by.extend(self.connectors.iter().map(|(k, n)| format!("{k} {n}")));
        format!(
            "telemetry: {} spans dropped ({}): the OpenTelemetry receiver is slow or unreachable (check OTEL_EXPORTER_OTLP_ENDPOINT)\n",
            self.total,
            by.join(", ")
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tutti_proto::kernel::ConnectorStatus;

    #[test]
    fn shown_only_when_something_was_dropped() {
        let mut reply = StatusReply {
            connectors: vec![
                ConnectorStatus {
                    key: "fx".into(),
                    telemetry_dropped: 4,
                    ..Default::default()
                },
                ConnectorStatus {
                    key: "quiet".into(),
                    ..Default::default()
                },
            ],
            ..Default::default()
        };
        assert_eq!(TelemetryDroppedJson::of(&reply), None);
        reply.telemetry_dropped = 11;
        reply.frontend_telemetry_dropped = 7;
        let dropped = TelemetryDroppedJson::of(&reply).unwrap_or_else(|| panic!("shown"));
        assert_eq!(
            serde_json::to_value(&dropped).unwrap_or_default(),
            serde_json::json!({"total": 11, "frontend": 7, "connectors": {"fx": 4}})
        );
        assert_eq!(
            dropped.line(),
            "telemetry: 11 spans dropped (frontend 7, fx 4): the OpenTelemetry receiver is slow \
             or unreachable (check OTEL_EXPORTER_OTLP_ENDPOINT)\n"
        );
    }
}

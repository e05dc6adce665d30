//! The wire enums by the names people read: log fields, `audit.jsonl` records, the install
//! plan, status text. The conversions live here, next to the generated types, so no other
//! crate spells a transport or a report kind as a string.

use crate::kernel::{Transport, WorkerReportKind};

impl Transport {
    /// `stdio` / `http` (empty for an unspecified transport).
    pub fn label(self) -> &'static str {
        match self {
            Transport::Unspecified => "",
            Transport::Stdio => "stdio",
            Transport::Http => "http",
        }
    }
}

impl WorkerReportKind {
    /// `auth_failed`, `start_failed`, … (`unspecified` for the default).
    pub fn label(self) -> &'static str {
        match self {
            WorkerReportKind::Unspecified => "unspecified",
            WorkerReportKind::AuthFailed => "auth_failed",
            WorkerReportKind::StartFailed => "start_failed",
            WorkerReportKind::UpstreamExited => "upstream_exited",
            WorkerReportKind::NonJsonStdout => "non_json_stdout",
            WorkerReportKind::UpstreamReinitialized => "upstream_reinitialized",
            WorkerReportKind::UpstreamUnavailable => "upstream_unavailable",
            WorkerReportKind::AuthRequired => "auth_required",
            WorkerReportKind::TelemetryDropped => "telemetry_dropped",
        }
    }
}

impl std::fmt::Display for Transport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.label())
    }
}

impl std::fmt::Display for WorkerReportKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.label())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const KINDS: [WorkerReportKind; 9] = [
        WorkerReportKind::Unspecified,
        WorkerReportKind::AuthFailed,
        WorkerReportKind::StartFailed,
        WorkerReportKind::UpstreamExited,
        WorkerReportKind::NonJsonStdout,
        WorkerReportKind::UpstreamReinitialized,
        WorkerReportKind::UpstreamUnavailable,
        WorkerReportKind::AuthRequired,
        WorkerReportKind::TelemetryDropped,
    ];

    #[test]
    fn labels_are_the_protobuf_names_in_lower_case() {
        for kind in KINDS {
            let wire = kind.as_str_name().to_ascii_lowercase();
            assert_eq!(wire.strip_prefix("worker_report_kind_"), Some(kind.label()));
            assert_eq!(kind.to_string(), kind.label());
        }
        for t in [Transport::Stdio, Transport::Http] {
            let wire = t.as_str_name().to_ascii_lowercase();
            assert_eq!(wire.strip_prefix("transport_"), Some(t.label()));
        }
        assert_eq!(Transport::Unspecified.label(), "");
    }

    #[test]
    fn every_kind_has_its_own_number_and_label() {
        for (i, a) in KINDS.iter().enumerate() {
            assert_eq!(WorkerReportKind::try_from(*a as i32), Ok(*a));
            for b in &KINDS[i + 1..] {
                assert_ne!(a.label(), b.label());
            }
        }
        // A number this build does not know reads as unspecified, never as another kind.
        let report = crate::kernel::WorkerReport {
            kind: 99,
            ..Default::default()
        };
        assert_eq!(report.kind(), WorkerReportKind::Unspecified);
    }
}

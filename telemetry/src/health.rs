//! Logging a signal's export failures once per change (see [`ExportHealth`]).

use opentelemetry_sdk::error::OTelSdkResult;

/// Whether a signal's exports reach the receiver, so a failing receiver is logged once when
/// exports start failing and once when they work again, not per export. The SDK's own
/// processors would have logged each failure; its internal logs are off here, and our loops
/// replace those processors.
#[derive(Debug)]
pub(crate) struct ExportHealth {
    signal: &'static str,
    failing: bool,
}

impl ExportHealth {
    pub(crate) fn new(signal: &'static str) -> ExportHealth {
        ExportHealth {
            signal,
            failing: false,
        }
    }

    /// Notes one export's result; logs a change. The SDK's export errors name a status code or
    /// "network error" (never a header, URL or response body), so they are logged as they are.
    pub(crate) fn note(&mut self, result: &OTelSdkResult) {
        match (result, self.failing) {
            (Err(e), false) => {
                self.failing = true;
                tracing::warn!(
                    signal = self.signal,
                    error = %e,
                    "OpenTelemetry export failed; calls are not affected, but {} are not reaching the receiver: check OTEL_EXPORTER_OTLP_ENDPOINT (or the per-signal variable) and that the collector is running",
                    self.signal
                );
            }
            (Ok(()), true) => {
                self.failing = false;
                tracing::info!(
                    signal = self.signal,
                    "OpenTelemetry export reaches the receiver again"
                );
            }
            _ => {}
        }
    }

    #[cfg(test)]
    fn failing(&self) -> bool {
        self.failing
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn export_health_changes_only_when_exports_start_or_stop_failing() {
        use opentelemetry_sdk::error::OTelSdkError;
        let mut health = ExportHealth::new("spans");
        let failed = || {
            Err(OTelSdkError::InternalFailure(
                "HTTP export failed: network error".into(),
            ))
        };
        health.note(&Ok(()));
        assert!(!health.failing());
        health.note(&failed());
        assert!(health.failing());
        health.note(&failed());
        assert!(health.failing(), "a second failure changes nothing");
        health.note(&Ok(()));
        assert!(!health.failing(), "a success after failures is a recovery");
    }
}

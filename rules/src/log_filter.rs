//! Log events of dependencies that carry an authorization code, a token or an upstream's raw
//! messages: off (or capped) in every process, whatever `RUST_LOG`, `TUTTI_WORKER_LOG` or
//! `TUTTI_LOG` ask for. Each binary adds [`secret_free`] to its subscriber as a global filter
//! beside its own level filter.
//!
//! - `rmcp::transport::auth` logs the authorization code at debug ("start exchange code for
//!   token") and the client registration and token answers;
//! - the rest of `rmcp` logs whole JSON-RPC messages at debug (an upstream's arguments and
//!   results, which may hold anything).
//!
//! reqwest, hyper and h2 log no header values or bodies at any level, and oauth2 does not log.

use tracing_subscriber::filter::{LevelFilter, Targets};

/// The targets capped, with the most verbose level each may log at.
pub const CAPPED: &[(&str, LevelFilter)] = &[
    ("rmcp", LevelFilter::WARN),
    ("rmcp::transport::auth", LevelFilter::OFF),
];

/// A filter that lets everything through except what [`CAPPED`] caps. Its verdict depends on
/// an event's target only, so tracing caches it per callsite (nothing on the call path).
pub fn secret_free() -> Targets {
    Targets::new()
        .with_default(LevelFilter::TRACE)
        .with_targets(CAPPED.iter().copied())
}

#[cfg(test)]
mod tests {
    use super::*;
    use tracing::Level;

    #[test]
    fn the_authorization_code_is_off_at_every_level_and_the_rest_passes() {
        let filter = secret_free();
        for level in [
            Level::ERROR,
            Level::WARN,
            Level::INFO,
            Level::DEBUG,
            Level::TRACE,
        ] {
            assert!(
                !filter.would_enable("rmcp::transport::auth", &level),
                "{level}"
            );
        }
        assert!(filter.would_enable("rmcp::service", &Level::WARN));
        assert!(!filter.would_enable("rmcp::service", &Level::DEBUG));
        assert!(filter.would_enable("tutti_kernel::oauth", &Level::TRACE));
        assert!(filter.would_enable("reqwest::connect", &Level::DEBUG));
    }
}

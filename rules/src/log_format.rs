//! `TUTTI_LOG_FORMAT` (SPEC §14): `json` makes every process of the runtime log one JSON
//! object per line (tracing-subscriber's JSON format: `timestamp`, `level`, `fields`,
//! `target`, spans); anything else, or unset, is the human-readable text format. The kernel
//! passes the variable on to the frontend, the shim manager and every worker
//! ([`super::child_env`]), so setting it for `tutti up` (or the service) covers them all.

/// The variable's name.
pub const ENV: &str = "TUTTI_LOG_FORMAT";

/// How a process formats its log lines.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum LogFormat {
    #[default]
    Text,
    /// One JSON object per line.
    Json,
}

impl LogFormat {
    /// `json` (any case, surrounding blanks ignored) is [`LogFormat::Json`]; anything else
    /// is text.
    pub fn parse(value: Option<&str>) -> LogFormat {
        match value {
            Some(v) if v.trim().eq_ignore_ascii_case("json") => LogFormat::Json,
            _ => LogFormat::Text,
        }
    }

    /// The format [`ENV`] asks for in this process's environment.
    pub fn from_env() -> LogFormat {
        Self::parse(std::env::var(ENV).ok().as_deref())
    }

    pub fn is_json(self) -> bool {
        self == LogFormat::Json
    }
}

/// The logs of a process that logs to stderr only (the CLI, the frontend, the shim manager):
/// `filter` decides what is logged, colours only in text on a terminal, one JSON object per
/// line with [`ENV`]`=json`, the event's target shown when `show_target`. The dependencies'
/// events that carry codes or tokens stay off whatever the filter says
/// ([`crate::log_filter::secret_free`]).
pub fn init_stderr(filter: tracing_subscriber::EnvFilter, show_target: bool) {
    use tracing_subscriber::layer::SubscriberExt as _;
    use tracing_subscriber::util::SubscriberInitExt as _;

    let json = LogFormat::from_env().is_json();
    let logs = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(!json && std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_writer(std::io::stderr)
        .with_target(show_target);
    let secret_free = crate::log_filter::secret_free();
    if json {
        logs.json().finish().with(secret_free).init();
    } else {
        logs.finish().with(secret_free).init();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_json_is_json() {
        assert_eq!(LogFormat::parse(Some("json")), LogFormat::Json);
        assert_eq!(LogFormat::parse(Some(" JSON ")), LogFormat::Json);
        for other in [None, Some(""), Some("text"), Some("jsonl")] {
            assert_eq!(LogFormat::parse(other), LogFormat::Text, "{other:?}");
        }
    }
}

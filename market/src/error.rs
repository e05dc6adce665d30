//! The one error type of the market. Each message is one line that names the problem and the fix.

/// Everything that can end a market step.
#[derive(Debug, thiserror::Error)]
pub enum MarketError {
    /// A local file or folder could not be read or written.
    #[error("{path}: {source}")]
    Io {
        path: std::path::PathBuf,
        #[source]
        source: std::io::Error,
    },
}

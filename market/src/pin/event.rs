//! The progress a pinning step reports.

/// What a pinning step is doing, for the CLI's progress lines and `--json` events.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(tag = "phase", rename_all = "lowercase")]
pub enum PinEvent {
    /// Resolving the package and its whole tree to exact versions and hashes.
    Resolving { source: String },
    /// Fetching artefacts: how many, and the bytes fetched so far (0 before the first).
    Downloading { artefacts: usize, bytes: u64 },
    /// Placing the checked artefacts into the release.
    Installing { artefacts: usize },
}

/// The progress callback every step reports to.
pub type Progress<'a> = &'a mut (dyn FnMut(PinEvent) + Send);

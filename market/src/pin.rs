//! STAND-IN, replaced when the real pinning module is merged: it pins nothing and refuses
//! every package, so only `server.json` remotes (which need no pinning) install from this
//! branch. The signature is the one the market's install step calls.

use std::path::Path;

use crate::MarketError;
use crate::plan::{PackageRef, PinOptions, Pinned};

/// Fetches `package` into `release` and says how to launch it.
pub async fn pin(
    package: &PackageRef,
    _release: &Path,
    _options: &PinOptions,
) -> Result<Pinned, MarketError> {
    let kind = match package {
        PackageRef::Npm { .. } => "npm",
        PackageRef::Pypi { .. } => "pypi",
        PackageRef::Mcpb { .. } => "mcpb",
        PackageRef::Oci { .. } => "oci",
    };
    Err(MarketError::Pin(format!(
        "pinning {kind} packages is not part of this build; install a remote (--remote N) or a release folder"
    )))
}

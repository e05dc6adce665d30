//! The checks a use case makes before it changes anything, each refusal a line a person
//! reads: the connector is installed, its release is readable, and (for a change made from a
//! `tutti console` page, SPEC §13) it is still the release the page showed.

use tonic::Status;

use crate::release::manifest::Manifest;
use crate::state::Inner;

pub fn precondition(msg: impl Into<String>) -> Status {
    Status::failed_precondition(msg.into())
}

pub fn not_installed(key: &str) -> Status {
    Status::not_found(format!(
        "connector {key:?} is not installed (see `tutti connector available`)"
    ))
}

/// The manifest of an installed connector. One whose installed release could not be read at
/// kernel start is in the registry but has none: say so, and how to get out of it.
pub fn manifest_of<'a>(inner: &'a Inner, key: &str) -> Result<&'a Manifest, Status> {
    inner.manifests.get(key).ok_or_else(|| {
        if inner.registry.connectors.contains_key(key) {
            precondition(format!(
                "the installed release of connector {key} cannot be read (see `tutti status`); reinstall it with `tutti connector install DIR` or remove it with `tutti connector uninstall {key}`"
            ))
        } else {
            not_installed(key)
        }
    })
}

/// The message of a refused stale change; the page shows it as is.
pub const STALE: &str = "changed since you opened this page; reload";

/// A change made from a page names the installed release it saw (`expected_sha256`); if the
/// connector was upgraded or reinstalled since, the change is refused and nothing changes.
/// An empty expectation (the CLI) checks nothing.
pub fn check_unchanged(inner: &Inner, key: &str, expected_sha256: &str) -> Result<(), Status> {
    if expected_sha256.is_empty() {
        return Ok(());
    }
    match inner.registry.connectors.get(key) {
        Some(installed) if installed.sha256 == expected_sha256 => Ok(()),
        Some(installed) => Err(Status::failed_precondition(format!(
            "connector {key} {STALE} (it is now version {})",
            installed.version
        ))),
        None => Err(Status::failed_precondition(format!(
            "connector {key} is no longer installed: {STALE}"
        ))),
    }
}

//! Pinning: one package fetched into a release folder, every artefact checked against its
//! source's hash, so that the release's SHA-256 covers everything that runs except the
//! interpreter, and starting needs no network.
//!
//! The ecosystems' own tools do the fetching (npm, pip, a container engine); this module gives
//! them a private cache, checks what they fetched, and moves the finished folder into place:
//! the release is built in a temporary folder next to the target and renamed at the end, so a
//! failure leaves nothing behind.

mod event;
mod files;
mod mcpb;
mod npm;
mod oci;
mod pypi;
mod tool;

use std::path::Path;

use crate::error::MarketError;
use crate::lock::{self, ReleaseLock};
use crate::plan::{PackageRef, PinOptions, Pinned};
pub use event::{PinEvent, Progress};
use files::{Staging, only_regular_files};

/// Fetches `package` into the new folder `release_dir` (which must not exist, or be empty) and
/// writes its `tutti-lock.json`. On any error nothing is left at `release_dir`.
pub async fn pin(
    package: &PackageRef,
    release_dir: &Path,
    options: &PinOptions,
    progress: Progress<'_>,
) -> Result<Pinned, MarketError> {
    package.check()?;
    let staging = Staging::next_to(release_dir)?;
    let dir = staging.path();
    let pinned = match package {
        PackageRef::Npm { name, version } => {
            npm::pin(name, version, dir, options, progress).await?
        }
        PackageRef::Pypi { name, version } => {
            pypi::pin(name, version, dir, options, progress).await?
        }
        PackageRef::Mcpb { location, sha256 } => {
            mcpb::pin(location, sha256.as_deref(), dir, progress).await?
        }
        PackageRef::Oci { image } => oci::pin(image, progress).await?,
    };
    lock::write(dir, &ReleaseLock::new(package, &pinned, options))?;
    only_regular_files(dir)?;
    staging.commit(release_dir)?;
    Ok(pinned)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn an_option_for_a_name_is_refused_before_any_tool_runs_leaving_nothing() {
        let parent = tempfile::tempdir().unwrap_or_else(|e| panic!("tempdir: {e}"));
        let package = PackageRef::Pypi {
            name: "--index-url=http://127.0.0.1:9/simple".into(),
            version: "1.0".into(),
        };
        let mut progress = |_: PinEvent| {};
        let release = parent.path().join("release");
        let err = pin(&package, &release, &PinOptions::default(), &mut progress)
            .await
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(
            err.starts_with(
                "PyPI distribution \"--index-url=http://127.0.0.1:9/simple\" cannot be pinned"
            ),
            "{err}"
        );
        let left: Vec<_> = std::fs::read_dir(parent.path())
            .map(|d| d.flatten().map(|e| e.path()).collect())
            .unwrap_or_default();
        assert!(left.is_empty(), "left behind: {left:?}");
    }

    #[test]
    fn a_pinning_step_can_be_spawned_on_a_multi_threaded_runtime() {
        fn send<T: Send>(_: &T) {}
        let package = PackageRef::Oci { image: "x".into() };
        let options = PinOptions::default();
        let mut progress = |_: PinEvent| {};
        let step = pin(&package, Path::new("x"), &options, &mut progress);
        send(&step);
    }
}

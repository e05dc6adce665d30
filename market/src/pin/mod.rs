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
use files::{Staging, blocking, only_regular_files};

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
    match pin_into(package, staging.path(), options, progress).await {
        Ok(pinned) => {
            staging.commit(release_dir)?;
            Ok(pinned)
        }
        Err(e) => {
            // A half-built tree (node_modules) is removed off the runtime's thread too.
            let _ = blocking(move || {
                drop(staging);
                Ok(())
            })
            .await;
            Err(e)
        }
    }
}

/// The steps of [`pin`] in the staging folder `dir`.
async fn pin_into(
    package: &PackageRef,
    dir: &Path,
    options: &PinOptions,
    progress: Progress<'_>,
) -> Result<Pinned, MarketError> {
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
    let owned = dir.to_path_buf();
    blocking(move || only_regular_files(&owned)).await?;
    Ok(pinned)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

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

    /// A local bundle of `size` bytes (stored, not compressed) whose server is `true`.
    fn big_bundle(dir: &Path, size: usize) -> PathBuf {
        use std::io::Write as _;
        let path = dir.join("big.mcpb");
        let file = std::fs::File::create(&path).unwrap_or_else(|e| panic!("create: {e}"));
        let mut zip = zip::ZipWriter::new(file);
        let stored = zip::write::SimpleFileOptions::default()
            .compression_method(zip::CompressionMethod::Stored);
        let manifest = r#"{"name": "big", "version": "1.0.0",
            "server": {"mcp_config": {"command": "true"}}}"#;
        for (name, bytes) in [
            ("manifest.json", manifest.as_bytes().to_vec()),
            ("data.bin", vec![7u8; size]),
        ] {
            zip.start_file(name, stored)
                .unwrap_or_else(|e| panic!("zip: {e}"));
            zip.write_all(&bytes).unwrap_or_else(|e| panic!("zip: {e}"));
        }
        zip.finish().unwrap_or_else(|e| panic!("zip: {e}"));
        path
    }

    /// The kernel runs on one thread: while a release is hashed and unpacked, that thread
    /// keeps serving (the file work runs on the blocking pool).
    #[test]
    fn pinning_leaves_a_single_threaded_runtime_free_to_serve() {
        use std::sync::Arc;
        use std::sync::atomic::{AtomicU64, Ordering};
        use std::time::{Duration, Instant};
        let parent = tempfile::tempdir().unwrap_or_else(|e| panic!("tempdir: {e}"));
        let package = PackageRef::Mcpb {
            location: big_bundle(parent.path(), 48 << 20).display().to_string(),
            sha256: None,
        };
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap_or_else(|e| panic!("runtime: {e}"));
        // The longest time between two ticks of a 5 ms timer, in microseconds.
        let stall = Arc::new(AtomicU64::new(0));
        let took = runtime.block_on(async {
            let seen = Arc::clone(&stall);
            let ticker = tokio::spawn(async move {
                let mut last = Instant::now();
                loop {
                    tokio::time::sleep(Duration::from_millis(5)).await;
                    let gap = u64::try_from(last.elapsed().as_micros()).unwrap_or(u64::MAX);
                    seen.fetch_max(gap, Ordering::Relaxed);
                    last = Instant::now();
                }
            });
            tokio::task::yield_now().await;
            let started = Instant::now();
            let mut progress = |_: PinEvent| {};
            let release = parent.path().join("release");
            let pinned = pin(&package, &release, &PinOptions::default(), &mut progress).await;
            let took = started.elapsed();
            pinned.unwrap_or_else(|e| panic!("pin: {e}"));
            // One more tick, which measures a stall that lasted to the end.
            tokio::time::sleep(Duration::from_millis(20)).await;
            ticker.abort();
            took
        });
        let stall = Duration::from_micros(stall.load(Ordering::Relaxed));
        assert!(
            stall < took / 2,
            "the runtime's thread stalled {stall:?} of the {took:?} the pin took"
        );
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

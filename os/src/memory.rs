//! Giving freed heap memory back to the system. glibc's allocator keeps memory a burst of
//! allocations freed (thousands of connections' buffers, say) in its arenas, so the resident
//! set stays at its peak long after; `malloc_trim` returns what it can. Elsewhere (musl,
//! macOS, Windows) this does nothing.

/// Returns free heap memory to the system where the allocator supports it. Walks the heap
/// under the allocator's lock: call it only after a burst has ended.
pub fn release_free_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    glibc::trim();
}

/// Gives free heap back once a run of changes has settled: [`AfterChanges::changed`] after
/// each change (a route table replaced, a connector gone); once `quiet` passes without
/// another, [`release_free_memory`] runs on the runtime's own thread (a blocking-pool thread
/// would stay for seconds in processes kept to one thread). Without changes it waits on
/// nothing (no timer, no wake-up). Installing and uninstalling a few hundred connectors left
/// the kernel and the frontend ~70 MiB above where they started, all of it free heap that
/// glibc kept.
#[derive(Clone)]
pub struct AfterChanges(std::sync::Arc<tokio::sync::Notify>);

impl AfterChanges {
    /// Spawns the waiting task on the current tokio runtime.
    pub fn spawn(quiet: std::time::Duration) -> AfterChanges {
        let notify = std::sync::Arc::new(tokio::sync::Notify::new());
        let changes = notify.clone();
        tokio::spawn(async move {
            loop {
                changes.notified().await;
                while tokio::time::timeout(quiet, changes.notified())
                    .await
                    .is_ok()
                {}
                release_free_memory();
            }
        });
        AfterChanges(notify)
    }

    /// One more change: the release waits for `quiet` after the last one.
    pub fn changed(&self) {
        self.0.notify_one();
    }
}

#[cfg(all(target_os = "linux", target_env = "gnu"))]
#[allow(unsafe_code)] // one FFI call into glibc, with its SAFETY comment
mod glibc {
    unsafe extern "C" {
        /// glibc: `int malloc_trim(size_t pad)`.
        fn malloc_trim(pad: usize) -> std::ffi::c_int;
    }

    pub(super) fn trim() {
        // SAFETY: malloc_trim takes a plain integer, touches only the allocator's own state
        // under its own locks, and is safe to call from any thread at any time.
        let released = unsafe { malloc_trim(0) };
        tracing::debug!(released = released != 0, "released free heap memory");
    }
}

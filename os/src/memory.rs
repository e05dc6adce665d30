//! Giving freed heap memory back to the system. glibc's allocator keeps memory a burst of
//! allocations freed (thousands of connections' buffers, say) in its arenas, so the resident
//! set stays at its peak long after; `malloc_trim` returns what it can. Elsewhere (musl,
//! macOS, Windows) this does nothing.

/// Keeps every thread's allocations in the main heap. The runtime's processes run their
/// work on one thread, but blocking-pool threads (file writes, process spawns) get arenas of
/// their own from glibc, and `malloc_trim` never shrinks such an arena's top: the kernel kept
/// 5.6 MiB of a dead thread's arena after 198 installs, the serialization buffers of its
/// registry file. Call it first in `main`, before any thread starts. Elsewhere it does
/// nothing.
pub fn one_arena() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    glibc::one_arena();
}

/// Returns free heap memory to the system where the allocator supports it. Walks the heap
/// under the allocator's lock: call it only after a burst has ended.
pub fn release_free_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    glibc::trim();
}

/// The second release after a run of changes: past tokio's blocking-pool threads' 10 s
/// keep-alive, and past workers stopping within their drain.
pub const RELEASE_AGAIN_AFTER: std::time::Duration = std::time::Duration::from_secs(12);

/// Gives free heap back once a run of changes has settled: [`AfterChanges::changed`] after
/// each change (a route table replaced, a connector gone, a worker reaped); once `quiet`
/// passes without another, [`release_free_memory`] runs on the runtime's own thread (a
/// blocking-pool thread would stay for seconds in processes kept to one thread). Without
/// changes it waits on nothing (no timer, no wake-up). Installing and uninstalling a few
/// hundred connectors left the kernel and the frontend ~70 MiB above where they started, all
/// of it free heap that glibc kept.
#[derive(Clone, Default)]
pub struct AfterChanges(std::sync::Arc<tokio::sync::Notify>);

impl AfterChanges {
    /// A handle whose changes are counted once [`AfterChanges::release_when_quiet`] runs
    /// (it needs no runtime until then).
    pub fn new() -> AfterChanges {
        AfterChanges::default()
    }

    /// [`AfterChanges::new`] with its waiting task spawned on the current tokio runtime.
    pub fn spawn(quiet: std::time::Duration) -> AfterChanges {
        let after = AfterChanges::new();
        after.release_when_quiet(quiet);
        after
    }

    /// Spawns the waiting task on the current tokio runtime (once per handle). It releases
    /// once `quiet` after the last change and once more [`RELEASE_AGAIN_AFTER`] later (unless
    /// another change came first): what a burst of changes frees in its tail, after the first
    /// release, stayed otherwise (the kernel kept about 2.5 MiB after 198 uninstalls, given
    /// back by a release 4 s after them).
    pub fn release_when_quiet(&self, quiet: std::time::Duration) {
        let changes = self.0.clone();
        tokio::spawn(async move {
            loop {
                changes.notified().await;
                loop {
                    while tokio::time::timeout(quiet, changes.notified())
                        .await
                        .is_ok()
                    {}
                    release_free_memory();
                    let again = tokio::time::timeout(RELEASE_AGAIN_AFTER, changes.notified());
                    if again.await.is_err() {
                        release_free_memory();
                        break;
                    }
                }
            }
        });
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
        /// glibc: `int mallopt(int param, int value)`.
        fn mallopt(param: std::ffi::c_int, value: std::ffi::c_int) -> std::ffi::c_int;
    }

    /// glibc's `M_ARENA_MAX` (malloc.h).
    const M_ARENA_MAX: std::ffi::c_int = -8;

    pub(super) fn one_arena() {
        // SAFETY: mallopt takes two plain integers and only sets the allocator's own
        // parameter under its lock; M_ARENA_MAX may be set at any time.
        let set = unsafe { mallopt(M_ARENA_MAX, 1) };
        if set != 1 {
            tracing::debug!("the allocator refused one arena");
        }
    }

    pub(super) fn trim() {
        // SAFETY: malloc_trim takes a plain integer, touches only the allocator's own state
        // under its own locks, and is safe to call from any thread at any time.
        let released = unsafe { malloc_trim(0) };
        tracing::debug!(released = released != 0, "released free heap memory");
    }
}

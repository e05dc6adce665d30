//! Giving freed heap memory back to the system. glibc's allocator keeps memory a burst of
//! allocations freed (thousands of connections' buffers, say) in its arenas, so the resident
//! set stays at its peak long after; `malloc_trim` returns what it can. Elsewhere (musl,
//! macOS, Windows) this does nothing.

/// Returns free heap memory to the system where the allocator supports it. Walks the heap:
/// call it off any latency-sensitive thread, and only after a burst has ended.
pub fn release_free_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    glibc::trim();
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

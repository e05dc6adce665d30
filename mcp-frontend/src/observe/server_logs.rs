//! Log messages that no call claims (SPEC §11).
//!
//! An upstream's `notifications/message` sent while none of its calls is in flight (or on an
//! HTTP upstream's standalone stream) belongs to no caller; the worker hands those out on
//! `WatchLogs`. The frontend keeps one such stream per live generation, opened after the route
//! change that made the generation live and ending with it, and puts each message on the
//! legacy GET streams of every token whose `logging/setLevel` admits it, tagged `<key>/…`
//! (the same rule as a call's messages, `relay::log_params`). A token that set no level gets
//! nothing. The streams are opened and relayed by `observe/unclaimed.rs`; this module holds which
//! generations have one.

use std::collections::HashSet;
use std::sync::{Mutex, PoisonError};

/// The generations with an open `WatchLogs` stream.
#[derive(Default)]
pub(crate) struct Followed(Mutex<HashSet<(String, u64)>>);

impl Followed {
    /// `true` the first time for `(key, generation)`: the caller opens its stream.
    pub(crate) fn start(&self, key: &str, generation: u64) -> bool {
        self.lock().insert((key.to_owned(), generation))
    }

    /// The stream ended: a later route change may open it again.
    pub(crate) fn stop(&self, key: &str, generation: u64) {
        self.lock().remove(&(key.to_owned(), generation));
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashSet<(String, u64)>> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

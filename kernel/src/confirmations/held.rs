//! The set of held calls, by id and by the frontend's call key (memory only).

use std::collections::{BTreeMap, HashMap};
use std::sync::{Mutex, MutexGuard};
use std::time::Instant;

use tokio::sync::oneshot;
use tutti_proto::kernel as pb;

/// Who answered a held call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Channel {
    Person,
    Agent,
}

impl Channel {
    pub(super) fn as_str(self) -> &'static str {
        match self {
            Self::Person => "person",
            Self::Agent => "agent",
        }
    }
}

pub(super) struct Held {
    pub(super) shown: pb::PendingConfirmation,
    pub(super) call_key: String,
    pub(super) deadline: Instant,
    pub(super) answer: oneshot::Sender<(bool, Channel)>,
}

#[derive(Default)]
pub(super) struct Table {
    pub(super) held: BTreeMap<String, Held>,
    pub(super) by_key: HashMap<String, String>,
}

impl Table {
    pub(super) fn take(&mut self, id: &str) -> Option<Held> {
        let held = self.held.remove(id)?;
        self.by_key.remove(&held.call_key);
        Some(held)
    }
}

/// The held calls.
#[derive(Default)]
pub struct Confirmations {
    table: Mutex<Table>,
}

impl Confirmations {
    /// How many calls wait (`status`).
    pub fn waiting(&self) -> usize {
        self.lock().held.len()
    }

    pub(super) fn lock(&self) -> MutexGuard<'_, Table> {
        // A panic while holding the lock leaves plain data behind; keep serving.
        self.table.lock().unwrap_or_else(|p| p.into_inner())
    }
}

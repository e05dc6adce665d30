//! Change notifications and resource subscriptions (SPEC §11), for both surfaces.
//!
//! One broadcast of [`Note`]s carries every list change (tools, prompts, resources: published
//! by `App::publish_routes` after each committed route change) and every upstream
//! `notifications/resources/updated`. Consumers:
//! - the modern `subscriptions/listen` stream (`http/listen.rs`) filters by what it was asked for;
//! - the legacy GET stream (SPEC §11) takes [`Notifier::events`] for its token's identity:
//!   JSON-RPC notification messages, list changes for everyone, resource updates only for
//!   URIs that identity subscribed to with `resources/subscribe`.
//!
//! Subscriptions are per identity (the token's workspace and session), kept here; the upstream
//! is subscribed once per URI and generation (`catalog/beyond.rs`), and each generation with a
//! subscribed URI has one `WatchResources` stream to its worker ([`Notifier::watch`]).

use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::{Arc, Mutex, MutexGuard};

use serde_json::{Value, json};
use tokio::sync::broadcast;
use tutti_proto::kernel::SessionsRevoked;

use crate::backend::Identity;

/// Notes a slow consumer may fall behind by before it loses some.
const BACKLOG: usize = 1024;

/// One notification for clients.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Note {
    ToolsListChanged,
    PromptsListChanged,
    ResourcesListChanged,
    /// The upstream's params (`uri`, maybe `title`, `_meta`), as it sent them.
    ResourceUpdated {
        uri: String,
        params: Value,
    },
}

impl Note {
    pub(crate) fn method(&self) -> &'static str {
        match self {
            Note::ToolsListChanged => "notifications/tools/list_changed",
            Note::PromptsListChanged => "notifications/prompts/list_changed",
            Note::ResourcesListChanged => "notifications/resources/list_changed",
            Note::ResourceUpdated { .. } => "notifications/resources/updated",
        }
    }

    /// The JSON-RPC notification, with `meta` merged into its params' `_meta` when given.
    pub(crate) fn message(&self, meta: Option<&Value>) -> Value {
        let mut params = match self {
            Note::ResourceUpdated { params, .. } => params.clone(),
            _ => json!({}),
        };
        if let (Some(Value::Object(extra)), Some(params)) = (meta, params.as_object_mut()) {
            let own = params
                .entry("_meta")
                .or_insert_with(|| Value::Object(Default::default()));
            if let Some(own) = own.as_object_mut() {
                own.extend(extra.clone());
            }
        }
        json!({"jsonrpc": "2.0", "method": self.method(), "params": params})
    }
}

/// The broadcast, the per-identity subscriptions, and the generations being watched.
pub(crate) struct Notifier {
    tx: broadcast::Sender<Note>,
    inner: Mutex<Inner>,
}

#[derive(Default)]
struct Inner {
    subscriptions: HashMap<Identity, BTreeSet<String>>,
    /// (key, generation) with an open `WatchResources` stream.
    watched: HashSet<(String, u64)>,
    /// (key, generation, uri) the upstream was asked to send updates for.
    upstream: HashSet<(String, u64, String)>,
    /// URIs open `subscriptions/listen` streams honour, with how many streams.
    listening: HashMap<(Identity, String), usize>,
}

impl Default for Notifier {
    fn default() -> Self {
        Self {
            tx: broadcast::channel(BACKLOG).0,
            inner: Mutex::new(Inner::default()),
        }
    }
}

impl Notifier {
    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(crate) fn publish(&self, note: Note) {
        // No consumer is fine.
        let _ = self.tx.send(note);
    }

    /// Every note from now on.
    pub(crate) fn receiver(&self) -> broadcast::Receiver<Note> {
        self.tx.subscribe()
    }

    /// The notes for `who`, as JSON-RPC messages: what the legacy GET stream sends (SPEC §11;
    /// its module plugs this in).
    pub(crate) fn events(self: &Arc<Self>, who: Identity) -> Events {
        Events {
            rx: self.tx.subscribe(),
            who,
            notifier: Arc::clone(self),
        }
    }

    pub(crate) fn subscribe(&self, who: &Identity, uri: &str) {
        self.lock()
            .subscriptions
            .entry(who.clone())
            .or_default()
            .insert(uri.to_owned());
    }

    /// Drops `who`'s subscription; `true` when nobody is subscribed to `uri` any more.
    pub(crate) fn unsubscribe(&self, who: &Identity, uri: &str) -> bool {
        let mut inner = self.lock();
        if let Some(uris) = inner.subscriptions.get_mut(who) {
            uris.remove(uri);
            if uris.is_empty() {
                inner.subscriptions.remove(who);
            }
        }
        !inner.subscriptions.values().any(|uris| uris.contains(uri))
    }

    #[cfg_attr(not(test), allow(dead_code))]
    pub(crate) fn is_subscribed(&self, who: &Identity, uri: &str) -> bool {
        self.lock()
            .subscriptions
            .get(who)
            .is_some_and(|uris| uris.contains(uri))
    }

    /// Forgets the subscriptions of revoked sessions.
    pub(crate) fn revoke(&self, revoked: &SessionsRevoked) {
        self.lock().subscriptions.retain(|who, _| {
            !(revoked.all || (who.workspace == revoked.workspace && who.session == revoked.session))
        });
    }

    /// `true` the first time for `(key, generation)`: the caller opens its stream.
    pub(crate) fn watch(&self, key: &str, generation: u64) -> bool {
        self.lock().watched.insert((key.to_owned(), generation))
    }

    /// The stream of `(key, generation)` ended: a later subscription opens a new one.
    pub(crate) fn unwatch(&self, key: &str, generation: u64) {
        let mut inner = self.lock();
        inner.watched.remove(&(key.to_owned(), generation));
        inner
            .upstream
            .retain(|(k, g, _)| !(k == key && *g == generation));
    }

    /// `true` the first time the upstream of `(key, generation)` is to be subscribed to `uri`.
    pub(crate) fn upstream_subscribe(&self, key: &str, generation: u64, uri: &str) -> bool {
        self.lock()
            .upstream
            .insert((key.to_owned(), generation, uri.to_owned()))
    }

    /// Forgets that the upstream was subscribed to `uri`.
    pub(crate) fn upstream_unsubscribe(&self, key: &str, generation: u64, uri: &str) {
        self.lock()
            .upstream
            .remove(&(key.to_owned(), generation, uri.to_owned()));
    }
}

/// What a new generation must be subscribed to again.
impl Notifier {
    /// Every subscribed URI (legacy `resources/subscribe` and open listen streams), each with
    /// one identity that wants it.
    pub(crate) fn wanted(&self) -> std::collections::BTreeMap<String, Identity> {
        let inner = self.lock();
        let legacy = inner
            .subscriptions
            .iter()
            .flat_map(|(who, uris)| uris.iter().map(move |uri| (uri, who)));
        let listening = inner.listening.keys().map(|(who, uri)| (uri, who));
        legacy
            .chain(listening)
            .map(|(uri, who)| (uri.clone(), who.clone()))
            .collect()
    }

    /// Registers the URIs an open listen stream honours until the guard is dropped.
    pub(crate) fn listen(
        self: &Arc<Self>,
        who: &Identity,
        uris: impl IntoIterator<Item = String>,
    ) -> ListenGuard {
        let keys: Vec<(Identity, String)> = uris.into_iter().map(|u| (who.clone(), u)).collect();
        let mut inner = self.lock();
        for key in &keys {
            *inner.listening.entry(key.clone()).or_default() += 1;
        }
        ListenGuard {
            notifier: Arc::clone(self),
            keys,
        }
    }
}

/// A listen stream's URIs, registered with the notifier while it is open.
pub(crate) struct ListenGuard {
    notifier: Arc<Notifier>,
    keys: Vec<(Identity, String)>,
}

impl Drop for ListenGuard {
    fn drop(&mut self) {
        let mut inner = self.notifier.lock();
        for key in &self.keys {
            if let Some(n) = inner.listening.get_mut(key) {
                *n = n.saturating_sub(1);
                if *n == 0 {
                    inner.listening.remove(key);
                }
            }
        }
    }
}

/// One identity's notifications (see [`Notifier::events`]).
pub(crate) struct Events {
    rx: broadcast::Receiver<Note>,
    who: Identity,
    notifier: Arc<Notifier>,
}

impl Events {
    /// The next JSON-RPC notification for this identity; `None` once the notifier is gone.
    /// A consumer that fell behind misses some notes (it is told nothing: list changes are
    /// idempotent, and the next update of a resource stands for a lost one).
    pub(crate) async fn next(&mut self) -> Option<Value> {
        loop {
            let note = match self.rx.recv().await {
                Ok(note) => note,
                Err(broadcast::error::RecvError::Lagged(_)) => continue,
                Err(broadcast::error::RecvError::Closed) => return None,
            };
            if let Note::ResourceUpdated { uri, .. } = &note
                && !self.notifier.is_subscribed(&self.who, uri)
            {
                continue;
            }
            return Some(note.message(None));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn who(s: &str) -> Identity {
        Identity {
            workspace: "w".into(),
            session: s.into(),
            confirm_high: false,
            confirm_via: Default::default(),
            tools: Default::default(),
        }
    }

    #[tokio::test]
    async fn updates_reach_only_subscribed_identities_list_changes_everyone() {
        let n = Arc::new(Notifier::default());
        let mut a = n.events(who("a"));
        let mut b = n.events(who("b"));
        n.subscribe(&who("a"), "x://1");
        n.publish(Note::ResourceUpdated {
            uri: "x://1".into(),
            params: json!({"uri": "x://1"}),
        });
        n.publish(Note::PromptsListChanged);
        let first = a.next().await.unwrap_or_default();
        assert_eq!(first["method"], "notifications/resources/updated");
        assert_eq!(first["params"]["uri"], "x://1");
        let first_b = b.next().await.unwrap_or_default();
        assert_eq!(first_b["method"], "notifications/prompts/list_changed");
        assert!(n.unsubscribe(&who("a"), "x://1"));
        n.revoke(&SessionsRevoked {
            all: true,
            ..Default::default()
        });
        assert!(!n.is_subscribed(&who("a"), "x://1"));
    }

    #[test]
    fn wanted_holds_legacy_and_listen_uris_while_their_guards_live() {
        let n = Arc::new(Notifier::default());
        n.subscribe(&who("a"), "x://1");
        let guard = n.listen(&who("b"), ["x://2".to_owned()]);
        let second = n.listen(&who("b"), ["x://2".to_owned()]);
        let wanted: Vec<String> = n.wanted().into_keys().collect();
        assert_eq!(wanted, ["x://1", "x://2"]);
        drop(guard);
        assert!(n.wanted().contains_key("x://2"), "one stream still listens");
        drop(second);
        assert!(!n.wanted().contains_key("x://2"));
    }

    #[test]
    fn meta_is_merged_into_the_params() {
        let note = Note::ToolsListChanged;
        let m = note.message(Some(&json!({"io.modelcontextprotocol/subscriptionId": 7})));
        assert_eq!(
            m["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"],
            7
        );
    }
}

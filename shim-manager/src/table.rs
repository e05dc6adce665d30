//! Which shims should exist, as pure data: the kernel's route events in, publish/remove
//! actions out. A shim is removed only on behalf of the generation that published it or a
//! later one (SPEC §8), so a late `removed` for an older generation changes nothing.

use std::collections::BTreeMap;

/// The part of a route the shim manager cares about.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct RouteView<'a> {
    pub(crate) key: &'a str,
    pub(crate) generation: u64,
    pub(crate) has_cli: bool,
}

/// One change to apply to `bin/`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Action {
    Publish { key: String, generation: u64 },
    Remove { key: String, generation: u64 },
}

/// Key → the generation on whose behalf the shim is currently published.
#[derive(Debug, Default)]
pub(crate) struct ShimTable {
    published: BTreeMap<String, u64>,
}

impl ShimTable {
    /// A full snapshot replaces the table: every live cli connector is (re)published, every
    /// other published shim is removed.
    pub(crate) fn snapshot<'a>(
        &mut self,
        routes: impl IntoIterator<Item = RouteView<'a>>,
    ) -> Vec<Action> {
        let mut wanted: BTreeMap<String, u64> = BTreeMap::new();
        for route in routes.into_iter().filter(|r| r.has_cli) {
            let generation = wanted.entry(route.key.to_owned()).or_insert(0);
            *generation = (*generation).max(route.generation);
        }
        let mut actions: Vec<Action> = self
            .published
            .iter()
            .filter(|(key, _)| !wanted.contains_key(*key))
            .map(|(key, generation)| Action::Remove {
                key: key.clone(),
                generation: *generation,
            })
            .collect();
        actions.extend(wanted.iter().map(|(key, generation)| Action::Publish {
            key: key.clone(),
            generation: *generation,
        }));
        self.published = wanted;
        actions
    }

    /// The connector is live at `generation`. Without a cli interface that retires a shim
    /// published by the same or an earlier generation.
    pub(crate) fn upsert(&mut self, route: RouteView<'_>) -> Option<Action> {
        if !route.has_cli {
            return self.removed(route.key, route.generation);
        }
        match self.published.get(route.key) {
            Some(current) if *current > route.generation => None,
            _ => {
                self.published
                    .insert(route.key.to_owned(), route.generation);
                Some(Action::Publish {
                    key: route.key.to_owned(),
                    generation: route.generation,
                })
            }
        }
    }

    /// `generation` of `key` is fenced or removed.
    pub(crate) fn removed(&mut self, key: &str, generation: u64) -> Option<Action> {
        match self.published.get(key) {
            Some(current) if *current <= generation => {
                self.published.remove(key);
                Some(Action::Remove {
                    key: key.to_owned(),
                    generation,
                })
            }
            _ => None,
        }
    }

    /// Nothing is live any more (runtime shutdown): every published shim is removed.
    pub(crate) fn clear(&mut self) -> Vec<Action> {
        std::mem::take(&mut self.published)
            .into_iter()
            .map(|(key, generation)| Action::Remove { key, generation })
            .collect()
    }

    /// Keys whose shim should exist.
    pub(crate) fn keys(&self) -> impl Iterator<Item = &str> {
        self.published.keys().map(String::as_str)
    }

    /// Whether a shim for `key` should exist.
    #[cfg(test)]
    fn contains(&self, key: &str) -> bool {
        self.published.contains_key(key)
    }

    /// The generation a key's shim is published for.
    #[cfg(test)]
    fn generation(&self, key: &str) -> Option<u64> {
        self.published.get(key).copied()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn route(key: &str, generation: u64, has_cli: bool) -> RouteView<'_> {
        RouteView {
            key,
            generation,
            has_cli,
        }
    }

    fn publish(key: &str, generation: u64) -> Action {
        Action::Publish {
            key: key.to_owned(),
            generation,
        }
    }

    fn remove(key: &str, generation: u64) -> Action {
        Action::Remove {
            key: key.to_owned(),
            generation,
        }
    }

    #[test]
    fn snapshot_publishes_cli_connectors_only() {
        let mut t = ShimTable::default();
        let actions = t.snapshot([
            route("b", 5, true),
            route("a", 3, true),
            route("m", 4, false),
        ]);
        assert_eq!(actions, vec![publish("a", 3), publish("b", 5)]);
        assert!(t.contains("a") && t.contains("b") && !t.contains("m"));
        // What the sweep after a snapshot keeps in `bin/`.
        assert_eq!(t.keys().collect::<Vec<_>>(), ["a", "b"]);
    }

    #[test]
    fn later_snapshot_removes_what_is_gone() {
        let mut t = ShimTable::default();
        t.snapshot([route("a", 1, true), route("b", 2, true)]);
        let actions = t.snapshot([route("b", 7, true)]);
        assert_eq!(actions, vec![remove("a", 1), publish("b", 7)]);
        assert_eq!(t.generation("b"), Some(7));
        assert!(!t.contains("a"));
    }

    #[test]
    fn upsert_publishes_and_moves_the_generation_forward() {
        let mut t = ShimTable::default();
        assert_eq!(t.upsert(route("a", 1, true)), Some(publish("a", 1)));
        assert_eq!(t.upsert(route("a", 2, true)), Some(publish("a", 2)));
        assert_eq!(t.generation("a"), Some(2));
        // A stale upsert for an older generation is ignored.
        assert_eq!(t.upsert(route("a", 1, true)), None);
        assert_eq!(t.generation("a"), Some(2));
        // The live generation upserted again (it re-offered its tools) publishes again:
        // publishing is idempotent and puts back a shim deleted meanwhile.
        assert_eq!(t.upsert(route("a", 2, true)), Some(publish("a", 2)));
        assert_eq!(t.keys().collect::<Vec<_>>(), ["a"]);
    }

    #[test]
    fn removed_for_an_older_generation_does_nothing() {
        let mut t = ShimTable::default();
        t.upsert(route("a", 1, true));
        t.upsert(route("a", 2, true));
        assert_eq!(t.removed("a", 1), None);
        assert!(t.contains("a"));
        assert_eq!(t.removed("a", 2), Some(remove("a", 2)));
        assert!(!t.contains("a"));
        // Nothing published: nothing to remove.
        assert_eq!(t.removed("a", 3), None);
    }

    #[test]
    fn removed_for_a_later_generation_removes() {
        let mut t = ShimTable::default();
        t.upsert(route("a", 1, true));
        assert_eq!(t.removed("a", 9), Some(remove("a", 9)));
    }

    #[test]
    fn clear_removes_every_published_shim() {
        let mut t = ShimTable::default();
        t.snapshot([
            route("a", 1, true),
            route("b", 2, true),
            route("c", 3, false),
        ]);
        assert_eq!(t.clear(), vec![remove("a", 1), remove("b", 2)]);
        assert_eq!(t.keys().count(), 0);
        assert_eq!(t.clear(), vec![]);
    }

    #[test]
    fn upsert_without_cli_retires_the_shim_of_same_or_older_generation() {
        let mut t = ShimTable::default();
        t.upsert(route("a", 4, true));
        assert_eq!(t.upsert(route("a", 3, false)), None);
        assert!(t.contains("a"));
        assert_eq!(t.upsert(route("a", 5, false)), Some(remove("a", 5)));
        assert!(!t.contains("a"));
        assert_eq!(t.upsert(route("z", 1, false)), None);
    }
}

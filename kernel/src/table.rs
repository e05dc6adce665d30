//! The generation table: which generation of which connector is live, and its tool set.
//! Pure data: no I/O, the clock is passed in. Every change bumps the revision that the
//! route-table watchers see.

use std::collections::{BTreeMap, VecDeque};
use std::time::Duration;

use crate::toolset::ValidTool;

/// A connector's committed route: everything the frontend needs to call its worker.
#[derive(Clone, Debug, PartialEq)]
pub struct Route {
    pub key: String,
    pub name: String,
    pub generation: u64,
    pub endpoint: String,
    /// The worker's frame endpoint for plain tool calls, or empty.
    pub data_endpoint: String,
    pub call_timeout_ms: u32,
    pub has_cli: bool,
    pub has_mcp: bool,
    pub tools: Vec<ValidTool>,
    /// The circuit breaker's settings (SPEC §12), for the frontend.
    pub circuit: crate::circuit::Settings,
    /// Prompts, resources and templates of the same generation.
    pub catalog: crate::catalog::Catalog,
    /// The release's skills.
    pub skills: Vec<RouteSkill>,
}

/// One skill of a route.
#[derive(Clone, Debug, PartialEq)]
pub struct RouteSkill {
    pub name: String,
    /// The absolute directory in the release copy.
    pub dir: std::path::PathBuf,
    /// Its files that are part of the release (relative to `dir`, `/`-separated): the files
    /// the install scanned, the only ones served.
    pub files: Vec<String>,
}

/// A published change of the table.
#[derive(Clone, Debug, PartialEq)]
pub enum Change {
    /// The connector's whole tool set now belongs to this route's generation.
    Upsert {
        /// Boxed: a route is far larger than the other variants.
        route: Box<Route>,
        /// False when only the generation/endpoint changed and the visible tools, prompts
        /// and resources did not.
        tools_changed: bool,
    },
    /// The generation left the table (fenced or removed).
    Removed {
        key: String,
        generation: u64,
        reason: String,
    },
}

/// When and why a generation was fenced.
#[derive(Clone, Debug, PartialEq)]
pub struct FenceRecord {
    pub key: String,
    pub generation: u64,
    pub at: Duration,
    pub reason: String,
}

const FENCE_HISTORY: usize = 1024;

#[derive(Debug, Default)]
pub struct GenerationTable {
    revision: u64,
    live: BTreeMap<String, Route>,
    fences: VecDeque<FenceRecord>,
}

impl GenerationTable {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn revision(&self) -> u64 {
        self.revision
    }

    pub fn live(&self, key: &str) -> Option<&Route> {
        self.live.get(key)
    }

    /// The live routes, sorted by key (borrowed: a route holds every tool's definition).
    pub fn routes(&self) -> impl Iterator<Item = &Route> {
        self.live.values()
    }

    /// Sorted by key.
    #[cfg(test)]
    pub fn snapshot(&self) -> (u64, Vec<Route>) {
        (self.revision, self.routes().cloned().collect())
    }

    #[cfg(test)]
    pub fn fences(&self) -> impl Iterator<Item = &FenceRecord> {
        self.fences.iter()
    }

    /// Atomically makes `route` the connector's live generation (replacing any older one).
    /// Returns the change to publish, or `None` when nothing visible changed. A generation
    /// older than the live one is never committed over it.
    pub fn commit(&mut self, route: Route, now: Duration) -> Option<(u64, Change)> {
        let previous = self.live.get(&route.key);
        if let Some(prev) = previous {
            if route.generation < prev.generation {
                return None;
            }
            if *prev == route {
                return None;
            }
        }
        let tools_changed =
            previous.is_none_or(|p| p.tools != route.tools || p.catalog != route.catalog);
        if let Some(prev) = previous
            && prev.generation != route.generation
        {
            let record = FenceRecord {
                key: prev.key.clone(),
                generation: prev.generation,
                at: now,
                reason: "superseded".into(),
            };
            self.record_fence(record);
        }
        self.live.insert(route.key.clone(), route.clone());
        self.revision += 1;
        Some((
            self.revision,
            Change::Upsert {
                route: Box::new(route),
                tools_changed,
            },
        ))
    }

    /// Fences `generation` of `key` if it is the live one.
    pub fn fence(
        &mut self,
        key: &str,
        generation: u64,
        reason: &str,
        now: Duration,
    ) -> Option<(u64, Change)> {
        if self.live.get(key)?.generation != generation {
            return None;
        }
        self.remove(key, reason, now)
    }

    /// Removes whatever generation of `key` is live.
    pub fn remove(&mut self, key: &str, reason: &str, now: Duration) -> Option<(u64, Change)> {
        let route = self.live.remove(key)?;
        self.record_fence(FenceRecord {
            key: key.to_string(),
            generation: route.generation,
            at: now,
            reason: reason.to_string(),
        });
        self.revision += 1;
        Some((
            self.revision,
            Change::Removed {
                key: key.to_string(),
                generation: route.generation,
                reason: reason.to_string(),
            },
        ))
    }

    /// A revision bump for events that are not route changes (session revocations), so
    /// that every published event has a higher revision than the last.
    pub fn bump(&mut self) -> u64 {
        self.revision += 1;
        self.revision
    }

    fn record_fence(&mut self, record: FenceRecord) {
        if self.fences.len() == FENCE_HISTORY {
            self.fences.pop_front();
        }
        self.fences.push_back(record);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::toolset::Risk;

    fn tool(n: &str) -> ValidTool {
        ValidTool {
            local_name: format!("k_{n}"),
            upstream_name: n.into(),
            definition_json: "{}".into(),
            risk: Risk::Medium,
        }
    }

    fn route(key: &str, generation: u64, tools: &[&str]) -> Route {
        Route {
            key: key.into(),
            name: key.into(),
            generation,
            endpoint: format!("/run/w-{key}-{generation}"),
            data_endpoint: String::new(),
            call_timeout_ms: 1000,
            has_cli: false,
            has_mcp: true,
            tools: tools.iter().map(|t| tool(t)).collect(),
            circuit: Default::default(),
            catalog: Default::default(),
            skills: Vec::new(),
        }
    }

    const T: Duration = Duration::from_secs(1);

    #[test]
    fn commit_switches_the_whole_set_atomically() {
        let mut t = GenerationTable::new();
        let (r1, c1) = t.commit(route("a", 1, &["x", "y"]), T).expect("change");
        assert_eq!(r1, 1);
        assert!(matches!(
            c1,
            Change::Upsert {
                tools_changed: true,
                ..
            }
        ));
        let (r2, c2) = t.commit(route("a", 2, &["x", "z"]), T).expect("change");
        assert_eq!(r2, 2);
        assert!(matches!(
            c2,
            Change::Upsert {
                tools_changed: true,
                ..
            }
        ));
        let (_, live) = t.snapshot();
        assert_eq!(live.len(), 1);
        assert_eq!(live[0].generation, 2);
        assert_eq!(
            live[0]
                .tools
                .iter()
                .map(|t| t.upstream_name.as_str())
                .collect::<Vec<_>>(),
            ["x", "z"]
        );
        // The superseded generation is on the fence record.
        assert!(
            t.fences()
                .any(|f| f.generation == 1 && f.reason == "superseded")
        );
    }

    #[test]
    fn same_tools_new_generation_is_a_route_change_but_not_a_tools_change() {
        let mut t = GenerationTable::new();
        t.commit(route("a", 1, &["x"]), T);
        let (_, c) = t.commit(route("a", 2, &["x"]), T).expect("route changed");
        assert!(matches!(
            c,
            Change::Upsert {
                tools_changed: false,
                ..
            }
        ));
        // Identical commit: nothing to publish, revision unchanged.
        assert!(t.commit(route("a", 2, &["x"]), T).is_none());
        assert_eq!(t.revision(), 2);
    }

    #[test]
    fn older_generations_never_win() {
        let mut t = GenerationTable::new();
        t.commit(route("a", 5, &["x"]), T);
        assert!(t.commit(route("a", 4, &["y"]), T).is_none());
        assert_eq!(t.live("a").map(|r| r.generation), Some(5));
    }

    #[test]
    fn fence_only_hits_the_named_generation() {
        let mut t = GenerationTable::new();
        t.commit(route("a", 5, &["x"]), T);
        assert!(t.fence("a", 4, "crash", T).is_none());
        let (rev, c) = t.fence("a", 5, "crash", T).expect("fenced");
        assert_eq!(rev, 2);
        assert_eq!(
            c,
            Change::Removed {
                key: "a".into(),
                generation: 5,
                reason: "crash".into()
            }
        );
        assert!(t.live("a").is_none());
        assert!(t.fence("a", 5, "crash", T).is_none());
    }

    #[test]
    fn snapshot_is_sorted_and_revisions_grow() {
        let mut t = GenerationTable::new();
        t.commit(route("b", 1, &[]), T);
        t.commit(route("a", 2, &[]), T);
        let b = t.bump();
        assert_eq!(b, 3);
        let (rev, s) = t.snapshot();
        assert_eq!(rev, 3);
        assert_eq!(
            s.iter().map(|r| r.key.as_str()).collect::<Vec<_>>(),
            ["a", "b"]
        );
        assert!(t.remove("zz", "x", T).is_none());
    }
}

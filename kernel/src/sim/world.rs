//! The simulated runtime: a registry, a generation table, worker processes, timers and one
//! lifecycle actor per installed connector, carrying out effects as `supervisor/` and
//! `state.rs` do.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::path::PathBuf;
use std::time::Duration;

use super::action::{Action, KEYS, Summary};
use crate::catalog::Candidate;
use crate::lifecycle::{Connector, Effect, Facts, Input, ReportKind, View};
use crate::release::pin::Pin;
use crate::supervisor::restart::RestartTracker;
use crate::table::{GenerationTable, Route};
use crate::toolset::{Risk, ValidTool};

/// A connector as the registry holds it.
#[derive(Clone, Debug)]
pub struct Entry {
    pub release: PathBuf,
    pub version: u32,
    pub connected: bool,
    pub secret_ok: bool,
    pub previous: Option<Box<Entry>>,
    pub pin: Option<Pin>,
}

impl Entry {
    pub fn auth_ready(&self) -> bool {
        self.connected && self.secret_ok
    }
}

/// A worker process that has not exited.
#[derive(Debug)]
pub struct Proc {
    pub c: usize,
    pub release: PathBuf,
    /// When it is asked to stop: the time it is gone.
    pub stop_at: Option<Duration>,
}

/// What the checks follow of one actor: its live generation and candidate (as the effects
/// show them), a restart tracker fed the same exits, and when each worker started.
#[derive(Debug, Default)]
pub struct Shadow {
    pub live: Option<u64>,
    pub candidate: Option<u64>,
    pub tracker: RestartTracker,
    pub started: BTreeMap<u64, Duration>,
}

/// A lifecycle actor (one per installed connector) and what the checks shadow of it.
pub struct Actor {
    pub life: Connector,
    pub id: u64,
    pub shadow: Shadow,
}

pub struct Timer {
    pub due: Duration,
    pub actor: u64,
    pub c: usize,
    pub input: Input,
}

pub struct World {
    pub now: Duration,
    pub registry: BTreeMap<usize, Entry>,
    pub actors: BTreeMap<usize, Actor>,
    pub table: GenerationTable,
    pub procs: BTreeMap<u64, Proc>,
    pub identities: BTreeSet<u64>,
    pub timers: Vec<Timer>,
    /// Generations fenced, superseded, revoked or exited: never live again.
    pub fenced: BTreeSet<u64>,
    /// The last generation each connector had live (only ever increases).
    pub last_live: BTreeMap<usize, u64>,
    /// The release each connector's live route runs.
    pub live_release: BTreeMap<usize, PathBuf>,
    /// The last pin made for each release (its first commit or an approval).
    pub reviewed: BTreeMap<PathBuf, Vec<crate::release::pin::Entry>>,
    pub broken: BTreeSet<usize>,
    pub next_gen: u64,
    next_release: u32,
    next_actor: u64,
    pub stats: Summary,
}

impl World {
    pub fn new() -> World {
        World {
            now: Duration::ZERO,
            registry: BTreeMap::new(),
            actors: BTreeMap::new(),
            table: GenerationTable::new(),
            procs: BTreeMap::new(),
            identities: BTreeSet::new(),
            timers: Vec::new(),
            fenced: BTreeSet::new(),
            last_live: BTreeMap::new(),
            live_release: BTreeMap::new(),
            reviewed: BTreeMap::new(),
            broken: BTreeSet::new(),
            next_gen: 1,
            next_release: 0,
            next_actor: 0,
            stats: Summary::default(),
        }
    }

    pub fn summary(&self, steps: u64) -> Summary {
        Summary {
            steps,
            ..self.stats.clone()
        }
    }

    /// Carries out one action, then checks every invariant.
    pub fn act(&mut self, a: Action) -> Result<(), String> {
        match a {
            Action::Install { c } => self.install(c % KEYS.len(), false)?,
            Action::Upgrade { c, new_secret } => self.install(c % KEYS.len(), new_secret)?,
            Action::Uninstall { c } => self.uninstall(c % KEYS.len(), "uninstalled")?,
            Action::Connect { c } => self.connect(c % KEYS.len(), true)?,
            Action::Disconnect { c } => self.connect(c % KEYS.len(), false)?,
            Action::Reload { c } => self.deliver(c % KEYS.len(), Input::Reload)?,
            Action::Offer { c, pick, set } => self.offer(c % KEYS.len(), pick, set)?,
            Action::Exit { c, pick } => {
                if let Some(g) = self.pick(c % KEYS.len(), pick) {
                    self.exit(g, "worker exited (signal: 9)")?;
                }
            }
            Action::Report { c, pick, kind } => self.report(c % KEYS.len(), pick, kind)?,
            Action::Approve { c, stale } => self.approve(c % KEYS.len(), stale)?,
            Action::Spawner { c, broken } => {
                if broken {
                    self.broken.insert(c % KEYS.len());
                } else {
                    self.broken.remove(&(c % KEYS.len()));
                }
            }
            Action::Advance { ms } => self.advance(Duration::from_millis(ms))?,
            Action::Shutdown => self.shutdown()?,
        }
        self.check_state()
    }

    /// A release is installed (an upgrade when one is already), then the actor reloads.
    fn install(&mut self, c: usize, new_secret: bool) -> Result<(), String> {
        self.next_release += 1;
        let release = PathBuf::from(format!("/releases/{}/{}", KEYS[c], self.next_release));
        let old = self.registry.remove(&c);
        let connected = old.as_ref().is_none_or(|o| o.connected);
        let entry = Entry {
            release,
            version: self.next_release,
            connected,
            secret_ok: !(new_secret && old.is_some()),
            pin: old.as_ref().and_then(|o| o.pin.clone()),
            // The fallback: the release an unfinished upgrade was to replace, else the
            // current one (`install/commit.rs`).
            previous: old.map(|mut o| Box::new(o.previous.take().map_or(o, |p| *p))),
        };
        let auth_required = !entry.auth_ready();
        let waits = auth_required
            && entry.connected
            && entry.previous.is_some()
            && self.table.live(KEYS[c]).is_some();
        self.registry.insert(c, entry);
        if !self.actors.contains_key(&c) {
            self.start_actor(c);
        }
        self.deliver(
            c,
            Input::Install {
                auth_required,
                waits,
            },
        )?;
        self.deliver(c, Input::Reload)
    }

    pub fn start_actor(&mut self, c: usize) {
        self.next_actor += 1;
        let actor = Actor {
            life: Connector::new(KEYS[c]),
            id: self.next_actor,
            shadow: Shadow::default(),
        };
        self.actors.insert(c, actor);
    }

    fn uninstall(&mut self, c: usize, reason: &str) -> Result<(), String> {
        if !self.actors.contains_key(&c) {
            return Ok(());
        }
        self.stop_actor(c, reason)?;
        if reason == "uninstalled" {
            self.registry.remove(&c);
        }
        Ok(())
    }

    /// `Input::Stop`: the actor fences and stops everything, waits for the reaping, ends.
    fn stop_actor(&mut self, c: usize, reason: &str) -> Result<(), String> {
        let drain = Duration::from_secs(2);
        self.deliver(
            c,
            Input::Stop {
                reason: reason.to_string(),
                drain,
            },
        )?;
        if let Some(a) = self.actors.remove(&c) {
            self.timers.retain(|t| t.actor != a.id);
        }
        Ok(())
    }

    fn connect(&mut self, c: usize, on: bool) -> Result<(), String> {
        let Some(e) = self.registry.get_mut(&c) else {
            return Ok(());
        };
        e.connected = on;
        if on {
            e.secret_ok = true;
        } else {
            self.deliver(c, Input::Disconnect)?;
        }
        self.deliver(c, Input::Reload)
    }

    /// The `pick`-th worker of `c` still running (wrapping), if any.
    fn pick(&self, c: usize, pick: usize) -> Option<u64> {
        let gens: Vec<u64> = self
            .procs
            .iter()
            .filter(|(_, p)| p.c == c)
            .map(|(g, _)| *g)
            .collect();
        (!gens.is_empty()).then(|| gens[pick % gens.len()])
    }

    fn offer(&mut self, c: usize, pick: usize, set: u8) -> Result<(), String> {
        let Some(g) = self.pick(c, pick) else {
            return Ok(());
        };
        let tools = tool_set(c, set);
        self.deliver(
            c,
            Input::Offer {
                generation: g,
                tools,
            },
        )
    }

    /// A report of any running worker: `ReportWorker` checks the identity when the report
    /// arrives, but the actor may hear it after the identity was revoked.
    fn report(&mut self, c: usize, pick: usize, kind: u8) -> Result<(), String> {
        let Some(g) = self.pick(c, pick) else {
            return Ok(());
        };
        let kind = match kind {
            0 => ReportKind::AuthFailed,
            1 => ReportKind::AuthRequired,
            2 => ReportKind::UpstreamUnavailable,
            3 => ReportKind::StartFailed,
            _ => ReportKind::UpstreamReinitialized,
        };
        let message = "upstream said no".to_string();
        self.deliver(
            c,
            Input::Report {
                generation: g,
                kind,
                message,
            },
        )?;
        if kind == ReportKind::UpstreamUnavailable {
            // The worker exits after reporting it.
            self.exit(g, "worker exited (exit status: 1)")?;
        }
        Ok(())
    }

    fn approve(&mut self, c: usize, stale: bool) -> Result<(), String> {
        let Some(a) = self.actors.get(&c) else {
            return Ok(());
        };
        let held = a.life.held().map(|h| h.hash.clone());
        let expected = if stale {
            Some("sha256:stale".to_string())
        } else {
            held
        };
        self.deliver(c, Input::Approve { expected })
    }

    /// A worker process is gone: the actor hears it exited (an ended actor hears nothing).
    pub fn exit(&mut self, g: u64, detail: &str) -> Result<(), String> {
        let Some(p) = self.procs.remove(&g) else {
            return Ok(());
        };
        self.deliver(
            p.c,
            Input::Exited {
                generation: g,
                detail: detail.to_string(),
            },
        )
    }

    /// Moves the clock by `by`, firing timers and finishing stops in time order.
    fn advance(&mut self, by: Duration) -> Result<(), String> {
        let until = self.now + by;
        loop {
            let timer = self.timers.iter().enumerate().min_by_key(|(_, t)| t.due);
            let timer = timer
                .filter(|(_, t)| t.due <= until)
                .map(|(i, t)| (i, t.due));
            let stop = self
                .procs
                .iter()
                .filter_map(|(g, p)| p.stop_at.map(|at| (*g, at)))
                .min_by_key(|(_, at)| *at)
                .filter(|(_, at)| *at <= until);
            match (timer, stop) {
                (Some((_, due)), Some((g, at))) if at < due => {
                    self.now = self.now.max(at);
                    self.exit(g, "stopped")?;
                }
                (Some((i, due)), _) => {
                    self.now = self.now.max(due);
                    let t = self.timers.swap_remove(i);
                    self.deliver(t.c, t.input)?;
                }
                (None, Some((g, at))) => {
                    self.now = self.now.max(at);
                    self.exit(g, "stopped")?;
                }
                (None, None) => break,
            }
        }
        self.now = until;
        Ok(())
    }

    /// Shutdown: every actor stops (nothing may stay running or keep an identity), then the
    /// runtime starts again with a new table and reloads every installed connector.
    fn shutdown(&mut self) -> Result<(), String> {
        let cs: Vec<usize> = self.actors.keys().copied().collect();
        for c in cs {
            self.stop_actor(c, "shutdown")?;
        }
        self.quiescent()?;
        self.table = GenerationTable::new();
        self.live_release.clear();
        let installed: Vec<usize> = self.registry.keys().copied().collect();
        for c in installed {
            self.start_actor(c);
            self.deliver(c, Input::Reload)?;
        }
        Ok(())
    }

    /// The end of a run: shut down and check nothing leaked.
    pub fn finish(&mut self) -> Result<(), String> {
        let cs: Vec<usize> = self.actors.keys().copied().collect();
        for c in cs {
            self.stop_actor(c, "shutdown")?;
        }
        self.quiescent()
    }

    /// What `c`'s lifecycle sees now; `draw` hands out generation numbers.
    pub fn facts<'a>(&self, c: usize, draw: &'a mut dyn FnMut() -> u64) -> Facts<'a> {
        let now = self.now;
        Facts {
            installed: self.view(c),
            table_live: self.table.live(KEYS[c]).is_some(),
            next_generation: draw,
            jitter: f64::from(now.subsec_nanos() % 1000) / 1000.0,
            unix_ms: 1_000_000 + now.as_millis() as i64,
            now,
        }
    }

    /// The registry's view of `c`.
    pub fn view(&self, c: usize) -> Option<View> {
        let e = self.registry.get(&c)?;
        Some(View {
            version: format!("{}.0.0", e.version),
            release: e.release.clone(),
            has_mcp: KEYS[c] != "cli",
            start_ms: 1000,
            auth_ready: e.auth_ready(),
            waits_for_secrets: !e.auth_ready() && e.connected && e.previous.is_some(),
            upgrade_pending: e.previous.is_some(),
            auth_hint: "needs TOKEN".into(),
            connect_command: format!("tutti connector connect {}", KEYS[c]),
            log_path: format!("/logs/{}.log", KEYS[c]),
            pin: e.pin.clone(),
            trust_updates: false,
        })
    }

    pub fn apply(
        &mut self,
        c: usize,
        effect: Effect,
        queue: &mut VecDeque<Input>,
        later: &mut VecDeque<(u64, String)>,
    ) {
        match effect {
            Effect::Spawn {
                generation,
                release,
            } => {
                self.stats.spawns += 1;
                if self.broken.contains(&c) {
                    later.push_back((generation, "cannot start the worker: no such file".into()));
                    return;
                }
                self.identities.insert(generation);
                let stop_at = None;
                self.procs.insert(
                    generation,
                    Proc {
                        c,
                        release,
                        stop_at,
                    },
                );
            }
            Effect::StartTimer { generation, after } => {
                self.timer(c, after, Input::StartTimeout(generation))
            }
            Effect::RetryAfter { epoch, after } => self.timer(c, after, Input::Retry(epoch)),
            Effect::Stop { generation, grace } => {
                let at = self.now + grace + Duration::from_millis(1);
                if let Some(p) = self.procs.get_mut(&generation) {
                    p.stop_at = Some(p.stop_at.map_or(at, |s| s.min(at)));
                }
            }
            Effect::StopAll { .. } => {
                for g in self.workers_of(c) {
                    self.procs.remove(&g);
                    self.fenced.insert(g);
                }
            }
            Effect::Forget { generation } => {
                self.identities.remove(&generation);
                self.fenced.insert(generation);
            }
            Effect::ForgetAll => {
                for g in self.workers_of(c) {
                    self.identities.remove(&g);
                    self.fenced.insert(g);
                }
            }
            Effect::Fence { generation, reason } => self.fence(c, generation, &reason),
            Effect::Commit {
                generation,
                tools,
                release,
            } => self.commit(c, generation, tools, release),
            Effect::Abandon { .. } => {
                let note = self.abandon(c);
                let why = "it did not start".to_string();
                queue.push_back(Input::Abandoned { note, why });
            }
            Effect::Pin(pin) => {
                self.reviewed
                    .insert(pin.release_dir.clone(), pin.entries.clone());
                if let Some(e) = self
                    .registry
                    .get_mut(&c)
                    .filter(|e| e.release == pin.release_dir)
                {
                    e.pin = Some(pin);
                }
            }
            Effect::Audit(_) | Effect::Answer(_) => {}
        }
    }

    /// The generations of `c`'s running workers.
    fn workers_of(&self, c: usize) -> Vec<u64> {
        let mine = self.procs.iter().filter(|(_, p)| p.c == c);
        mine.map(|(g, _)| *g).collect()
    }

    /// `Kernel::fence`: the generation (or whatever is live) leaves the table.
    fn fence(&mut self, c: usize, generation: Option<u64>, reason: &str) {
        let (key, now) = (KEYS[c], self.now);
        let change = match generation {
            Some(g) => self.table.fence(key, g, reason, now),
            None => self.table.remove(key, reason, now),
        };
        if let Some((_, crate::table::Change::Removed { generation, .. })) = change {
            self.stats.fences += 1;
            self.fenced.insert(generation);
            self.live_release.remove(&c);
        }
    }

    fn timer(&mut self, c: usize, after: Duration, input: Input) {
        let Some(a) = self.actors.get(&c) else {
            return;
        };
        let due = self.now + after;
        self.timers.push(Timer {
            due,
            actor: a.id,
            c,
            input,
        });
    }

    /// `Kernel::commit`: the route goes live, the release settles an upgrade of it.
    fn commit(&mut self, c: usize, generation: u64, tools: Option<Candidate>, release: PathBuf) {
        self.stats.commits += 1;
        if let Some(e) = self.registry.get_mut(&c).filter(|e| e.release == release) {
            e.previous = None;
        }
        let has_mcp = tools.is_some();
        let Candidate { tools, catalog } = tools.unwrap_or_default();
        let route = Route {
            key: KEYS[c].to_string(),
            name: KEYS[c].to_string(),
            generation,
            endpoint: format!("w-{generation}"),
            data_endpoint: String::new(),
            call_timeout_ms: 1000,
            has_cli: !has_mcp,
            has_mcp,
            tools,
            circuit: crate::circuit::Settings::default(),
            catalog,
            skills: Vec::new(),
        };
        let previous = self.table.live(KEYS[c]).map(|r| r.generation);
        if self.table.commit(route, self.now).is_some() || previous == Some(generation) {
            if let Some(old) = previous.filter(|p| *p != generation) {
                self.fenced.insert(old);
            }
            self.live_release.insert(c, release);
        }
    }

    /// `Kernel::abandon_upgrade`: the release the upgrade replaced is current again.
    fn abandon(&mut self, c: usize) -> Option<String> {
        let e = self.registry.get_mut(&c)?;
        let previous = e.previous.take()?;
        let restored = Entry {
            previous: None,
            pin: e.pin.clone(),
            connected: e.connected,
            secret_ok: previous.secret_ok,
            ..*previous
        };
        let note = format!("upgrade to {} not applied", e.version);
        *e = restored;
        Some(note)
    }
}

/// Tool set `set` of connector `c` (see [`Action::Offer`]).
pub fn tool_set(c: usize, set: u8) -> Result<Candidate, String> {
    let tool = |name: &str, description: &str| ValidTool {
        local_name: format!("{}_{name}", KEYS[c]),
        upstream_name: name.to_string(),
        definition_json: format!(r#"{{"name":"{name}","description":"{description}"}}"#),
        risk: Risk::Medium,
    };
    let tools = match set {
        0 => vec![tool("a", "one")],
        1 => vec![tool("a", "one"), tool("b", "two")],
        2 => vec![tool("a", "changed")],
        3 => vec![],
        _ => return Err("tool a: inputSchema is not an object".into()),
    };
    Ok(Candidate {
        tools,
        catalog: Default::default(),
    })
}

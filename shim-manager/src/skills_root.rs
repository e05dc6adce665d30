//! The stable skills root `<state>/skills/`: every live generation's skills,
//! one directory per skill named by the skill (`<root>/<skill name>/SKILL.md`, the layout
//! agents scan), kept in sync with the kernel's route table like `bin/`.
//!
//! - A skill directory is published as a copy of the release's (regular files and
//!   directories; links are not followed; only the files that are part of the release, as
//!   the route lists them: one an upstream wrote there after the install is left out), built under a dot-name in the root and renamed
//!   into place, so an agent never sees a half-written skill. An upgrade moves the old copy
//!   aside first, so for that instant the name is absent rather than mixed.
//! - A skill is removed only on behalf of the generation that published it or a later one:
//!   the live set follows the same rules as the shims' table (a late `removed` of an older
//!   generation changes nothing).
//! - Two connectors with a skill of the same name: the connector whose key sorts first
//!   publishes it; the other's is logged and left out.
//! - Anything else in the root (leftovers of a crash, skills of a connector that is gone)
//!   is deleted at every snapshot and when the manager stops.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use tutti_proto::kernel::route_event::Event;
use tutti_proto::kernel::{ConnectorRoute, RouteEvent};
use tutti_rules::atomic_file;
use tutti_rules::release_path::slashed;

/// One skill of a live generation: its directory in the release copy and the files of it
/// that are part of the release (relative, `/`-separated; the install scanned them).
#[derive(Clone, Debug, PartialEq)]
struct Source {
    dir: PathBuf,
    files: Vec<String>,
}

/// A connector's live generation and its skills (name, source).
type Live = (u64, Vec<(String, Source)>);

pub(crate) struct SkillsRoot {
    root: PathBuf,
    /// Key → live generation with skills.
    live: BTreeMap<String, Live>,
    /// Skill name → (key, generation) it is published for.
    published: BTreeMap<String, (String, u64)>,
    counter: u64,
}

fn skills_of(route: &ConnectorRoute) -> Vec<(String, Source)> {
    route
        .skills
        .iter()
        .map(|s| {
            let source = Source {
                dir: PathBuf::from(&s.dir),
                files: s.files.clone(),
            };
            (s.name.clone(), source)
        })
        .collect()
}

/// A skill name that is one plain path segment.
fn safe_name(name: &str) -> bool {
    !name.is_empty()
        && !name.starts_with('.')
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
}

impl SkillsRoot {
    pub(crate) fn new(root: PathBuf) -> Self {
        if let Err(e) = fs::create_dir_all(&root) {
            tracing::error!(root = %root.display(), error = %e, "cannot create the skills root");
        }
        Self {
            root,
            live: BTreeMap::new(),
            published: BTreeMap::new(),
            counter: 0,
        }
    }

    /// Applies one route event, then brings the root in line.
    pub(crate) fn apply(&mut self, event: &RouteEvent) {
        match &event.event {
            Some(Event::Snapshot(snapshot)) => {
                self.live = snapshot
                    .connectors
                    .iter()
                    .filter(|r| !r.skills.is_empty() && tutti_proto::key::is_valid(&r.key))
                    .map(|r| (r.key.clone(), (r.generation, skills_of(r))))
                    .collect();
                self.sync();
                self.sweep();
                return;
            }
            Some(Event::Upsert(route)) if tutti_proto::key::is_valid(&route.key) => {
                let newer = self
                    .live
                    .get(&route.key)
                    .is_some_and(|(g, _)| *g > route.generation);
                if !newer {
                    if route.skills.is_empty() {
                        self.live.remove(&route.key);
                    } else {
                        self.live
                            .insert(route.key.clone(), (route.generation, skills_of(route)));
                    }
                }
            }
            Some(Event::Removed(removed)) => {
                if self
                    .live
                    .get(&removed.key)
                    .is_some_and(|(g, _)| *g <= removed.generation)
                {
                    self.live.remove(&removed.key);
                }
            }
            Some(Event::Shutdown(_)) => self.live.clear(),
            _ => return,
        }
        self.sync();
    }

    /// Nothing is live any more: every published skill goes.
    pub(crate) fn clear(&mut self) {
        self.live.clear();
        self.sync();
        self.sweep();
    }

    /// Skill name → (key, generation, source) that should be published.
    fn wanted(&self) -> BTreeMap<String, (String, u64, Source)> {
        let mut wanted = BTreeMap::new();
        for (key, (generation, skills)) in &self.live {
            for (name, dir) in skills {
                if !safe_name(name) {
                    tracing::warn!(%key, skill = %name, "skill name is not a plain directory name; not published");
                    continue;
                }
                if let Some((owner, _, _)) = wanted.get(name) {
                    tracing::warn!(%key, skill = %name, %owner, "skill name taken by another connector; not published");
                    continue;
                }
                wanted.insert(name.clone(), (key.clone(), *generation, dir.clone()));
            }
        }
        wanted
    }

    fn sync(&mut self) {
        let wanted = self.wanted();
        let stale: Vec<String> = self
            .published
            .keys()
            .filter(|name| !wanted.contains_key(*name))
            .cloned()
            .collect();
        for name in stale {
            match self.remove(&name) {
                Ok(()) => tracing::info!(skill = %name, "skill removed from the skills root"),
                Err(e) => tracing::error!(skill = %name, error = %e, "skill not removed"),
            }
            self.published.remove(&name);
        }
        for (name, (key, generation, source)) in wanted {
            let owner = (key.clone(), generation);
            if self.published.get(&name) == Some(&owner) {
                continue;
            }
            match self.publish(&name, &source) {
                Ok(()) => {
                    tracing::info!(skill = %name, %key, generation, "skill published");
                    self.published.insert(name, owner);
                }
                Err(e) => tracing::error!(skill = %name, %key, error = %e, "skill not published"),
            }
        }
    }

    fn scratch(&mut self, what: &str, name: &str) -> PathBuf {
        self.counter += 1;
        self.root.join(format!(
            ".{what}-{name}.{}-{}",
            std::process::id(),
            self.counter
        ))
    }

    /// Copies the release's files of `source` to `<root>/<name>` atomically (replacing what
    /// was there).
    fn publish(&mut self, name: &str, source: &Source) -> io::Result<()> {
        let target = self.root.join(name);
        let old = self.scratch("old", name);
        let moved_aside = match fs::rename(&target, &old) {
            Ok(()) => true,
            Err(e) if e.kind() == io::ErrorKind::NotFound => false,
            Err(e) => return Err(e),
        };
        let tmp = self.scratch("tmp", name);
        let done = atomic_file::replace_with(&target, &tmp, |tmp| copy_release_files(source, tmp));
        if moved_aside {
            let _ = fs::remove_dir_all(&old);
        }
        done
    }

    /// Removes `<root>/<name>`: renamed aside first, so it vanishes at once and whole.
    fn remove(&mut self, name: &str) -> io::Result<()> {
        let target = self.root.join(name);
        let old = self.scratch("old", name);
        match fs::rename(&target, &old) {
            Ok(()) => fs::remove_dir_all(&old),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// Deletes every entry of the root that is not a published skill.
    fn sweep(&mut self) {
        let Ok(entries) = fs::read_dir(&self.root) else {
            return;
        };
        for entry in entries.filter_map(Result::ok) {
            let name = entry.file_name().to_string_lossy().into_owned();
            if self.published.contains_key(&name) {
                continue;
            }
            let path = entry.path();
            let removed = match entry.file_type() {
                Ok(t) if t.is_dir() => fs::remove_dir_all(&path),
                _ => fs::remove_file(&path),
            };
            match removed {
                Ok(()) => {
                    tracing::info!(path = %path.display(), "stale entry of the skills root deleted")
                }
                Err(e) => {
                    tracing::warn!(path = %path.display(), error = %e, "cannot delete a stale entry of the skills root")
                }
            }
        }
    }
}

/// Copies the regular files and directories under `from` that are part of the release
/// (`listed`, relative to `from`) into `to` (created). A file an upstream wrote there after
/// the install was never scanned: it is logged and left out.
fn copy_tree(from: &Path, rel: &Path, to: &Path, listed: &BTreeSet<String>) -> io::Result<()> {
    fs::create_dir(to)?;
    for entry in fs::read_dir(from)? {
        let entry = entry?;
        let kind = entry.file_type()?;
        let target = to.join(entry.file_name());
        let child = rel.join(entry.file_name());
        if kind.is_dir() {
            copy_tree(&entry.path(), &child, &target, listed)?;
        } else if kind.is_file() && listed.contains(&slashed(&child)) {
            fs::copy(entry.path(), &target)?;
        } else if kind.is_file() {
            tracing::warn!(file = %entry.path().display(),
                "skill file not published: it is not part of the installed release (written after install, so never scanned)");
        }
    }
    Ok(())
}

fn copy_release_files(source: &Source, to: &Path) -> io::Result<()> {
    let listed: BTreeSet<String> = source.files.iter().cloned().collect();
    copy_tree(&source.dir, Path::new(""), to, &listed)
}

#[cfg(test)]
mod tests {
    use super::*;
    use tutti_proto::kernel::{ConnectorRemoved, RouteSnapshot, RoutedSkill};

    fn route(key: &str, generation: u64, skills: &[(&str, &Path)]) -> ConnectorRoute {
        ConnectorRoute {
            key: key.into(),
            generation,
            skills: skills
                .iter()
                .map(|(n, d)| RoutedSkill {
                    name: (*n).into(),
                    dir: d.to_string_lossy().into_owned(),
                    files: vec!["SKILL.md".into(), "refs/x.md".into()],
                })
                .collect(),
            ..Default::default()
        }
    }

    fn ev(revision: u64, event: Event) -> RouteEvent {
        RouteEvent {
            revision,
            event: Some(event),
        }
    }

    fn source(base: &Path, name: &str, body: &str) -> PathBuf {
        let dir = base.join("src").join(name).join(body);
        fs::create_dir_all(dir.join("refs")).unwrap_or_default();
        fs::write(dir.join("SKILL.md"), body).unwrap_or_default();
        fs::write(dir.join("refs").join("x.md"), "x").unwrap_or_default();
        // Not in the route's list: written after install.
        fs::write(dir.join("refs").join("late.md"), "x").unwrap_or_default();
        dir
    }

    fn listing(root: &Path) -> Vec<String> {
        let mut names: Vec<String> = fs::read_dir(root)
            .map(|d| {
                d.filter_map(Result::ok)
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .collect()
            })
            .unwrap_or_default();
        names.sort();
        names
    }

    #[test]
    fn follows_generations_and_keeps_only_live_skills() {
        let base = std::env::temp_dir().join(format!("tutti-skills-root-{}", std::process::id()));
        let _ = fs::remove_dir_all(&base);
        let root = base.join("skills");
        let v1 = source(&base, "a", "v1");
        let v2 = source(&base, "a", "v2");
        let other = source(&base, "b", "b1");
        fs::create_dir_all(&root).unwrap_or_default();
        fs::write(root.join("leftover"), "x").unwrap_or_default();
        let mut s = SkillsRoot::new(root.clone());
        s.apply(&ev(
            1,
            Event::Snapshot(RouteSnapshot {
                connectors: vec![route("a", 1, &[("alpha", &v1)])],
            }),
        ));
        assert_eq!(listing(&root), ["alpha"]);
        assert_eq!(
            fs::read_to_string(root.join("alpha/SKILL.md"))
                .ok()
                .as_deref(),
            Some("v1")
        );
        assert!(root.join("alpha/refs/x.md").is_file());
        assert!(
            !root.join("alpha/refs/late.md").exists(),
            "a file that is not part of the release is not published"
        );
        // An upgrade replaces the copy; a late removal of generation 1 changes nothing.
        s.apply(&ev(2, Event::Upsert(route("a", 2, &[("alpha", &v2)]))));
        s.apply(&ev(
            3,
            Event::Removed(ConnectorRemoved {
                key: "a".into(),
                generation: 1,
                reason: String::new(),
                deliberate: false,
            }),
        ));
        assert_eq!(
            fs::read_to_string(root.join("alpha/SKILL.md"))
                .ok()
                .as_deref(),
            Some("v2")
        );
        // Same name from a later key: left out; a new name: published.
        s.apply(&ev(
            4,
            Event::Upsert(route("b", 3, &[("alpha", &other), ("beta", &other)])),
        ));
        assert_eq!(listing(&root), ["alpha", "beta"]);
        assert_eq!(
            fs::read_to_string(root.join("alpha/SKILL.md"))
                .ok()
                .as_deref(),
            Some("v2")
        );
        // Removing a: b's alpha takes the name.
        s.apply(&ev(
            5,
            Event::Removed(ConnectorRemoved {
                key: "a".into(),
                generation: 2,
                reason: String::new(),
                deliberate: false,
            }),
        ));
        assert_eq!(
            fs::read_to_string(root.join("alpha/SKILL.md"))
                .ok()
                .as_deref(),
            Some("b1")
        );
        s.clear();
        assert!(listing(&root).is_empty());
        let _ = fs::remove_dir_all(&base);
    }
}

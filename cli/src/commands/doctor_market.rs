//! `tutti doctor`'s checks of the market and of the clients' configurations (SPEC §17, §18):
//! an interpreter that changed since a pinned release was installed, connectors imported
//! unpinned, registries that do not answer, client configurations that still start servers
//! that are also installed connectors, and rewritten entries whose `tutti` is gone. One line
//! each with its fix.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use serde_json::Value;
use tutti_market::plan::PackageRef;
use tutti_proto::kernel::{Empty, SearchRequest};

use super::doctor_check::{Check, Level, check};
use crate::kernel::Kernel;

/// How long one registry may take to answer.
const REGISTRY_TIMEOUT: Duration = Duration::from_secs(10);

/// Every check of this module; `live`: the kernel answers (registries are asked through it).
pub(super) async fn checks(state_dir: &Path, cwd: Option<&Path>, live: bool) -> Vec<Check> {
    let installed = installed(state_dir);
    let mut out = interpreters(state_dir, &installed);
    out.extend(unpinned(state_dir, &installed));
    if live {
        out.extend(registries(state_dir).await);
    }
    if let Some(cwd) = cwd {
        out.extend(clients(state_dir, cwd));
    }
    out
}

/// Installed connectors: key → release SHA-256 (`registry.json`).
fn installed(state_dir: &Path) -> BTreeMap<String, String> {
    let path = tutti_rules::state_dir::layout::registry(state_dir);
    let registry: Value = std::fs::read(path)
        .ok()
        .and_then(|b| serde_json::from_slice(&b).ok())
        .unwrap_or_default();
    let connectors = registry["connectors"].as_object().cloned();
    connectors
        .unwrap_or_default()
        .into_iter()
        .map(|(key, c)| (key, c["sha256"].as_str().unwrap_or_default().to_owned()))
        .collect()
}

fn release_dir(state_dir: &Path, key: &str, sha256: &str) -> std::path::PathBuf {
    tutti_rules::state_dir::layout::releases(state_dir)
        .join(key)
        .join(sha256)
}

/// The interpreter a pinned release runs under (`node`, `python3`), from its lock and launch.
fn interpreter_of(lock: &tutti_market::lock::ReleaseLock, release: &Path) -> Option<String> {
    match &lock.source {
        PackageRef::Npm { .. } => Some("node".into()),
        PackageRef::Pypi { .. } => Some("python3".into()),
        PackageRef::Mcpb { .. } => {
            let manifest = std::fs::read(release.join("connector.json")).ok()?;
            let manifest: Value = serde_json::from_slice(&manifest).ok()?;
            let command = manifest["mcp"]["command"].as_str()?;
            let name = Path::new(command).file_name()?.to_str()?;
            matches!(name, "node" | "python3").then(|| name.to_owned())
        }
        PackageRef::Oci { .. } => None,
    }
}

/// `PROGRAM --version` as the market recorded it at install (first line, stdout else stderr).
fn version_now(program: &str) -> String {
    let out = std::process::Command::new(program)
        .arg("--version")
        .stdin(std::process::Stdio::null())
        .output();
    match out {
        Ok(out) if out.status.success() => {
            let text = [out.stdout, out.stderr].concat();
            let text = String::from_utf8_lossy(&text);
            text.lines().next().unwrap_or_default().trim().to_owned()
        }
        _ => format!("not found on PATH ({program})"),
    }
}

/// A pinned release whose interpreter is another version than at install.
fn interpreters(state_dir: &Path, installed: &BTreeMap<String, String>) -> Vec<Check> {
    let mut seen: BTreeMap<String, String> = BTreeMap::new();
    let mut out = Vec::new();
    for (key, sha) in installed {
        let release = release_dir(state_dir, key, sha);
        let Ok(lock) = tutti_market::lock::read(&release) else {
            continue;
        };
        let (Some(recorded), Some(program)) =
            (lock.interpreter.clone(), interpreter_of(&lock, &release))
        else {
            continue;
        };
        let now = seen
            .entry(program.clone())
            .or_insert_with(|| version_now(&program))
            .clone();
        if now == recorded {
            continue;
        }
        let source = tutti_market::origin::read(&release)
            .ok()
            .flatten()
            .map(|o| o.source)
            .filter(|s| !s.is_empty())
            .unwrap_or_else(|| "SOURCE".into());
        out.push(
            check(
                format!("interpreter {key}"),
                Level::Warn,
                format!("installed under {recorded}, {program} is now {now}"),
            )
            .fix(format!(
                "install it again so its packages match this interpreter: `tutti connector install {source} --key {key}`"
            )),
        );
    }
    out
}

/// Connectors imported with `--no-pin`: what they run is resolved at every start.
fn unpinned(state_dir: &Path, installed: &BTreeMap<String, String>) -> Vec<Check> {
    let mut out = Vec::new();
    for (key, sha) in installed {
        let Some(record) = crate::import::import_record(state_dir, key, sha) else {
            continue;
        };
        if record["unpinned"] != true {
            continue;
        }
        let client = record["client"].as_str().unwrap_or("CLIENT");
        let entry = record["entry"].as_str().unwrap_or(key);
        out.push(
            check(
                format!("unpinned {key}"),
                Level::Warn,
                format!("imported with --no-pin from {client}: its command fetches what it runs at every start"),
            )
            .fix(format!(
                "pin it: `tutti connector uninstall {key}`, then `tutti connector import --from {client} --only {entry}`"
            )),
        );
    }
    out
}

/// Every configured registry answers a search (through the kernel, which holds the list).
async fn registries(state_dir: &Path) -> Vec<Check> {
    let Ok(kernel) = Kernel::connect(state_dir).await else {
        return Vec::new();
    };
    let mut market = kernel.market();
    let Ok(list) = market.list_registries(Empty {}).await else {
        return Vec::new();
    };
    let mut out = Vec::new();
    let mut answering = 0;
    for r in &list.get_ref().registries {
        let request = SearchRequest {
            words: "tutti-doctor-reachability".into(),
            registry: r.name.clone(),
        };
        let answer = tokio::time::timeout(REGISTRY_TIMEOUT, market.search(request)).await;
        let problem = match answer {
            Ok(Ok(_)) => {
                answering += 1;
                continue;
            }
            // The market's own advice after "; " gives way to this check's fix.
            Ok(Err(status)) => {
                let message = status.message();
                message
                    .split_once("; ")
                    .map_or(message, |(p, _)| p)
                    .to_owned()
            }
            Err(_) => format!("no answer from {} within {REGISTRY_TIMEOUT:?}", r.url),
        };
        out.push(
            check(
                format!("registry {}", r.name),
                Level::Warn,
                format!("unreachable: {problem}"),
            )
            .fix(format!(
                "check the network and the URL, or `tutti registry remove {}`",
                r.name
            )),
        );
    }
    if answering > 0 {
        out.push(check(
            "registries",
            Level::Ok,
            format!("{answering} answer"),
        ));
    }
    out
}

/// Client configurations that still start an installed connector's server themselves, and
/// bridge entries whose `tutti` is gone.
fn clients(state_dir: &Path, cwd: &Path) -> Vec<Check> {
    let launches = crate::import::installed_launches(state_dir);
    let mut out = Vec::new();
    for e in crate::import::client_entries(cwd) {
        let place = e.path.display().to_string();
        if let Some(program) = &e.bridge {
            if !Path::new(program).is_file() {
                let tutti = std::env::current_exe()
                    .map(|p| p.display().to_string())
                    .unwrap_or_else(|_| "the path of tutti".into());
                out.push(
                    check(
                        format!("client {}", e.client),
                        Level::Warn,
                        format!(
                            "{place}: entry {} runs {program}, which no longer exists",
                            e.name
                        ),
                    )
                    .fix(format!("set the entry's command to {tutti}")),
                );
            }
            continue;
        }
        let Some((key, _)) = launches.iter().find(|(_, l)| l.contains(&e.launch)) else {
            continue;
        };
        out.push(
            check(
                format!("client {}", e.client),
                Level::Warn,
                format!(
                    "{place}: still starts {} itself, also installed as connector {key} (imported, not rewritten)",
                    e.name
                ),
            )
            .fix(format!(
                "`tutti connector import --from {} --rewrite` points it at the runtime",
                e.client
            )),
        );
    }
    out
}

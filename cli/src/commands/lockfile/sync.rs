//! `tutti connector sync FILE [--yes] [--prune] [--from DIR]`: each connector of the lock
//! file that this runtime does not hold as it is (same key, same release SHA-256) is built
//! again (a market source re-pinned from its source, each artefact's hash compared with the
//! lock's; a folder install from `--from DIR`, with the same release hash), planned by the
//! kernel, and all of them are confirmed once; a connector whose hashes differ is refused
//! and nothing of it is installed. `--prune` uninstalls the connectors the file does not name.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use tutti_market::plan::LockedArtefact;
use tutti_proto::kernel::{DiscardRequest, Empty, InstallPlan, InstallRequest, KeyRequest};

use super::document::{LockedConnector, read_lock_file, stage_request};
use crate::args::SyncArgs;
use crate::commands::connector::{Verb, confirm, confirmation};
use crate::commands::market::{confirmation as market_confirmation, stage};
use crate::error::CliError;
use crate::kernel::Kernel;
use crate::output::{emit, note, one_line, visible};

/// A connector ready to install: its release folder planned by the kernel.
struct Prepared {
    key: String,
    /// The market's staged folder (discarded whatever happens), `None` for a folder.
    staged: Option<String>,
    /// What the market adds to the confirmation (source, version, artefacts, scripts).
    extra: Option<String>,
    request: InstallRequest,
    plan: InstallPlan,
}

pub(crate) async fn sync(state_dir: &Path, args: SyncArgs) -> Result<ExitCode, CliError> {
    let file = read_lock_file(&args.file)?;
    let mut kernel = Kernel::connect(state_dir).await?;
    let installed = installed(&mut kernel).await?;
    let mut prepared = Vec::new();
    let mut refused = Vec::new();
    for entry in &file.connectors {
        if installed.get(&entry.key) == Some(&entry.sha256) {
            note(&format!(
                "tutti: {} is already this release; left alone",
                entry.key
            ));
            continue;
        }
        match prepare(&mut kernel, entry, args.from.as_deref()).await {
            Ok(p) => prepared.push(p),
            Err(problem) => refused.push(format!(
                "tutti: {} refused, nothing of it is installed: {}",
                entry.key,
                one_line(&problem, 4096)
            )),
        }
    }
    let prune: Vec<String> = installed
        .keys()
        .filter(|k| args.prune && !file.connectors.iter().any(|c| &c.key == *k))
        .cloned()
        .collect();
    let outcome = apply(&mut kernel, &prepared, &prune, &refused, args.yes).await;
    for p in &prepared {
        discard(&mut kernel, p).await;
    }
    outcome?;
    secrets_to_give(&mut kernel, &file.connectors).await?;
    for line in &refused {
        note(&visible(line));
    }
    Ok(if refused.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// The installed connectors: key → release SHA-256.
async fn installed(kernel: &mut Kernel) -> Result<BTreeMap<String, String>, CliError> {
    let status = kernel.client.status(Empty {}).await;
    let status = status.map_err(|s| kernel.error(s))?.into_inner();
    Ok(status
        .connectors
        .into_iter()
        .map(|c| (c.key, c.sha256))
        .collect())
}

/// One confirmation for everything, then the installs and the uninstalls.
async fn apply(
    kernel: &mut Kernel,
    prepared: &[Prepared],
    prune: &[String],
    refused: &[String],
    yes: bool,
) -> Result<(), CliError> {
    if prepared.is_empty() && prune.is_empty() {
        emit("nothing to change\n")?;
        return Ok(());
    }
    for p in prepared {
        note(confirmation(&p.plan, Verb::Install).trim_end());
        if let Some(extra) = &p.extra {
            note(extra.trim_end());
        }
    }
    for key in prune {
        note(&format!("Uninstall connector {key} (not in the lock file)"));
    }
    if !refused.is_empty() {
        note(&format!(
            "{} connector(s) of the lock file refused (see below)",
            refused.len()
        ));
    }
    if !yes {
        confirm(Verb::Install)?;
    }
    for p in prepared {
        let mut request = p.request.clone();
        request.expected_sha256 = p.plan.sha256.clone();
        let reply = kernel.client.install(request).await;
        let reply = reply.map_err(|s| kernel.error(s))?.into_inner();
        emit(&format!(
            "installed {} {} ({})\n",
            reply.key,
            visible(&reply.version),
            reply.status
        ))?;
    }
    for key in prune {
        let request = KeyRequest {
            key: key.clone(),
            ..KeyRequest::default()
        };
        kernel
            .client
            .uninstall(request)
            .await
            .map_err(|s| kernel.error(s))?;
        emit(&format!("uninstalled {key}\n"))?;
    }
    Ok(())
}

/// Builds and plans one connector of the lock file; `Err` is why it is refused (one line).
async fn prepare(
    kernel: &mut Kernel,
    entry: &LockedConnector,
    from: Option<&Path>,
) -> Result<Prepared, String> {
    let Some(origin) = &entry.origin else {
        return prepare_folder(kernel, entry, from).await;
    };
    let request = stage_request(origin, None);
    let staged = stage(kernel, request, false)
        .await
        .map_err(|e| e.to_string())?;
    let mut prepared = Prepared {
        key: entry.key.clone(),
        staged: Some(staged.staging_dir.clone()),
        extra: Some(market_confirmation(&staged)),
        request: install_request(entry, Path::new(&staged.staging_dir)),
        plan: InstallPlan::default(),
    };
    let checked = check_staged(kernel, entry, &mut prepared).await;
    if let Err(problem) = checked {
        discard(kernel, &prepared).await;
        return Err(problem);
    }
    Ok(prepared)
}

/// The staged release's artefacts against the lock's, then the kernel's plan of it.
async fn check_staged(
    kernel: &mut Kernel,
    entry: &LockedConnector,
    prepared: &mut Prepared,
) -> Result<(), String> {
    let dir = PathBuf::from(&prepared.request.source_dir);
    let got = tutti_market::lock::read(&dir)
        .map(|l| l.artefacts)
        .unwrap_or_default();
    if let Some(problem) = artefact_mismatch(&entry.artefacts, &got) {
        return Err(format!(
            "{problem}; the source no longer serves what the lock names: check the source, or lock again where it was installed"
        ));
    }
    prepared.plan = plan(kernel, &prepared.request).await?;
    if prepared.plan.key != entry.key {
        return Err(format!(
            "the source builds connector {:?}, not {:?}; lock again where it was installed",
            prepared.plan.key, entry.key
        ));
    }
    if prepared.plan.sha256 != entry.sha256 {
        note(&format!(
            "tutti: {}: the release built here is {} (the lock names {}): its artefacts are the locked ones, the interpreter differs",
            entry.key, prepared.plan.sha256, entry.sha256
        ));
    }
    Ok(())
}

/// A folder install: `DIR/<key>` or `DIR` itself, whichever is the locked release.
async fn prepare_folder(
    kernel: &mut Kernel,
    entry: &LockedConnector,
    from: Option<&Path>,
) -> Result<Prepared, String> {
    let Some(from) = from else {
        return Err(format!(
            "it was installed from a release folder; give the folder holding it with --from DIR (release {})",
            entry.sha256
        ));
    };
    let mut got = Vec::new();
    for dir in [from.join(&entry.key), from.to_path_buf()] {
        if !dir.join("connector.json").is_file() {
            continue;
        }
        let dir = std::path::absolute(&dir).unwrap_or(dir);
        let request = install_request(entry, &dir);
        let plan = plan(kernel, &request).await?;
        if plan.sha256 == entry.sha256 {
            return Ok(Prepared {
                key: entry.key.clone(),
                staged: None,
                extra: None,
                request,
                plan,
            });
        }
        got.push(format!("{} in {}", plan.sha256, dir.display()));
    }
    Err(match got.is_empty() {
        true => format!(
            "no release folder {} or {} holds connector.json; give the folder the lock was made from with --from DIR",
            from.join(&entry.key).display(),
            from.display()
        ),
        false => format!(
            "release hash differs: expected {}, got {}; give the folder the lock was made from with --from DIR",
            entry.sha256,
            got.join(", ")
        ),
    })
}

fn install_request(entry: &LockedConnector, dir: &Path) -> InstallRequest {
    InstallRequest {
        source_dir: dir.display().to_string(),
        allow_commands: entry.allow_commands.clone(),
        allow_env: entry.allow_env.clone(),
        allow_skill_findings: entry.allow_skill_findings,
        trust_updates: entry.trust_updates,
        ..Default::default()
    }
}

/// The kernel's plan of a release folder; its problems (joined) when it would be refused.
async fn plan(kernel: &mut Kernel, request: &InstallRequest) -> Result<InstallPlan, String> {
    let plan = kernel.client.plan_install(request.clone()).await;
    let plan = plan.map_err(|s| kernel.error(s).to_string())?.into_inner();
    if !plan.problems.is_empty() {
        return Err(plan.problems.join("; "));
    }
    Ok(plan)
}

/// The first artefact whose hash differs from the lock's (or that one side lacks), as
/// `artefact NAME VERSION: expected H, got H`.
fn artefact_mismatch(locked: &[LockedArtefact], got: &[LockedArtefact]) -> Option<String> {
    let find = |list: &[LockedArtefact], a: &LockedArtefact| {
        list.iter()
            .find(|b| b.name == a.name && b.version == a.version)
            .map(|b| b.hash.clone())
    };
    for a in locked {
        let found = find(got, a);
        if found.as_deref() != Some(a.hash.as_str()) {
            let got = found.unwrap_or_else(|| "no such artefact".into());
            return Some(format!(
                "artefact {} {}: expected {}, got {got}",
                a.name, a.version, a.hash
            ));
        }
    }
    got.iter().find(|a| find(locked, a).is_none()).map(|a| {
        format!(
            "artefact {} {}: expected none (not in the lock), got {}",
            a.name, a.version, a.hash
        )
    })
}

async fn discard(kernel: &mut Kernel, p: &Prepared) {
    if let Some(dir) = &p.staged {
        let request = DiscardRequest {
            staging_dir: dir.clone(),
        };
        if let Err(status) = kernel.market().discard_staged(request).await {
            tracing::warn!(key = %p.key, error = %status.message(), "the staged release was not removed");
        }
    }
}

/// The names of secrets still to be given, one line per connector of the file.
async fn secrets_to_give(
    kernel: &mut Kernel,
    connectors: &[LockedConnector],
) -> Result<(), CliError> {
    let status = kernel.client.status(Empty {}).await;
    let status = status.map_err(|s| kernel.error(s))?.into_inner();
    for c in status
        .connectors
        .iter()
        .filter(|c| c.status == "auth_required" && connectors.iter().any(|l| l.key == c.key))
    {
        let what = if c.secret_names.is_empty() {
            "a login".to_owned()
        } else {
            format!("secrets {}", c.secret_names.join(", "))
        };
        emit(&format!(
            "{} still needs {what}: tutti connector connect {}\n",
            c.key, c.key
        ))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn artefact(name: &str, hash: &str) -> LockedArtefact {
        LockedArtefact {
            name: name.into(),
            version: "1.0.0".into(),
            url: format!("https://example.test/{name}"),
            hash: hash.into(),
            size: 1,
        }
    }

    #[test]
    fn an_artefact_whose_hash_differs_is_named_with_both_hashes() {
        let locked = [artefact("a", "sha256-aa"), artefact("b", "sha256-bb")];
        assert_eq!(artefact_mismatch(&locked, &locked), None);
        let got = [artefact("a", "sha256-aa"), artefact("b", "sha256-cc")];
        assert_eq!(
            artefact_mismatch(&locked, &got).as_deref(),
            Some("artefact b 1.0.0: expected sha256-bb, got sha256-cc")
        );
        let more = [
            artefact("a", "sha256-aa"),
            artefact("b", "sha256-bb"),
            artefact("c", "sha256-dd"),
        ];
        let extra = artefact_mismatch(&locked, &more).unwrap_or_default();
        assert!(extra.contains("artefact c 1.0.0: expected none"), "{extra}");
        let missing = artefact_mismatch(&locked, &got[..1]).unwrap_or_default();
        assert!(missing.ends_with("got no such artefact"), "{missing}");
    }
}

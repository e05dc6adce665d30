//! What is installed and how it is doing: `tutti status` (every connector, its generation,
//! figures and faults) and `tutti connector available` (what agents can use). Reads only.

use tutti_proto::kernel as pb;

use crate::registry::Installed;
use crate::state::{Inner, Kernel, Status as CStatus, lock};

/// The runtime's status, every installed connector included; never a secret value.
pub fn status(k: &Kernel) -> pb::StatusReply {
    let redact = k.redactor();
    let inner = lock(&k.inner);
    k.figures.retain_keys(&inner.registry.connectors);
    let connectors = inner
        .registry
        .connectors
        .iter()
        .map(|(key, installed)| connector_status(k, &inner, key, installed, &redact))
        .collect();
    pb::StatusReply {
        frontend_url: lock(&k.frontend_url).clone().unwrap_or_default(),
        route_revision: inner.table.revision(),
        state_dir: k.paths.state.to_string_lossy().into_owned(),
        kernel_pid: std::process::id(),
        connectors,
        audit_dropped: k.audit.dropped(),
        bin_dir: k.paths.bin().to_string_lossy().into_owned(),
        resource_clashes: resource_clashes(&inner.table),
        registry_revision: inner.registry.revision,
        confirmations_waiting: u32::try_from(k.confirmations.waiting()).unwrap_or(u32::MAX),
        ..k.telemetry_drops.reply()
    }
}

fn connector_status(
    k: &Kernel,
    inner: &Inner,
    key: &str,
    installed: &Installed,
    redact: &impl Fn(&str) -> String,
) -> pb::ConnectorStatus {
    let m = inner.manifests.get(key);
    let c = inner.conns.get(key);
    let live = inner.table.live(key);
    let oauth = m.and_then(crate::connect::oauth_record::oauth_of).is_some();
    let circuit = c.and_then(|c| c.circuit.as_ref());
    let mut s = pb::ConnectorStatus {
        key: key.to_owned(),
        name: m.map(|m| m.name.clone()).unwrap_or_default(),
        // The version that is live, else the installed one.
        version: inner
            .serving(key)
            .map_or(&installed.version, |l| &l.manifest.version)
            .clone(),
        generation: live.map(|r| r.generation).unwrap_or(0),
        status: c.map_or("stopped", |c| c.life.status().as_str()).into(),
        tool_count: live.map(|r| r.tools.len() as u32).unwrap_or(0),
        restarts: c.map_or(0, |c| c.life.restarts()),
        reinitializations: c.map_or(0, |c| c.life.reinitializations()),
        oauth,
        token_expires_unix_ms: if oauth {
            crate::connect::oauth::expiry(k, key)
        } else {
            0
        },
        oauth_account: crate::connect::oauth::account(k, key),
        last_error: c
            .map(|c| {
                let (error, note) = (c.life.last_error(), c.life.upgrade_note());
                match (error.is_empty(), note.is_empty()) {
                    (_, true) => redact(error),
                    (true, false) => redact(note),
                    (false, false) => redact(&format!("{error}; {note}")),
                }
            })
            .unwrap_or_default(),
        next_retry_unix_ms: c.map_or(0, |c| c.life.next_retry_unix_ms()),
        non_json_stdout_lines: c.map(|c| c.non_json_lines).unwrap_or(0),
        has_mcp: m.is_some_and(|m| m.mcp.is_some()),
        has_cli: m.is_some_and(|m| m.cli.is_some()),
        changes_await_review: c.is_some_and(|c| c.life.held().is_some()),
        review_summary: c
            .and_then(|c| c.life.held())
            .map(|h| redact(&h.summary))
            .unwrap_or_default(),
        circuit: circuit.map_or("closed", |s| s.state.as_str()).into(),
        circuit_note: circuit
            .map(|s| s.note(key, crate::state::unix_ms(std::time::SystemTime::now())))
            .unwrap_or_default(),
        call_figures: Some(k.figures.figures(key)),
        sha256: installed.sha256.clone(),
        secret_names: m.map(|m| m.secret_names()).unwrap_or_default(),
        ..k.telemetry_drops.connector(key)
    };
    if let Some(r) = live {
        count_live(&mut s, r);
    }
    s
}

/// What agents can use: every installed connector with its skills and interfaces.
pub fn available(k: &Kernel) -> pb::AvailableReply {
    let inner = lock(&k.inner);
    let connectors = inner
        .registry
        .connectors
        .keys()
        .map(|key| available_connector(&inner, key))
        .collect();
    pb::AvailableReply { connectors }
}

fn available_connector(inner: &Inner, key: &str) -> pb::AvailableConnector {
    // What agents are served: the live release while an upgrade is pending.
    let live_manifest = inner.serving(key).map(|l| &l.manifest);
    let Some(m) = live_manifest.or_else(|| inner.manifests.get(key)) else {
        // Installed, but its release cannot be read (SPEC §7 lists every installed
        // connector): nothing of it can run, and only `tutti status` has the details.
        return pb::AvailableConnector {
            key: key.to_owned(),
            name: key.to_owned(),
            description:
                "not usable: its installed release cannot be read (`tutti status` says why)".into(),
            skills: Vec::new(),
            interfaces: Vec::new(),
        };
    };
    let status = inner
        .conns
        .get(key)
        .map_or(CStatus::Stopped, |c| c.life.status());
    let iface_status = interface_status(status, inner.table.live(key).is_some());
    let mut interfaces = Vec::new();
    if m.mcp.is_some() {
        interfaces.push(pb::InterfaceStatus {
            kind: "mcp".into(),
            status: iface_status.into(),
            server_name: "connector".into(),
            tool_prefix: format!("{key}_"),
            command: String::new(),
        });
    }
    if m.cli.is_some() {
        interfaces.push(pb::InterfaceStatus {
            kind: "cli".into(),
            status: iface_status.into(),
            server_name: String::new(),
            tool_prefix: String::new(),
            command: format!("tutti-connector-{key}"),
        });
    }
    pb::AvailableConnector {
        key: key.to_owned(),
        name: m.name.clone(),
        description: m.description.clone(),
        skills: m
            .skills
            .iter()
            .map(|s| pb::SkillSummary {
                name: s.name.clone(),
                title: s.title.clone().unwrap_or_default(),
                description: s.description.clone(),
            })
            .collect(),
        interfaces,
    }
}

/// The agent-facing interface status of `tutti connector available` (SPEC §7). Refused
/// credentials (`auth_failed`) read as `auth_required`: for an agent the way out is the same,
/// the user runs `tutti connector connect` again.
fn interface_status(status: CStatus, live: bool) -> &'static str {
    match status {
        CStatus::Ready if live => "ready",
        CStatus::Starting | CStatus::Restarting => "starting",
        CStatus::AuthRequired | CStatus::AuthFailed => "auth_required",
        CStatus::Ready | CStatus::CrashLoop | CStatus::Failed | CStatus::Stopped => "unavailable",
    }
}

/// What the live generation `r` serves, counted into its connector's status: prompts,
/// resources, templates and the tools by risk.
fn count_live(s: &mut pb::ConnectorStatus, r: &crate::table::Route) {
    s.prompt_count = r.catalog.prompts.len() as u32;
    s.resource_count = r.catalog.resources.len() as u32;
    s.resource_template_count = r.catalog.templates.len() as u32;
    for t in &r.tools {
        match t.risk {
            crate::toolset::Risk::Low => s.risk_low += 1,
            crate::toolset::Risk::Medium => s.risk_medium += 1,
            crate::toolset::Risk::High => {
                s.risk_high += 1;
                s.high_risk_tools.push(t.local_name.clone());
            }
        }
    }
}

/// Resource URIs (and identical templates) claimed by more than one live generation.
fn resource_clashes(table: &crate::table::GenerationTable) -> Vec<pb::ResourceClash> {
    crate::catalog::clashes(table.routes().map(|r| (r.key.as_str(), &r.catalog)))
        .into_iter()
        .map(|c| pb::ResourceClash {
            uri: c.uri,
            connectors: c.connectors,
            kind: c.kind.to_owned(),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn interface_statuses_are_the_four_of_the_spec() {
        assert_eq!(interface_status(CStatus::Ready, true), "ready");
        assert_eq!(interface_status(CStatus::Ready, false), "unavailable");
        assert_eq!(interface_status(CStatus::Restarting, false), "starting");
        assert_eq!(
            interface_status(CStatus::AuthFailed, false),
            "auth_required"
        );
        assert_eq!(interface_status(CStatus::CrashLoop, false), "unavailable");
        assert_eq!(interface_status(CStatus::Failed, false), "unavailable");
    }
}

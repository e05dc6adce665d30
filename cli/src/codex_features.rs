//! What a Codex binding needs beyond its `[mcp_servers.connector]` table to refresh its tool
//! list (SPEC §6, §11): Codex acts on `notifications/tools/list_changed` only with
//! `[features] mcp_tool_list_changed = true`, a feature only some Codex versions have. The
//! installed Codex is asked with `codex features list` (run directly, no shell); the flag is
//! written only when it lists the feature.

use std::process::Stdio;
use std::time::Duration;

use toml_edit::{DocumentMut, Item, Table};

/// The Codex feature that makes Codex list tools again on `list_changed`.
pub(crate) const LIST_CHANGED: &str = "mcp_tool_list_changed";

/// How long `codex features list` may take.
const PROBE_TIMEOUT: Duration = Duration::from_secs(10);

/// Whether the `codex` on PATH has [`LIST_CHANGED`]: `Err` says why not, in a few words.
pub(crate) async fn detect() -> Result<(), String> {
    let run = tokio::process::Command::new("codex")
        .args(["features", "list"])
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .output();
    let output = match tokio::time::timeout(PROBE_TIMEOUT, run).await {
        Err(_) => {
            return Err(format!(
                "`codex features list` did not answer within {} s",
                PROBE_TIMEOUT.as_secs()
            ));
        }
        Ok(Err(e)) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err("codex is not on PATH".to_owned());
        }
        Ok(Err(e)) => return Err(format!("`codex features list` cannot run ({e})")),
        Ok(Ok(output)) => output,
    };
    if !output.status.success() {
        return Err(format!("`codex features list` failed ({})", output.status));
    }
    if lists_feature(&String::from_utf8_lossy(&output.stdout)) {
        Ok(())
    } else {
        Err(format!("the installed codex has no {LIST_CHANGED} feature"))
    }
}

/// Whether a `codex features list` listing (one feature a line, its name first) has
/// [`LIST_CHANGED`].
fn lists_feature(listing: &str) -> bool {
    listing
        .lines()
        .any(|line| line.split_whitespace().next() == Some(LIST_CHANGED))
}

/// Sets `[features] mcp_tool_list_changed = true`, keeping every other key. `Err` when the
/// document's `features` is not a table.
pub(crate) fn merge(doc: &mut DocumentMut) -> Result<(), ()> {
    let features = doc
        .as_table_mut()
        .entry("features")
        .or_insert_with(|| Item::Table(Table::new()));
    let features = features.as_table_like_mut().ok_or(())?;
    features.insert(LIST_CHANGED, toml_edit::value(true));
    Ok(())
}

/// `printed` (the binding's TOML) with the features table added.
pub(crate) fn with_features(printed: String) -> String {
    let Ok(mut doc) = printed.parse::<DocumentMut>() else {
        return printed;
    };
    match merge(&mut doc) {
        Ok(()) => doc.to_string(),
        Err(()) => printed,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_feature_is_found_by_its_name_only() {
        let listing = "apply_patch_freeform  stable  true\n\
                       mcp_tool_list_changed  experimental  false\n";
        assert!(lists_feature(listing));
        assert!(!lists_feature("mcp_tool_list_changed_v2  beta  false\n"));
        assert!(!lists_feature("other  stable  mcp_tool_list_changed\n"));
        assert!(!lists_feature(""));
    }

    #[test]
    fn merging_sets_the_flag_and_keeps_every_other_key() {
        let text = "# mine\nmodel = \"m\"\n\n[features]\n# keep\nweb_search = true\nmcp_tool_list_changed = false\n\n[mcp_servers.x]\nurl = \"u\"\n";
        let mut doc: DocumentMut = text.parse().unwrap_or_default();
        assert_eq!(merge(&mut doc), Ok(()));
        assert_eq!(
            doc.to_string(),
            text.replace(
                "mcp_tool_list_changed = false",
                "mcp_tool_list_changed = true"
            )
        );
        let mut inline: DocumentMut = "features = { web_search = true }\n"
            .parse()
            .unwrap_or_default();
        assert_eq!(merge(&mut inline), Ok(()));
        assert_eq!(
            inline["features"]["mcp_tool_list_changed"].as_bool(),
            Some(true)
        );
        assert_eq!(inline["features"]["web_search"].as_bool(), Some(true));
        let mut broken: DocumentMut = "features = 3\n".parse().unwrap_or_default();
        assert_eq!(merge(&mut broken), Err(()));
        assert_eq!(broken.to_string(), "features = 3\n");
    }
}

//! `connector.json` (SPEC §3): parsing, validation with one line per problem naming the
//! field, placeholder expansion and the exact launch plan.

mod fields;
mod launch;
mod model;
mod parse;
#[cfg(test)]
mod props;
#[cfg(test)]
mod tests;

use std::path::Path;

use serde_json::Value;

pub use launch::{injection_problems, launch_problems, stdio_launch, stdio_launch_from};
pub use model::{Auth, Manifest, Mcp, OauthSettings, StdioLaunch};
pub use parse::parse;

/// Reads and validates `<dir>/connector.json`. `Err` holds one line per problem.
pub fn load(dir: &Path) -> Result<Manifest, Vec<String>> {
    let text = fields::read_manifest(dir).map_err(|e| vec![e])?;
    let value: Value = serde_json::from_str(&text)
        .map_err(|e| vec![format!("connector.json: not valid JSON: {e}")])?;
    parse(&value, dir)
}

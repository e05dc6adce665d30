//! What a valid `connector.json` describes: the manifest and its interfaces.

use std::collections::BTreeMap;
use std::path::PathBuf;

pub const DEFAULT_START_MS: u32 = 30_000;
pub const DEFAULT_CALL_MS: u32 = 60_000;

#[derive(Clone, Debug)]
pub struct Manifest {
    pub key: String,
    pub name: String,
    pub description: String,
    pub version: String,
    pub mcp: Option<Mcp>,
    pub cli: Option<Cli>,
    pub skills: Vec<Skill>,
    pub start_ms: u32,
    pub call_ms: u32,
    pub tool_risk: BTreeMap<String, String>,
    /// `circuit` (SPEC §12), defaults filled in.
    pub circuit: crate::circuit::Settings,
}

#[derive(Clone, Debug)]
pub enum Mcp {
    Stdio {
        command: String,
        args: Vec<String>,
        cwd: String,
        env: BTreeMap<String, String>,
        secrets: Vec<String>,
    },
    Http {
        url: String,
        auth: Auth,
    },
}

#[derive(Clone, Debug)]
pub enum Auth {
    None,
    Bearer {
        secret: String,
    },
    Header {
        header: String,
        secret: String,
    },
    /// SPEC §10: a browser login; the tokens are kept by the kernel under `secrets/`.
    Oauth(OauthSettings),
}

/// `auth.kind: "oauth"` (SPEC §10).
#[derive(Clone, Debug, Default)]
pub struct OauthSettings {
    pub scopes: Vec<String>,
    pub client_id: Option<String>,
    /// The name of the secret that holds a pre-registered client's secret.
    pub client_secret: Option<String>,
    pub client_metadata_url: Option<String>,
}

#[derive(Clone, Debug)]
pub struct Cli {
    pub entrypoint: String,
    pub secrets: Vec<String>,
}

#[derive(Clone, Debug)]
pub struct Skill {
    /// Directory relative to the release.
    pub dir: String,
    pub name: String,
    pub title: Option<String>,
    pub description: String,
}

/// What a stdio upstream runs, after expansion.
#[derive(Clone, Debug, PartialEq)]
pub struct StdioLaunch {
    pub program: PathBuf,
    pub args: Vec<String>,
    pub cwd: PathBuf,
    pub env: BTreeMap<String, String>,
}

impl Manifest {
    /// Every secret name the connector declares (mcp, http auth and cli), sorted, unique.
    pub fn secret_names(&self) -> Vec<String> {
        let mut names: Vec<String> = Vec::new();
        match &self.mcp {
            Some(Mcp::Stdio { secrets, .. }) => names.extend(secrets.iter().cloned()),
            Some(Mcp::Http {
                auth: Auth::Bearer { secret } | Auth::Header { secret, .. },
                ..
            }) => names.push(secret.clone()),
            Some(Mcp::Http {
                auth:
                    Auth::Oauth(OauthSettings {
                        client_secret: Some(secret),
                        ..
                    }),
                ..
            }) => names.push(secret.clone()),
            _ => {}
        }
        if let Some(cli) = &self.cli {
            names.extend(cli.secrets.iter().cloned());
        }
        names.sort();
        names.dedup();
        names
    }
}

//! What the market's steps hand to each other: the package a source names, how it is to be
//! pinned, and what the pinned release runs.

use std::collections::BTreeMap;

use crate::MarketError;

/// One package to fetch into a release, exactly as resolved from its source.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum PackageRef {
    /// An npm package at an exact version.
    Npm { name: String, version: String },
    /// A PyPI distribution at an exact version.
    Pypi { name: String, version: String },
    /// An MCP bundle (`.mcpb`): a local file or an `https` URL, with its expected SHA-256.
    Mcpb {
        location: String,
        sha256: Option<String>,
    },
    /// A container image reference (tag or digest).
    Oci { image: String },
}

impl PackageRef {
    /// Refuses a name or version that an ecosystem tool would read as something else: an
    /// option (`-…` on pip's or docker's command line), a requirement with markers, or an npm
    /// spec that is a URL, a path or a git repository (whose `integrity` would be computed at
    /// download, not published by the registry). Names come from the person and from
    /// registries alike.
    pub fn check(&self) -> Result<(), MarketError> {
        let refuse = |what: &str, value: &str, rule: &str| {
            Err(MarketError::Source(format!(
                "{what} {value:?} cannot be pinned: {rule}; check the name and version"
            )))
        };
        match self {
            PackageRef::Npm { name, version } => {
                if !npm_name(name) {
                    return refuse(
                        "npm package",
                        name,
                        "an npm name is [@scope/]name of letters, digits, '-', '.', '_' and '~'",
                    );
                }
                if version.contains([':', '/', '\\']) {
                    return refuse(
                        "npm version",
                        version,
                        "a version, tag or range of the npm registry, never a URL, a path or a git repository",
                    );
                }
            }
            PackageRef::Pypi { name, version } => {
                if !pypi_name(name) {
                    return refuse(
                        "PyPI distribution",
                        name,
                        "a distribution name is letters, digits, '-', '.' and '_', starting and ending with a letter or digit",
                    );
                }
                let version_ok = version
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || ".!+*_-".contains(c));
                if !version_ok || version.starts_with('-') {
                    return refuse("PyPI version", version, "an exact version such as 1.2.0");
                }
            }
            PackageRef::Oci { image } => {
                if image.starts_with('-')
                    || image.chars().any(|c| c.is_whitespace() || c.is_control())
                {
                    return refuse(
                        "image",
                        image,
                        "an image reference such as ghcr.io/owner/name:tag",
                    );
                }
            }
            PackageRef::Mcpb { .. } => {}
        }
        Ok(())
    }
}

/// `[@scope/]name` as the npm registry spells names (upper case is kept for old packages).
fn npm_name(name: &str) -> bool {
    let part = |p: &str| {
        !p.is_empty()
            && !p.starts_with(['.', '-', '_'])
            && p.chars()
                .all(|c| c.is_ascii_alphanumeric() || "-._~".contains(c))
    };
    match name.strip_prefix('@') {
        Some(scoped) => scoped
            .split_once('/')
            .is_some_and(|(scope, rest)| part(scope) && part(rest)),
        None => part(name),
    }
}

/// A PEP 508 distribution name.
fn pypi_name(name: &str) -> bool {
    let edge = |c: Option<char>| c.is_some_and(|c| c.is_ascii_alphanumeric());
    edge(name.chars().next())
        && edge(name.chars().last())
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-._".contains(c))
}

/// What the person allowed for a pinning step.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PinOptions {
    /// Run npm install scripts (`--allow-scripts`); off by default.
    pub allow_scripts: bool,
    /// Accept source distributions for PyPI (`--allow-sdist`); off by default.
    pub allow_sdist: bool,
}

/// One fetched artefact as recorded in `tutti-lock.json`.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct LockedArtefact {
    /// Package name as its ecosystem spells it.
    pub name: String,
    pub version: String,
    /// Where it was fetched from.
    pub url: String,
    /// The hash the source published, as `sha256-<hex>` / `sha512-<base64>` (npm's `integrity`).
    pub hash: String,
    /// Bytes fetched.
    pub size: u64,
}

/// A package fetched into a release folder: how to launch it and what was fetched.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pinned {
    /// The interpreter or engine (`node`, `python3`, `docker`), a bare name found on PATH.
    pub command: String,
    /// Arguments before the package's own, with `${release}` for the release folder
    /// (e.g. `["${release}/node_modules/pkg/dist/index.js"]`).
    pub args: Vec<String>,
    /// Environment the launch needs (e.g. `PYTHONPATH`), with `${release}` placeholders.
    pub env: BTreeMap<String, String>,
    /// Every artefact, in a stable order.
    pub artefacts: Vec<LockedArtefact>,
    /// The interpreter's version seen at install (`node --version`), when one is used.
    pub interpreter: Option<String>,
    /// Packages whose install scripts were refused or allowed (named in the confirmation).
    pub scripts: Vec<String>,
    /// The version that was pinned (the package's own, a bundle's manifest, an image's tag).
    pub version: String,
    /// Secret names the launch needs (a bundle's `sensitive` `user_config` entries).
    pub secrets: Vec<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn npm(name: &str, version: &str) -> PackageRef {
        PackageRef::Npm {
            name: name.into(),
            version: version.into(),
        }
    }

    fn pypi(name: &str, version: &str) -> PackageRef {
        PackageRef::Pypi {
            name: name.into(),
            version: version.into(),
        }
    }

    #[test]
    fn names_and_versions_a_tool_would_misread_are_refused() {
        for ok in [
            npm("@modelcontextprotocol/server-memory", "2026.8.31"),
            npm("left-pad", ""),
            npm("JSONStream", "^1.3"),
            pypi("mcp-server-time", "2026.10.19"),
            pypi("zope.interface", ""),
            PackageRef::Oci {
                image: "ghcr.io/a/b:1".into(),
            },
        ] {
            assert!(ok.check().is_ok(), "{ok:?}");
        }
        for bad in [
            npm("../../x", "1.0.0"),
            npm("@scope", "1.0.0"),
            npm("-x", "1.0.0"),
            npm("x", "https://evil.example/x.tgz"),
            npm("x", "file:../x"),
            npm("x", "github:o/r"),
            pypi("--index-url=http://evil.example/simple", "1.0"),
            pypi("x", "1.0; os_name == 'posix'"),
            pypi("x", "-r/etc/passwd"),
            PackageRef::Oci {
                image: "--privileged".into(),
            },
        ] {
            let err = bad.check().err().map(|e| e.to_string()).unwrap_or_default();
            assert!(err.contains("cannot be pinned"), "{bad:?}: {err}");
        }
    }
}

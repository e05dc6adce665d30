//! What the market's steps hand to each other: the package a source names, how it is to be
//! pinned, and what the pinned release runs.

use std::collections::BTreeMap;

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

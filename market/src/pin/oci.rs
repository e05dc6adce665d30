//! Container images: a container engine (`docker`, else `podman`) that answers `info` (so it
//! can run containers) pulls the image at install; the tag is resolved to the pulled image's
//! repository digest, and the launch runs exactly that digest with `--pull=never`. The image
//! lives in the engine's store, not in the release; the lock names its digest.

use std::collections::BTreeMap;

use super::event::{PinEvent, Progress};
use super::tool::Tool;
use crate::error::MarketError;
use crate::plan::{LockedArtefact, Pinned};

const ENGINES: [Tool; 2] = [
    Tool {
        name: "docker",
        program: "docker",
        fix: "install docker or podman to use oci: packages",
    },
    Tool {
        name: "podman",
        program: "podman",
        fix: "install docker or podman to use oci: packages",
    },
];

pub(super) async fn pin(image: &str, progress: Progress<'_>) -> Result<Pinned, MarketError> {
    progress(PinEvent::Resolving {
        source: format!("oci:{image}"),
    });
    let (engine, version) = engine().await?;
    progress(PinEvent::Downloading {
        artefacts: 1,
        bytes: 0,
    });
    engine
        .run(image, engine.command().args(["pull", image]))
        .await?;
    let inspect = engine
        .run(
            image,
            engine.command().args([
                "image",
                "inspect",
                "--format",
                "{{json .RepoDigests}} {{.Size}}",
                image,
            ]),
        )
        .await?;
    let (digests, size) = inspect.trim().rsplit_once(' ').unwrap_or_default();
    let digests: Vec<String> = serde_json::from_str(digests).unwrap_or_default();
    let repository = repository(image);
    let Some(pinned) = digests
        .iter()
        .find(|d| d.split('@').next() == Some(repository))
        .or_else(|| digests.first())
    else {
        return Err(MarketError::Unpinnable {
            artefact: format!("oci {image}"),
            problem: format!(
                "{} reports no repository digest for it; pull it from a registry (a local build has none)",
                engine.name
            ),
        });
    };
    let digest = pinned.split_once('@').map(|(_, d)| d).unwrap_or_default();
    let size = size.parse().unwrap_or(0);
    progress(PinEvent::Downloading {
        artefacts: 1,
        bytes: size,
    });
    progress(PinEvent::Installing { artefacts: 1 });
    Ok(Pinned {
        command: engine.program.into(),
        args: vec![
            "run".into(),
            "--rm".into(),
            "-i".into(),
            "--pull=never".into(),
            pinned.clone(),
        ],
        env: BTreeMap::new(),
        artefacts: vec![LockedArtefact {
            name: repository.to_string(),
            version: tag(image).to_string(),
            url: image.to_string(),
            hash: digest.replacen(':', "-", 1),
            size,
        }],
        interpreter: Some(version),
        scripts: Vec::new(),
        version: tag(image).to_string(),
        secrets: Vec::new(),
    })
}

/// The first engine whose daemon answers, with its version; else why none can run containers.
async fn engine() -> Result<(&'static Tool, String), MarketError> {
    let mut problems = Vec::new();
    for engine in &ENGINES {
        let mut cmd = engine.command();
        cmd.args(["info", "--format", "{{.ServerVersion}}"]);
        let answer =
            tokio::time::timeout(std::time::Duration::from_secs(20), engine.output(&mut cmd)).await;
        match answer {
            Ok(Ok(out)) if out.status.success() => {
                let version = String::from_utf8_lossy(&out.stdout).trim().to_string();
                return Ok((engine, format!("{} {version}", engine.name)));
            }
            Ok(Ok(out)) => problems.push(format!(
                "{}: {}",
                engine.name,
                super::tool::summary(&String::from_utf8_lossy(&out.stderr), out.status)
            )),
            Ok(Err(_)) => problems.push(format!("{}: not on PATH", engine.name)),
            Err(_) => problems.push(format!("{}: no answer within 20 s", engine.name)),
        }
    }
    Err(MarketError::EngineMissing {
        detail: problems.join("; "),
    })
}

/// `ghcr.io/a/b` of `ghcr.io/a/b:1.0` or `ghcr.io/a/b@sha256:…` (a registry port is kept).
fn repository(image: &str) -> &str {
    let image = image.split('@').next().unwrap_or(image);
    match image.rfind(':') {
        Some(i) if !image[i..].contains('/') => &image[..i],
        _ => image,
    }
}

/// The tag of an image reference, `latest` when none is given (a digest reference: the digest).
fn tag(image: &str) -> &str {
    if let Some((_, digest)) = image.split_once('@') {
        return digest;
    }
    let rest = &image[repository(image).len()..];
    rest.strip_prefix(':').unwrap_or("latest")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn image_references_split_into_repository_and_tag() {
        assert_eq!(repository("localhost:5000/a/b:1.0"), "localhost:5000/a/b");
        assert_eq!(tag("localhost:5000/a/b:1.0"), "1.0");
        assert_eq!(repository("mcp/time"), "mcp/time");
        assert_eq!(tag("mcp/time"), "latest");
        assert_eq!(tag("mcp/time@sha256:ab"), "sha256:ab");
    }
}

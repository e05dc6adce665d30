//! The market's refusals that come from the package indexes and the machine (SPEC §17), each
//! one line naming the problem and the fix, with nothing left: an npm tarball and a PyPI wheel
//! served with other bytes than the hash their index publishes (the registry fixture's
//! package indexes, the hashes computed here from what it serves), a PyPI distribution with
//! no wheel for this platform, and an `oci:` package with no container engine on PATH.

use base64::Engine as _;
use sha2::Digest as _;
use tutti_tests::{Runtime, RuntimeOptions};

use super::{Registry, nothing_left};

/// A runtime whose registry is the fixture and whose npm and pip use the fixture's package
/// indexes (the kernel's environment reaches the tools it pins with). npm fetches a tarball
/// unlike its integrity six times before it gives up, over two minutes with its default
/// back-off: the back-off is shortened here, not the checks.
fn tampered_indexes() -> (Runtime, Registry) {
    let registry = Registry::start("http://127.0.0.1:9/mcp");
    let url = registry.url.clone();
    let env = [
        ("TUTTI_REGISTRIES", format!("fix={url}")),
        ("npm_config_registry", format!("{url}/npm/")),
        ("npm_config_fetch_retry_mintimeout", "100".to_owned()),
        ("npm_config_fetch_retry_maxtimeout", "200".to_owned()),
        ("PIP_INDEX_URL", format!("{url}/pypi/simple")),
        ("NO_PROXY", "127.0.0.1".to_owned()),
        ("no_proxy", "127.0.0.1".to_owned()),
    ];
    let rt = Runtime::start(RuntimeOptions {
        env: env.into_iter().map(|(k, v)| (k.to_owned(), v)).collect(),
        env_remove: vec!["PIP_EXTRA_INDEX_URL".to_owned()],
        ..Default::default()
    });
    (rt, registry)
}

async fn get(url: &str) -> Vec<u8> {
    let response = reqwest::get(url)
        .await
        .unwrap_or_else(|e| panic!("GET {url}: {e}"));
    assert!(response.status().is_success(), "GET {url}: {response:?}");
    let body = response.bytes().await;
    body.unwrap_or_else(|e| panic!("GET {url}: {e}")).to_vec()
}

fn sha256_hex(bytes: &[u8]) -> String {
    sha2::Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// `tutti connector install SOURCE --yes` refused in one line after its progress lines,
/// nothing of it left; the line.
fn refused(rt: &Runtime, source: &str) -> String {
    let out = rt.tutti(&["connector", "install", source, "--yes"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{source} installed: {stderr}");
    let lines: Vec<&str> = stderr.lines().filter(|l| !l.trim().is_empty()).collect();
    let Some((refusal, progress)) = lines.split_last() else {
        panic!("{source}: refused without a line");
    };
    for line in progress {
        let shown = ["resolving ", "downloading ", "installing "]
            .iter()
            .any(|phase| line.starts_with(&format!("tutti: {phase}")));
        assert!(
            shown,
            "{source}: more than the refusal and progress: {stderr}"
        );
    }
    nothing_left(rt);
    (*refusal).to_owned()
}

/// The npm registry's integrity for `tutti-tampered` 1.0.0, and that of the tarball it serves.
async fn npm_hashes(index: &str) -> (String, String) {
    let packument = get(&format!("{index}/npm/tutti-tampered")).await;
    let packument: serde_json::Value =
        serde_json::from_slice(&packument).unwrap_or_else(|e| panic!("packument: {e}"));
    let dist = &packument["versions"]["1.0.0"]["dist"];
    let expected = dist["integrity"].as_str().unwrap_or_default().to_owned();
    let served = get(dist["tarball"].as_str().unwrap_or_default()).await;
    let got = base64::engine::general_purpose::STANDARD.encode(sha2::Sha512::digest(&served));
    (expected, format!("sha512-{got}"))
}

/// The simple index's `#sha256=` for `tutti-tampered`'s wheel, and that of the wheel it serves.
async fn pypi_hashes(index: &str) -> (String, String) {
    let page = get(&format!("{index}/pypi/simple/tutti-tampered/")).await;
    let page = String::from_utf8_lossy(&page).into_owned();
    let href = page
        .split("href=\"")
        .nth(1)
        .and_then(|rest| rest.split('"').next())
        .unwrap_or_else(|| panic!("no link in {page}"));
    let (path, expected) = href
        .split_once("#sha256=")
        .unwrap_or_else(|| panic!("no hash in {href}"));
    let served = get(&format!("{index}{path}")).await;
    (expected.to_owned(), sha256_hex(&served))
}

#[tokio::test(flavor = "multi_thread")]
async fn npm_and_pypi_files_unlike_their_index_hash_are_refused_naming_both() {
    let (rt, registry) = tampered_indexes();
    let (expected, got) = npm_hashes(&registry.url).await;
    assert_ne!(expected, got, "the fixture serves the published bytes");
    let line = refused(&rt, "npm:tutti-tampered@1.0.0");
    assert!(
        line.starts_with("tutti: npm tutti-tampered@1.0.0: hash mismatch: ")
            && line.contains(&format!("expected {expected}, got {got}")),
        "{line}"
    );

    let (expected, got) = pypi_hashes(&registry.url).await;
    assert_ne!(expected, got, "the fixture serves the published bytes");
    let line = refused(&rt, "pypi:tutti-tampered@1.0.0");
    assert!(
        line.starts_with("tutti: pypi tutti-tampered==1.0.0")
            && line.contains(&format!(
                "hash mismatch: expected sha256-{expected}, got sha256-{got}"
            )),
        "{line}"
    );
}

#[test]
fn a_pypi_distribution_without_a_wheel_for_this_platform_is_refused_naming_sdists() {
    let (rt, _registry) = tampered_indexes();
    let line = refused(&rt, "pypi:tutti-nowheel@1.0.0");
    assert!(
        line.starts_with("tutti: no wheel of tutti-nowheel==1.0.0 for this platform and Python 3.")
            && line.contains("allow building from source with --allow-sdist"),
        "{line}"
    );
}

#[test]
fn an_oci_package_without_a_container_engine_is_refused_naming_both_engines() {
    let empty = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let rt = Runtime::start(RuntimeOptions {
        env: vec![("PATH".to_owned(), empty.path().display().to_string())],
        ..Default::default()
    });
    let line = refused(&rt, "oci:ghcr.io/example/server:1.0");
    assert_eq!(
        line,
        "tutti: container engine not found: no docker or podman on PATH can run containers \
         (docker: not on PATH; podman: not on PATH); install or start one to use oci: packages"
    );
}

//! Package indexes that serve other bytes than the hashes they publish, for the market's
//! refusals (SPEC §17): an npm registry under `/npm/` and a PyPI simple index under
//! `/pypi/simple/`. Each has the package `tutti-tampered` 1.0.0, whose index publishes the
//! hash of [`PUBLISHED`] while its file is served as [`SERVED`] (a mirror or a proxy that
//! changed it); the PyPI index also has `tutti-nowheel` 1.0.0, which has only a Windows wheel.

use axum::extract::{Path, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use base64::Engine as _;
use serde_json::json;
use sha2::Digest as _;

/// The bytes whose hash the indexes publish.
pub const PUBLISHED: &[u8] = b"tutti-tampered 1.0.0 as its author published it\n";
/// The bytes the indexes serve instead.
pub const SERVED: &[u8] = b"tutti-tampered 1.0.0 as a changed mirror serves it\n";

const TAMPERED: &str = "tutti-tampered";
const NO_WHEEL: &str = "tutti-nowheel";

/// The fixture's own URL (`http://127.0.0.1:PORT`), for the file links.
#[derive(Clone)]
pub struct Base(pub String);

fn not_found() -> Response {
    (StatusCode::NOT_FOUND, "not found").into_response()
}

/// `GET /npm/{name}`: the packument of `tutti-tampered`, its integrity that of [`PUBLISHED`].
pub async fn npm_packument(State(base): State<Base>, Path(name): Path<String>) -> Response {
    if name != TAMPERED {
        return not_found();
    }
    let digest = sha2::Sha512::digest(PUBLISHED);
    let integrity = format!(
        "sha512-{}",
        base64::engine::general_purpose::STANDARD.encode(digest)
    );
    let tarball = format!("{}/npm/{TAMPERED}/-/{TAMPERED}-1.0.0.tgz", base.0);
    axum::Json(json!({"name": TAMPERED, "dist-tags": {"latest": "1.0.0"},
        "versions": {"1.0.0": {"name": TAMPERED, "version": "1.0.0",
            "bin": {TAMPERED: "index.js"},
            "dist": {"tarball": tarball, "integrity": integrity}}}}))
    .into_response()
}

/// `GET /npm/{name}/-/{file}` and `GET /pypi/files/{file}`: [`SERVED`].
pub async fn served_file() -> Response {
    ([(header::CONTENT_TYPE, "application/octet-stream")], SERVED).into_response()
}

/// `GET /pypi/simple/{name}/`: a PEP 503 page with one file whose `#sha256=` is that of
/// [`PUBLISHED`]: a wheel for every platform (`tutti-tampered`) or for Windows only
/// (`tutti-nowheel`).
pub async fn pypi_simple(Path(name): Path<String>) -> Response {
    let file = match name.trim_end_matches('/') {
        TAMPERED => "tutti_tampered-1.0.0-py3-none-any.whl",
        NO_WHEEL => "tutti_nowheel-1.0.0-py3-none-win_amd64.whl",
        _ => return not_found(),
    };
    let sha256: String = sha2::Sha256::digest(PUBLISHED)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    let page = format!(
        "<!DOCTYPE html>\n<html><body>\n<a href=\"/pypi/files/{file}#sha256={sha256}\">{file}</a>\n</body></html>\n"
    );
    ([(header::CONTENT_TYPE, "text/html")], page).into_response()
}

//! `tutti-registry-fixture`: an MCP Registry API v0.1 for tests (SPEC §17), serving the
//! registry answers (`{"server": …, "_meta": …}`) kept as files in a directory.
//!
//! `--documents DIR` (every `*.json` in it; `{{REMOTE_URL}}` is replaced by `--remote-url`),
//! `--page-size N` (default 2, so a search pages). Listens on 127.0.0.1 (`--port`, 0 = pick)
//! and prints `listening <port>`. `GET /v0.1/servers?search=&limit=&cursor=&version=latest`
//! (a name substring, case-insensitive; the cursor is a decimal offset) and
//! `GET /v0.1/servers/{name}/versions/{version|latest}` (404 `{"error"}` when unknown).
//! Beside the registry, package indexes that serve other bytes than the hashes they publish
//! (`packages`): an npm registry at `/npm/` and a PyPI simple index at `/pypi/simple/`.

#[path = "registry_fixture/packages.rs"]
mod packages;

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;

use axum::Json;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::routing::get;
use clap::Parser;
use serde_json::{Value, json};

#[derive(Parser)]
struct Args {
    #[arg(long)]
    documents: PathBuf,
    #[arg(long, default_value = "")]
    remote_url: String,
    #[arg(long, default_value_t = 2)]
    page_size: usize,
    #[arg(long, default_value_t = 0)]
    port: u16,
}

struct Catalogue {
    entries: Vec<Value>,
    page_size: usize,
}

fn is_latest(entry: &Value) -> bool {
    entry["_meta"]["io.modelcontextprotocol.registry/official"]["isLatest"] == true
}

fn load(args: &Args) -> anyhow::Result<Vec<Value>> {
    let mut entries = Vec::new();
    for file in std::fs::read_dir(&args.documents)? {
        let path = file?.path();
        if path.extension().is_some_and(|e| e == "json") {
            let text = std::fs::read_to_string(&path)?.replace("{{REMOTE_URL}}", &args.remote_url);
            entries.push(serde_json::from_str::<Value>(&text)?);
        }
    }
    entries.sort_by_key(|e| {
        (
            e["server"]["name"].to_string(),
            e["server"]["version"].to_string(),
        )
    });
    Ok(entries)
}

async fn list(
    State(cat): State<Arc<Catalogue>>,
    Query(q): Query<HashMap<String, String>>,
) -> Json<Value> {
    let search = q
        .get("search")
        .map(|s| s.to_lowercase())
        .unwrap_or_default();
    let latest_only = q.get("version").is_some_and(|v| v == "latest");
    let matching: Vec<&Value> = cat
        .entries
        .iter()
        .filter(|e| {
            let name = e["server"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_lowercase();
            search.split_whitespace().all(|w| name.contains(w)) && (!latest_only || is_latest(e))
        })
        .collect();
    let offset: usize = q.get("cursor").and_then(|c| c.parse().ok()).unwrap_or(0);
    let limit: usize = q.get("limit").and_then(|l| l.parse().ok()).unwrap_or(30);
    let end = (offset + limit.min(cat.page_size)).min(matching.len());
    let page: Vec<&Value> = matching.get(offset..end).unwrap_or_default().to_vec();
    let mut metadata = json!({"count": page.len()});
    if end < matching.len() {
        metadata["nextCursor"] = json!(end.to_string());
    }
    Json(json!({"servers": page, "metadata": metadata}))
}

async fn version(
    State(cat): State<Arc<Catalogue>>,
    Path((name, version)): Path<(String, String)>,
) -> Result<Json<Value>, (StatusCode, Json<Value>)> {
    cat.entries
        .iter()
        .find(|e| {
            e["server"]["name"] == name.as_str()
                && (e["server"]["version"] == version.as_str()
                    || (version == "latest" && is_latest(e)))
        })
        .map(|e| Json(e.clone()))
        .ok_or((
            StatusCode::NOT_FOUND,
            Json(json!({"error": "Server not found"})),
        ))
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let catalogue = Arc::new(Catalogue {
        entries: load(&args)?,
        page_size: args.page_size.max(1),
    });
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", args.port)).await?;
    let port = listener.local_addr()?.port();
    let indexes = axum::Router::new()
        .route("/npm/{name}", get(packages::npm_packument))
        .route("/npm/{name}/-/{file}", get(packages::served_file))
        .route("/pypi/simple/{name}", get(packages::pypi_simple))
        .route("/pypi/simple/{name}/", get(packages::pypi_simple))
        .route("/pypi/files/{file}", get(packages::served_file))
        .with_state(packages::Base(format!("http://127.0.0.1:{port}")));
    let app = axum::Router::new()
        .route("/v0.1/servers", get(list))
        .route("/v0.1/servers/{name}/versions/{version}", get(version))
        .with_state(catalogue)
        .merge(indexes);
    println!("listening {port}");
    axum::serve(listener, app).await?;
    Ok(())
}

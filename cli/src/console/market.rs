//! The Install view's market part (SPEC §17): search the configured registries, stage a
//! market source in the kernel, and show the same confirmation as a release folder's (launch
//! line, SHA-256) with what the market resolved. Confirming installs the staged folder through
//! the folder install (`/install`); cancelling discards it.

use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::{Extension, Form};
use maud::{Markup, html};
use tutti_proto::kernel as pb;

use super::access::{Session, Shared};
use super::actions::{self, Fields, checked};
use super::link::{self, Problem};
use super::pages::{self, page};
use super::views;
use crate::args::MarketInstallArgs;
use crate::commands::market as cli_market;
use crate::output::visible;

#[derive(serde::Deserialize)]
pub(crate) struct SearchQuery {
    #[serde(default)]
    q: String,
}

/// `GET /install`: the folder form, the market search with its results, and a source box.
pub(crate) async fn view(
    State(c): State<Shared>,
    Extension(session): Extension<Session>,
    Query(query): Query<SearchQuery>,
) -> Response {
    let (status, found) = match search(&c, &c.access.csrf_for(session), &query.q).await {
        Ok(found) => (StatusCode::OK, found),
        Err(p) => (p.status, views::problems(&p.lines)),
    };
    let body = html! {
        h2 { "From a folder" }
        (pages::install_form(&c, session, ""))
        (market_forms(&c, session, &query.q, ""))
        (found)
    };
    (status, views::layout("Install", &body)).into_response()
}

/// The search box and the source box.
fn market_forms(c: &Shared, session: Session, words: &str, source: &str) -> Markup {
    html! {
        h2 { "From a registry" }
        form method="get" action="/install" {
            label { "Search the configured registries "
                input type="search" name="q" size="40" value=(words) required; }
            button type="submit" #search { "Search" }
        }
        form method="post" action="/install/stage" {
            (views::csrf(&c.access.csrf_for(session)))
            label { "Market source "
                input type="text" name="source" size="60" value=(source)
                    placeholder="registry:NAME[@VERSION], npm:…, pypi:…, mcpb:…, oci:… or a server.json path" required; }
            label { "Inputs, one NAME=VALUE a line (never a secret) "
                textarea name="set" rows="2" cols="60" {} }
            button type="submit" { "Show what would run" }
        }
    }
}

/// The hits of `words` over every configured registry; nothing without words.
async fn search(c: &Shared, csrf: &str, words: &str) -> Result<Markup, Problem> {
    if words.trim().is_empty() {
        return Ok(html! {});
    }
    let kernel = link::kernel(&c.state_dir).await?;
    let request = pb::SearchRequest {
        words: words.trim().to_owned(),
        registry: String::new(),
    };
    let reply = kernel
        .market()
        .search(request)
        .await
        .map_err(|s| link::rpc(&c.state_dir, &kernel, s))?
        .into_inner();
    Ok(hits(&reply, csrf))
}

/// Whether a registry status may be installed: active or deprecated (never deleted).
fn installable(status: &str) -> bool {
    matches!(status, "active" | "deprecated" | "")
}

fn hits(reply: &pb::SearchReply, csrf: &str) -> Markup {
    html! {
        @if reply.servers.is_empty() { p { "No server matches; try fewer or other words." } }
        @else {
            table #hits {
                thead { tr { th { "name" } th { "version" } th { "transport" } th { "description" } th { "status" } th {} } }
                tbody {
                    @for h in &reply.servers {
                        tr data-name=(h.name) data-status=(h.status) {
                            td { (visible(&h.name)) } td { (visible(&h.version)) }
                            td { (visible(&h.transport)) } td { (visible(&h.description)) }
                            td { (visible(&h.status)) " (" (visible(&h.registry)) ")" }
                            td {
                                @if installable(&h.status) {
                                    form method="post" action="/install/stage" {
                                        (views::csrf(csrf))
                                        input type="hidden" name="source" value={ "registry:" (h.name) "@" (h.version) };
                                        button type="submit" { "Install…" }
                                    }
                                } @else { "not installable" }
                            }
                        }
                    }
                }
            }
        }
    }
}

/// `POST /install/stage`: stages the source and shows the confirmation; a refusal shows why,
/// with the forms again, and leaves nothing staged.
pub(crate) async fn stage(
    State(c): State<Shared>,
    Extension(session): Extension<Session>,
    Form(fields): Form<Vec<(String, String)>>,
) -> Response {
    let fields = Fields(fields);
    let change = async {
        let staged = stage_source(&c, &fields).await?;
        match actions::plan_of(&c, &staged.staging_dir).await {
            Ok(plan) => {
                let csrf = c.access.csrf_for(session);
                Ok(views::plan(
                    &plan,
                    &staged.staging_dir,
                    &csrf,
                    Some(&staged),
                ))
            }
            Err(p) => {
                link::discard_staged_quietly(&c.state_dir, &staged.staging_dir).await;
                Err(p)
            }
        }
    };
    match checked(&c, session, &fields, change).await {
        Ok(body) => page("Install: confirm", &body),
        Err(p) => {
            let body = html! {
                (views::problems(&p.lines))
                (market_forms(&c, session, "", fields.get("source")))
            };
            (p.status, views::layout("Install", &body)).into_response()
        }
    }
}

/// Asks the kernel to stage `source` with the form's inputs.
async fn stage_source(c: &Shared, fields: &Fields) -> Result<pb::StageReply, Problem> {
    let bad = |line: String| Problem::new(StatusCode::BAD_REQUEST, line);
    let source = fields.get("source").trim();
    if source.is_empty() {
        return Err(bad("name a market source, such as registry:NAME".into()));
    }
    let set = fields
        .get("set")
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .map(|l| {
            crate::args::parse_setting(l)
                .map_err(|e| bad(format!("{e}; write one input a line as NAME=VALUE")))
        })
        .collect::<Result<Vec<_>, _>>()?;
    let choices = MarketInstallArgs {
        set,
        ..Default::default()
    };
    let request = cli_market::stage_request(source, &choices)
        .map_err(|e| Problem::from_cli(&c.state_dir, e))?;
    let kernel = link::kernel(&c.state_dir).await?;
    cli_market::stage(&kernel, request, false)
        .await
        .map_err(|e| Problem::from_cli(&c.state_dir, e))
}

/// `POST /install/discard`: the confirmation's cancel.
pub(crate) async fn cancel(
    State(c): State<Shared>,
    Extension(session): Extension<Session>,
    Form(fields): Form<Vec<(String, String)>>,
) -> Response {
    let fields = Fields(fields);
    let change = link::discard_staged(&c.state_dir, fields.get("dir"));
    match checked(&c, session, &fields, change).await {
        Ok(()) => actions::done(
            "Install",
            "Cancelled: the staged release is discarded; nothing was installed.",
        ),
        Err(p) => pages::failed("Install", &p),
    }
}

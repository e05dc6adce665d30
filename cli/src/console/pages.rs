//! The views (GET): connectors, a connector's detail, install, connect, the confirmations
//! of changes, sessions, the calls that wait for the person's confirmation and activity; and the console's own script and stylesheet.

use axum::Extension;
use axum::extract::{Path as UrlPath, Query, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use maud::{Markup, html};
use tutti_proto::kernel as pb;

use super::access::Session;
use super::access::Shared;
use super::link::{self, Problem};
use super::views;
use crate::kernel::LogMask;

const SCRIPT: &str = include_str!("assets/console.js");
const STYLESHEET: &str = include_str!("assets/console.css");
/// How much of a connector's log the detail page shows.
const LOG_TAIL_BYTES: u64 = 16 * 1024;

pub(crate) fn page(title: &str, body: &Markup) -> Response {
    views::layout(title, body).into_response()
}

/// A page that says what went wrong, with the status it deserves.
pub(crate) fn failed(title: &str, problem: &Problem) -> Response {
    let body =
        html! { (views::problems(&problem.lines)) p { a href="/" { "Back to the connectors" } } };
    (problem.status, views::layout(title, &body)).into_response()
}

/// A connector key from the URL: only a valid key goes anywhere (it names a log file).
pub(crate) fn valid_key(key: &str) -> Result<(), Problem> {
    if tutti_proto::key::is_valid(key) {
        Ok(())
    } else {
        Err(Problem::new(
            StatusCode::NOT_FOUND,
            format!("{key:?} is not a connector key"),
        ))
    }
}

pub(crate) async fn connectors(State(c): State<Shared>) -> Response {
    match link::overview(&c.state_dir).await {
        Ok(o) => {
            let body = html! {
                p.summary { "MCP URL: " code { (o.status.frontend_url) } }
                div #cards data-live="/fragment/connectors" { (views::cards(&o.status, &o.available)) }
            };
            page("Connectors", &body)
        }
        Err(p) => failed("Connectors", &p),
    }
}

/// The cards alone: the connectors page refreshes them every few seconds.
pub(crate) async fn connector_cards(State(c): State<Shared>) -> Response {
    match link::overview(&c.state_dir).await {
        Ok(o) => views::cards(&o.status, &o.available).into_response(),
        Err(p) => (p.status, views::problems(&p.lines)).into_response(),
    }
}

pub(crate) async fn detail(
    State(c): State<Shared>,
    Extension(session): Extension<Session>,
    UrlPath(key): UrlPath<String>,
) -> Response {
    match detail_body(&c, session, &key, None).await {
        Ok(body) => page(&key, &body),
        Err(p) => failed(&key, &p),
    }
}

/// The detail view, with a probe's result when one was just run.
pub(crate) async fn detail_body(
    c: &Shared,
    session: Session,
    key: &str,
    probed: Option<Markup>,
) -> Result<Markup, Problem> {
    valid_key(key)?;
    let o = link::overview(&c.state_dir).await?;
    let Some(status) = o.status.connectors.iter().find(|s| s.key == key) else {
        return Err(Problem::new(
            StatusCode::NOT_FOUND,
            format!("connector {key} is not installed"),
        ));
    };
    let available = o.available.connectors.iter().find(|a| a.key == key);
    let route = link::route(&c.state_dir, key).await?;
    let log = LogMask::connect(&c.state_dir)
        .await
        .apply(log_tail(&c.state_dir, key))
        .await;
    let csrf = c.access.csrf_for(session);
    let review = match status.changes_await_review {
        true => Some(review_changes(c, key).await?),
        false => None,
    };
    Ok(html! {
        (views::cards(&pb::StatusReply { connectors: vec![status.clone()], ..Default::default() }, &o.available))
        div.actions {
            form method="post" action={ "/connectors/" (key) "/probe" } {
                (views::csrf(&csrf))
                button type="submit" #probe { "Test connection" }
            }
            a href={ "/connectors/" (key) "/connect" } { "Connect" }
            a href={ "/connectors/" (key) "/disconnect" } { "Disconnect" }
            a href={ "/connectors/" (key) "/uninstall" } { "Uninstall" }
            // Review and approve held definition changes.
            @if status.changes_await_review {
                a href={ "/connectors/" (key) "/approve" } #review-approve { "Review and approve" }
            }
        }
        @if let Some(probed) = probed { (probed) }
        @if let Some(review) = review { (views::review(&review)) }
        h2 { "Tools" }
        (views::tools(route.as_ref()))
        h2 { "Skills" }
        (views::skills(available))
        h2 { "Log" }
        pre.log { (log) }
    })
}

/// The kernel's `ReviewChanges` of a connector (SPEC §12).
pub(crate) async fn review_changes(c: &Shared, key: &str) -> Result<pb::ReviewReply, Problem> {
    valid_key(key)?;
    let request = pb::KeyRequest {
        key: key.to_owned(),
        ..Default::default()
    };
    link::call(&c.state_dir, async |k| k.review_changes(request).await).await
}

/// The held changes with the approval's confirmation form.
pub(crate) async fn confirm_approve(
    State(c): State<Shared>,
    Extension(session): Extension<Session>,
    UrlPath(key): UrlPath<String>,
) -> Response {
    let title = format!("Review {key}");
    let reply = match review_changes(&c, &key).await {
        Ok(r) => r,
        Err(p) => return failed(&title, &p),
    };
    let csrf = c.access.csrf_for(session);
    let body = html! {
        (views::review(&reply))
        @if reply.awaiting { (views::approve_form(&key, &csrf, &reply.offered_hash)) }
        @else { p { a href={ "/connectors/" (key) } { "Back to " (key) } } }
    };
    page(&title, &body)
}

/// The last lines of `logs/connector-<key>.log` (written redacted by the runtime; the page
/// masks them once more with the kernel's values, [`LogMask`]).
fn log_tail(state_dir: &std::path::Path, key: &str) -> String {
    use std::io::{Read, Seek, SeekFrom};
    let path = tutti_rules::state_dir::layout::connector_log(state_dir, key);
    let Ok(mut file) = std::fs::File::open(&path) else {
        return "(no log yet)".into();
    };
    let len = file.metadata().map(|m| m.len()).unwrap_or(0);
    let start = len.saturating_sub(LOG_TAIL_BYTES);
    let mut bytes = Vec::new();
    if file.seek(SeekFrom::Start(start)).is_err() || file.read_to_end(&mut bytes).is_err() {
        return format!("(cannot read {})", path.display());
    }
    let text = String::from_utf8_lossy(&bytes);
    // A cut first line is dropped.
    match (start > 0, text.split_once('\n')) {
        (true, Some((_, rest))) => rest.to_owned(),
        _ => text.into_owned(),
    }
}

/// The status of one connector, for the forms that change it.
async fn one(c: &Shared, key: &str) -> Result<pb::ConnectorStatus, Problem> {
    valid_key(key)?;
    let o = link::overview(&c.state_dir).await?;
    o.status
        .connectors
        .into_iter()
        .find(|s| s.key == key)
        .ok_or_else(|| {
            Problem::new(
                StatusCode::NOT_FOUND,
                format!("connector {key} is not installed"),
            )
        })
}

pub(crate) async fn connect(
    State(c): State<Shared>,
    Extension(session): Extension<Session>,
    UrlPath(key): UrlPath<String>,
) -> Response {
    let title = format!("Connect {key}");
    let s = match one(&c, &key).await {
        Ok(s) => s,
        Err(p) => return failed(&title, &p),
    };
    let csrf = c.access.csrf_for(session);
    if s.oauth {
        return page(&title, &views::oauth_connect(&s));
    }
    let body = html! {
        p { "Values are sent to the runtime's secret store and never shown again." }
        form method="post" action={ "/connectors/" (key) "/connect" } autocomplete="off" {
            (views::csrf(&csrf))
            input type="hidden" name="expected" value=(s.sha256);
            @for name in &s.secret_names {
                label { (name) " " input type="password" name={ "secret." (name) } autocomplete="new-password"; }
            }
            @if s.secret_names.is_empty() { p { (key) " declares no secrets." } }
            button type="submit" { "Connect" }
        }
    };
    page(&title, &body)
}

async fn confirm(c: &Shared, session: Session, key: &str, verb: &str, what: &str) -> Response {
    let title = format!("{verb} {key}");
    let s = match one(c, key).await {
        Ok(s) => s,
        Err(p) => return failed(&title, &p),
    };
    let csrf = c.access.csrf_for(session);
    let action = format!("/connectors/{key}/{}", verb.to_lowercase());
    let body = html! {
        p { (what) }
        p { "Version " (s.version) ", generation " (s.generation) "." }
        (views::confirm_form(&action, &csrf, &s.sha256, &format!("{verb} {key}")))
    };
    page(&title, &body)
}

pub(crate) async fn confirm_disconnect(
    State(c): State<Shared>,
    Extension(session): Extension<Session>,
    UrlPath(key): UrlPath<String>,
) -> Response {
    let what = "Its secret values are deleted and its tools are no longer routed.";
    confirm(&c, session, &key, "Disconnect", what).await
}

pub(crate) async fn confirm_uninstall(
    State(c): State<Shared>,
    Extension(session): Extension<Session>,
    UrlPath(key): UrlPath<String>,
) -> Response {
    let what =
        "Its routes are fenced, its shims removed, its worker stopped and its secrets deleted.";
    confirm(&c, session, &key, "Uninstall", what).await
}

pub(crate) fn install_form(c: &Shared, session: Session, dir: &str) -> Markup {
    let csrf = c.access.csrf_for(session);
    html! {
        form method="post" action="/install/plan" {
            (views::csrf(&csrf))
            label { "Release folder (holding connector.json) "
                input type="text" name="dir" size="60" value=(dir) required; }
            button type="submit" { "Show what would run" }
        }
    }
}

pub(crate) async fn sessions(
    State(c): State<Shared>,
    Extension(session): Extension<Session>,
) -> Response {
    match sessions_body(&c, session).await {
        Ok(body) => page("Sessions", &body),
        Err(p) => failed("Sessions", &p),
    }
}

pub(crate) async fn sessions_body(c: &Shared, session: Session) -> Result<Markup, Problem> {
    let list = link::call(&c.state_dir, async |k| k.list_sessions(pb::Empty {}).await).await?;
    Ok(views::sessions(&list, &c.access.csrf_for(session)))
}

pub(crate) async fn confirmations(
    State(c): State<Shared>,
    Extension(session): Extension<Session>,
) -> Response {
    match confirmations_list(&c, session).await {
        Ok(list) => {
            let body = html! {
                p.hint { "High-risk calls of sessions issued with " code { "--confirm high" } " wait here for your answer (also " code { "tutti confirm list" } ")." }
                div #confirmations data-poll="/fragment/confirmations" { (list) }
            };
            page("Confirmations", &body)
        }
        Err(p) => failed("Confirmations", &p),
    }
}

/// The waiting calls alone: the confirmations page refreshes them every second.
pub(crate) async fn confirmation_rows(
    State(c): State<Shared>,
    Extension(session): Extension<Session>,
) -> Response {
    match confirmations_list(&c, session).await {
        Ok(list) => list.into_response(),
        Err(p) => (p.status, views::problems(&p.lines)).into_response(),
    }
}

pub(crate) async fn confirmations_list(c: &Shared, session: Session) -> Result<Markup, Problem> {
    let list = link::call(&c.state_dir, async |k| {
        k.list_confirmations(pb::Empty {}).await
    })
    .await?;
    Ok(views::confirmations(&list, &c.access.csrf_for(session)))
}

#[derive(serde::Deserialize)]
pub(crate) struct ActivityFilter {
    #[serde(default)]
    connector: String,
    #[serde(default)]
    outcome: String,
}

pub(crate) async fn activity(Query(f): Query<ActivityFilter>) -> Response {
    let body = html! {
        form.filter method="get" action="/activity" {
            label { "connector " input type="text" name="connector" value=(f.connector); }
            label { "outcome " input type="text" name="outcome" value=(f.outcome) placeholder="ok, tool_error, …"; }
            button type="submit" { "Filter" }
        }
        table #activity data-connector=(f.connector) data-outcome=(f.outcome) {
            thead { tr { th { "time" } th { "event" } th { "connector" } th { "tool" } th { "risk" } th { "outcome" } th { "duration" } th { "detail" } } }
            tbody {}
        }
        p.hint { "Live from the audit log (" code { "logs/audit.jsonl" } "); newest first." }
    };
    page("Activity", &body)
}

pub(crate) async fn script() -> Response {
    (
        [(header::CONTENT_TYPE, "text/javascript; charset=utf-8")],
        SCRIPT,
    )
        .into_response()
}

pub(crate) async fn stylesheet() -> Response {
    (
        [(header::CONTENT_TYPE, "text/css; charset=utf-8")],
        STYLESHEET,
    )
        .into_response()
}

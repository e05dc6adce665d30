//! The changes (POST). Each needs the CSRF token of a page this console showed to this
//! browser, and a change to a connector names the installed release the page saw: the kernel
//! refuses it if the connector changed since. A refused change changes nothing and the page
//! says why.

use std::collections::HashMap;

use axum::extract::{Path as UrlPath, State};
use axum::http::StatusCode;
use axum::response::Response;
use axum::{Extension, Form};
use maud::html;
use tutti_proto::kernel as pb;

use super::access::Session;
use super::access::Shared;
use super::link::{self, Problem};
use super::pages::{self, failed, page};
use super::views;

/// A form's fields. Secret values among them are moved out, never copied or shown.
pub(super) struct Fields(pub(super) Vec<(String, String)>);

impl Fields {
    pub(super) fn get(&self, name: &str) -> &str {
        self.0
            .iter()
            .find(|(n, _)| n == name)
            .map_or("", |(_, v)| v.as_str())
    }

    /// Refuses a change whose form did not come from a page of this console.
    fn check_csrf(&self, c: &Shared, session: Session) -> Result<(), Problem> {
        if c.access.csrf_ok(session, self.get("csrf")) {
            Ok(())
        } else {
            Err(Problem::new(
                StatusCode::FORBIDDEN,
                "this form is missing its page token or is out of date; reload the page and try again",
            ))
        }
    }
}

/// A form's change, once its page token is checked: what `change` gives, or why nothing
/// changed.
pub(super) async fn checked<T>(
    c: &Shared,
    session: Session,
    fields: &Fields,
    change: impl Future<Output = Result<T, Problem>>,
) -> Result<T, Problem> {
    fields.check_csrf(c, session)?;
    change.await
}

/// Every form but the install plan: [`checked`], then the page `shown` makes of the outcome,
/// or the page titled `title` that says why nothing changed.
async fn submit<T>(
    c: &Shared,
    session: Session,
    fields: &Fields,
    title: &str,
    change: impl Future<Output = Result<T, Problem>>,
    shown: impl FnOnce(T) -> Response,
) -> Response {
    match checked(c, session, fields, change).await {
        Ok(outcome) => shown(outcome),
        Err(p) => failed(title, &p),
    }
}

pub(super) fn done(title: &str, text: &str) -> Response {
    let body = html! { (views::notice(text)) p { a href="/" { "Back to the connectors" } } };
    page(title, &body)
}

pub(crate) async fn probe(
    State(c): State<Shared>,
    Extension(session): Extension<Session>,
    UrlPath(key): UrlPath<String>,
    Form(fields): Form<Vec<(String, String)>>,
) -> Response {
    let change = async {
        pages::valid_key(&key)?;
        let request = pb::ProbeRequest {
            target: key.clone(),
            ..Default::default()
        };
        let reply = link::call(&c.state_dir, async |k| k.probe(request).await).await?;
        pages::detail_body(&c, session, &key, Some(views::probe_result(&reply))).await
    };
    let fields = Fields(fields);
    submit(&c, session, &fields, &key, change, |body| page(&key, &body)).await
}

pub(crate) async fn connect(
    State(c): State<Shared>,
    Extension(session): Extension<Session>,
    UrlPath(key): UrlPath<String>,
    Form(fields): Form<Vec<(String, String)>>,
) -> Response {
    let title = format!("Connect {key}");
    let (secrets, rest): (Vec<_>, Vec<_>) = fields
        .into_iter()
        .partition(|(n, _)| n.starts_with("secret."));
    let fields = Fields(rest);
    let change = async {
        pages::valid_key(&key)?;
        let secrets: HashMap<String, String> = secrets
            .into_iter()
            .filter_map(|(n, v)| Some((n.strip_prefix("secret.")?.to_owned(), v)))
            .filter(|(_, v)| !v.is_empty())
            .collect();
        let request = pb::ConnectRequest {
            key: key.clone(),
            secrets,
            expected_sha256: fields.get("expected").to_owned(),
        };
        link::call(&c.state_dir, async |k| k.connect_connector(request).await).await
    };
    submit(&c, session, &fields, &title, change, |_| {
        done(
            &title,
            &format!("{key} is connected; its values are stored and will not be shown."),
        )
    })
    .await
}

/// Disconnect or uninstall, with the release the confirmation page showed.
async fn disconnect_or_uninstall(
    c: &Shared,
    key: &str,
    fields: &Fields,
    uninstall: bool,
) -> Result<(), Problem> {
    pages::valid_key(key)?;
    let request = pb::KeyRequest {
        key: key.to_owned(),
        expected_sha256: fields.get("expected").to_owned(),
        ..Default::default()
    };
    link::call(&c.state_dir, async |k| {
        if uninstall {
            k.uninstall(request).await
        } else {
            k.disconnect_connector(request).await
        }
    })
    .await?;
    Ok(())
}

pub(crate) async fn disconnect(
    State(c): State<Shared>,
    Extension(session): Extension<Session>,
    UrlPath(key): UrlPath<String>,
    Form(fields): Form<Vec<(String, String)>>,
) -> Response {
    let title = format!("Disconnect {key}");
    let fields = Fields(fields);
    let change = disconnect_or_uninstall(&c, &key, &fields, false);
    submit(&c, session, &fields, &title, change, |()| {
        done(
            &title,
            &format!("{key} is disconnected; its secret values are deleted."),
        )
    })
    .await
}

pub(crate) async fn uninstall(
    State(c): State<Shared>,
    Extension(session): Extension<Session>,
    UrlPath(key): UrlPath<String>,
    Form(fields): Form<Vec<(String, String)>>,
) -> Response {
    let title = format!("Uninstall {key}");
    let fields = Fields(fields);
    let change = disconnect_or_uninstall(&c, &key, &fields, true);
    submit(&c, session, &fields, &title, change, |()| {
        done(&title, &format!("{key} is uninstalled."))
    })
    .await
}

/// The folder as the kernel gets it: absolute, and a directory (else the CLI's message).
pub(super) fn release_dir(dir: &str) -> Result<String, Problem> {
    let dir = dir.trim();
    let path = std::path::absolute(dir).unwrap_or_else(|_| dir.into());
    if dir.is_empty() || !path.is_dir() {
        return Err(Problem::new(
            StatusCode::BAD_REQUEST,
            crate::error::CliError::NotADirectory { path }.to_string(),
        ));
    }
    path.to_str().map(str::to_owned).ok_or_else(|| {
        Problem::new(
            StatusCode::BAD_REQUEST,
            crate::error::CliError::NotUtf8Path { path: path.clone() }.to_string(),
        )
    })
}

/// The kernel's install plan of release folder `dir`, or its problems.
pub(super) async fn plan_of(c: &Shared, dir: &str) -> Result<pb::InstallPlan, Problem> {
    let request = pb::InstallRequest {
        source_dir: dir.to_owned(),
        ..Default::default()
    };
    let plan = link::call(&c.state_dir, async |k| k.plan_install(request).await).await?;
    if plan.problems.is_empty() {
        Ok(plan)
    } else {
        Err(Problem {
            status: StatusCode::BAD_REQUEST,
            lines: plan.problems,
        })
    }
}

pub(crate) async fn plan(
    State(c): State<Shared>,
    Extension(session): Extension<Session>,
    Form(fields): Form<Vec<(String, String)>>,
) -> Response {
    let fields = Fields(fields);
    let change = async {
        let dir = release_dir(fields.get("dir"))?;
        let plan = plan_of(&c, &dir).await?;
        Ok(views::plan(&plan, &dir, &c.access.csrf_for(session), None))
    };
    match checked(&c, session, &fields, change).await {
        Ok(body) => page("Install: confirm", &body),
        Err(p) => {
            let body = html! { (views::problems(&p.lines)) (pages::install_form(&c, session, fields.get("dir"))) };
            axum::response::IntoResponse::into_response((p.status, views::layout("Install", &body)))
        }
    }
}

pub(crate) async fn install(
    State(c): State<Shared>,
    Extension(session): Extension<Session>,
    Form(fields): Form<Vec<(String, String)>>,
) -> Response {
    let fields = Fields(fields);
    let change = async {
        let request = pb::InstallRequest {
            source_dir: release_dir(fields.get("dir"))?,
            expected_sha256: fields.get("sha256").to_owned(),
            ..Default::default()
        };
        let installed = link::call(&c.state_dir, async |k| k.install(request).await).await;
        // A market source's staged release goes whatever happened, as the CLI's does.
        if fields.get("staged") == "yes" {
            link::discard_staged_quietly(&c.state_dir, fields.get("dir")).await;
        }
        installed
    };
    submit(&c, session, &fields, "Install", change, |r| {
        let verb = if r.upgraded {
            "upgraded to"
        } else {
            "installed at"
        };
        done(
            "Install",
            &format!("{} {verb} version {} ({}).", r.key, r.version, r.status),
        )
    })
    .await
}

pub(crate) async fn revoke(
    State(c): State<Shared>,
    Extension(session): Extension<Session>,
    Form(fields): Form<Vec<(String, String)>>,
) -> Response {
    let fields = Fields(fields);
    let request = pb::RevokeSessionRequest {
        workspace: fields.get("workspace").to_owned(),
        session: fields.get("session").to_owned(),
        all: false,
    };
    revoke_and_show(&c, session, &fields, request).await
}

pub(crate) async fn revoke_all(
    State(c): State<Shared>,
    Extension(session): Extension<Session>,
    Form(fields): Form<Vec<(String, String)>>,
) -> Response {
    let fields = Fields(fields);
    let request = pb::RevokeSessionRequest {
        all: true,
        ..Default::default()
    };
    revoke_and_show(&c, session, &fields, request).await
}

async fn revoke_and_show(
    c: &Shared,
    session: Session,
    fields: &Fields,
    request: pb::RevokeSessionRequest,
) -> Response {
    let change = async {
        let reply = link::call(&c.state_dir, async |k| k.revoke_session(request).await).await?;
        let body = pages::sessions_body(c, session).await?;
        Ok(html! { (views::notice(&format!("revoked {} session(s)", reply.revoked))) (body) })
    };
    submit(c, session, fields, "Sessions", change, |body| {
        page("Sessions", &body)
    })
    .await
}

/// Approves held definition changes (SPEC §12) with the page's CSRF
/// token and confirmation. The form names the offer it showed; a different offer now waiting
/// is refused as stale, so what is approved is what was reviewed.
pub(crate) async fn approve(
    State(c): State<Shared>,
    Extension(session): Extension<Session>,
    UrlPath(key): UrlPath<String>,
    Form(fields): Form<Vec<(String, String)>>,
) -> Response {
    let title = format!("Approve {key}");
    let fields = Fields(fields);
    let change = async {
        if fields.get("confirm") != "yes" {
            return Err(Problem::new(
                StatusCode::BAD_REQUEST,
                "tick the confirmation to approve these changes",
            ));
        }
        let now = pages::review_changes(&c, &key).await?;
        if !now.awaiting || now.offered_hash != fields.get("offered") {
            return Err(Problem::new(
                StatusCode::CONFLICT,
                format!("the changes of {key} changed since you opened this page; reload"),
            ));
        }
        let request = pb::KeyRequest {
            key: key.clone(),
            expected_offered_hash: now.offered_hash.clone(),
            ..Default::default()
        };
        link::call(&c.state_dir, async |k| k.approve_changes(request).await).await
    };
    submit(&c, session, &fields, &title, change, |_| {
        done(
            &title,
            &format!("approved {key}: the reviewed definitions serve and are pinned"),
        )
    })
    .await
}

/// The person's Allow once / Deny of a call that waits for confirmation (SPEC §12).
pub(crate) async fn answer_confirmation(
    State(c): State<Shared>,
    Extension(session): Extension<Session>,
    Form(fields): Form<Vec<(String, String)>>,
) -> Response {
    let fields = Fields(fields);
    let id = fields.get("id").to_owned();
    let allow = match fields.get("answer") {
        "allow" => true,
        "deny" => false,
        _ => {
            let p = Problem::new(StatusCode::BAD_REQUEST, "answer with Allow once or Deny");
            return failed("Confirmations", &p);
        }
    };
    let change = async {
        let request = pb::AnswerConfirmationRequest {
            id: id.clone(),
            allow,
        };
        link::call(&c.state_dir, async |k| k.answer_confirmation(request).await).await?;
        pages::confirmations_list(&c, session).await
    };
    submit(&c, session, &fields, "Confirmations", change, |list| {
        let text = match allow {
            true => format!("allowed {id}: the call is sent now"),
            false => format!("denied {id}: the call is refused and nothing was sent"),
        };
        let body = html! { (views::notice(&text)) div #confirmations data-poll="/fragment/confirmations" { (list) } };
        page("Confirmations", &body)
    })
    .await
}

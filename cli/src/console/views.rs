//! The HTML of every view (maud: escaped by construction). No inline script or style: the
//! page loads `/static/console.js` and `/static/console.css` only. Status is shown as a word
//! next to its dot, so nothing depends on colour.

use maud::{DOCTYPE, Markup, html};
use tutti_proto::kernel as pb;

/// The whole page around `body`.
pub(crate) fn layout(title: &str, body: &Markup) -> Markup {
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                title { (title) " · tutti console" }
                link rel="stylesheet" href="/static/console.css";
                script src="/static/console.js" defer {}
            }
            body {
                header {
                    strong { "tutti console" }
                    nav {
                        a href="/" { "Connectors" }
                        a href="/install" { "Install" }
                        a href="/sessions" { "Sessions" }
                        a href="/confirmations" { "Confirmations" }
                        a href="/activity" { "Activity" }
                    }
                }
                main { h1 { (title) } (body) }
            }
        }
    }
}

/// One line per problem, as the CLI prints them (hidden characters written out).
pub(crate) fn problems(lines: &[String]) -> Markup {
    html! {
        div.problem role="alert" {
            @for line in lines { p { (crate::output::visible(line)) } }
        }
    }
}

pub(crate) fn notice(text: &str) -> Markup {
    html! { div.notice role="status" { p { (text) } } }
}

pub(crate) fn csrf(token: &str) -> Markup {
    html! { input type="hidden" name="csrf" value=(token); }
}

fn dot(status: &str) -> Markup {
    html! {
        span class={ "dot " (status) } aria-hidden="true" {}
        span.status { (status) }
    }
}

/// The connectors' cards (also served alone, for the page's live refresh).
pub(crate) fn cards(status: &pb::StatusReply, available: &pb::AvailableReply) -> Markup {
    html! {
        @if status.connectors.is_empty() {
            p { "No connector is installed. " a href="/install" { "Install one from a folder." } }
        }
        ul.cards {
            @for c in &status.connectors {
                (card(c, available.connectors.iter().find(|a| a.key == c.key)))
            }
        }
    }
}

fn card(c: &pb::ConnectorStatus, a: Option<&pb::AvailableConnector>) -> Markup {
    html! {
        li.card data-key=(c.key) {
            h2 { a href={ "/connectors/" (c.key) } { (c.key) } " " (dot(&c.status)) }
            @if !c.name.is_empty() { p.name { (c.name) } }
            dl {
                dt { "version" } dd { (c.version) }
                dt { "generation" } dd { (c.generation) }
                dt { "restarts" } dd { (c.restarts) }
                dt { "tools" } dd { (c.tool_count) }
                // Prompts and resources counts.
                dt { "prompts" } dd.prompts { (c.prompt_count) }
                dt { "resources" } dd.resources { (c.resource_count) }
                dt { "risk" } dd.risk {
                    (c.risk_low) " low · " (c.risk_medium) " medium · " (c.risk_high) " high"
                }
                dt { "interfaces" } dd {
                    @if let Some(a) = a {
                        @for i in &a.interfaces { span.iface { (i.kind) ": " (i.status) } " " }
                    }
                }
                @if !c.last_error.is_empty() {
                    dt { "last error" } dd.error { (c.last_error) }
                }
                // The circuit breaker (SPEC §12), when not closed.
                @if !c.circuit.is_empty() && c.circuit != "closed" {
                    dt { "circuit" } dd.circuit { span class={ "badge " (c.circuit) } { (c.circuit) }
                        @if !c.circuit_note.is_empty() { " — " (c.circuit_note) } }
                }
            }
            // Held definition changes (pinned definitions, SPEC §12).
            @if c.changes_await_review {
                p.review-badge {
                    a.badge.review href={ "/connectors/" (c.key) "/approve" } { "changes await review" }
                    @if !c.review_summary.is_empty() { " " span.review-summary { (c.review_summary) } }
                }
            }
        }
    }
}

/// A tool of the live route: name, risk, description and input schema.
pub(crate) fn tools(route: Option<&pb::ConnectorRoute>) -> Markup {
    let Some(route) = route else {
        return html! { p { "No generation is live, so no tools are routed now." } };
    };
    html! {
        table.tools {
            thead { tr { th { "tool" } th { "risk" } th { "description" } th { "input schema" } } }
            tbody {
                @for t in &route.tools {
                    @let def: serde_json::Value = serde_json::from_str(&t.definition_json).unwrap_or_default();
                    tr data-tool=(t.name) {
                        td { code { (t.name) } }
                        td { span class={ "risk " (t.risk) } { (t.risk) } }
                        td { (def.get("description").and_then(|d| d.as_str()).unwrap_or("")) }
                        td {
                            details {
                                summary { "schema" }
                                pre { (serde_json::to_string_pretty(def.get("inputSchema").unwrap_or(&serde_json::Value::Null)).unwrap_or_default()) }
                            }
                        }
                    }
                }
            }
        }
    }
}

pub(crate) fn skills(a: Option<&pb::AvailableConnector>) -> Markup {
    let skills = a.map(|a| a.skills.as_slice()).unwrap_or_default();
    html! {
        @if skills.is_empty() { p { "No skills." } }
        ul.skills {
            @for s in skills {
                li { strong { (s.name) } @if !s.description.is_empty() { " — " (s.description) } }
            }
        }
    }
}

pub(crate) fn probe_result(reply: &pb::ProbeReply) -> Markup {
    html! {
        section.probe-result role="status" {
            h2 { "Test connection" }
            @if reply.problems.is_empty() {
                p.ok { "ok: " (reply.server_name) " speaks " (reply.protocol_version) " and lists "
                       (reply.tools.len()) " tools" }
            } @else {
                (problems(&reply.problems))
            }
            ul { @for t in &reply.tools { li { code { (t.local_name) } } } }
        }
    }
}

/// A change's confirmation form, with the release it was seen with.
pub(crate) fn confirm_form(action: &str, csrf_token: &str, sha: &str, label: &str) -> Markup {
    html! {
        form method="post" action=(action) {
            (csrf(csrf_token))
            input type="hidden" name="expected" value=(sha);
            button type="submit" { (label) }
            " "
            a href="/" { "cancel" }
        }
    }
}

/// The install plan: exactly what would run, then the confirmation.
/// Every field of the manifest is shown with its hidden characters written out by the CLI's
/// rule (`visible`, `shell_join`): a manifest must not be able to reorder or hide what the
/// person confirming sees.
/// The install confirmation of a release folder; of a market source's staged release
/// (`staged`), also what the market resolved (SPEC §17), and cancel discards it.
pub(crate) fn plan(
    plan: &pb::InstallPlan,
    dir: &str,
    csrf_token: &str,
    staged: Option<&pb::StageReply>,
) -> Markup {
    use crate::output::{shell_join, visible};
    let launch = if plan.transport == "http" {
        visible(&plan.url)
    } else {
        shell_join(&plan.argv)
    };
    html! {
        dl.plan {
            dt { "connector" } dd {
                (visible(&plan.key)) " (" (visible(&plan.name)) ") version " (visible(&plan.version))
            }
            @if !plan.upgrades_version.is_empty() {
                dt { "upgrades" } dd { "from version " (visible(&plan.upgrades_version)) }
            }
            dt { "runs" } dd { code #launch-line { (launch) } }
            @if !plan.cwd.is_empty() { dt { "in" } dd { code { (visible(&plan.cwd)) } } }
            @for e in &plan.env {
                dt { "env" } dd { code { (visible(&e.name)) "=" (shell_join(std::slice::from_ref(&e.value))) } }
            }
            dt { "secrets" } dd {
                @if plan.secret_names.is_empty() { "none" } @else { (visible(&plan.secret_names.join(", "))) }
            }
            dt { "SHA-256" } dd { code #sha256 { (plan.sha256) } }
        }
        @if let Some(staged) = staged {
            @for warning in &staged.warnings { (notice(&visible(warning))) }
            pre #market-source { (crate::commands::market::confirmation(staged)) }
        }
        // The confirmation carries the SHA-256 shown: the kernel installs exactly that
        // content or refuses (SPEC §12).
        form method="post" action="/install" {
            (csrf(csrf_token))
            input type="hidden" name="dir" value=(dir);
            input type="hidden" name="sha256" value=(plan.sha256);
            @if staged.is_some() { input type="hidden" name="staged" value="yes"; }
            button type="submit" { "Install " (plan.key) }
            @if staged.is_none() { " " a href="/install" { "cancel" } }
        }
        @if staged.is_some() {
            form method="post" action="/install/discard" {
                (csrf(csrf_token))
                input type="hidden" name="dir" value=(dir);
                button type="submit" #cancel { "Cancel" }
            }
        }
    }
}

/// The live sessions with revoke and revoke-all.
pub(crate) fn sessions(list: &pb::ListSessionsReply, csrf_token: &str) -> Markup {
    html! {
        @if list.sessions.is_empty() { p { "No live session." } }
        table.sessions {
            thead { tr { th { "workspace" } th { "session" } th { "issued" } th {} } }
            tbody {
                @for s in &list.sessions {
                    tr data-session=(s.session) {
                        td { (s.workspace) } td { (s.session) } td { (issued(s.issued_unix_ms)) }
                        td {
                            form method="post" action="/sessions/revoke" {
                                (csrf(csrf_token))
                                input type="hidden" name="workspace" value=(s.workspace);
                                input type="hidden" name="session" value=(s.session);
                                button type="submit" { "Revoke" }
                            }
                        }
                    }
                }
            }
        }
        @if !list.sessions.is_empty() {
            form method="post" action="/sessions/revoke-all" {
                (csrf(csrf_token))
                button type="submit" { "Revoke all" }
            }
        }
    }
}

fn issued(unix_ms: i64) -> String {
    chrono::DateTime::from_timestamp_millis(unix_ms)
        .map(|t| t.format("%Y-%m-%d %H:%M:%S UTC").to_string())
        .unwrap_or_default()
}

/// The offer that awaits review against the pinned definitions
/// (SPEC §12): added, removed and changed entries, as `tutti connector review` prints them
/// (changed fields as a line diff).
pub(crate) fn review(reply: &pb::ReviewReply) -> Markup {
    html! {
        section.review {
            h2 { "Changes awaiting review" }
            @if reply.awaiting {
                p { "Until approved, agents keep seeing the pinned definitions." }
                ul.review-entries {
                    @for e in &reply.entries {
                        li data-change=(e.change) { (e.change) " " (e.kind) " " code { (e.name) } }
                    }
                }
            }
            pre.review-diff { (crate::commands::review::render(reply)) }
        }
    }
}

/// Approving commits exactly the offer shown (its hash goes along).
pub(crate) fn approve_form(key: &str, csrf_token: &str, offered_hash: &str) -> Markup {
    html! {
        form method="post" action={ "/connectors/" (key) "/approve" } {
            (csrf(csrf_token))
            input type="hidden" name="offered" value=(offered_hash);
            label { input type="checkbox" name="confirm" value="yes" required;
                " I reviewed these changes; serve them and pin them" }
            button type="submit" #approve { "Approve changes to " (key) }
            " "
            a href={ "/connectors/" (key) } { "cancel" }
        }
    }
}

/// An OAuth connector (SPEC §10) logs in from the CLI, whose
/// loopback redirect receives the code; the page names the command and the token's expiry,
/// never a token.
pub(crate) fn oauth_connect(s: &pb::ConnectorStatus) -> Markup {
    html! {
        p { (s.key) " logs in with OAuth in your browser. Run this in a terminal:" }
        pre { code #oauth-command { "tutti connector connect " (s.key) } }
        dl.oauth {
            dt { "status" } dd { (dot(&s.status)) }
            dt { "access token expires" } dd #token-expires {
                @if s.token_expires_unix_ms > 0 { (issued(s.token_expires_unix_ms)) }
                @else { "not logged in, or unknown" }
            }
        }
        p.hint { "The tokens stay in the runtime's secret store and are never shown." }
    }
}

/// The calls that wait for the person's confirmation (SPEC §12), each with its arguments as
/// the frontend showed them (secret-looking keys masked, long values cut) and Allow once /
/// Deny. Served alone too: the page refreshes it every second.
pub(crate) fn confirmations(list: &pb::ConfirmationsReply, csrf_token: &str) -> Markup {
    html! {
        @if list.pending.is_empty() { p #no-confirmations { "No call waits for confirmation." } }
        @for p in &list.pending {
            @let call = p.call.clone().unwrap_or_default();
            div.confirmation data-confirmation=(p.id) {
                p {
                    strong { (crate::output::visible(&call.tool)) }
                    " (connector " (call.connector) ", risk " (call.risk) ") from session "
                    (crate::output::visible(&call.workspace)) "/" (crate::output::visible(&call.session))
                    " · " span.left { (p.remaining_ms.div_ceil(1000)) " s left" }
                    " · id " code { (p.id) }
                }
                table.arguments {
                    @for a in &call.arguments {
                        tr { td { code { (crate::output::visible(&a.name)) } } td { code { (crate::output::visible(&a.value)) } } }
                    }
                    @if call.arguments.is_empty() { tr { td { "No arguments." } } }
                    @if call.more_arguments > 0 { tr { td { "… and " (call.more_arguments) " more" } } }
                }
                form.answer method="post" action="/confirmations/answer" {
                    (csrf(csrf_token))
                    input type="hidden" name="id" value=(p.id);
                    button type="submit" name="answer" value="allow" { "Allow once" }
                    " "
                    button type="submit" name="answer" value="deny" { "Deny" }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status() -> pb::ConnectorStatus {
        pb::ConnectorStatus {
            key: "fx".into(),
            status: "ready".into(),
            circuit: "closed".into(),
            prompt_count: 3,
            resource_count: 5,
            ..Default::default()
        }
    }

    fn card_html(s: &pb::ConnectorStatus) -> String {
        card(s, None).into_string()
    }

    #[test]
    fn a_card_shows_counts_and_an_open_circuit_only() {
        let mut s = status();
        let closed = card_html(&s);
        assert!(closed.contains(r#"<dd class="prompts">3</dd>"#), "{closed}");
        assert!(
            closed.contains(r#"<dd class="resources">5</dd>"#),
            "{closed}"
        );
        assert!(!closed.contains("circuit"), "{closed}");
        s.circuit = "open".into();
        s.circuit_note = "circuit open after 5 failures; retry in 30 s".into();
        let open = card_html(&s);
        assert!(open.contains(r#"class="badge open""#), "{open}");
        assert!(open.contains("retry in 30 s"), "{open}");
    }

    #[test]
    fn a_card_shows_held_changes() {
        let mut s = status();
        assert!(!card_html(&s).contains("changes await review"));
        s.changes_await_review = true;
        s.review_summary = "added steal".into();
        let html = card_html(&s);
        assert!(html.contains("changes await review"), "{html}");
        assert!(html.contains("/connectors/fx/approve"), "{html}");
        assert!(html.contains("added steal"), "{html}");
    }

    #[test]
    fn the_oauth_connect_page_names_the_command_and_the_expiry() {
        let mut s = status();
        s.oauth = true;
        let unknown = oauth_connect(&s).into_string();
        assert!(unknown.contains("tutti connector connect fx"), "{unknown}");
        assert!(unknown.contains("not logged in, or unknown"), "{unknown}");
        s.token_expires_unix_ms = 1_790_000_000_000;
        let known = oauth_connect(&s).into_string();
        assert!(known.contains("2026-09-21"), "{known}");
        assert!(!known.contains("type=\"password\""), "{known}");
    }
}

//! Table tests of the connector lifecycle: each case runs a history of inputs (`given`),
//! then one input (`when`), and checks the effects of that input and the status after it.
//! Generation numbers are drawn 1, 2, 3…; the clock starts at 0 and moves only by `T(ms)`.

use std::time::Duration;

use super::connector::*;
use super::vocabulary::*;
use crate::audit::Event;

const KEY: &str = "k";
const CONNECT: &str = "tutti connector connect k --from-env TOKEN";
const LOG: &str = "/state/logs/k.log";

/// One entry of a case's history.
enum Step {
    /// An input.
    I(Input),
    /// The clock moves on.
    T(u64),
    /// An upgrade to 2.0.0 (/r/v2) is installed and not committed yet.
    Upgrade,
    /// The registry went back to 1.0.0 (what `Effect::Abandon` does).
    Restored,
    /// An upgrade that waits for a secret not stored yet.
    Waits,
    /// Disconnected or a declared secret missing.
    NoAuth,
    /// A connector without MCP.
    NoMcp,
    /// Uninstalled meanwhile.
    Gone,
    /// Whether the generation table serves the connector.
    Table(bool),
}
use Step::*;

fn view() -> View {
    View {
        version: "1.0.0".into(),
        release: "/r/v1".into(),
        has_mcp: true,
        start_ms: 1000,
        auth_ready: true,
        waits_for_secrets: false,
        upgrade_pending: false,
        auth_hint: format!("needs TOKEN; run `{CONNECT}`"),
        connect_command: CONNECT.into(),
        log_path: LOG.into(),
        pin: None,
        trust_updates: false,
    }
}

struct Harness {
    c: Connector,
    installed: Option<View>,
    now: Duration,
    next: u64,
    table_live: bool,
}

impl Harness {
    fn new() -> Harness {
        Harness {
            c: Connector::new(KEY),
            installed: Some(view()),
            now: Duration::ZERO,
            next: 1,
            table_live: false,
        }
    }

    fn input(&mut self, input: Input) -> Vec<Effect> {
        let mut next = self.next;
        let mut draw = || {
            next += 1;
            next - 1
        };
        let mut facts = Facts {
            now: self.now,
            unix_ms: 1_000_000 + self.now.as_millis() as i64,
            jitter: 0.0,
            installed: self.installed.clone(),
            table_live: self.table_live,
            next_generation: &mut draw,
        };
        let effects = self.c.step(input, &mut facts);
        self.next = next;
        effects
    }

    fn apply(&mut self, step: Step) {
        match step {
            I(input) => {
                self.input(input);
            }
            T(ms) => self.now += Duration::from_millis(ms),
            Gone => self.installed = None,
            Table(live) => self.table_live = live,
            change => change.apply_to(self.installed.get_or_insert_with(view)),
        }
    }

    fn run(given: Vec<Step>) -> Harness {
        let mut h = Harness::new();
        for s in given {
            h.apply(s);
        }
        h
    }
}

impl Step {
    /// A change of the installed connector.
    fn apply_to(self, v: &mut View) {
        match self {
            Upgrade => {
                v.version = "2.0.0".into();
                v.release = "/r/v2".into();
                v.upgrade_pending = true;
            }
            Restored => *v = view(),
            Waits => {
                Upgrade.apply_to(v);
                v.auth_ready = false;
                v.waits_for_secrets = true;
            }
            NoAuth => v.auth_ready = false,
            NoMcp => v.has_mcp = false,
            I(_) | T(_) | Gone | Table(_) => {}
        }
    }
}

fn check(given: Vec<Step>, when: Input, then: Vec<Effect>, status: Status, error: Option<&str>) {
    let mut h = Harness::run(given);
    let effects = h.input(when);
    assert_eq!(effects, then, "effects");
    assert_eq!(h.c.status(), status, "status");
    if let Some(e) = error {
        assert_eq!(h.c.last_error(), e, "last error");
    }
}

// Inputs.
fn reload() -> Step {
    I(Input::Reload)
}
fn offer(g: u64) -> Input {
    Input::Offer {
        generation: g,
        tools: Ok(crate::catalog::Candidate::default()),
    }
}
fn refuse(g: u64, problems: &str) -> Input {
    Input::Offer {
        generation: g,
        tools: Err(problems.into()),
    }
}
fn exited(g: u64) -> Input {
    Input::Exited {
        generation: g,
        detail: "worker exited (exit status: 1)".into(),
    }
}
fn report(g: u64, kind: ReportKind, message: &str) -> Input {
    Input::Report {
        generation: g,
        kind,
        message: message.into(),
    }
}
fn abandoned(note: &str) -> Input {
    Input::Abandoned {
        note: Some(note.into()),
        why: "why".into(),
    }
}
fn stop_input(reason: &str, ms: u64) -> Input {
    Input::Stop {
        reason: reason.into(),
        drain: Duration::from_millis(ms),
    }
}

// Effects.
fn spawn(g: u64) -> Effect {
    spawn_of(g, "/r/v1")
}
fn spawn_of(g: u64, release: &str) -> Effect {
    Effect::Spawn {
        generation: g,
        release: release.into(),
    }
}
fn timer(g: u64) -> Effect {
    Effect::StartTimer {
        generation: g,
        after: Duration::from_millis(3000),
    }
}
fn stop(g: u64, ms: u64) -> Effect {
    Effect::Stop {
        generation: g,
        grace: Duration::from_millis(ms),
    }
}
fn forget(g: u64) -> Effect {
    Effect::Forget { generation: g }
}
fn fence_all(reason: &str) -> Effect {
    Effect::Fence {
        generation: None,
        reason: reason.into(),
    }
}
fn fence(g: u64, reason: &str) -> Effect {
    Effect::Fence {
        generation: Some(g),
        reason: reason.into(),
    }
}
fn commit(g: u64, release: &str) -> Effect {
    Effect::Commit {
        generation: g,
        tools: Some(crate::catalog::Candidate::default()),
        release: release.into(),
    }
}
fn commit_cli(g: u64, release: &str) -> Effect {
    Effect::Commit {
        generation: g,
        tools: None,
        release: release.into(),
    }
}
fn abandon(why: &str) -> Effect {
    Effect::Abandon { why: why.into() }
}
fn retry_after(epoch: u64, ms: u64) -> Effect {
    Effect::RetryAfter {
        epoch,
        after: Duration::from_millis(ms),
    }
}
fn ok() -> Effect {
    Effect::Answer(Ok(()))
}
fn err(e: &str) -> Effect {
    Effect::Answer(Err(e.into()))
}
fn refuse_audit(g: u64, problems: &str) -> Effect {
    Effect::Audit(Event::Refuse {
        connector: KEY.into(),
        generation: g,
        reason: format!("generation {g} refused: {problems}"),
    })
}

const EXIT: &str = "worker exited (exit status: 1); see /state/logs/k.log";

/// `$name: given [...] when input => [effects] status S [error "text"]`: one test per row.
macro_rules! table {
    ($($name:ident: [$($g:expr),* $(,)?] when $w:expr => [$($e:expr),* $(,)?] $s:ident $(, $err:expr)?;)*) => {
        $(
            #[test]
            fn $name() {
                #[allow(unused_mut, unused_assignments)]
                let mut error: Option<&str> = None;
                $(error = Some($err);)?
                check(vec![$($g),*], $w, vec![$($e),*], Status::$s, error);
            }
        )*
    };
}

table! {
    // Start.
    reload_spawns_a_candidate_with_a_start_deadline:
        [] when Input::Reload => [spawn(1), timer(1)] Starting;
    reload_of_a_connector_not_installed_does_nothing:
        [Gone] when Input::Reload => [] Starting;
    reload_without_credentials_fences_and_requires_auth:
        [NoAuth] when Input::Reload => [fence_all("auth required")] AuthRequired,
        "needs TOKEN; run `tutti connector connect k --from-env TOKEN`";
    reload_without_credentials_revokes_then_fences_then_stops_every_worker:
        [reload(), I(offer(1)), reload(), NoAuth] when Input::Reload =>
        [forget(1), forget(2), fence_all("auth required"), stop(1, 2000), stop(2, 2000)] AuthRequired;
    reload_supersedes_a_candidate_revoking_it_first:
        [reload()] when Input::Reload => [forget(1), stop(1, 0), spawn(2), timer(2)] Starting;
    reload_of_a_ready_connector_starts_a_candidate_and_stays_ready:
        [reload(), I(offer(1))] when Input::Reload => [spawn(2), timer(2)] Ready;
    reload_after_a_refusal_tries_again:
        [reload(), I(refuse(1, "bad"))] when Input::Reload => [spawn(2), timer(2)] Starting;
    reload_routable_again_clears_the_auth_hint:
        [NoAuth, reload(), Restored] when Input::Reload => [spawn(1), timer(1)] Starting, "";
    connector_without_mcp_commits_at_once:
        [NoMcp] when Input::Reload => [commit_cli(1, "/r/v1")] Ready, "";
    connector_without_mcp_and_credentials_requires_auth:
        [NoMcp, NoAuth] when Input::Reload => [fence_all("auth required")] AuthRequired;
    upgrade_without_mcp_commits_the_new_release:
        [NoMcp, reload(), Upgrade] when Input::Reload => [commit_cli(2, "/r/v2")] Ready;

    // Offers and commits.
    offer_of_the_candidate_commits:
        [reload()] when offer(1) => [commit(1, "/r/v1"), ok()] Ready, "";
    update_commit_drains_the_superseded_generation:
        [reload(), I(offer(1)), reload()] when offer(2) =>
        [commit(2, "/r/v1"), forget(1), stop(1, 10_000), ok()] Ready;
    reoffer_of_the_live_generation_commits_again:
        [reload(), I(offer(1))] when offer(1) => [commit(1, "/r/v1"), ok()] Ready;
    offer_of_a_superseded_candidate_is_refused:
        [reload(), reload()] when offer(1) => [err("generation 1 of k is fenced")] Starting;
    offer_after_the_start_deadline_cannot_commit:
        [reload(), I(Input::StartTimeout(1))] when offer(1) =>
        [err("generation 1 of k is fenced")] Starting;
    offer_of_an_unknown_generation_is_refused:
        [] when offer(9) => [err("generation 9 of k is fenced")] Starting;
    offer_after_auth_failure_cannot_commit:
        [reload(), I(report(1, ReportKind::AuthFailed, "401"))] when offer(1) =>
        [err("generation 1 of k is fenced")] AuthFailed;
    offer_after_stop_cannot_commit:
        [reload(), I(stop_input("uninstalled", 2000))] when offer(1) =>
        [err("generation 1 of k is fenced")] Stopped;
    commit_clears_the_last_error:
        [reload(), I(exited(1)), I(Input::Retry(2))] when offer(2) => [commit(2, "/r/v1"), ok()] Ready, "";

    // Refusals.
    refused_candidate_without_live_fails:
        [reload()] when refuse(1, "bad schema") =>
        [refuse_audit(1, "bad schema"), err("generation 1 refused: bad schema"), forget(1), stop(1, 0)] Failed,
        "generation 1 refused: bad schema";
    refused_candidate_beside_a_live_one_keeps_ready:
        [reload(), I(offer(1)), Table(true), reload()] when refuse(2, "bad") =>
        [refuse_audit(2, "bad"), err("generation 2 refused: bad"), forget(2), stop(2, 0)] Ready;
    refused_reoffer_of_the_live_generation_keeps_serving:
        [reload(), I(offer(1)), Table(true)] when refuse(1, "bad") =>
        [refuse_audit(1, "bad"), err("generation 1 refused: bad")] Ready, "generation 1 refused: bad";
    refused_upgrade_is_abandoned:
        [reload(), I(offer(1)), Table(true), Upgrade, reload()] when refuse(2, "bad") =>
        [refuse_audit(2, "bad"), err("generation 2 refused: bad"), forget(2), stop(2, 0),
         abandon("its tools were refused (bad)")] Ready;
    exit_of_a_refused_candidate_is_not_restarted:
        [reload(), I(refuse(1, "bad"))] when exited(1) => [forget(1)] Failed;

    // Exits and restarts.
    crash_of_a_ready_worker_fences_and_restarts_after_the_base_delay:
        [reload(), I(offer(1)), T(20_000)] when exited(1) =>
        [forget(1), fence(1, "worker exited"), retry_after(2, 100)] Restarting, EXIT;
    failed_start_restarts_after_the_base_delay:
        [reload()] when exited(1) => [forget(1), retry_after(2, 100)] Restarting, EXIT;
    second_failed_start_doubles_the_delay:
        [reload(), I(exited(1)), I(Input::Retry(2))] when exited(2) =>
        [forget(2), retry_after(3, 200)] Restarting;
    retry_spawns_with_status_restarting:
        [reload(), I(exited(1))] when Input::Retry(2) => [spawn(2), timer(2)] Restarting;
    stale_retry_is_ignored:
        [reload(), I(exited(1))] when Input::Retry(1) => [] Restarting;
    retry_while_a_candidate_runs_is_ignored:
        [reload(), I(exited(1)), reload()] when Input::Retry(2) => [] Restarting;
    retry_of_an_uninstalled_connector_does_nothing:
        [reload(), I(exited(1)), Gone] when Input::Retry(2) => [] Restarting;
    sixth_failed_start_in_a_minute_is_a_crash_loop:
        [reload(), I(exited(1)), I(Input::Retry(2)), I(exited(2)), I(Input::Retry(3)), I(exited(3)),
         I(Input::Retry(4)), I(exited(4)), I(Input::Retry(5)), I(exited(5)), I(Input::Retry(6))]
        when exited(6) => [forget(6), retry_after(7, 60_000)] CrashLoop;
    crash_loop_is_retried_after_a_minute:
        [reload(), I(exited(1)), I(Input::Retry(2)), I(exited(2)), I(Input::Retry(3)), I(exited(3)),
         I(Input::Retry(4)), I(exited(4)), I(Input::Retry(5)), I(exited(5)), I(Input::Retry(6)),
         I(exited(6))]
        when Input::Retry(7) => [spawn(7), timer(7)] Restarting;
    reload_retries_a_crash_loop_at_once:
        [reload(), I(exited(1)), I(Input::Retry(2)), I(exited(2)), I(Input::Retry(3)), I(exited(3)),
         I(Input::Retry(4)), I(exited(4)), I(Input::Retry(5)), I(exited(5)), I(Input::Retry(6)),
         I(exited(6))]
        when Input::Reload => [spawn(7), timer(7)] Restarting;
    ready_worker_that_ran_long_restarts_at_the_base_delay_again:
        [reload(), I(offer(1)), T(20_000), I(exited(1)), I(Input::Retry(2)), I(offer(2)), T(20_000)]
        when exited(2) => [forget(2), fence(2, "worker exited"), retry_after(3, 100)] Restarting;
    failed_start_after_a_crash_doubles:
        [reload(), I(offer(1)), T(20_000), I(exited(1)), I(Input::Retry(2))]
        when exited(2) => [forget(2), retry_after(3, 200)] Restarting;
    exit_of_an_unknown_generation_is_ignored:
        [] when exited(9) => [] Starting;
    exit_of_a_superseded_generation_is_only_revoked:
        [reload(), I(offer(1)), reload(), I(offer(2))] when exited(1) => [forget(1)] Ready;
    exit_of_a_candidate_beside_a_live_one_keeps_serving:
        [reload(), I(offer(1)), reload()] when exited(2) => [forget(2)] Ready,
        "new generation failed to start: worker exited (exit status: 1); see /state/logs/k.log";
    exit_after_stop_is_ignored:
        [reload(), I(stop_input("runtime shutdown", 10_000))] when exited(1) => [] Stopped;

    // Reports.
    start_failed_report_is_the_exit_reason:
        [reload(), I(report(1, ReportKind::StartFailed, "command not found"))] when exited(1) =>
        [forget(1), retry_after(2, 100)] Restarting, "command not found";
    upstream_exited_report_is_the_exit_reason:
        [reload(), I(offer(1)), T(20_000), I(report(1, ReportKind::UpstreamExited, "exit 3"))]
        when exited(1) => [forget(1), fence(1, "worker exited"), retry_after(2, 100)] Restarting, "exit 3";
    start_timeout_revokes_and_stops_the_candidate:
        [reload()] when Input::StartTimeout(1) => [forget(1), stop(1, 0)] Starting;
    start_timeout_of_a_superseded_candidate_is_ignored:
        [reload(), reload()] when Input::StartTimeout(1) => [] Starting;
    start_timeout_of_the_live_generation_is_ignored:
        [reload(), I(offer(1))] when Input::StartTimeout(1) => [] Ready;
    start_timeout_is_the_exit_reason:
        [reload(), I(Input::StartTimeout(1))] when exited(1) =>
        [forget(1), retry_after(2, 100)] Restarting,
        "upstream did not become ready within startMs = 1000 ms";
    auth_failure_fences_every_generation_and_stops_them:
        [reload(), I(offer(1)), reload()] when report(2, ReportKind::AuthFailed, "401 Unauthorized") =>
        [fence_all("upstream refused the credentials"), forget(1), stop(1, 2000), forget(2), stop(2, 2000)]
        AuthFailed, "401 Unauthorized; run `tutti connector connect k --from-env TOKEN` again";
    oauth_login_needed_fences_every_generation_and_asks_for_connect:
        [reload(), I(offer(1)), reload()] when report(2, ReportKind::AuthRequired, "the login expired (invalid_grant)") =>
        [fence_all("upstream refused the credentials"), forget(1), stop(1, 2000), forget(2), stop(2, 2000)]
        AuthRequired, "the login expired (invalid_grant); run `tutti connector connect k --from-env TOKEN` again";
    report_of_a_revoked_generation_changes_nothing:
        [reload(), I(offer(1)), reload(), I(offer(2))] when report(1, ReportKind::AuthRequired, "403") =>
        [] Ready;
    exit_after_oauth_login_needed_is_not_restarted:
        [reload(), I(report(1, ReportKind::AuthRequired, "403"))] when exited(1) => [forget(1)] AuthRequired;
    exit_after_auth_failure_is_not_restarted:
        [reload(), I(report(1, ReportKind::AuthFailed, "401"))] when exited(1) => [forget(1)] AuthFailed;
    auth_failure_of_an_upgrade_candidate_abandons_the_upgrade:
        [reload(), I(offer(1)), Upgrade, reload()] when report(2, ReportKind::AuthFailed, "401") =>
        [forget(2), stop(2, 0), abandon("its upstream refused the stored credentials (401)")] Ready;
    reload_after_auth_failure_starts_again_without_the_hint:
        [reload(), I(offer(1)), I(report(1, ReportKind::AuthFailed, "401"))] when Input::Reload =>
        [spawn(2), timer(2)] Starting, "";
    reinitialization_is_recorded_and_fences_nothing:
        [reload(), I(offer(1))] when report(1, ReportKind::UpstreamReinitialized, "session expired") =>
        [Effect::Audit(Event::Reinit { connector: KEY.into(), generation: 1, reason: "session expired".into() })] Ready;
    unavailable_upstream_fences_the_live_generation:
        [reload(), I(offer(1))] when report(1, ReportKind::UpstreamUnavailable, "503") =>
        [fence(1, "upstream unavailable: 503")] Ready;
    unavailable_candidate_is_not_fenced:
        [reload()] when report(1, ReportKind::UpstreamUnavailable, "503") => [] Starting;
    exit_after_unavailable_restarts_with_its_reason:
        [reload(), I(offer(1)), T(20_000), I(report(1, ReportKind::UpstreamUnavailable, "503"))] when exited(1) =>
        [forget(1), fence(1, "worker exited"), retry_after(2, 100)] Restarting, "upstream unavailable: 503";
    non_json_report_changes_nothing:
        [reload(), I(offer(1))] when report(1, ReportKind::NonJsonStdout, "") => [] Ready;
    unknown_report_changes_nothing:
        [reload(), I(offer(1))] when report(1, ReportKind::Other, "x") => [] Ready;

    // Upgrades.
    upgrade_commit_settles_and_drains_the_old_release:
        [reload(), I(offer(1)), Upgrade, reload()] when offer(2) =>
        [commit(2, "/r/v2"), forget(1), stop(1, 10_000), ok()] Ready;
    upgrade_candidate_that_never_starts_is_abandoned:
        [reload(), I(offer(1)), Upgrade, reload()] when exited(2) =>
        [forget(2), abandon(&format!("it did not start ({EXIT})"))] Ready;
    abandoned_upgrade_beside_a_live_release_only_notes_it:
        [reload(), I(offer(1)), Upgrade, reload(), I(exited(2)), Restored] when abandoned("upgrade to 2.0.0 not applied") =>
        [] Ready, "";
    abandoned_upgrade_without_a_live_release_starts_the_old_one:
        [Upgrade, reload(), I(exited(1)), Restored] when abandoned("upgrade to 2.0.0 not applied") =>
        [spawn(2), timer(2)] Starting, "";
    abandon_that_cannot_restore_retries_like_a_failed_start:
        [Upgrade, reload(), I(exited(1))] when Input::Abandoned { note: None, why: "gone".into() } =>
        [retry_after(2, 100)] Restarting, "gone";
    abandon_of_a_refused_upgrade_that_cannot_restore_stays_failed:
        [Upgrade, reload(), I(refuse(1, "bad"))] when Input::Abandoned { note: None, why: "gone".into() } =>
        [] Failed, "generation 1 refused: bad";
    upgrade_waiting_for_credentials_leaves_the_live_release_serving:
        [reload(), I(offer(1)), Waits] when Input::Reload => [] Ready;
    upgrade_waiting_for_credentials_stops_its_candidate:
        [reload(), I(offer(1)), Upgrade, reload(), Waits] when Input::Reload => [forget(2), stop(2, 0)] Ready;
    upgrade_waiting_for_credentials_without_a_live_release_requires_auth:
        [Waits] when Input::Reload => [fence_all("auth required")] AuthRequired;

    // Install, disconnect, stop.
    install_sets_starting:
        [] when Input::Install { auth_required: false, waits: false } => [] Starting;
    install_over_a_ready_connector_keeps_ready:
        [reload(), I(offer(1))] when Input::Install { auth_required: false, waits: false } => [] Ready;
    install_without_credentials_requires_auth:
        [reload(), I(offer(1))] when Input::Install { auth_required: true, waits: false } => [] AuthRequired;
    install_of_an_upgrade_waiting_for_credentials_keeps_ready:
        [reload(), I(offer(1))] when Input::Install { auth_required: true, waits: true } => [] Ready;
    install_over_a_crash_loop_says_starting:
        [reload(), I(exited(1))] when Input::Install { auth_required: false, waits: false } => [] Starting;
    disconnect_fences_at_once:
        [reload(), I(offer(1))] when Input::Disconnect => [fence_all("disconnected")] Ready;
    disconnect_then_reload_stops_the_workers:
        [reload(), I(offer(1)), I(Input::Disconnect), NoAuth] when Input::Reload =>
        [forget(1), fence_all("auth required"), stop(1, 2000)] AuthRequired;
    stop_fences_revokes_and_stops_everything:
        [reload(), I(offer(1))] when stop_input("uninstalled", 2000) =>
        [fence_all("uninstalled"), Effect::ForgetAll, Effect::StopAll { drain: Duration::from_secs(2) }] Stopped;
}

#[test]
fn a_committed_upgrade_clears_its_waiting_note() {
    let mut h = Harness::run(vec![reload(), I(offer(1)), Waits, reload()]);
    assert!(
        h.c.upgrade_note()
            .starts_with("upgrade to 2.0.0 waits for its credentials: needs TOKEN")
    );
    // `connect` stored the secret: the upgrade is routable now.
    if let Some(v) = h.installed.as_mut() {
        v.auth_ready = true;
        v.waits_for_secrets = false;
    }
    assert_eq!(h.input(Input::Reload), vec![spawn_of(2, "/r/v2"), timer(2)]);
    h.input(offer(2));
    assert_eq!(h.c.upgrade_note(), "");
}

#[test]
fn an_abandoned_upgrade_note_stays_until_the_next_install() {
    let mut h = Harness::run(vec![Upgrade, reload(), I(exited(1)), Restored]);
    h.input(abandoned("upgrade to 2.0.0 not applied: x"));
    h.input(offer(2));
    assert_eq!(h.c.upgrade_note(), "upgrade to 2.0.0 not applied: x");
    h.input(Input::Install {
        auth_required: false,
        waits: false,
    });
    assert_eq!(h.c.upgrade_note(), "");
}

#[test]
fn a_live_generation_that_exits_restarts_though_its_refused_reoffer_shows_failed() {
    // Generation 1 served; its upstream went away, which fenced its route, and its re-offer
    // was refused while the table did not serve it: the connector shows failed.
    let mut h = Harness::run(vec![
        reload(),
        I(offer(1)),
        I(report(1, ReportKind::UpstreamUnavailable, "503")),
        Table(false),
        I(refuse(1, "bad")),
    ]);
    assert_eq!(h.c.status(), Status::Failed);
    // A generation that served restarts like any crash when it exits (its candidate's offer
    // is checked again); only a candidate refused before it ever served stays failed.
    assert_eq!(
        h.input(exited(1)),
        vec![forget(1), fence(1, "worker exited"), retry_after(2, 100)]
    );
    assert_eq!(h.c.status(), Status::Restarting);
    assert_eq!(h.c.last_error(), "upstream unavailable: 503");
}

#[test]
fn an_upgrade_that_cannot_restore_beside_a_live_release_leaves_it_serving() {
    // Generation 1 of 1.0.0 serves; the upgrade's candidate exits before it offered.
    let mut h = Harness::run(vec![reload(), I(offer(1)), Upgrade, reload()]);
    assert_eq!(
        h.input(exited(2)),
        vec![forget(2), abandon(&format!("it did not start ({EXIT})"))]
    );
    // The release the upgrade replaced could not be restored in the registry: the live
    // generation goes on serving, so there is nothing to restart and no retry to show.
    let effects = h.input(Input::Abandoned {
        note: None,
        why: "gone".into(),
    });
    assert_eq!(effects, vec![]);
    assert_eq!(h.c.status(), Status::Ready);
    assert_eq!(h.c.next_retry_unix_ms(), 0);
    assert_eq!(h.c.restarts(), 0);
}

#[test]
fn restarts_are_counted_and_the_retry_time_shown_until_ready() {
    let mut h = Harness::run(vec![reload(), T(500)]);
    h.input(exited(1));
    assert_eq!(h.c.restarts(), 1);
    assert_eq!(h.c.next_retry_unix_ms(), 1_000_000 + 500 + 100);
    h.input(Input::Retry(2));
    h.input(offer(2));
    assert_eq!(h.c.next_retry_unix_ms(), 0);
    assert_eq!(h.c.restarts(), 1);
}

#[test]
fn reinitializations_are_counted() {
    let mut h = Harness::run(vec![reload(), I(offer(1))]);
    h.input(report(1, ReportKind::UpstreamReinitialized, "a"));
    h.input(report(1, ReportKind::UpstreamReinitialized, "b"));
    assert_eq!(h.c.reinitializations(), 2);
}

#[test]
fn a_worker_dying_right_after_every_start_ends_in_a_crash_loop() {
    let mut h = Harness::run(vec![reload()]);
    let mut epoch = 1;
    let mut g = 1;
    let mut last = Vec::new();
    for _ in 0..31 {
        h.input(offer(g));
        h.now += Duration::from_millis(200);
        last = h.input(exited(g));
        epoch += 1;
        if h.c.status() == Status::CrashLoop {
            break;
        }
        h.input(Input::Retry(epoch));
        g += 1;
    }
    assert_eq!(h.c.status(), Status::CrashLoop);
    assert_eq!(g, 31, "the 31st quick exit of a ready worker gives up");
    assert_eq!(last.last(), Some(&retry_after(epoch, 60_000)));
}

#[test]
fn a_crash_loop_and_a_quoted_stderr_line_say_where_to_look_next() {
    let mut h = Harness::run(vec![reload()]);
    for (g, epoch) in (1..=31).zip(2..) {
        h.input(offer(g));
        h.now += Duration::from_millis(200);
        h.input(exited(g));
        if h.c.status() == Status::CrashLoop {
            break;
        }
        h.input(Input::Retry(epoch));
    }
    assert_eq!(h.c.status(), Status::CrashLoop);
    assert!(
        h.c.last_error()
            .ends_with("; `tutti connector probe k` starts it once and shows why it fails"),
        "{}",
        h.c.last_error()
    );
    let quoted = super::connector::with_next_steps(
        KEY,
        "upstream did not start: exited (exit status: 1); stderr: npm error 404 Not Found - GET x"
            .into(),
        Status::Restarting,
    );
    assert!(
        quoted.ends_with("stderr: npm error 404 Not Found - GET x; `tutti logs k` has the rest"),
        "{quoted}"
    );
}

#[test]
fn an_unreadable_release_is_failed_with_its_reason() {
    let c = Connector::unreadable(KEY, "installed release is unreadable".into());
    assert_eq!(c.status(), Status::Failed);
    assert_eq!(c.last_error(), "installed release is unreadable");
}

#[test]
fn report_kinds_are_read_from_their_wire_names() {
    use tutti_proto::kernel::WorkerReportKind as Wire;
    for (wire, kind) in [
        (Wire::StartFailed, ReportKind::StartFailed),
        (Wire::UpstreamExited, ReportKind::UpstreamExited),
        (Wire::AuthFailed, ReportKind::AuthFailed),
        (
            Wire::UpstreamReinitialized,
            ReportKind::UpstreamReinitialized,
        ),
        (Wire::UpstreamUnavailable, ReportKind::UpstreamUnavailable),
        (Wire::NonJsonStdout, ReportKind::NonJsonStdout),
        (Wire::Unspecified, ReportKind::Other),
    ] {
        assert_eq!(ReportKind::from_wire(wire), kind, "{wire:?}");
    }
}

#[test]
fn the_auth_hint_names_missing_secrets_or_the_disconnect() {
    assert_eq!(
        auth_hint("k", &["A".into(), "B".into()]),
        "needs A, B; run `tutti connector connect k --from-env A --from-env B`"
    );
    assert_eq!(
        auth_hint("k", &[]),
        "disconnected; run `tutti connector connect k` to route it again"
    );
}

#[test]
fn only_the_fences_of_a_failing_connector_count_as_its_failures() {
    assert!(fence_is_failure(FENCE_WORKER_EXITED));
    assert!(fence_is_failure(&format!(
        "{FENCE_UPSTREAM_UNAVAILABLE}connection refused"
    )));
    for deliberate in [
        "uninstalled",
        "runtime shutdown",
        "disconnected",
        "upstream refused the credentials",
    ] {
        assert!(!fence_is_failure(deliberate), "{deliberate}");
    }
}

#[test]
fn each_status_has_its_spec_name() {
    let names = [
        (Status::Starting, "starting"),
        (Status::Ready, "ready"),
        (Status::Restarting, "restarting"),
        (Status::CrashLoop, "crash_loop"),
        (Status::AuthRequired, "auth_required"),
        (Status::AuthFailed, "auth_failed"),
        (Status::Failed, "failed"),
        (Status::Stopped, "stopped"),
    ];
    for (status, name) in names {
        assert_eq!(status.as_str(), name);
    }
    assert_eq!(
        Connector::new(KEY).restarts(),
        0,
        "a new connector never restarted"
    );
}

//! The console's confirmations page in a real browser (SPEC §12, §13): a high-risk call of a
//! `--confirm-via person` session shows up live with its arguments masked, and the page's
//! Allow once runs it; the upstream (the fixture records every message it gets) sees the call
//! only after that.

use std::time::Duration;

use serde_json::json;
use tutti_tests::confirm::{RiskyFixture, client_answer};

use super::{Console, click, shot, signed_in, wait_text};

const SECRET: &str = "tok-console-7d41b9";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_console_shows_a_waiting_call_masked_and_allow_once_runs_it() {
    let fx = RiskyFixture::start(Some(60_000));
    let token = fx.token_via("held", "person");
    let c = Console::start(&fx.rt);
    let (_driver, _profile, b) = signed_in(&c).await;
    let t = Duration::from_secs(20);
    b.goto(&c.url("/confirmations"))
        .await
        .unwrap_or_else(|e| panic!("goto: {e}"));
    wait_text(&b, "#confirmations", "No call waits", t).await;

    // The call arrives while the page is open: the page shows it without a reload.
    let arguments = json!({"path": "/srv/reports/q3.csv", "api_token": SECRET});
    let client = fx.spawn_client("legacy", &token, "accept", &arguments);
    let shown = wait_text(&b, ".confirmation", "fx_destroy", t).await;
    for part in [
        "connector fx",
        "w/held",
        "api_token",
        "***",
        "/srv/reports/q3.csv",
    ] {
        assert!(shown.contains(part), "the page shows {part}: {shown}");
    }
    let source = b.source().await.unwrap_or_default();
    assert!(
        !source.contains(SECRET),
        "the page never shows the secret value"
    );
    shot(&b, "confirmation-waiting").await;
    assert_eq!(fx.upstream_calls(), 0, "nothing is sent before Allow once");

    click(&b, "form.answer button[value=allow]").await;
    wait_text(&b, ".notice", "allowed", t).await;
    let ran = client_answer("accept", client);
    assert_ne!(ran["result"]["isError"], true, "{ran}");
    assert_eq!(fx.upstream_calls(), 1, "Allow once sent the call once");
    assert_eq!(fx.confirmation_states(2), ["pending", "allowed:person"]);
    let _ = b.close().await;
}

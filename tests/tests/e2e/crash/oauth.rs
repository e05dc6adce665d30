//! The OAuth records (SPEC §10) under kills: an OAuth connector behind a real authorization
//! server (oidc-provider, `tests/oauth/provider.mjs`) is installed, logged in (the kill lands
//! while the kernel exchanges the code and stores the login), disconnected and uninstalled
//! (while it revokes the tokens at the server and deletes them), at random moments. After each
//! kill and start: the invariants of `check.rs`, the stored login parses, and the connector is
//! `ready` exactly when it is connected with a usable login, wholly as before the command or
//! after it.
//!
//! `TUTTI_CRASH_OAUTH_ITERATIONS` sets the number of kills (default
//! [`DEFAULT_ITERATIONS`]); `TUTTI_CRASH_SEED` replays a sequence.

use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tutti_tests::oauth::{Browser, oauth_connector};
use tutti_tests::{Runtime, RuntimeOptions};

use super::check::{self, Came};
use super::{Outcome, Spans, Tally, command_killed, iterations, kill_after, restart_kernel};
use crate::oauth::{Login, Remote};
use tutti_tests::rng::Rng;

const KEY: &str = "remote";
/// Kills per run unless `TUTTI_CRASH_OAUTH_ITERATIONS` says otherwise.
const DEFAULT_ITERATIONS: usize = 30;

/// The connector as the test expects it; `None`: not installed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Conn {
    connected: bool,
    logged_in: bool,
}

type State = Option<Conn>;

#[derive(Clone, Copy, Debug)]
enum Op {
    Install,
    Login,
    Disconnect,
    Uninstall,
}

impl Op {
    fn pick(rng: &mut Rng, state: State) -> Op {
        match state {
            None => Op::Install,
            Some(c) if !c.logged_in => match rng.below(6) {
                0 => Op::Uninstall,
                1 if c.connected => Op::Disconnect,
                _ => Op::Login,
            },
            Some(_) => match rng.below(10) {
                0..=4 => Op::Disconnect,
                5..=7 => Op::Uninstall,
                _ => Op::Login,
            },
        }
    }

    fn kind(self) -> &'static str {
        match self {
            Op::Install => "install",
            Op::Login => "login",
            Op::Disconnect => "disconnect",
            Op::Uninstall => "uninstall",
        }
    }

    /// `connect` reconnects the connector first, then logs in (two kernel commands).
    fn between(self) -> Option<State> {
        matches!(self, Op::Login).then_some(Some(Conn {
            connected: true,
            logged_in: false,
        }))
    }

    fn apply(self, state: State) -> State {
        match self {
            Op::Install => Some(Conn {
                connected: true,
                logged_in: false,
            }),
            Op::Login => Some(Conn {
                connected: true,
                logged_in: true,
            }),
            Op::Disconnect => state.map(|_| Conn {
                connected: false,
                logged_in: false,
            }),
            Op::Uninstall => None,
        }
    }
}

/// A login as the user does it, the kernel killed `delay` after the browser was sent back
/// to `connect`'s callback (the kernel then exchanges the code and stores the login). The
/// login counts as acknowledged once the kernel answered `connect`'s completion.
async fn login_killed(rt: &mut Runtime, delay: Duration) -> Outcome {
    let login = Login::start(rt, KEY);
    let (mut login, url) = tokio::task::spawn_blocking(move || {
        let mut login = login;
        let url = login.url();
        (login, url)
    })
    .await
    .unwrap_or_else(|e| panic!("connect: {e}"));
    let callback = Browser::new().authorize(&url, "alice").await;
    let back = tokio::spawn(async move { Browser::new().get(&callback).await });
    // The kernel's part is done when `connect` says it waits for the connector to start:
    // from then on the login must survive.
    let done = format!("waiting for {KEY} to start");
    let out = tokio::task::block_in_place(|| {
        kill_after(rt, delay, || {
            if login.printed(&done) {
                Some(true)
            } else {
                login.ended().filter(|ok| !ok)
            }
        })
    });
    // The callback reaches `connect` whatever became of the kernel, so the command ends.
    let _ = tokio::time::timeout(Duration::from_secs(30), back).await;
    let (_, stdout, stderr) = tokio::task::spawn_blocking(move || login.finish())
        .await
        .unwrap_or_else(|e| panic!("connect: {e}"));
    assert!(
        !out.failed,
        "the login failed before the kill:\n{stdout}{stderr}"
    );
    out
}

/// Runs `op` and kills the kernel `delay` after it began.
async fn interrupt(rt: &mut Runtime, op: Op, release: &Path, delay: Duration) -> Outcome {
    let dir = release.to_string_lossy().into_owned();
    let args = match op {
        Op::Login => return login_killed(rt, delay).await,
        Op::Install => vec!["connector", "install", &dir, "--yes"],
        Op::Disconnect => vec!["connector", "disconnect", KEY],
        Op::Uninstall => vec!["connector", "uninstall", KEY],
    };
    tokio::task::block_in_place(|| command_killed(rt, &args, &[], delay))
}

/// Whether the stored login (`oauth:login` in the secrets file) is usable: it parses, has
/// an access token and is not marked for renewal.
fn logged_in(state: &Path) -> Result<bool, String> {
    let Some(stored) = check::stored(state, KEY)? else {
        return Ok(false);
    };
    let Some(text) = stored.get("oauth:login") else {
        return Ok(false);
    };
    let record: Value =
        serde_json::from_str(text).map_err(|e| format!("the stored login does not parse: {e}"))?;
    let token = &record["grant"]["credentials"]["token_response"]["access_token"];
    Ok(token.is_string() && record["needsLogin"] != json!(true))
}

/// The invariants after a start; the state now.
fn observe(rt: &Runtime) -> Result<State, String> {
    let found = check::state_dir(rt.state_dir())?;
    check::kernel_view(&rt.status_json(), &found)?;
    let Some(entry) = found.get(KEY) else {
        return Ok(None);
    };
    let logged_in = logged_in(rt.state_dir())?;
    if entry.ready != (entry.connected && logged_in) {
        return Err(format!(
            "auth ready {} but connected {} and logged in {logged_in}",
            entry.ready, entry.connected
        ));
    }
    Ok(Some(Conn {
        connected: entry.connected,
        logged_in,
    }))
}

#[tokio::test(flavor = "multi_thread")]
async fn oauth_records_survive_kills_during_login_disconnect_and_uninstall() {
    let iterations = iterations("TUTTI_CRASH_OAUTH_ITERATIONS", DEFAULT_ITERATIONS);
    let mut rng = Rng::seeded("TUTTI_CRASH_SEED", "OAuth crash loop");
    let mut rt = Runtime::start(RuntimeOptions::default());
    let remote = Remote::start(&rt, &["--ttl", "300"]);
    let release = rt.write_release(
        &oauth_connector(KEY, &remote.server.mcp_url, json!({})),
        &[],
    );
    let mut spans = Spans::new(&[
        ("install", 200),
        ("login", 300),
        ("disconnect", 300),
        ("uninstall", 300),
    ]);
    let (mut state, mut tally) = (None, Tally::default());
    let began = Instant::now();
    for i in 0..iterations {
        let op = Op::pick(&mut rng, state);
        let delay = spans.draw(op.kind(), &mut rng);
        let out = interrupt(&mut rt, op, &release, delay).await;
        if let Some(took) = out.took {
            spans.seen(op.kind(), took);
        }
        tokio::task::block_in_place(|| restart_kernel(&mut rt));
        let new = op.apply(state);
        let checked = tokio::task::block_in_place(|| {
            let now = observe(&rt)?;
            let between = op.between();
            let came = check::old_or_new(&now, &state, between.as_ref(), &new, out.acked)?;
            Ok::<_, String>((came, now))
        });
        let (came, now): (Came, State) =
            checked.unwrap_or_else(|e| super::kill_failed(&rt, i, &op, delay, out.acked, &e));
        tally.note(op.kind(), came, out.acked);
        state = now;
    }
    tally.print(
        "OAuth crash loop",
        iterations,
        began.elapsed(),
        &rt.log("kernel.log"),
    );
}

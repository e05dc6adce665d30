//! `Mcp-Session-Id`s derived from the token (SPEC §11): named by a legacy `initialize`, absent
//! on the modern surface, accepted on later POSTs and GET streams, 404 with another token or
//! after revocation; `DELETE` with an id ends that id's GET streams and nothing else; several
//! GET streams of one id each get every notification once.

use std::time::{Duration, Instant};

use serde_json::json;
use tutti_tests::{Mcp, Runtime, RuntimeOptions, SseStream};

use super::{AT_ONCE, READY, blocking, ends, list_changed};

/// The session id a legacy `initialize` of `mcp` answered with.
async fn session_of(mcp: &Mcp) -> String {
    mcp.initialize().await;
    mcp.session_id()
        .unwrap_or_else(|| panic!("a legacy initialize answered without Mcp-Session-Id"))
}

fn with_id(id: &str) -> [(String, String); 1] {
    [("Mcp-Session-Id".to_owned(), id.to_owned())]
}

/// `tools/list` with exactly `headers` (and the protocol version): its status.
async fn list_status(mcp: &Mcp, headers: &[(String, String)]) -> u16 {
    let mut all = vec![(
        "MCP-Protocol-Version".to_owned(),
        tutti_tests::LEGACY_VERSION.to_owned(),
    )];
    all.extend_from_slice(headers);
    let body = br#"{"jsonrpc":"2.0","id":7,"method":"tools/list"}"#.to_vec();
    mcp.post_raw(body, &all).await.0
}

/// Nothing arrives on `stream` for `quiet`, and it stays open meanwhile.
async fn stays_open(stream: &mut SseStream, quiet: Duration, what: &str) {
    let started = Instant::now();
    let event = stream.next_event(quiet).await;
    assert!(event.is_none(), "{what}: unexpected event {event:?}");
    assert!(
        started.elapsed() >= quiet.mul_f32(0.9),
        "{what}: the stream ended"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_id_is_named_at_legacy_initialize_and_refused_with_another_token_or_after_revocation()
 {
    let rt = blocking(|| Runtime::start(RuntimeOptions::default()));
    let (a, b) = blocking(|| (rt.issue_token("w", "a"), rt.issue_token("w", "b")));
    let url = rt.frontend_url().to_owned();
    let (mcp_a, mcp_b) = (Mcp::legacy(&url, &a), Mcp::legacy(&url, &b));
    let id_a = session_of(&mcp_a).await;
    assert!(id_a.len() >= 32, "{id_a}");
    assert!(id_a.bytes().all(|c| (0x21..=0x7e).contains(&c)), "{id_a}");
    assert_eq!(session_of(&mcp_a).await, id_a, "one token, one id");
    assert_ne!(session_of(&mcp_b).await, id_a, "another token, another id");
    // The modern surface has no sessions.
    let (status, headers, body) = Mcp::modern(&url, &a)
        .request("server/discover", json!({}))
        .await;
    assert_eq!(status, 200, "{body}");
    assert!(
        headers.get("mcp-session-id").is_none(),
        "modern: {headers:?}"
    );

    // Accepted on POST and GET with its own token.
    assert_eq!(list_status(&mcp_a, &with_id(&id_a)).await, 200);
    let mut stream = mcp_a.get_stream().await;
    assert_eq!(stream.status, 200, "GET with the session id");
    // Refused with another token (and a made-up id), on POST and GET.
    assert_eq!(list_status(&mcp_b, &with_id(&id_a)).await, 404);
    assert_eq!(list_status(&mcp_b, &with_id("made-up")).await, 404);
    let refused = mcp_b
        .get_stream_with(&[("Mcp-Session-Id", id_a.as_str())])
        .await;
    assert_eq!(refused.status, 404, "GET with another token's id");

    // After revocation the id is 404 (the session ended); the bare token is 401.
    blocking(|| rt.tutti_ok(&["session", "revoke", "--workspace", "w", "--session", "a"]));
    ends(&mut stream).await;
    assert_eq!(list_status(&mcp_a, &with_id(&id_a)).await, 404);
    let refused = mcp_a
        .get_stream_with(&[("Mcp-Session-Id", id_a.as_str())])
        .await;
    assert_eq!(refused.status, 404, "GET after revocation");
    assert_eq!(list_status(&mcp_a, &[]).await, 401);
    // The other token's session is untouched.
    let id_b = mcp_b.session_id().unwrap_or_default();
    assert_eq!(list_status(&mcp_b, &with_id(&id_b)).await, 200);
}

/// The `tools/list_changed` notifications `stream` gets within `window`.
async fn tool_changes(stream: &mut SseStream, window: Duration) -> usize {
    let deadline = Instant::now() + window;
    let mut seen = 0;
    while let Some(event) = stream
        .next_event(deadline.saturating_duration_since(Instant::now()))
        .await
    {
        if event["method"] == "notifications/tools/list_changed" {
            seen += 1;
        }
    }
    seen
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delete_ends_only_its_ids_get_streams_and_each_stream_of_an_id_hears_every_change_once() {
    let mut rt = blocking(|| Runtime::start(RuntimeOptions::default()));
    let (a, b) = blocking(|| (rt.issue_token("w", "a"), rt.issue_token("w", "b")));
    let url = rt.frontend_url().to_owned();
    let (mcp_a, mcp_b) = (Mcp::legacy(&url, &a), Mcp::legacy(&url, &b));
    let (id_a, id_b) = (session_of(&mcp_a).await, session_of(&mcp_b).await);
    let (mut first, mut second) = (mcp_a.get_stream().await, mcp_a.get_stream().await);
    let mut other = mcp_b.get_stream().await;
    assert_eq!((first.status, second.status, other.status), (200, 200, 200));

    // Two streams of one id: each hears the install exactly once.
    blocking(|| {
        rt.install_ok(
            &tutti_tests::fixture_connector("sx", &["--tools", "echo"]),
            &[],
        );
        rt.wait_status("sx", "ready", READY);
    });
    for (stream, what) in [
        (&mut first, "first"),
        (&mut second, "second"),
        (&mut other, "other"),
    ] {
        let heard = tool_changes(stream, Duration::from_millis(1500)).await;
        assert_eq!(
            heard, 1,
            "{what} stream: tools/list_changed once per install"
        );
    }

    // DELETE without an id stays 405; with another token's id 404; neither ends a stream.
    let delete = reqwest::Method::DELETE;
    assert_eq!(mcp_a.send_method(delete.clone(), &[]).await.0, 405);
    assert_eq!(
        mcp_a.send_method(delete.clone(), &with_id(&id_b)).await.0,
        404
    );
    stays_open(
        &mut first,
        Duration::from_millis(300),
        "after refused DELETEs",
    )
    .await;
    // DELETE with its id ends both of its streams, not the other token's.
    assert_eq!(mcp_a.send_method(delete, &with_id(&id_a)).await.0, 204);
    for stream in [&mut first, &mut second] {
        let took = ends(stream).await;
        assert!(
            took <= AT_ONCE,
            "a stream of the deleted id ended after {took:?}"
        );
    }
    stays_open(
        &mut other,
        Duration::from_millis(500),
        "the other token's stream",
    )
    .await;
    // The token stays valid, with the same id and a new stream.
    assert_eq!(list_status(&mcp_a, &with_id(&id_a)).await, 200);
    let mut again = mcp_a.get_stream().await;
    assert_eq!(again.status, 200);
    blocking(|| rt.tutti_ok(&["connector", "uninstall", "sx"]));
    list_changed(again.next_event(AT_ONCE).await, "an uninstall after DELETE");
    list_changed(
        other.next_event(AT_ONCE).await,
        "an uninstall (other token)",
    );
}

/// The kernel makes the key once per run: a frontend it restarts names the same ids, so a
/// client's session survives the restart.
#[cfg(unix)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_frontend_names_the_same_session_id() {
    let rt = blocking(|| Runtime::start(RuntimeOptions::default()));
    let token = blocking(|| rt.issue_token("w", "restart"));
    let mcp = Mcp::legacy(rt.frontend_url(), &token);
    let id = session_of(&mcp).await;
    let Some(pid) = rt.frontend_pid() else {
        panic!("no frontend pid\n{}", rt.diagnostics());
    };
    let _ = nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(i32::try_from(pid).unwrap_or(i32::MAX)),
        nix::sys::signal::Signal::SIGKILL,
    );
    let deadline = Instant::now() + READY;
    while rt.frontend_pid().is_none_or(|now| now == pid) {
        assert!(Instant::now() < deadline, "the frontend was not restarted");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // Waiting connections are served by the successor on the same port.
    assert_eq!(list_status(&mcp, &with_id(&id)).await, 200);
    assert_eq!(session_of(&mcp).await, id, "the restarted frontend's id");
}

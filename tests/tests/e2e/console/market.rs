//! The console's Install view over the connector market (SPEC §13, §17), over plain HTTP
//! against `tutti-registry-fixture`: search shows the entries (deprecated marked, deleted not
//! installable), staging shows the confirmation (source, resolved version, launch line,
//! SHA-256) with nothing installed, cancel discards the staged release, a change without its
//! page token changes nothing, a missing input says so, and confirming installs the remote,
//! which comes up ready.

use super::{Console, READY, get, input_value, post, sign_in};
use crate::market::market;
use tutti_tests::Runtime;

/// The staged release folders the kernel holds.
fn staged(rt: &Runtime) -> Vec<std::path::PathBuf> {
    std::fs::read_dir(rt.state_dir().join("staging"))
        .map(|d| d.flatten().map(|e| e.path()).collect())
        .unwrap_or_default()
}

/// The table row of a search hit, by its server name.
fn hit_row<'a>(page: &'a str, name: &str) -> &'a str {
    let marker = format!("data-name=\"{name}\"");
    page.split_once(&marker)
        .and_then(|(_, rest)| rest.split("</tr>").next())
        .unwrap_or_else(|| panic!("no search hit {name} in the page:\n{page}"))
}

/// Stages `source` (with `set`, one NAME=VALUE a line) from the Install view's source box.
async fn stage(c: &Console, cookie: &str, csrf: &str, source: &str, set: &str) -> (u16, String) {
    let fields = [("csrf", csrf), ("source", source), ("set", set)];
    post(c, cookie, "/install/stage", &fields).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn console_searches_the_market_and_installs_a_remote_only_once_confirmed() {
    let (rt, _registry, remote) = market();
    let c = Console::start(&rt);
    let cookie = sign_in(&c).await;
    let (status, found) = get(&c, &cookie, "/install?q=remote").await;
    assert_eq!(status, 200, "{found}");
    let fixture = hit_row(&found, "io.example/fixture-remote");
    for cell in ["1.1.0", "The test fixture over streamable HTTP", "active"] {
        assert!(fixture.contains(cell), "{cell} missing from {fixture}");
    }
    assert!(fixture.contains("value=\"registry:io.example/fixture-remote@1.1.0\""));
    assert!(hit_row(&found, "io.example/old-remote").contains("deprecated"));
    let gone = hit_row(&found, "io.example/gone-remote");
    assert!(
        gone.contains("deleted") && gone.contains("not installable") && !gone.contains("<form"),
        "a deleted entry offers no install: {gone}"
    );
    let csrf = input_value(&found, "csrf");

    let source = "registry:io.example/fixture-remote";
    let (status, refused) = stage(&c, &cookie, "", source, "").await;
    assert_eq!(status, 403, "staging without the page token: {refused}");
    assert!(staged(&rt).is_empty(), "a refused form stages nothing");

    let deleted = stage(&c, &cookie, &csrf, "registry:io.example/gone-remote", "").await;
    assert!((400..500).contains(&deleted.0), "{}", deleted.1);
    assert!(
        deleted
            .1
            .contains("is deleted in its registry and cannot be installed"),
        "{}",
        deleted.1
    );
    missing_input_then_cancel(&c, &cookie, &csrf, &rt, remote.port).await;
    confirm_install(&c, &cookie, &csrf, &rt, &remote.url).await;
}

/// A remote whose URL needs an input: without it one line says which; with it the
/// confirmation shows it, and cancel discards the staged release.
async fn missing_input_then_cancel(c: &Console, cookie: &str, csrf: &str, rt: &Runtime, port: u16) {
    let source = "registry:io.example/port-remote";
    let (status, missing) = stage(c, cookie, csrf, source, "").await;
    assert!((400..500).contains(&status), "{missing}");
    assert!(
        missing.contains("(variable port) needs a value: give it with --set port="),
        "{missing}"
    );
    assert!(staged(rt).is_empty(), "a refused stage leaves nothing");
    let (status, plan) = stage(c, cookie, csrf, source, &format!("port={port}")).await;
    assert_eq!(status, 200, "{plan}");
    assert!(
        plan.contains(&format!("http://127.0.0.1:{port}/mcp")),
        "the launch line has the input: {plan}"
    );
    assert_eq!(
        staged(rt).len(),
        1,
        "the confirmation holds one staged release"
    );
    let dir = input_value(&plan, "dir");
    let forged = post(c, cookie, "/install/discard", &[("dir", dir.as_str())]).await;
    assert_eq!(
        forged.0, 403,
        "a cancel without the page token: {}",
        forged.1
    );
    assert_eq!(staged(rt).len(), 1, "is refused and discards nothing");
    let cancel = [("csrf", csrf), ("dir", dir.as_str())];
    let (status, cancelled) = post(c, cookie, "/install/discard", &cancel).await;
    assert_eq!(status, 200, "{cancelled}");
    assert!(staged(rt).is_empty(), "cancel discards the staged release");
    assert!(rt.connector_status("port-remote").is_none());
}

/// Stages the fixture remote, checks its confirmation, refuses the confirm without the page
/// token, then installs it with the token: ready, and nothing left staged.
async fn confirm_install(c: &Console, cookie: &str, csrf: &str, rt: &Runtime, url: &str) {
    let (status, plan) = stage(c, cookie, csrf, "registry:io.example/fixture-remote", "").await;
    assert_eq!(status, 200, "{plan}");
    for line in [
        "source: registry fix: io.example/fixture-remote",
        "resolved version: 1.1.0",
        "artefacts: 0 (0 bytes)",
        "install scripts: refused",
    ] {
        assert!(
            plan.contains(line),
            "{line:?} missing from the confirmation:\n{plan}"
        );
    }
    assert!(
        plan.contains(&format!("<code id=\"launch-line\">{url}</code>")),
        "{plan}"
    );
    let sha = input_value(&plan, "sha256");
    assert!(
        plan.contains(&format!("<code id=\"sha256\">{sha}</code>")),
        "{plan}"
    );
    assert!(
        rt.connector_status("fixture-remote").is_none(),
        "nothing before the confirm"
    );
    let dir = input_value(&plan, "dir");
    let mut confirm = vec![
        ("dir", dir.as_str()),
        ("sha256", sha.as_str()),
        ("staged", "yes"),
    ];
    let (status, _) = post(c, cookie, "/install", &confirm).await;
    assert_eq!(status, 403, "a confirm without the page token is refused");
    assert!(
        rt.connector_status("fixture-remote").is_none(),
        "and installs nothing"
    );
    assert_eq!(
        staged(rt).len(),
        1,
        "and keeps the confirmation's staged release"
    );
    confirm.push(("csrf", csrf));
    let (status, done) = post(c, cookie, "/install", &confirm).await;
    assert_eq!(status, 200, "{done}");
    assert!(
        done.contains("fixture-remote installed at version 1.1.0"),
        "{done}"
    );
    rt.wait_status("fixture-remote", "ready", READY);
    assert!(
        staged(rt).is_empty(),
        "the installed staged release is removed"
    );
}

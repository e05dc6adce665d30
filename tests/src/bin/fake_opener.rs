//! `tutti-fake-opener`: stands in for the platform's opener (`xdg-open`, linked under that
//! name into a directory put first on `PATH`) and for the browser it would start.
//!
//! It appends one JSON line to the file named by `TUTTI_FAKE_OPENER_RECORD` at once: its
//! arguments (`argv`), and, when it got one readable file, the file's and its directory's
//! Unix modes (`fileMode`, `dirMode`). Then, as a browser would, it reads the page, follows
//! its meta refresh (checking the page's link leads to the same URL) and appends a second
//! line: for an OAuth authorization URL (one with a `redirect_uri`), the login and consent
//! pages done as user `alice` ([`tutti_tests::oauth::Browser`]) and the redirect to the
//! callback: `{"callbackStatus", "state", "code"}`; for any other URL one GET:
//! `{"status", "cookie"}` (whether a `tutti_console` cookie was set). Anything that goes wrong
//! is `{"error"}`. With `TUTTI_FAKE_OPENER_STAY` set it does not browse (`{"stayed": true}`):
//! a browser that never loads the page. Like a real opener it lives a moment (200 ms) even
//! when it is done at once.
#![forbid(unsafe_code)]

use std::io::Write as _;
use std::path::Path;
use std::time::Duration;

use serde_json::{Value, json};
use tutti_tests::oauth::{Browser, query_param};

fn main() {
    let Some(record) = std::env::var_os("TUTTI_FAKE_OPENER_RECORD") else {
        eprintln!("tutti-fake-opener: set TUTTI_FAKE_OPENER_RECORD to the record file");
        std::process::exit(2);
    };
    let record = Path::new(&record);
    let argv: Vec<String> = std::env::args().skip(1).collect();
    append(record, &opened(&argv));
    let outcome = match argv.as_slice() {
        _ if std::env::var_os("TUTTI_FAKE_OPENER_STAY").is_some() => json!({"stayed": true}),
        [page] => browse(Path::new(page)),
        _ => json!({"error": "expected one argument"}),
    };
    std::thread::sleep(Duration::from_millis(200));
    append(record, &outcome);
}

fn append(record: &Path, line: &Value) {
    let written = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(record)
        .and_then(|mut f| writeln!(f, "{line}"));
    if let Err(e) = written {
        eprintln!("tutti-fake-opener: cannot write {}: {e}", record.display());
    }
}

/// The first line: the arguments, and the modes of the file given (if it is one).
fn opened(argv: &[String]) -> Value {
    let mode = |p: &Path| -> Value {
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt as _;
            std::fs::symlink_metadata(p)
                .map(|m| json!(m.permissions().mode() & 0o777))
                .unwrap_or(Value::Null)
        }
        #[cfg(not(unix))]
        {
            let _ = p;
            Value::Null
        }
    };
    let file = argv.first().map(Path::new);
    json!({
        "argv": argv,
        "fileMode": file.map_or(Value::Null, mode),
        "dirMode": file.and_then(Path::parent).map_or(Value::Null, mode),
    })
}

fn browse(page: &Path) -> Value {
    let text = match std::fs::read_to_string(page) {
        Ok(text) => text,
        Err(e) => return json!({"error": format!("cannot read {}: {e}", page.display())}),
    };
    let refresh = attribute_after(&text, "content=\"0;url=");
    let link = attribute_after(&text, "<a href=\"");
    let Some(url) = refresh.filter(|r| Some(r) == link.as_ref()) else {
        return json!({"error": "the page has no meta refresh, or its link leads elsewhere"});
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build();
    match runtime {
        Ok(runtime) => runtime.block_on(follow(&url)),
        Err(e) => json!({"error": format!("no runtime: {e}")}),
    }
}

async fn follow(url: &str) -> Value {
    let mut browser = Browser::new();
    if query_param(url, "redirect_uri").is_some() {
        let callback = browser.authorize(url, "alice").await;
        let (status, _) = browser.get(&callback).await;
        return json!({
            "callbackStatus": status,
            "state": query_param(url, "state"),
            "code": query_param(&callback, "code"),
        });
    }
    let response = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .map(|client| client.get(url).send());
    let response = match response {
        Ok(sending) => sending.await,
        Err(e) => return json!({"error": e.to_string()}),
    };
    match response {
        Ok(r) => json!({
            "status": r.status().as_u16(),
            "cookie": r.headers().get_all(reqwest::header::SET_COOKIE).iter().any(|v| {
                v.to_str().is_ok_and(|v| v.starts_with("tutti_console="))
            }),
        }),
        Err(e) => json!({"error": e.to_string()}),
    }
}

/// The HTML attribute value that starts right after `prefix` (up to the next `"`), unescaped.
fn attribute_after(page: &str, prefix: &str) -> Option<String> {
    let start = page.find(prefix)? + prefix.len();
    let value = &page[start..start + page[start..].find('"')?];
    Some(
        value
            .replace("&quot;", "\"")
            .replace("&#39;", "'")
            .replace("&lt;", "<")
            .replace("&gt;", ">")
            .replace("&amp;", "&"),
    )
}

//! The hand-off to the browser puts nothing secret on any command line: `tutti console` and
//! `tutti connector connect KEY` of an OAuth connector give the opener the path of a private
//! page under the state dir, never the URL holding the console's login token or the login's
//! `state`; and the OAuth login's callback listener cannot be ended by a forged request or
//! stalled by a silent one.
//!
//! The opener is `tutti-fake-opener`, linked as `xdg-open` into a directory put first on
//! `PATH`: it records its argv and the page's modes, then acts as the browser. An
//! [`ArgvWatch`] reads every process's `/proc/<pid>/cmdline` throughout. Linux only (the
//! opener's name and `/proc`). Needs `cargo build --workspace --bins`, and for the OAuth tests
//! `scripts/install-test-tools` (Node 22 and oidc-provider).
#![cfg(target_os = "linux")]

use std::io::{BufRead, BufReader, Read as _};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tutti_tests::argv_watch::ArgvWatch;
use tutti_tests::oauth::{Browser, OAuthServer, oauth_connector, query_param};
use tutti_tests::{FixtureHttp, Runtime, RuntimeOptions, bin};

const READY: Duration = Duration::from_secs(60);

/// `tutti-fake-opener` as `xdg-open`, first on `PATH`, and the file it records to.
struct FakeOpener {
    path_dir: PathBuf,
    record: PathBuf,
}

impl FakeOpener {
    fn install(rt: &Runtime) -> FakeOpener {
        let path_dir = rt.root().join("opener-path");
        std::fs::create_dir_all(&path_dir).unwrap_or_else(|e| panic!("{e}"));
        std::os::unix::fs::symlink(bin("tutti-fake-opener"), path_dir.join("xdg-open"))
            .unwrap_or_else(|e| panic!("cannot link the fake opener: {e}"));
        FakeOpener {
            path_dir,
            record: rt.root().join("opener.jsonl"),
        }
    }

    /// Puts the fake opener first on `PATH` of `cmd`; `follow`: it also acts as the browser.
    fn on<'c>(&self, cmd: &'c mut Command, follow: bool) -> &'c mut Command {
        let path = std::env::var("PATH").unwrap_or_default();
        cmd.env("PATH", format!("{}:{path}", self.path_dir.display()))
            .env("TUTTI_FAKE_OPENER_RECORD", &self.record);
        if !follow {
            cmd.env("TUTTI_FAKE_OPENER_STAY", "1");
        }
        cmd
    }

    /// The first `n` lines recorded (waiting for them up to [`READY`]).
    fn lines(&self, n: usize) -> Vec<Value> {
        let deadline = Instant::now() + READY;
        let read = || -> Vec<Value> {
            let text = std::fs::read_to_string(&self.record).unwrap_or_default();
            text.lines()
                .filter_map(|l| serde_json::from_str(l).ok())
                .collect()
        };
        let mut lines = read();
        while lines.len() < n && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(50));
            lines = read();
        }
        assert!(lines.len() >= n, "the opener recorded only {lines:?}");
        lines
    }
}

/// The opener got one argument, the path of a page under `<state>/run/`, a 0600 file in a
/// 0700 directory. Returns the page's path.
fn assert_private_page(rt: &Runtime, opened: &Value) -> PathBuf {
    let argv: Vec<&str> = opened["argv"]
        .as_array()
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let run = rt.state_dir().join("run");
    assert!(
        argv.len() == 1 && Path::new(argv[0]).starts_with(&run),
        "the opener got {argv:?}, not one path under {}",
        run.display()
    );
    assert_eq!(
        opened["fileMode"],
        json!(0o600),
        "the page's mode: {opened}"
    );
    assert_eq!(
        opened["dirMode"],
        json!(0o700),
        "its directory's mode: {opened}"
    );
    PathBuf::from(argv[0])
}

/// Pages left in the directory of `page`.
fn pages_left(page: &Path) -> Vec<PathBuf> {
    let dir = page.parent().unwrap_or(page);
    std::fs::read_dir(dir)
        .map(|d| d.filter_map(Result::ok).map(|e| e.path()).collect())
        .unwrap_or_default()
}

fn wait_removed(page: &Path, within: Duration) {
    let deadline = Instant::now() + within;
    while page.exists() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(!page.exists(), "{} is still there", page.display());
}

/// A child process killed when the test ends.
struct Running(Child);

impl Running {
    fn interrupt(&mut self) -> Option<std::process::ExitStatus> {
        use nix::sys::signal::{Signal, kill};
        let _ = kill(
            nix::unistd::Pid::from_raw(self.0.id() as i32),
            Signal::SIGINT,
        );
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Ok(Some(status)) = self.0.try_wait() {
                return Some(status);
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        None
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `tutti console` (opening the browser) and the login URL it printed.
fn console(rt: &Runtime, opener: &FakeOpener, follow: bool) -> (Running, String) {
    let mut cmd = rt.tutti_cmd(&["console"]);
    let child = opener
        .on(&mut cmd, follow)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start `tutti console`: {e}"));
    let mut running = Running(child);
    let stdout = running.0.stdout.take();
    let mut lines = BufReader::new(stdout.unwrap_or_else(|| panic!("no stdout"))).lines();
    let login = lines
        .find_map(|l| l.ok()?.strip_prefix("Console: ").map(str::to_owned))
        .unwrap_or_else(|| panic!("`tutti console` printed no login URL"));
    std::thread::spawn(move || lines.for_each(drop));
    (running, login)
}

#[tokio::test(flavor = "multi_thread")]
async fn the_console_login_reaches_the_browser_as_a_private_page_never_on_an_argv() {
    let rt = Runtime::start(RuntimeOptions::default());
    let opener = FakeOpener::install(&rt);
    let watch = ArgvWatch::start();

    // An opener that only records: the page stays until the console ends.
    let (mut unused, login) = console(&rt, &opener, false);
    let first = opener.lines(2);
    let token = |url: &str| query_param(url, "token").unwrap_or_default();
    watch.assert_never_held(&[("console's login token", &token(&login))]);
    let page = assert_private_page(&rt, &first[0]);
    let html = std::fs::read_to_string(&page).unwrap_or_default();
    assert!(html.contains("http-equiv=\"refresh\""), "{html}");
    assert_eq!(first[1], json!({"stayed": true}));
    assert!(
        unused.interrupt().is_some(),
        "the console did not end on Ctrl-C"
    );
    assert!(!page.exists(), "the page outlived the console");

    // An opener that acts as the browser: it signs in, and the page goes.
    let (mut used, login2) = console(&rt, &opener, true);
    let lines = opener.lines(4);
    let page2 = assert_private_page(&rt, &lines[2]);
    assert_eq!(
        lines[3],
        json!({"status": 303, "cookie": true}),
        "the browser's sign-in through the page"
    );
    wait_removed(&page2, Duration::from_secs(5));
    let again = Browser::new().get(&login2).await;
    assert_eq!(
        again.0, 401,
        "the browser did not use this login URL: {}",
        again.1
    );
    assert!(
        used.interrupt().is_some(),
        "the console did not end on Ctrl-C"
    );
    assert_eq!(pages_left(&page2), Vec::<PathBuf>::new());

    watch.assert_never_held(&[
        ("console's login token", &token(&login)),
        ("second console's login token", &token(&login2)),
    ]);
}

/// The fixture MCP server behind the OAuth server of `provider.mjs`, and an OAuth connector
/// `remote` for it, waiting for its login.
fn oauth_remote(rt: &mut Runtime) -> (OAuthServer, FixtureHttp) {
    let fixture = FixtureHttp::start(&["--tools", "echo"]);
    let upstream = format!("http://127.0.0.1:{}/mcp", fixture.port);
    let server = OAuthServer::start(&upstream, &[], &[], &rt.root().join("provider.stderr"));
    rt.install_ok(&oauth_connector("remote", &server.mcp_url, json!({})), &[]);
    rt.wait_status("remote", "auth_required", READY);
    (server, fixture)
}

#[tokio::test(flavor = "multi_thread")]
async fn an_oauth_login_reaches_the_browser_as_a_private_page_never_on_an_argv() {
    let mut rt = Runtime::start(RuntimeOptions::default());
    let (_server, _fixture) = oauth_remote(&mut rt);
    let opener = FakeOpener::install(&rt);
    let watch = ArgvWatch::start();

    let (stdout, stderr) = (
        rt.root().join("connect.stdout"),
        rt.root().join("connect.stderr"),
    );
    let file = |p: &Path| std::fs::File::create(p).unwrap_or_else(|e| panic!("{e}"));
    let mut cmd = rt.tutti_cmd(&["connector", "connect", "remote", "--json"]);
    let child = opener
        .on(&mut cmd, true)
        .stdout(file(&stdout))
        .stderr(file(&stderr))
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run tutti connector connect: {e}"));
    let mut login = Running(child);
    let lines = opener.lines(2);
    let page = assert_private_page(&rt, &lines[0]);
    let status = login.0.wait().unwrap_or_else(|e| panic!("{e}"));
    let read = |p: &Path| std::fs::read_to_string(p).unwrap_or_default();
    let (stdout, stderr) = (read(&stdout), read(&stderr));
    assert!(
        status.success(),
        "connect failed: {stdout}{stderr}\n{lines:?}"
    );
    assert_eq!(
        serde_json::from_str::<Value>(stdout.trim()).unwrap_or_default(),
        json!({"key": "remote", "status": "ready"}),
        "{stdout}"
    );
    assert!(
        stderr.contains("opened the login page of remote in your browser"),
        "{stderr}"
    );
    assert_eq!(lines[1]["callbackStatus"], 200, "{}", lines[1]);
    assert!(!page.exists(), "the page outlived the login");
    assert_eq!(pages_left(&page), Vec::<PathBuf>::new());

    let field = |name: &str| lines[1][name].as_str().unwrap_or_default().to_owned();
    watch.assert_never_held(&[
        ("login's state", &field("state")),
        ("authorization code", &field("code")),
    ]);
}

/// Lines of a child's stderr as they come.
fn stderr_lines(child: &mut Child) -> mpsc::Receiver<String> {
    let stderr = child.stderr.take().unwrap_or_else(|| panic!("no stderr"));
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        BufReader::new(stderr)
            .lines()
            .map_while(Result::ok)
            .try_for_each(|l| tx.send(l))
    });
    rx
}

/// Reads `lines` until one `pick` accepts (within [`READY`]).
fn next_line<T>(lines: &mpsc::Receiver<String>, pick: impl Fn(&str) -> Option<T>) -> T {
    let deadline = Instant::now() + READY;
    loop {
        let line = lines
            .recv_timeout(deadline.saturating_duration_since(Instant::now()))
            .unwrap_or_else(|e| panic!("connect said no more ({e})"));
        if let Some(found) = pick(&line) {
            return found;
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn the_callback_ignores_a_forged_state_and_is_not_stalled_by_a_silent_connection() {
    let mut rt = Runtime::start(RuntimeOptions::default());
    let (_server, _fixture) = oauth_remote(&mut rt);
    let child = rt
        .tutti_cmd(&["connector", "connect", "remote", "--no-browser", "--json"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run tutti connector connect: {e}"));
    let mut login = Running(child);
    let lines = stderr_lines(&mut login.0);
    // --no-browser: the URL is printed for the person.
    let url = next_line(&lines, |l| l.starts_with("http").then(|| l.to_owned()));
    let port: u16 = next_line(&lines, |l| {
        l.strip_prefix("waiting for the login on 127.0.0.1:")?
            .split(' ')
            .next()?
            .parse()
            .ok()
    });

    // A silent connection first; a forged redirect is answered at once and ignored.
    let mut silent = TcpStream::connect(("127.0.0.1", port)).unwrap_or_else(|e| panic!("{e}"));
    let forged = format!("http://127.0.0.1:{port}/callback?code=forged&state=forged");
    let started = Instant::now();
    let (status, page) = Browser::new().get(&forged).await;
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "the forged request waited {:?} behind a silent connection",
        started.elapsed()
    );
    assert_eq!((status, page.contains("ignored")), (400, true), "{page}");
    // The silent connection is closed within its 5 s bound; the login goes on waiting.
    let _ = silent.set_read_timeout(Some(Duration::from_secs(15)));
    let closed = silent.read(&mut [0u8; 64]);
    assert!(
        matches!(closed, Ok(0)) && started.elapsed() < Duration::from_secs(9),
        "the silent connection: {closed:?} after {:?}",
        started.elapsed()
    );
    assert!(matches!(login.0.try_wait(), Ok(None)), "the login ended");

    // The real redirect, with another connection silent all along, completes the login.
    let _held = TcpStream::connect(("127.0.0.1", port)).unwrap_or_else(|e| panic!("{e}"));
    let callback = Browser::new().authorize(&url, "alice").await;
    let started = Instant::now();
    let (status, page) = Browser::new().get(&callback).await;
    assert_eq!(status, 200, "{page}");
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );
    let mut stdout = String::new();
    if let Some(mut out) = login.0.stdout.take() {
        let _ = out.read_to_string(&mut stdout);
    }
    let status = login.0.wait().unwrap_or_else(|e| panic!("{e}"));
    assert!(status.success(), "connect failed: {stdout}");
    assert_eq!(
        serde_json::from_str::<Value>(stdout.trim()).unwrap_or_default(),
        json!({"key": "remote", "status": "ready"})
    );
}

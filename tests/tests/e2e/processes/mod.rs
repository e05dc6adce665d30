//! The kernel (generations, fencing, supervision, sessions, lifecycle), end to end over
//! the real binaries and the fixture server's fault modes: chaos with worker SIGKILLs,
//! orphans (uninstall, worker SIGKILL, kernel SIGKILL), crash loop, atomic update with a
//! drained old generation, refused candidates, token revocation, a kernel SIGKILL followed
//! by `tutti up` on the same state dir, a supervised frontend keeping its port, and calls in
//! flight when their worker or upstream dies.
//!
//! The chaos test prints its random seed; rerun a sequence with `TUTTI_CHAOS_SEED=<n>`.

mod hardening;
mod idle;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde_json::{Value, json};
use tutti_tests::rng::Rng;
use tutti_tests::{Mcp, Runtime, RuntimeOptions, proc_tree};

const READY: Duration = Duration::from_secs(20);
/// A test-only secret value (never a real credential).
const SECRET: &str = "fixture-secret-value-42";

// ---------------------------------------------------------------------------------------
// helpers

fn tool_names(tools: &[Value]) -> Vec<String> {
    tools
        .iter()
        .filter_map(|t| t["name"].as_str().map(str::to_owned))
        .collect()
}

/// The JSON a fixture tool put in its first text content (`whoami`: `{"pid","ppid",…}`).
fn text_json(result: &Value) -> Value {
    let text = result["content"][0]["text"].as_str().unwrap_or("");
    serde_json::from_str(text).unwrap_or(Value::Null)
}

/// The fixture's "who answered" JSON of a `whoami` result, a `prompts/get` result or a
/// `resources/read` result.
fn who_answered(result: &Value) -> Value {
    let text = [
        &result["content"][0]["text"],
        &result["messages"][0]["content"]["text"],
        &result["contents"][0]["text"],
    ]
    .into_iter()
    .find_map(Value::as_str)
    .unwrap_or("");
    serde_json::from_str(text).unwrap_or(Value::Null)
}

fn generation(entry: &Value) -> u64 {
    entry["generation"].as_u64().unwrap_or(0)
}

/// Calls `tool` and returns the fixture's `whoami` answer; panics on anything else.
async fn whoami(mcp: &Mcp, tool: &str) -> Value {
    let result = mcp.call_tool_ok(tool, json!({})).await;
    let who = text_json(&result);
    assert!(who["pid"].as_u64().is_some(), "{tool}: {result}");
    who
}

#[cfg(unix)]
fn sigkill(pid: u32) {
    signal(pid, nix::sys::signal::Signal::SIGKILL);
}

/// Sends `sig` to `pid`; a process that is already gone is not an error here.
#[cfg(unix)]
fn signal(pid: u32, sig: nix::sys::signal::Signal) {
    if let Ok(p) = i32::try_from(pid) {
        let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(p), sig);
    }
}

#[cfg(not(unix))]
fn sigkill(pid: u32) {
    panic!("this test sends SIGKILL (to pid {pid}): Unix only");
}

/// Unix ms of an RFC 3339 UTC timestamp `YYYY-MM-DDTHH:MM:SS[.fff]Z`.
fn rfc3339_ms(s: &str) -> Option<i64> {
    let s = s.strip_suffix('Z')?;
    let (date, time) = s.split_once('T')?;
    let mut d = date.split('-').map(|p| p.parse::<i64>().ok());
    let (y, m, day) = (d.next()??, d.next()??, d.next()??);
    let (hms, frac) = time.split_once('.').unwrap_or((time, "0"));
    let mut t = hms.split(':').map(|p| p.parse::<i64>().ok());
    let (hh, mm, ss) = (t.next()??, t.next()??, t.next()??);
    let ms: i64 = format!("{frac:0<3}").get(..3)?.parse().ok()?;
    // Days from civil (Howard Hinnant).
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    Some(((days * 24 + hh) * 60 + mm) * 60_000 + ss * 1000 + ms)
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

#[test]
fn rfc3339_parser_matches_known_instants() {
    assert_eq!(rfc3339_ms("1970-01-01T00:00:00.000Z"), Some(0));
    assert_eq!(rfc3339_ms("2000-03-01T00:00:01.5Z"), Some(951_868_801_500));
    assert_eq!(
        rfc3339_ms("2026-11-29T15:18:30.100Z"),
        Some(1_795_965_510_100)
    );
    assert_eq!(rfc3339_ms("not a date"), None);
}

// ---------------------------------------------------------------------------------------
// chaos

const CHAOS_RUN: Duration = Duration::from_secs(20);
/// A call to an instant tool that takes longer than this is a hang.
const CALL_LIMIT: Duration = Duration::from_secs(5);
const CHAOS_KEYS: [&str; 2] = ["ca", "cb"];

#[derive(Debug)]
enum Outcome {
    /// `whoami` answered: the upstream's pid and its parent (the worker).
    Who {
        pid: u32,
        ppid: u32,
    },
    Echo(String),
    RpcError {
        code: i64,
        message: String,
    },
    Http {
        status: u16,
        body: String,
    },
    Hang,
}

#[derive(Debug)]
struct Call {
    key: &'static str,
    tool: String,
    start: Instant,
    end: Instant,
    outcome: Outcome,
}

#[derive(Clone, Debug)]
struct Kill {
    pid: u32,
    key: String,
    generation: u64,
    /// Taken after the process was seen dead: any call that started later cannot have
    /// been answered by it.
    dead_at: Instant,
}

/// What one chaos call's reply means: no answer in time, an error, an echo, or who answered.
fn outcome_of(
    reply: Result<(u16, reqwest::header::HeaderMap, Value), tokio::time::error::Elapsed>,
    echo: bool,
) -> Outcome {
    match reply {
        Err(_) => Outcome::Hang,
        Ok((200, _, body)) => {
            if let Some(err) = body.get("error") {
                Outcome::RpcError {
                    code: err["code"].as_i64().unwrap_or(0),
                    message: err["message"].as_str().unwrap_or("").to_owned(),
                }
            } else if echo {
                Outcome::Echo(
                    body["result"]["content"][0]["text"]
                        .as_str()
                        .unwrap_or("")
                        .to_owned(),
                )
            } else {
                let who = who_answered(&body["result"]);
                match (who["pid"].as_u64(), who["ppid"].as_u64()) {
                    (Some(pid), Some(ppid)) => Outcome::Who {
                        pid: pid as u32,
                        ppid: ppid as u32,
                    },
                    _ => Outcome::Http {
                        status: 200,
                        body: body.to_string(),
                    },
                }
            }
        }
        Ok((status, _, body)) => Outcome::Http {
            status,
            body: body.to_string(),
        },
    }
}

async fn chaos_client(url: String, token: String, n: usize, until: Instant) -> Vec<Call> {
    let mcp = Mcp::legacy(&url, &token);
    mcp.initialize().await;
    let mut calls = Vec::new();
    let mut i = n;
    while Instant::now() < until {
        i += 1;
        let key = CHAOS_KEYS[i % 2];
        let echo = i.is_multiple_of(5);
        // Prompts/get and resources/read are fenced like tools/call; the fixture's
        // answers name the upstream's pid and parent like `whoami`.
        let beyond = match i % 5 {
            1 => Some(("prompts/get", json!({"name": format!("{key}_hello")}))),
            3 => Some(("resources/read", json!({"uri": format!("{key}://doc")}))),
            _ => None,
        };
        let tool = match (&beyond, echo) {
            (Some((method, params)), _) => format!("{method} {params}"),
            (None, true) => format!("{key}_echo"),
            (None, false) => format!("{key}_whoami"),
        };
        let message = format!("c{n}-{i}");
        let args = if echo {
            json!({"message": message})
        } else {
            json!({})
        };
        let start = Instant::now();
        let reply = match beyond {
            Some((method, params)) => {
                tokio::time::timeout(CALL_LIMIT, mcp.request(method, params)).await
            }
            None => tokio::time::timeout(CALL_LIMIT, mcp.call_tool(&tool, args)).await,
        };
        let end = Instant::now();
        let outcome = outcome_of(reply, echo);
        if let Outcome::Echo(text) = &outcome {
            assert_eq!(text, &message, "echo answered another call's message");
        }
        calls.push(Call {
            key,
            tool,
            start,
            end,
            outcome,
        });
    }
    calls
}

/// The chaos connectors, each with tools, a prompt and a resource, ready.
fn install_chaos_connectors(rt: &mut Runtime) {
    for key in CHAOS_KEYS {
        let doc = format!("{key}://doc");
        let mut m = rt.private_fixture_connector(
            key,
            &[
                "--tools",
                "whoami,echo",
                "--prompt",
                "hello",
                "--resource",
                &doc,
            ],
        );
        m["timeouts"] = json!({"callMs": 30000});
        rt.install_ok(&m, &[]);
    }
    for key in CHAOS_KEYS {
        rt.wait_status(key, "ready", READY);
    }
}

/// Records every worker pid seen in `state` with its key and generation, every 20 ms, until
/// `scanning` is cleared.
fn scan_workers(
    state: std::path::PathBuf,
    seen: Arc<Mutex<HashMap<u32, (String, u64)>>>,
    scanning: Arc<AtomicBool>,
) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        while scanning.load(Ordering::Relaxed) {
            let ws = Runtime::workers_in(&state);
            if let Ok(mut m) = seen.lock() {
                for w in ws {
                    m.entry(w.pid).or_insert((w.key, w.generation));
                }
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    })
}

/// SIGKILLs a random worker every 0.7 to 1.3 s until `until`; each kill, once the process is gone.
fn kill_random_workers(
    rt: &Runtime,
    seen: &Mutex<HashMap<u32, (String, u64)>>,
    until: Instant,
) -> Vec<Kill> {
    let mut rng = Rng::seeded("TUTTI_CHAOS_SEED", "chaos");
    let mut kills: Vec<Kill> = Vec::new();
    loop {
        let pause = Duration::from_millis(700 + rng.below(600));
        if Instant::now() + pause >= until {
            break;
        }
        std::thread::sleep(pause);
        let workers = rt.workers();
        if workers.is_empty() {
            continue;
        }
        let victim = workers[rng.below(workers.len() as u64) as usize].clone();
        if let Ok(mut m) = seen.lock() {
            m.entry(victim.pid)
                .or_insert((victim.key.clone(), victim.generation));
        }
        sigkill(victim.pid);
        let survivors = proc_tree::wait_gone(&[victim.pid], Duration::from_secs(2));
        assert!(
            survivors.is_empty(),
            "SIGKILL did not end worker {victim:?}"
        );
        kills.push(Kill {
            pid: victim.pid,
            key: victim.key,
            generation: victim.generation,
            dead_at: Instant::now(),
        });
    }
    kills
}

/// Upstreams of killed workers were swept with them, and nothing is left after the stop.
fn assert_nothing_left(
    rt: &mut Runtime,
    kills: &[Kill],
    upstream_pids: &BTreeMap<u32, u32>,
    seen: &HashMap<u32, (String, u64)>,
) {
    let killed: BTreeSet<u32> = kills.iter().map(|k| k.pid).collect();
    let orphans: Vec<u32> = upstream_pids
        .iter()
        .filter(|(_, ppid)| killed.contains(ppid))
        .map(|(pid, _)| *pid)
        .collect();
    let left = proc_tree::wait_gone(&orphans, Duration::from_secs(3));
    assert!(
        left.is_empty(),
        "upstreams of killed workers are still alive:\n{}",
        proc_tree::describe(&left)
    );

    // No orphan at the end.
    let set = rt.process_set();
    let status = rt
        .stop()
        .unwrap_or_else(|| panic!("`tutti up` could not be waited for"));
    assert!(
        status.success(),
        "`tutti up` exited with {status} after SIGTERM"
    );
    let mut everything: Vec<u32> = set;
    everything.extend(upstream_pids.keys());
    everything.extend(seen.keys());
    let left = proc_tree::wait_gone(&everything, Duration::from_secs(5));
    assert!(
        left.is_empty() && rt.process_set().is_empty(),
        "left behind after the stop:\n{}\n{}",
        proc_tree::describe(&left),
        proc_tree::describe(&rt.process_set())
    );
}

/// What the chaos calls came to: the problems found, the answers, the error classes, the
/// slowest call, and which upstream pid (with its parent) answered.
#[derive(Default)]
struct Verdicts {
    problems: Vec<String>,
    answered: usize,
    errors: BTreeMap<String, usize>,
    slowest: Duration,
    upstream_pids: BTreeMap<u32, u32>,
}

/// Judges every call: no hang, no HTTP error, only "unavailable" errors, every answer from a
/// worker of the called connector that was not killed before the call started.
fn judge(
    calls: &[Call],
    seen: &HashMap<u32, (String, u64)>,
    kills: &[Kill],
    start: Instant,
) -> Verdicts {
    let mut v = Verdicts::default();
    for c in calls {
        v.slowest = v.slowest.max(c.end - c.start);
        match &c.outcome {
            Outcome::Hang => v.problems.push(format!(
                "{} did not return within {CALL_LIMIT:?} (started {:?} into the run)",
                c.tool,
                c.start - start
            )),
            Outcome::Http { status, body } => v
                .problems
                .push(format!("{}: HTTP {status}: {body}", c.tool)),
            Outcome::RpcError { code, message } => {
                let unavailable = *code == -32603 && message.starts_with("[MCP_UNAVAILABLE]");
                let gone = *code == -32602 && message.contains("not available");
                if !(unavailable || gone) {
                    v.problems.push(format!(
                        "{}: unexpected JSON-RPC error {code} {message}",
                        c.tool
                    ));
                }
                let class = message.split(':').next().unwrap_or("").to_owned();
                *v.errors.entry(format!("{code} {class}")).or_default() += 1;
            }
            Outcome::Echo(_) => v.answered += 1,
            Outcome::Who { pid, ppid } => {
                v.answered += 1;
                v.upstream_pids.insert(*pid, *ppid);
                let Some((key, generation)) = seen.get(ppid) else {
                    v.problems.push(format!(
                        "{} was v.answered by pid {pid} whose parent {ppid} is not a worker of this runtime",
                        c.tool
                    ));
                    continue;
                };
                if key != c.key {
                    v.problems.push(format!(
                        "{} was v.answered by a worker of {key} (generation {generation})",
                        c.tool
                    ));
                }
                for k in kills
                    .iter()
                    .filter(|k| k.key == c.key && k.dead_at < c.start)
                {
                    if k.generation >= *generation {
                        v.problems.push(format!(
                            "{} started {:?} after generation {} (pid {}) was killed, yet generation {generation} (worker {ppid}) v.answered it",
                            c.tool,
                            c.start - k.dead_at,
                            k.generation,
                            k.pid
                        ));
                    }
                }
            }
        }
    }
    v
}

/// Lists the tools until every chaos tool is back (at most 10 s after the last kill): the time.
async fn wait_every_tool_listed(
    rt: &Runtime,
    url: &str,
    token: &str,
    last_kill: Instant,
) -> Instant {
    let all_tools: Vec<String> = {
        let mut v: Vec<String> = CHAOS_KEYS
            .iter()
            .flat_map(|k| [format!("{k}_echo"), format!("{k}_whoami")])
            .collect();
        v.sort();
        v
    };
    let lister = Mcp::legacy(url, token);
    lister.initialize().await;
    loop {
        let names = {
            let mut n = tool_names(&lister.list_tools().await);
            n.sort();
            n
        };
        if names == all_tools {
            break Instant::now();
        }
        assert!(
            last_kill.elapsed() < Duration::from_secs(10),
            "tools never came back after the last kill; listed {names:?}\nstatus: {}\n{}",
            rt.status_json(),
            rt.diagnostics()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Every call the chaos clients made.
async fn calls_of(clients: Vec<tokio::task::JoinHandle<Vec<Call>>>) -> Vec<Call> {
    let mut calls = Vec::new();
    for c in clients {
        calls.extend(
            c.await
                .unwrap_or_else(|e| panic!("a chaos client panicked: {e}")),
        );
    }
    calls
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn chaos_worker_kills_never_hang_misroute_or_outlive_their_fence() {
    let mut rt = Runtime::start(RuntimeOptions::default());
    install_chaos_connectors(&mut rt);

    let token = rt.issue_token("chaos", "clients");
    let url = rt.frontend_url().to_owned();
    let start = Instant::now();
    let until = start + CHAOS_RUN;
    let clients: Vec<_> = (0..4)
        .map(|n| tokio::spawn(chaos_client(url.clone(), token.clone(), n, until)))
        .collect();

    // Every worker pid ever seen -> (key, generation), sampled every 20 ms until the
    // clients are done.
    let seen: Arc<Mutex<HashMap<u32, (String, u64)>>> = Arc::default();
    let scanning = Arc::new(AtomicBool::new(true));
    let scanner = scan_workers(rt.state_dir().to_path_buf(), seen.clone(), scanning.clone());

    // The killer runs here, on the test's own thread (the clients run on tokio's workers).
    let kills = kill_random_workers(&rt, &seen, until);

    let last_kill = kills.last().map(|k| k.dead_at).unwrap_or(start);

    let back = wait_every_tool_listed(&rt, &url, &token, last_kill).await;
    let recovery = back.saturating_duration_since(last_kill);

    let calls = calls_of(clients).await;
    scanning.store(false, Ordering::Relaxed);
    let _ = scanner.join();
    let seen: HashMap<u32, (String, u64)> = seen.lock().map(|m| m.clone()).unwrap_or_default();

    // --- verdicts ---
    let Verdicts {
        problems,
        answered,
        errors,
        slowest,
        upstream_pids,
    } = judge(&calls, &seen, &kills, start);
    eprintln!(
        "chaos: {} calls, {answered} answered, errors {errors:?}, {} kills, slowest call {slowest:?}, recovery {recovery:?}",
        calls.len(),
        kills.len()
    );
    assert!(
        problems.is_empty(),
        "{} problem(s) in {} calls, e.g.:\n{}\n{}",
        problems.len(),
        calls.len(),
        problems
            .iter()
            .take(15)
            .cloned()
            .collect::<Vec<_>>()
            .join("\n"),
        rt.diagnostics()
    );
    assert!(
        kills.len() >= 12,
        "only {} kills in {CHAOS_RUN:?}",
        kills.len()
    );
    assert!(
        answered >= 200,
        "only {answered} of {} calls were answered: the run proves little",
        calls.len()
    );
    assert!(
        recovery <= Duration::from_secs(2),
        "all tools were back only {recovery:?} after the last kill (limit 2 s)\nstatus: {}",
        rt.status_json()
    );
    for key in CHAOS_KEYS {
        let entry = rt.connector_status(key).unwrap_or(Value::Null);
        assert_eq!(entry["status"], json!("ready"), "{entry}");
    }

    assert_nothing_left(&mut rt, &kills, &upstream_pids, &seen);
}

// ---------------------------------------------------------------------------------------
// orphans

/// A connector whose upstream is a shell wrapper around the private fixture, which spawns a
/// grandchild (`--grandchild`), as `npx` does: worker → sh → fixture → sleeper.
fn wrapped_grandchild_connector(rt: &Runtime, key: &str) -> (Value, Vec<u8>) {
    let script = format!(
        "#!/bin/sh\n# npx-like wrapper: stays the parent of the real server\n\"{}\" --grandchild --tools whoami,echo\n",
        rt.private_fixture().display()
    );
    let manifest = json!({
        "key": key,
        "name": format!("Wrapped {key}"),
        "description": "Fixture behind a shell wrapper that starts a grandchild",
        "version": "1.0.0",
        "mcp": {"transport": "stdio", "command": "${release}/wrapper.sh", "args": []},
    });
    (manifest, script.into_bytes())
}

fn install_wrapped(rt: &mut Runtime, key: &str) {
    let (manifest, script) = wrapped_grandchild_connector(rt, key);
    rt.install_ok(&manifest, &[("wrapper.sh", &script)]);
    rt.wait_status(key, "ready", READY);
}

/// The worker of `key` and its whole tree (wrapper, fixture, grandchild), checked against
/// the fixture's own `whoami`.
async fn upstream_tree(rt: &Runtime, mcp: &Mcp, key: &str) -> Vec<u32> {
    let workers: Vec<_> = rt.workers().into_iter().filter(|w| w.key == key).collect();
    assert_eq!(workers.len(), 1, "one worker of {key}: {workers:?}");
    let worker = workers[0].pid;
    let who = whoami(mcp, &format!("{key}_whoami")).await;
    let mut tree = vec![worker];
    tree.extend(proc_tree::descendants(worker));
    for field in ["pid", "ppid", "grandchild"] {
        let pid = who[field].as_u64().unwrap_or(0) as u32;
        assert!(
            tree.contains(&pid),
            "whoami {field} {pid} is not below worker {worker}: {who}\n{}",
            proc_tree::describe(&tree)
        );
    }
    // worker, sh, fixture, grandchild
    assert!(tree.len() >= 4, "tree: {}", proc_tree::describe(&tree));
    tree
}

fn assert_gone(what: &str, tree: &[u32]) {
    let left = proc_tree::wait_gone(tree, Duration::from_secs(5));
    assert!(
        left.is_empty(),
        "{what}: part of the upstream tree is still alive 5 s later:\n{}",
        proc_tree::describe(&left)
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn no_orphans_after_uninstall_or_worker_sigkill() {
    let mut rt = Runtime::start(RuntimeOptions::default());
    install_wrapped(&mut rt, "gone");
    install_wrapped(&mut rt, "hit");
    let token = rt.issue_token("orphans", "s");
    let mcp = Mcp::legacy(rt.frontend_url(), &token);
    mcp.initialize().await;

    // Uninstall.
    let tree = upstream_tree(&rt, &mcp, "gone").await;
    rt.tutti_ok(&["connector", "uninstall", "gone"]);
    assert_gone("after `tutti connector uninstall`", &tree);
    assert!(rt.connector_status("gone").is_none());

    // Worker SIGKILL: the tree goes, a new generation comes back with a new tree.
    let before = rt.wait_status("hit", "ready", READY);
    let tree = upstream_tree(&rt, &mcp, "hit").await;
    sigkill(tree[0]);
    assert_gone("after SIGKILL of the worker", &tree);
    let after = rt.wait_connector("hit", READY, "a new ready generation", |c| {
        c["status"] == "ready" && generation(c) > generation(&before)
    });
    let fresh = upstream_tree(&rt, &mcp, "hit").await;
    assert!(fresh.iter().all(|p| !tree.contains(p)), "{after}");

    // And nothing else of the runtime is left after a clean stop.
    let set = rt.process_set();
    assert!(rt.stop().is_some_and(|s| s.success()));
    assert_gone("after SIGTERM to `tutti up`", &set);
}

#[tokio::test(flavor = "multi_thread")]
async fn no_orphans_after_kernel_sigkill() {
    let mut rt = Runtime::start(RuntimeOptions::default());
    install_wrapped(&mut rt, "deep");
    let token = rt.issue_token("orphans", "k");
    let mcp = Mcp::legacy(rt.frontend_url(), &token);
    mcp.initialize().await;
    let tree = upstream_tree(&rt, &mcp, "deep").await;
    let set = rt.process_set();
    assert!(tree.iter().all(|p| set.contains(p)));
    rt.kill();
    let left = proc_tree::wait_gone(&set, Duration::from_secs(5));
    assert!(
        left.is_empty(),
        "after SIGKILL of the kernel these processes of its tree are still alive 5 s later \
         (workers get PDEATHSIG=SIGTERM and must take their process group down):\n{}",
        proc_tree::describe(&left)
    );
}

// ---------------------------------------------------------------------------------------
// crash loop

/// Calls `good_echo` every 20 ms until `stop`: how many answered right, and what failed.
async fn echo_until_stopped(
    url: String,
    token: String,
    stop: Arc<AtomicBool>,
) -> (usize, Vec<String>) {
    let mcp = Mcp::legacy(&url, &token);
    mcp.initialize().await;
    let mut ok = 0usize;
    let mut failures = Vec::new();
    let mut i = 0u64;
    while !stop.load(Ordering::Relaxed) {
        i += 1;
        let message = format!("still here {i}");
        let reply = tokio::time::timeout(
            CALL_LIMIT,
            mcp.call_tool("good_echo", json!({"message": message})),
        )
        .await;
        match reply {
            Ok((200, _, body)) if body["result"]["content"][0]["text"] == json!(message) => ok += 1,
            Ok((status, _, body)) => failures.push(format!("HTTP {status}: {body}")),
            Err(_) => failures.push("timed out".to_owned()),
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    (ok, failures)
}

#[tokio::test(flavor = "multi_thread")]
async fn crash_loop_is_reported_while_other_connectors_keep_working() {
    let mut rt = Runtime::start(RuntimeOptions::default());
    rt.install_ok(
        &rt.private_fixture_connector("good", &["--tools", "echo"]),
        &[],
    );
    rt.wait_status("good", "ready", READY);
    let good_generation = generation(&rt.connector_status("good").unwrap_or(Value::Null));
    let token = rt.issue_token("crash", "s");
    let url = rt.frontend_url().to_owned();

    let stop = Arc::new(AtomicBool::new(false));
    let caller = tokio::spawn(echo_until_stopped(url, token, stop.clone()));

    let started = Instant::now();
    rt.install_ok(
        &rt.private_fixture_connector("crashy", &["--crash-at-start"]),
        &[],
    );
    let entry = rt.wait_status("crashy", "crash_loop", Duration::from_secs(20));
    let took = started.elapsed();
    // Give the caller some time with the crash loop in place, too.
    tokio::time::sleep(Duration::from_millis(500)).await;
    stop.store(true, Ordering::Relaxed);
    let (ok, failures) = caller
        .await
        .unwrap_or_else(|e| panic!("the caller panicked: {e}"));

    eprintln!("crash loop after {took:?}: {entry}");
    let last_error = entry["lastError"].as_str().unwrap_or("");
    assert!(
        !last_error.is_empty(),
        "crash_loop without lastError: {entry}"
    );
    assert!(
        entry["restarts"].as_u64().is_some_and(|r| r >= 5),
        "crash_loop before 5 restarts: {entry}"
    );
    assert_eq!(entry["generation"], Value::Null, "nothing is live: {entry}");
    let next = entry["nextRetryAt"]
        .as_str()
        .and_then(rfc3339_ms)
        .unwrap_or_else(|| panic!("crash_loop without a parsable nextRetryAt: {entry}"));
    let now = now_ms();
    assert!(
        next > now && next <= now + 61_000,
        "nextRetryAt {} is not within the next minute: {entry}",
        entry["nextRetryAt"]
    );
    // The other connector kept answering, throughout.
    assert!(
        failures.is_empty(),
        "{} calls to the healthy connector failed during the crash loop, e.g. {:?}",
        failures.len(),
        failures.first()
    );
    assert!(ok >= 20, "only {ok} calls to the healthy connector");
    let good = rt.connector_status("good").unwrap_or(Value::Null);
    assert_eq!(good["status"], json!("ready"), "{good}");
    assert_eq!(generation(&good), good_generation, "{good}");
    // No worker of the crashing connector is left running in crash_loop.
    assert!(
        rt.workers().iter().all(|w| w.key != "crashy"),
        "{:?}",
        rt.workers()
    );
}

// ---------------------------------------------------------------------------------------
// atomic update

/// Lists the tools again and again until `stop`: every listing seen.
async fn list_until_stopped(url: String, token: String, stop: Arc<AtomicBool>) -> Vec<Vec<Value>> {
    let mcp = Mcp::legacy(&url, &token);
    mcp.initialize().await;
    let mut lists: Vec<Vec<Value>> = Vec::new();
    while !stop.load(Ordering::Relaxed) {
        lists.push(mcp.list_tools().await);
    }
    lists
}

/// Every listing shows exactly one release's tools of `upd` (never a mix), never an older one
/// after a newer one, other connectors' tools throughout, and every release at least once.
fn assert_each_list_one_release_in_order(lists: &[Vec<Value>], releases: &[&[&str]; 3]) {
    let mut stage = 0usize;
    let mut seen_stage = [0usize; 3];
    for (i, tools) in lists.iter().enumerate() {
        for t in tools {
            let name = t["name"].as_str().unwrap_or("");
            let (key, upstream) = name.split_once('_').unwrap_or(("", ""));
            assert_eq!(t["_meta"]["tutti/connector"], json!(key), "list {i}: {t}");
            assert_eq!(
                t["_meta"]["tutti/upstreamName"],
                json!(upstream),
                "list {i}: {t}"
            );
        }
        let names = tool_names(tools);
        assert!(
            names.contains(&"other_echo".to_owned()),
            "list {i} lost another connector's tool: {names:?}"
        );
        let mut upd: Vec<&str> = names
            .iter()
            .map(String::as_str)
            .filter(|n| n.starts_with("upd_"))
            .collect();
        upd.sort_unstable();
        let Some(s) = releases.iter().position(|r| *r == upd.as_slice()) else {
            panic!(
                "list {i} of {} shows upd's tools {upd:?}: missing or mixing generations \
                 (valid sets: {releases:?})",
                lists.len()
            );
        };
        assert!(
            s >= stage,
            "list {i} went back from release {stage} to release {s}: {upd:?}"
        );
        stage = s;
        seen_stage[s] += 1;
    }
    eprintln!(
        "atomic update: {} lists, per release {seen_stage:?}",
        lists.len()
    );
    assert!(
        seen_stage.iter().all(|n| *n > 0),
        "the lister did not see every release: {seen_stage:?}"
    );
}

/// Only the new generation's worker stays: the old one drains (the 2 s call) and
/// exits then, not at the end of the kernel's 10 s grace period.
async fn wait_only_the_new_worker(rt: &Runtime, last: u64) {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let upd: Vec<_> = rt
            .workers()
            .into_iter()
            .filter(|w| w.key == "upd")
            .collect();
        if upd.len() == 1 && upd[0].generation == last {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the old worker did not exit within 5 s of the upgrade although its calls \
             were drained: {upd:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn upgrades_switch_the_tool_set_atomically_and_drain_the_old_generation() {
    let mut rt = Runtime::start(RuntimeOptions::default());
    rt.install_ok(
        &rt.private_fixture_connector("other", &["--tools", "echo"]),
        &[],
    );
    rt.install_ok(
        &rt.private_fixture_connector("upd", &["--tools", "echo,add,sleep"]),
        &[],
    );
    rt.wait_status("other", "ready", READY);
    let first = rt.wait_status("upd", "ready", READY);
    let token = rt.issue_token("atomic", "s");
    let url = rt.frontend_url().to_owned();

    let releases: [&[&str]; 3] = [
        &["upd_add", "upd_echo", "upd_sleep"],
        &["upd_echo", "upd_whoami"],
        &["upd_add", "upd_echo"],
    ];

    let stop = Arc::new(AtomicBool::new(false));
    let lister = tokio::spawn(list_until_stopped(url.clone(), token.clone(), stop.clone()));

    // A call in flight on the first generation when the upgrade commits: it finishes.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let in_flight = {
        let (url, token) = (url.clone(), token.clone());
        tokio::spawn(async move {
            let mcp = Mcp::legacy(&url, &token);
            let started = Instant::now();
            let reply = mcp.call_tool("upd_sleep", json!({"ms": 2000})).await;
            (reply, started.elapsed())
        })
    };
    tokio::time::sleep(Duration::from_millis(200)).await;

    let mut last = generation(&first);
    for (args, expected) in [("echo,whoami", releases[1]), ("echo,add", releases[2])] {
        rt.install_ok(
            &rt.private_fixture_connector("upd", &["--tools", args]),
            &[],
        );
        let entry = rt.wait_connector("upd", READY, "the new generation", |c| {
            c["status"] == "ready" && generation(c) > last
        });
        last = generation(&entry);
        assert_eq!(
            entry["toolCount"].as_u64(),
            Some(expected.len() as u64),
            "{entry}"
        );
        wait_only_the_new_worker(&rt, last).await;
        // Let the lister see this release for a while.
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    stop.store(true, Ordering::Relaxed);
    let lists = lister
        .await
        .unwrap_or_else(|e| panic!("the lister panicked: {e}"));

    assert_each_list_one_release_in_order(&lists, &releases);
    let ((status, _, body), took) = in_flight
        .await
        .unwrap_or_else(|e| panic!("the in-flight call panicked: {e}"));
    assert!(
        status == 200 && body.get("result").is_some() && body["result"]["isError"] != json!(true),
        "a call in flight on the old generation must finish when an upgrade commits \
         (HTTP {status} after {took:?}): {body}"
    );
    assert!(took >= Duration::from_millis(2000), "{took:?}: {body}");
}

// ---------------------------------------------------------------------------------------
// refused candidates

/// The refused release never became the current one: the registry names the live release,
/// so neither a worker crash nor a kernel restart brings the refused one back.
fn assert_registry_names_the_live_release(rt: &Runtime) {
    let registry: Value = serde_json::from_slice(
        &std::fs::read(rt.state_dir().join("registry.json")).expect("registry.json"),
    )
    .expect("registry.json parses");
    let entry = &registry["connectors"]["cand"];
    assert!(entry.get("previous").is_none(), "{entry}");
    let current: Value = serde_json::from_slice(
        &std::fs::read(
            std::path::Path::new(entry["releaseDir"].as_str().unwrap_or_default())
                .join("connector.json"),
        )
        .expect("the current release's connector.json"),
    )
    .expect("connector.json parses");
    assert_eq!(
        current["mcp"]["args"],
        json!(["--tools", "echo"]),
        "the registry's current release is not the live one: {entry}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_refused_candidate_leaves_the_live_generation_and_says_why() {
    let mut rt = Runtime::start(RuntimeOptions::default());
    rt.install_ok(
        &rt.private_fixture_connector("cand", &["--tools", "echo"]),
        &[],
    );
    let live = rt.wait_status("cand", "ready", READY);
    let token = rt.issue_token("cand", "s");
    let mcp = Mcp::legacy(rt.frontend_url(), &token);
    mcp.initialize().await;

    for (flag, needles) in [
        ("--collide", &["a_b", "a.b"][..]),
        ("--bad-schema", &["bad_schema", "inputSchema"][..]),
    ] {
        rt.install_ok(
            &rt.private_fixture_connector("cand", &["--tools", "echo", flag]),
            &[],
        );
        // The candidate ran and was refused: status names the reason.
        let entry = rt.wait_connector("cand", READY, &format!("lastError for {flag}"), |c| {
            c["lastError"]
                .as_str()
                .is_some_and(|e| e.contains(needles[0]))
        });
        let error = entry["lastError"].as_str().unwrap_or("");
        assert!(
            needles.iter().all(|n| error.contains(n)),
            "{flag}: lastError must name the reason ({needles:?}): {entry}"
        );
        assert_eq!(entry["status"], json!("ready"), "{flag}: {entry}");
        assert_eq!(generation(&entry), generation(&live), "{flag}: {entry}");
        // Settle: the refused worker stops; the reason stays; the old generation serves.
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let ws: Vec<_> = rt
                .workers()
                .into_iter()
                .filter(|w| w.key == "cand")
                .collect();
            if ws.len() == 1 && ws[0].generation == generation(&live) {
                break;
            }
            assert!(Instant::now() < deadline, "{flag}: workers {ws:?}");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
        let settled = rt.connector_status("cand").unwrap_or(Value::Null);
        let error = settled["lastError"].as_str().unwrap_or("");
        assert!(
            needles.iter().all(|n| error.contains(n)),
            "{flag}: the refusal reason was replaced once the candidate stopped: {settled}"
        );
        assert_eq!(settled["status"], json!("ready"), "{flag}: {settled}");
        assert_eq!(generation(&settled), generation(&live), "{flag}: {settled}");
        assert_eq!(tool_names(&mcp.list_tools().await), ["cand_echo"], "{flag}");
        let echo = mcp
            .call_tool_ok("cand_echo", json!({"message": flag}))
            .await;
        assert_eq!(echo["content"][0]["text"], json!(flag));
    }

    assert_registry_names_the_live_release(&rt);
    let worker = rt
        .workers()
        .into_iter()
        .find(|w| w.key == "cand")
        .expect("cand's worker");
    sigkill(worker.pid);
    let back = rt.wait_connector("cand", READY, "a new generation after the crash", |c| {
        c["status"] == json!("ready") && generation(c) > worker.generation
    });
    assert_eq!(back["toolCount"], json!(1), "{back}");
    assert_eq!(tool_names(&mcp.list_tools().await), ["cand_echo"]);
    rt.stop();
    rt.restart();
    let after = rt.wait_status("cand", "ready", READY);
    assert_eq!(after["toolCount"], json!(1), "{after}");
}

/// The live worker crashes just as an upgrade is installed (so, most often, nothing is live
/// when the upgrade's tools are refused): the release the upgrade replaced comes back.
#[tokio::test(flavor = "multi_thread")]
async fn a_refused_upgrade_during_a_crash_brings_the_previous_release_back() {
    let mut rt = Runtime::start(RuntimeOptions::default());
    rt.install_ok(
        &rt.private_fixture_connector("back", &["--tools", "echo"]),
        &[],
    );
    let live = rt.wait_status("back", "ready", READY);
    let worker = rt
        .workers()
        .into_iter()
        .find(|w| w.key == "back")
        .expect("back's worker");
    rt.install_ok(
        &rt.private_fixture_connector("back", &["--tools", "echo", "--collide"]),
        &[],
    );
    sigkill(worker.pid);
    let entry = rt.wait_connector("back", READY, "the previous release back", |c| {
        c["status"] == json!("ready")
            && generation(c) > worker.generation
            && c["lastError"]
                .as_str()
                .is_some_and(|e| e.contains("not applied"))
    });
    assert!(generation(&entry) > generation(&live), "{entry}");
    assert_eq!(entry["toolCount"], json!(1), "{entry}");
    let mcp = Mcp::legacy(rt.frontend_url(), &rt.issue_token("back", "s2"));
    mcp.initialize().await;
    assert_eq!(tool_names(&mcp.list_tools().await), ["back_echo"]);
}

/// Right after a kernel restart the current release has not committed yet in this kernel's
/// life; an upgrade installed then still falls back to it (the fallback is read from the
/// registry, not from what this kernel has seen commit).
#[tokio::test(flavor = "multi_thread")]
async fn an_upgrade_right_after_a_restart_still_falls_back() {
    let mut rt = Runtime::start(RuntimeOptions::default());
    rt.install_ok(
        &rt.private_fixture_connector("early", &["--tools", "echo"]),
        &[],
    );
    rt.wait_status("early", "ready", READY);
    rt.stop();
    rt.restart();
    rt.install_ok(
        &rt.private_fixture_connector("early", &["--tools", "echo", "--collide"]),
        &[],
    );
    let entry = rt.wait_connector("early", READY, "back on the first release", |c| {
        c["status"] == json!("ready")
            && c["toolCount"] == json!(1)
            && c["lastError"]
                .as_str()
                .is_some_and(|e| e.contains("not applied"))
    });
    let registry: Value = serde_json::from_slice(
        &std::fs::read(rt.state_dir().join("registry.json")).expect("registry.json"),
    )
    .expect("registry.json parses");
    let current = &registry["connectors"]["early"];
    assert!(current.get("previous").is_none(), "{current}");
    let manifest: Value = serde_json::from_slice(
        &std::fs::read(
            std::path::Path::new(current["releaseDir"].as_str().unwrap_or_default())
                .join("connector.json"),
        )
        .expect("connector.json"),
    )
    .expect("connector.json parses");
    assert_eq!(
        manifest["mcp"]["args"],
        json!(["--tools", "echo"]),
        "{entry}"
    );
}

/// An upgrade that declares a secret not stored yet waits for it while the release it
/// replaces goes on serving; `connect` then lets it commit.
#[tokio::test(flavor = "multi_thread")]
async fn an_upgrade_needing_a_new_secret_waits_while_the_old_release_serves() {
    let mut rt = Runtime::start(RuntimeOptions::default());
    rt.install_ok(
        &rt.private_fixture_connector("wait", &["--tools", "echo"]),
        &[],
    );
    let first = rt.wait_status("wait", "ready", READY);
    let token = rt.issue_token("wait", "s");
    let mcp = Mcp::legacy(rt.frontend_url(), &token);
    mcp.initialize().await;
    let mut upgrade = rt.private_fixture_connector("wait", &["--tools", "echo,add"]);
    upgrade["version"] = json!("2.0.0");
    upgrade["mcp"]["secrets"] = json!(["NEWSEC"]);
    rt.install_ok(&upgrade, &[]);
    let waiting = rt.wait_connector("wait", READY, "the upgrade waiting for NEWSEC", |c| {
        c["lastError"]
            .as_str()
            .is_some_and(|e| e.contains("waits for its credentials") && e.contains("NEWSEC"))
    });
    assert_eq!(waiting["status"], json!("ready"), "{waiting}");
    assert_eq!(generation(&waiting), generation(&first), "{waiting}");
    assert_eq!(tool_names(&mcp.list_tools().await), ["wait_echo"]);
    let echo = mcp
        .call_tool_ok("wait_echo", json!({"message": "still"}))
        .await;
    assert_eq!(echo["content"][0]["text"], json!("still"));

    rt.connect_from_env("wait", "NEWSEC", SECRET);
    let upgraded = rt.wait_connector("wait", READY, "the upgrade committed", |c| {
        c["status"] == json!("ready") && c["version"] == json!("2.0.0")
    });
    assert!(generation(&upgraded) > generation(&first), "{upgraded}");
    assert_eq!(upgraded["lastError"], Value::Null, "{upgraded}");
    let mut names = tool_names(&mcp.list_tools().await);
    names.sort();
    assert_eq!(names, ["wait_add", "wait_echo"]);
}

/// Commands that change what is installed take turns: an uninstall racing an upgrade never
/// leaves the registry naming a release whose files it deleted, and of two uninstalls of one
/// connector exactly one succeeds.
#[test]
fn concurrent_install_and_uninstall_take_turns() {
    let mut rt = Runtime::start(RuntimeOptions::default());
    let v1 = rt.write_release(
        &rt.private_fixture_connector("race", &["--tools", "echo"]),
        &[],
    );
    let mut upgrade = rt.private_fixture_connector("race", &["--tools", "echo,add"]);
    upgrade["version"] = json!("2.0.0");
    let v2 = rt.write_release(&upgrade, &[]);
    let (v1, v2) = (
        v1.to_string_lossy().into_owned(),
        v2.to_string_lossy().into_owned(),
    );
    for round in 0..4 {
        rt.tutti_ok(&["connector", "install", &v1, "--yes"]);
        let (uninstall, install) = std::thread::scope(|s| {
            let a = s.spawn(|| rt.tutti(&["connector", "uninstall", "race"]));
            let b = s.spawn(|| rt.tutti(&["connector", "install", &v2, "--yes"]));
            (
                a.join().expect("uninstall thread"),
                b.join().expect("install thread"),
            )
        });
        assert!(
            uninstall.status.success() && install.status.success(),
            "round {round}"
        );
        let registry: Value = serde_json::from_slice(
            &std::fs::read(rt.state_dir().join("registry.json")).expect("registry.json"),
        )
        .expect("registry.json parses");
        if let Some(entry) = registry["connectors"].get("race") {
            let dir = entry["releaseDir"].as_str().unwrap_or_default();
            assert!(
                std::path::Path::new(dir).join("connector.json").is_file(),
                "round {round}: the registry names a release that is gone: {entry}"
            );
            let c = rt.wait_status("race", "ready", READY);
            assert_eq!(c["version"], json!("2.0.0"), "round {round}: {c}");
        }
        let twice = std::thread::scope(|s| {
            let runs: Vec<_> = (0..3)
                .map(|_| s.spawn(|| rt.tutti(&["connector", "uninstall", "race"])))
                .collect();
            runs.into_iter()
                .map(|r| r.join().expect("uninstall thread").status.success())
                .filter(|ok| *ok)
                .count()
        });
        let installed_before = registry["connectors"].get("race").is_some();
        assert_eq!(
            twice,
            usize::from(installed_before),
            "round {round}: uninstalls that succeeded"
        );
    }
}

// ---------------------------------------------------------------------------------------
// tokens

async fn list_status(url: &str, token: &str) -> u16 {
    Mcp::legacy(url, token)
        .request("tools/list", json!({}))
        .await
        .0
}

/// Live frontend processes of this runtime.
fn frontend_pids(rt: &Runtime) -> Vec<u32> {
    let state = rt.state_dir().to_string_lossy().into_owned();
    proc_tree::snapshot()
        .into_iter()
        .filter(|p| !p.is_zombie())
        .filter(|p| p.cmdline.contains("tutti-mcp-frontend") && p.cmdline.contains(&state))
        .map(|p| p.pid)
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn reissue_revoke_revoke_all_and_restart_end_tokens() {
    let mut rt = Runtime::start(RuntimeOptions::default());
    let url = rt.frontend_url().to_owned();
    let frontend = frontend_pids(&rt);

    // Reissue for the same (workspace, session) revokes the previous token at once.
    let a = rt.issue_token("w", "s");
    assert_eq!(list_status(&url, &a).await, 200);
    let b = rt.issue_token("w", "s");
    assert_ne!(a, b);
    assert_eq!(
        list_status(&url, &a).await,
        401,
        "reissued: the old token still works"
    );
    assert_eq!(list_status(&url, &b).await, 200);

    // Revoke one session; others stay.
    let other = rt.issue_token("w", "other");
    rt.tutti_ok(&["session", "revoke", "--workspace", "w", "--session", "s"]);
    assert_eq!(
        list_status(&url, &b).await,
        401,
        "revoked token still works"
    );
    assert_eq!(
        list_status(&url, &other).await,
        200,
        "revoke hit another session"
    );

    // Revoke all.
    let c = rt.issue_token("w2", "s2");
    assert_eq!(list_status(&url, &c).await, 200);
    rt.tutti_ok(&["session", "revoke", "--all"]);
    assert_eq!(
        list_status(&url, &c).await,
        401,
        "revoke --all missed a token"
    );
    assert_eq!(
        list_status(&url, &other).await,
        401,
        "revoke --all missed a token"
    );
    // The frontend caches verified tokens; each revocation above was confirmed by it, not
    // enforced by stopping it.
    assert_eq!(
        frontend_pids(&rt),
        frontend,
        "the frontend was restarted during the revocations"
    );

    // Kernel restart: tokens live in kernel memory only.
    let d = rt.issue_token("w", "s");
    assert_eq!(list_status(&url, &d).await, 200);
    assert!(rt.stop().is_some_and(|s| s.success()));
    rt.restart();
    let url = rt.frontend_url().to_owned();
    assert_eq!(
        list_status(&url, &d).await,
        401,
        "a token survived the kernel restart"
    );
    let e = rt.issue_token("w", "s");
    assert_eq!(list_status(&url, &e).await, 200);
}

/// The frontend keeps verified tokens; a revocation it cannot confirm (here: the process is
/// frozen) must not return while that cache could still accept the token.
#[cfg(unix)]
#[tokio::test(flavor = "multi_thread")]
async fn a_revocation_the_frontend_cannot_confirm_stops_it_before_revoke_returns() {
    use nix::sys::signal::Signal;
    let rt = Runtime::start(RuntimeOptions::default());
    let url = rt.frontend_url().to_owned();
    let revoked = rt.issue_token("w", "revoked");
    let kept = rt.issue_token("w", "kept");
    // Both verified once, so both are in the frontend's cache.
    assert_eq!(list_status(&url, &revoked).await, 200);
    assert_eq!(list_status(&url, &kept).await, 200);
    let before = frontend_pids(&rt);
    assert_eq!(before.len(), 1, "one frontend: {before:?}");

    signal(before[0], Signal::SIGSTOP);
    let started = Instant::now();
    let out = rt.tutti(&[
        "session",
        "revoke",
        "--workspace",
        "w",
        "--session",
        "revoked",
    ]);
    let took = started.elapsed();
    // Whatever happens next, never leave a stopped process behind.
    signal(before[0], Signal::SIGCONT);
    assert!(
        out.status.success(),
        "revoke failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        took >= Duration::from_millis(1900),
        "revoke returned after {took:?}, without the frozen frontend's confirmation"
    );
    assert!(
        took < Duration::from_secs(10),
        "revoke took {took:?}: the fence of the frozen frontend is too slow"
    );
    // Stopped (SIGKILL works on a frozen process) before revoke returned.
    assert!(
        proc_tree::wait_gone(&before, Duration::from_millis(200)).is_empty(),
        "the frontend that never confirmed is still running"
    );

    // A fresh frontend on the same URL: the revoked token is refused, the other one works.
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        if let Some((200, _)) = try_list(&url, &kept).await {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "no frontend on {url} 15 s after the fence\n{}",
            rt.diagnostics()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(list_status(&url, &revoked).await, 401);
    let after = frontend_pids(&rt);
    assert!(
        after.len() == 1 && after != before,
        "a new frontend: before {before:?}, after {after:?}"
    );
}

// ---------------------------------------------------------------------------------------
// kernel SIGKILL, then `tutti up` again

#[tokio::test(flavor = "multi_thread")]
async fn after_a_kernel_sigkill_up_brings_connectors_back_with_higher_generations() {
    let mut rt = Runtime::start(RuntimeOptions::default());
    let keys = ["k1", "k2"];
    for key in keys {
        rt.install_ok(
            &rt.private_fixture_connector(key, &["--tools", "whoami"]),
            &[],
        );
    }
    // A connector with a secret: its auth state must survive too.
    let mut sec = rt.private_fixture_connector("sec", &["--tools", "env"]);
    sec["mcp"]["secrets"] = json!(["FIXTURE_TOKEN"]);
    rt.install_ok(&sec, &[]);
    rt.wait_status("sec", "auth_required", READY);
    rt.connect_from_env("sec", "FIXTURE_TOKEN", SECRET);
    let mut before = BTreeMap::new();
    for key in keys.iter().chain(&["sec"]) {
        before.insert(*key, generation(&rt.wait_status(key, "ready", READY)));
    }
    let token = rt.issue_token("restart", "s");
    let mcp = Mcp::legacy(rt.frontend_url(), &token);
    mcp.initialize().await;
    let old_pid = whoami(&mcp, "k1_whoami").await["pid"].clone();

    let set = rt.process_set();
    rt.kill();
    let left = proc_tree::wait_gone(&set, Duration::from_secs(5));
    assert!(
        left.is_empty(),
        "after a kernel SIGKILL its process set is still alive:\n{}",
        proc_tree::describe(&left)
    );

    rt.restart();
    let highest_before = before.values().copied().max().unwrap_or(0);
    for key in keys.iter().chain(&["sec"]) {
        let entry = rt.wait_status(key, "ready", READY);
        assert!(
            generation(&entry) > highest_before,
            "{key}: generation {} is not above every generation before the restart ({before:?})",
            generation(&entry)
        );
    }
    let token = rt.issue_token("restart", "s");
    let mcp = Mcp::legacy(rt.frontend_url(), &token);
    mcp.initialize().await;
    let mut names = tool_names(&mcp.list_tools().await);
    names.sort();
    assert_eq!(names, ["k1_whoami", "k2_whoami", "sec_env"]);
    // The stored secret still reaches the upstream (compared, never printed).
    let env = text_json(&mcp.call_tool_ok("sec_env", json!({})).await);
    assert!(
        env["env"]["FIXTURE_TOKEN"] == json!(SECRET),
        "the upstream of sec did not get its stored secret after the restart"
    );
    let who = whoami(&mcp, "k1_whoami").await;
    assert_ne!(who["pid"], old_pid, "answered by the old upstream");
}

// ---------------------------------------------------------------------------------------
// the frontend is supervised too

/// `tools/list` over plain reqwest: `None` while nothing listens on the URL.
async fn try_list(url: &str, token: &str) -> Option<(u16, Value)> {
    let client = reqwest::Client::builder().no_proxy().build().ok()?;
    let resp = client
        .post(url)
        .header("Content-Type", "application/json")
        .header("Accept", "application/json, text/event-stream")
        .header("MCP-Protocol-Version", "2025-06-18")
        .header("Authorization", format!("Bearer {token}"))
        .body(r#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#)
        .timeout(Duration::from_secs(5))
        .send()
        .await
        .ok()?;
    let status = resp.status().as_u16();
    let body = resp.json::<Value>().await.unwrap_or(Value::Null);
    Some((status, body))
}

#[tokio::test(flavor = "multi_thread")]
async fn a_killed_frontend_comes_back_on_the_same_port() {
    let mut rt = Runtime::start(RuntimeOptions::default());
    rt.install_ok(
        &rt.private_fixture_connector("fe", &["--tools", "echo"]),
        &[],
    );
    rt.wait_status("fe", "ready", READY);
    let token = rt.issue_token("frontend", "s");
    let url = rt.frontend_url().to_owned();
    let frontend = || frontend_pids(&rt);
    let before = frontend();
    assert_eq!(before.len(), 1, "one frontend: {before:?}");
    sigkill(before[0]);
    assert!(proc_tree::wait_gone(&before, Duration::from_secs(2)).is_empty());

    let deadline = Instant::now() + Duration::from_secs(15);
    let body = loop {
        if let Some((200, body)) = try_list(&url, &token).await {
            break body;
        }
        assert!(
            Instant::now() < deadline,
            "the frontend did not come back on {url} within 15 s\n{}",
            rt.diagnostics()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let after = frontend();
    assert!(
        after.len() == 1 && after[0] != before[0],
        "a new frontend process: before {before:?}, after {after:?}"
    );
    // Same URL, the session token still valid, the routes back.
    assert_eq!(
        tool_names(
            body["result"]["tools"]
                .as_array()
                .map(Vec::as_slice)
                .unwrap_or(&[])
        ),
        ["fe_echo"],
        "{body}"
    );
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let shown = rt.status_json()["frontendUrl"].clone();
        if shown == json!(url) {
            break;
        }
        assert!(Instant::now() < deadline, "status shows {shown}, not {url}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

// ---------------------------------------------------------------------------------------
// a crash in the middle of a call

/// Starts `tool` (a long call), lets it reach the upstream, runs `crash`, and returns the
/// reply and how long after the crash it came.
async fn call_across_a_crash(
    url: &str,
    token: &str,
    tool: &str,
    args: Value,
    crash: impl FnOnce(),
) -> (Value, Duration) {
    let call = {
        let (url, token, tool) = (url.to_owned(), token.to_owned(), tool.to_owned());
        tokio::spawn(async move {
            let mcp = Mcp::legacy(&url, &token);
            let reply =
                tokio::time::timeout(Duration::from_secs(15), mcp.call_tool(&tool, args)).await;
            (reply, Instant::now())
        })
    };
    tokio::time::sleep(Duration::from_millis(400)).await;
    let crashed = Instant::now();
    crash();
    let (reply, at) = call
        .await
        .unwrap_or_else(|e| panic!("the call task panicked: {e}"));
    let (status, _, body) = reply.unwrap_or_else(|_| panic!("{tool} hung across the crash"));
    assert_eq!(status, 200, "{tool}: {body}");
    (body, at.saturating_duration_since(crashed))
}

#[tokio::test(flavor = "multi_thread")]
async fn calls_in_flight_end_at_once_when_the_worker_or_upstream_dies() {
    let mut rt = Runtime::start(RuntimeOptions::default());
    rt.install_ok(
        &rt.private_fixture_connector("mid", &["--tools", "sleep,whoami"]),
        &[],
    );
    rt.install_ok(
        &rt.private_fixture_connector("dies", &["--tools", "sleep", "--exit-after-calls", "0"]),
        &[],
    );
    let before = rt.wait_status("mid", "ready", READY);
    rt.wait_status("dies", "ready", READY);
    let token = rt.issue_token("mid", "s");
    let url = rt.frontend_url().to_owned();

    // The worker is SIGKILLed while the call waits on the upstream.
    let worker = rt
        .workers()
        .into_iter()
        .find(|w| w.key == "mid")
        .unwrap_or_else(|| panic!("no worker of mid"));
    let (body, after) =
        call_across_a_crash(&url, &token, "mid_sleep", json!({"ms": 20000}), || {
            sigkill(worker.pid)
        })
        .await;
    assert_eq!(body["error"]["code"], json!(-32603), "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .is_some_and(|m| m.starts_with("[MCP_UNAVAILABLE] mid")),
        "{body}"
    );
    assert_eq!(
        body["error"]["data"]["tutti"]["connector"],
        json!("mid"),
        "{body}"
    );
    assert_eq!(
        body["error"]["data"]["tutti"]["generation"],
        json!(generation(&before)),
        "{body}"
    );
    assert!(
        after < Duration::from_secs(2),
        "answered {after:?} after the kill: {body}"
    );

    // The upstream exits in the middle of the call (its worker survives it).
    let (body, after) =
        call_across_a_crash(&url, &token, "dies_sleep", json!({"ms": 20000}), || {}).await;
    assert_eq!(body["error"]["code"], json!(-32603), "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .is_some_and(|m| m.starts_with("[MCP_UNAVAILABLE] dies")),
        "{body}"
    );
    assert!(after < Duration::from_secs(2), "{after:?}: {body}");

    // Both come back on their own.
    rt.wait_connector("mid", READY, "a new generation", |c| {
        c["status"] == "ready" && generation(c) > generation(&before)
    });
    rt.wait_status("dies", "ready", READY);
}

// ---------------------------------------------------------------------------------------
// shutdown

/// SIGTERM to `tutti up` drains calls in flight (SPEC §4): a call with a few seconds left
/// gets its answer; one that would run past the 10 s drain gets `[MCP_UNAVAILABLE]` saying
/// so (never a dropped connection); `tutti up` exits 0.
#[cfg(unix)]
#[tokio::test(flavor = "multi_thread")]
async fn sigterm_lets_calls_in_flight_finish() {
    let mut rt = Runtime::start(RuntimeOptions::default());
    rt.install_ok(
        &rt.private_fixture_connector("drain", &["--tools", "sleep"]),
        &[],
    );
    rt.wait_status("drain", "ready", READY);
    let token = rt.issue_token("drain", "s");
    let mcp = Arc::new(Mcp::legacy(rt.frontend_url(), &token));
    mcp.initialize().await;
    let started = Instant::now();
    let short = {
        let mcp = mcp.clone();
        tokio::spawn(async move { mcp.call_tool("drain_sleep", json!({"ms": 6_000})).await })
    };
    let long = {
        let mcp = mcp.clone();
        tokio::spawn(async move { mcp.call_tool("drain_sleep", json!({"ms": 30_000})).await })
    };
    tokio::time::sleep(Duration::from_millis(500)).await;
    signal(
        rt.pid().expect("tutti up's pid"),
        nix::sys::signal::Signal::SIGTERM,
    );
    let (status, _, body) = short.await.expect("the short call task");
    assert_eq!(status, 200, "{body}");
    assert!(
        body.get("result").is_some(),
        "a call with 5.5 s left at SIGTERM was not drained: {body}"
    );
    assert!(started.elapsed() >= Duration::from_millis(5_900), "{body}");
    let (status, _, body) = long.await.expect("the long call task");
    assert_eq!(status, 200, "{body}");
    let message = body["error"]["message"].as_str().unwrap_or_default();
    assert!(
        message.starts_with("[MCP_UNAVAILABLE] drain:") && message.contains("stopped"),
        "a call cut off by the end of the drain must say so: {body}"
    );
    let exit = rt.stop().expect("tutti up's exit status");
    assert!(exit.success(), "`tutti up` after draining: {exit}");
}

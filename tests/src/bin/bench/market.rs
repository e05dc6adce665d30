//! Start to ready of a pinned market release against the same server run by `npx`
//! (`--market-only`; with `--smoke` one round). server-everything 2026.8.31 installed by name
//! from the registry fixture (pinned: `node` on the release's own files, which the kernel
//! hashes before it starts them) and a release whose `connector.json` runs `npx -y
//! @modelcontextprotocol/server-everything@2026.8.31 stdio`, each in a runtime of its own
//! with a HOME of its own (npx's npm cache is `~/.npm`). npx starts once before the rounds
//! (the first start downloads), so the rounds compare with a warm cache. A round starts each
//! runtime once (`tutti up`; which goes first alternates) and times it to the connector's
//! `commit` record in the audit log, the moment the kernel publishes its tools (`ready`); the
//! `launch` record of the same start gives the upstream's own part. After the rounds, one
//! more start of each with the network unreachable for npm (a dead proxy in the HOME's
//! `.npmrc`, so the cache keys stay the same), and one of the npx release with an empty cache.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant, SystemTime};

use anyhow::{Context, Result, bail};
use serde_json::{Value, json};
use tutti_tests::{Runtime, RuntimeOptions, bin, repo_root};

use super::systems::Proc;

const SERVER: &str = "io.github.modelcontextprotocol/server-everything";
const PACKAGE: &str = "@modelcontextprotocol/server-everything";
const VERSION: &str = "2026.8.31";
/// The keys of the two connectors.
const PINNED: &str = "server-everything";
const NPX: &str = "everything-npx";
/// A port where nothing answers: npm's proxy when the network is unreachable.
const DEAD_PROXY: &str = "http://127.0.0.1:9/";
/// The longest a start may take (an npx download on a slow network).
const WITHIN: Duration = Duration::from_secs(180);

/// How one start ended.
enum Outcome {
    /// Ready: `tutti up` → commit, and the start's launch → commit.
    Ready(Duration, Duration),
    /// The connector's upstream failed; after how long, with `lastError`.
    Failed(Duration, String),
}

/// A runtime with one connector and the HOME its upstream sees.
struct Side {
    rt: Runtime,
    home: tempfile::TempDir,
    key: &'static str,
}

/// The rows (what, value): `rounds` interleaved rounds, then the starts without network.
pub(super) fn rows(rounds: usize) -> Result<Vec<(String, String)>> {
    let mut rows = Vec::new();
    let registry = Registry::start()?;
    let (mut pinned, install) = pinned_side(&registry)?;
    rows.push((
        format!(
            "market: install by name, npm server-everything {VERSION} (fetch, check, unpack, copy)"
        ),
        install,
    ));
    let mut npx = npx_side()?;
    let first = start(&mut npx)?;
    rows.push((
        "market: npx release, first start (empty npm cache: downloads), `tutti up` → ready".into(),
        describe_one(&first),
    ));
    let mut up = [Vec::new(), Vec::new()];
    let mut launch = [Vec::new(), Vec::new()];
    for round in 0..rounds {
        for i in if round % 2 == 0 { [0, 1] } else { [1, 0] } {
            let side = if i == 0 { &mut pinned } else { &mut npx };
            match start(side)? {
                Outcome::Ready(u, l) => {
                    up[i].push(u);
                    launch[i].push(l);
                }
                Outcome::Failed(_, why) => bail!("{} did not start: {why}", side.key),
            }
        }
    }
    rows.extend(round_rows(&mut up, &mut launch));
    rows.extend(offline_rows(&mut pinned, &mut npx)?);
    Ok(rows)
}

/// The rows of the rounds: each side's `tutti up` → ready, launch → ready, the ratio.
fn round_rows(
    up: &mut [Vec<Duration>; 2],
    launch: &mut [Vec<Duration>; 2],
) -> Vec<(String, String)> {
    let mut before: [Vec<Duration>; 2] = [0, 1].map(|i| {
        let pairs = up[i].iter().zip(&launch[i]);
        pairs.map(|(u, l)| u.saturating_sub(*l)).collect()
    });
    for v in up
        .iter_mut()
        .chain(launch.iter_mut())
        .chain(before.iter_mut())
    {
        v.sort();
    }
    let p50 = |v: &[Duration]| v.get(v.len() / 2).copied().unwrap_or_default();
    let ms = |d: Duration| format!("{:.0} ms", d.as_secs_f64() * 1e3);
    let spread = |v: &[Duration]| {
        format!(
            "p50 {} · min {} · max {} (n={})",
            ms(p50(v)),
            ms(v.first().copied().unwrap_or_default()),
            ms(v.last().copied().unwrap_or_default()),
            v.len()
        )
    };
    let ratio = p50(&up[1]).as_secs_f64() / p50(&up[0]).as_secs_f64().max(1e-9);
    vec![
        (
            "market: `tutti up` → ready, pinned release (node on the release's files)".into(),
            spread(&up[0]),
        ),
        (
            "market: `tutti up` → ready, npx release, warm npm cache".into(),
            spread(&up[1]),
        ),
        (
            "market: `tutti up` → launch (kernel start, release copy checked), pinned · npx warm"
                .into(),
            format!("p50 {} · p50 {}", ms(p50(&before[0])), ms(p50(&before[1]))),
        ),
        (
            "market: launch → ready (the upstream's own start), pinned · npx warm".into(),
            format!("p50 {} · p50 {}", ms(p50(&launch[0])), ms(p50(&launch[1]))),
        ),
        (
            "market: npx warm against pinned, `tutti up` → ready p50".into(),
            format!("{ratio:.2}× ({} / {})", ms(p50(&up[1])), ms(p50(&up[0]))),
        ),
    ]
}

/// One start of each with npm's network unreachable, and the npx release with an empty cache.
fn offline_rows(pinned: &mut Side, npx: &mut Side) -> Result<Vec<(String, String)>> {
    for side in [&*pinned, &*npx] {
        unreachable_network(side.home.path())?;
    }
    let mut rows = Vec::new();
    rows.push((
        "market: network unreachable, pinned release".into(),
        describe_one(&start(pinned)?),
    ));
    rows.push((
        "market: network unreachable, npx release, warm npm cache".into(),
        describe_one(&start(npx)?),
    ));
    let empty = tempfile::tempdir()?;
    unreachable_network(empty.path())?;
    set_home(&mut npx.rt, empty.path());
    rows.push((
        "market: network unreachable, npx release, empty npm cache".into(),
        describe_one(&start(npx)?),
    ));
    Ok(rows)
}

fn describe_one(outcome: &Outcome) -> String {
    match outcome {
        Outcome::Ready(up, launch) => format!(
            "ready: `tutti up` → ready {:.0} ms, launch → ready {:.0} ms",
            up.as_secs_f64() * 1e3,
            launch.as_secs_f64() * 1e3
        ),
        Outcome::Failed(after, why) => format!(
            "fails after {:.1} s: {}",
            after.as_secs_f64(),
            why.replace('|', "/")
        ),
    }
}

/// `~/.npmrc` sending npm through a dead proxy, no retries: the registry's URLs (and so the
/// cache's keys) stay the same, but nothing can be fetched.
fn unreachable_network(home: &Path) -> Result<()> {
    let npmrc = format!("proxy={DEAD_PROXY}\nhttps-proxy={DEAD_PROXY}\nfetch-retries=0\n");
    std::fs::write(home.join(".npmrc"), npmrc).context("writing .npmrc")
}

fn set_home(rt: &mut Runtime, home: &Path) {
    let env = &mut rt.options_mut().env;
    env.retain(|(name, _)| name != "HOME");
    env.push(("HOME".into(), home.display().to_string()));
}

/// A stopped runtime with HOME `home` and `env`, for one connector.
fn runtime(home: &Path, env: Vec<(String, String)>) -> Runtime {
    let mut env = env;
    env.push(("HOME".into(), home.display().to_string()));
    Runtime::start(RuntimeOptions {
        env,
        ..Default::default()
    })
}

/// The runtime of the pinned release, installed by name (stopped), and the install's row.
fn pinned_side(registry: &Registry) -> Result<(Side, String)> {
    let home = tempfile::tempdir()?;
    let env = vec![("TUTTI_REGISTRIES".into(), format!("fix={}", registry.url))];
    let mut rt = runtime(home.path(), env);
    let source = format!("registry:{SERVER}@{VERSION}");
    let t = Instant::now();
    let out = rt.tutti(&["connector", "install", &source, "--yes"]);
    let took = t.elapsed();
    let confirmation = String::from_utf8_lossy(&out.stderr).into_owned();
    if !out.status.success() {
        bail!("install {source}: {confirmation}");
    }
    let artefacts = confirmation
        .lines()
        .find_map(|l| l.trim().strip_prefix("artefacts: "))
        .unwrap_or("?")
        .to_owned();
    rt.wait_status(PINNED, "ready", WITHIN);
    rt.stop();
    let row = format!("{:.1} s; {artefacts}", took.as_secs_f64());
    Ok((
        Side {
            rt,
            home,
            key: PINNED,
        },
        row,
    ))
}

/// The runtime of the npx release (stopped before its first start).
fn npx_side() -> Result<Side> {
    let home = tempfile::tempdir()?;
    let mut rt = runtime(home.path(), Vec::new());
    let manifest = json!({"key": NPX, "name": "Everything with npx",
        "description": "server-everything fetched by npx when it starts", "version": VERSION,
        "mcp": {"transport": "stdio", "command": "npx",
            "args": ["-y", format!("{PACKAGE}@{VERSION}"), "stdio"]},
        "timeouts": {"startMs": WITHIN.as_millis() as u64}});
    let dir: PathBuf = rt.write_release(&manifest, &[]);
    let out = rt.tutti(&["connector", "install", &dir.display().to_string(), "--yes"]);
    if !out.status.success() {
        bail!("install {NPX}: {}", String::from_utf8_lossy(&out.stderr));
    }
    // Installed while running, it started at once: stopped, and what it fetched removed.
    rt.stop();
    let cache = home.path().join(".npm");
    if cache.exists() {
        std::fs::remove_dir_all(&cache).context("emptying the npm cache")?;
    }
    Ok(Side { rt, home, key: NPX })
}

/// Starts the side's runtime, waits for its connector's commit or failure, stops it.
fn start(side: &mut Side) -> Result<Outcome> {
    let t0 = SystemTime::now();
    side.rt.restart();
    let outcome = wait_outcome(&side.rt, side.key, t0);
    side.rt.stop();
    outcome
}

fn wait_outcome(rt: &Runtime, key: &str, t0: SystemTime) -> Result<Outcome> {
    let deadline = Instant::now() + WITHIN;
    let mut poll = 0u64;
    loop {
        poll += 1;
        if let Some((launch, commit)) = audit_times(rt, key, t0) {
            let up = commit.duration_since(t0).unwrap_or_default();
            let own = commit.duration_since(launch).unwrap_or_default();
            return Ok(Outcome::Ready(up, own));
        }
        // The status is a process per look: every 20th poll (200 ms) only.
        if poll.is_multiple_of(20)
            && let Some(c) = rt.connector_status(key)
            && ["restarting", "crash_loop", "failed"].contains(&c["status"].as_str().unwrap_or(""))
        {
            let after = SystemTime::now().duration_since(t0).unwrap_or_default();
            let why = c["lastError"].as_str().unwrap_or("no lastError").to_owned();
            return Ok(Outcome::Failed(after, why));
        }
        if Instant::now() > deadline {
            bail!(
                "{key} neither ready nor failed within {WITHIN:?}: {}",
                rt.diagnostics()
            );
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// The times of `key`'s `launch` and `commit` records written after `t0`, once both are there.
fn audit_times(rt: &Runtime, key: &str, t0: SystemTime) -> Option<(SystemTime, SystemTime)> {
    let lines = rt.audit_lines();
    let time_of = |event: &str| {
        lines
            .iter()
            .filter(|r| r["event"] == event && r["connector"] == key)
            .filter_map(record_time)
            .find(|t| *t >= t0 - Duration::from_millis(1))
    };
    Some((time_of("launch")?, time_of("commit")?))
}

fn record_time(record: &Value) -> Option<SystemTime> {
    let time = chrono::DateTime::parse_from_rfc3339(record["time"].as_str()?).ok()?;
    let since_epoch = Duration::from_millis(u64::try_from(time.timestamp_millis()).ok()?);
    Some(SystemTime::UNIX_EPOCH + since_epoch)
}

/// `tutti-registry-fixture` over `tests/fixtures/registry`, killed on drop.
struct Registry {
    _proc: Proc,
    url: String,
}

impl Registry {
    fn start() -> Result<Registry> {
        let mut child = Command::new(bin("tutti-registry-fixture"))
            .arg("--documents")
            .arg(repo_root().join("tests/fixtures/registry"))
            .stdout(Stdio::piped())
            .spawn()
            .context("starting tutti-registry-fixture")?;
        let stdout = child.stdout.take();
        let proc = Proc(child);
        let mut line = String::new();
        if let Some(out) = stdout {
            std::io::BufRead::read_line(&mut std::io::BufReader::new(out), &mut line)?;
        }
        let Some(port) = line.trim().strip_prefix("listening ") else {
            bail!("tutti-registry-fixture printed {line:?}");
        };
        let url = format!("http://127.0.0.1:{port}");
        Ok(Registry { _proc: proc, url })
    }
}

//! The process set as a system service. The systemd notify protocol against a
//! datagram socket this test owns, the generated unit through `systemd-analyze verify`, the
//! launchd plist through a real property-list parser, and `--print` writing nothing.
#![cfg(target_os = "linux")]

use std::os::unix::net::UnixDatagram;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use tutti_tests::{bin, proc_tree};

/// Every datagram received within `timeout`, until one contains `want`.
fn recv_until(sock: &UnixDatagram, want: &str, timeout: Duration) -> Vec<String> {
    let deadline = Instant::now() + timeout;
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    while Instant::now() < deadline {
        sock.set_read_timeout(Some(
            deadline
                .saturating_duration_since(Instant::now())
                .max(Duration::from_millis(1)),
        ))
        .expect("timeout");
        match sock.recv(&mut buf) {
            Ok(n) => {
                let msg = String::from_utf8_lossy(&buf[..n]).into_owned();
                let done = msg.contains(want);
                got.push(msg);
                if done {
                    break;
                }
            }
            Err(_) => break,
        }
    }
    got
}

/// POSTs a ping to the frontend; true when any HTTP status line comes back.
fn frontend_answers(url: &str) -> bool {
    use std::io::{Read, Write};
    let Some(rest) = url.strip_prefix("http://") else {
        return false;
    };
    let Some((authority, path)) = rest.split_once('/') else {
        return false;
    };
    let Ok(mut s) = std::net::TcpStream::connect(authority) else {
        return false;
    };
    let body = r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#;
    let req = format!(
        "POST /{path} HTTP/1.1\r\nHost: {authority}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    if s.write_all(req.as_bytes()).is_err() {
        return false;
    }
    let mut head = [0u8; 12];
    s.read_exact(&mut head).is_ok() && head.starts_with(b"HTTP/1.1 ")
}

#[test]
fn kernel_speaks_the_systemd_notify_protocol_and_stops_cleanly() {
    let dir = tempfile::tempdir().expect("tempdir");
    let state = dir.path().join("state");
    let sock_path = dir.path().join("notify.sock");
    let sock = UnixDatagram::bind(&sock_path).expect("bind notify socket");

    let mut kernel = Command::new(bin("tutti-kernel"))
        .arg("--state-dir")
        .arg(&state)
        .env("NOTIFY_SOCKET", &sock_path)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start tutti-kernel");
    let pid = kernel.id();

    let ready = recv_until(&sock, "READY=1", Duration::from_secs(20));
    assert!(
        ready.iter().any(|m| m.lines().any(|l| l == "READY=1")),
        "no READY=1 within 20 s; got {ready:?}"
    );
    // READY=1 only after the frontend answers an MCP request: it must answer right now.
    let info: serde_json::Value = serde_json::from_slice(
        &std::fs::read(state.join("run/frontend.json")).expect("frontend.json exists at READY"),
    )
    .expect("frontend.json is JSON");
    let url = info["url"].as_str().expect("url").to_string();
    assert!(
        frontend_answers(&url),
        "READY=1 came but the frontend at {url} does not answer"
    );
    // The kernel socket is bound at READY too.
    assert!(
        state.join("run/kernel.sock").exists(),
        "kernel socket missing at READY"
    );

    let children: Vec<u32> = proc_tree::descendants(pid);
    assert!(!children.is_empty(), "the kernel started no children");

    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .expect("SIGTERM");
    let stopping = recv_until(&sock, "STOPPING=1", Duration::from_secs(10));
    assert!(
        stopping
            .iter()
            .any(|m| m.lines().any(|l| l == "STOPPING=1")),
        "no STOPPING=1 after SIGTERM; got {stopping:?}"
    );
    let deadline = Instant::now() + Duration::from_secs(20);
    let status = loop {
        if let Some(st) = kernel.try_wait().expect("wait") {
            break st;
        }
        assert!(
            Instant::now() < deadline,
            "the kernel did not exit within 20 s of SIGTERM"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(
        status.success(),
        "kernel exit status after SIGTERM: {status}"
    );
    let survivors = proc_tree::wait_gone(&children, Duration::from_secs(5));
    assert!(
        survivors.is_empty(),
        "left behind: {}",
        proc_tree::describe(&survivors)
    );
    let by_state = proc_tree::live_matching(&[state.to_str().expect("utf-8 path")]);
    assert!(
        by_state.is_empty(),
        "processes of this state dir left: {}",
        proc_tree::describe(&by_state)
    );
}

fn print_service(state: &Path, platform: Option<&str>) -> String {
    let mut cmd = Command::new(bin("tutti"));
    cmd.arg("--state-dir")
        .arg(state)
        .args(["service", "install", "--print", "--user"]);
    if let Some(p) = platform {
        cmd.args(["--platform", p]);
    }
    let out = cmd.output().expect("run tutti service install --print");
    assert!(
        out.status.success(),
        "service install --print failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("utf-8")
}

#[test]
fn print_writes_nothing_and_points_at_the_installed_binaries() {
    let dir = tempfile::tempdir().expect("tempdir");
    let state = dir.path().join("state");
    let home = dir.path().join("home");
    std::fs::create_dir_all(&home).expect("home");
    let out = Command::new(bin("tutti"))
        .arg("--state-dir")
        .arg(&state)
        .args(["service", "install", "--print", "--user"])
        .env("HOME", &home)
        .env("XDG_CONFIG_HOME", home.join(".config"))
        .output()
        .expect("run");
    assert!(out.status.success());
    let unit = String::from_utf8_lossy(&out.stdout);
    let kernel = bin("tutti-kernel");
    let kernel = kernel.canonicalize().unwrap_or(kernel);
    assert!(
        unit.contains(&format!(
            "ExecStart={} --state-dir {}",
            kernel.display(),
            state.display()
        )),
        "ExecStart must name the installed kernel and the state dir:\n{unit}"
    );
    assert!(
        unit.contains(&format!("ReadWritePaths={}", state.display())),
        "{unit}"
    );
    assert!(!state.exists(), "--print created the state dir");
    let written: Vec<_> = walk(&home);
    assert!(written.is_empty(), "--print wrote files: {written:?}");
}

fn walk(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    if let Ok(rd) = std::fs::read_dir(dir) {
        for e in rd.flatten() {
            let p = e.path();
            if p.is_dir() {
                out.extend(walk(&p));
            } else {
                out.push(p);
            }
        }
    }
    out
}

#[test]
fn generated_unit_passes_systemd_analyze_verify() {
    let analyze = Path::new("/usr/bin/systemd-analyze");
    assert!(
        analyze.exists(),
        "systemd-analyze is missing: install Debian's `systemd` package (scripts/test does as root)"
    );
    let dir = tempfile::tempdir().expect("tempdir");
    let state = dir.path().join("state");
    std::fs::create_dir_all(&state).expect("state");
    let unit = print_service(&state, None);
    for key in [
        "Type=notify",
        "Restart=on-failure",
        "KillMode=control-group",
        "NoNewPrivileges=yes",
        "ProtectSystem=strict",
        "PrivateTmp=yes",
    ] {
        assert!(unit.lines().any(|l| l == key), "unit lacks {key}:\n{unit}");
    }
    let path = dir.path().join("tutti-kernel.service");
    std::fs::write(&path, &unit).expect("write unit");
    let out = Command::new(analyze)
        .arg("verify")
        .arg(&path)
        .output()
        .expect("systemd-analyze");
    let stderr = String::from_utf8_lossy(&out.stderr);
    // Lines about this unit are problems; messages about the host's own units are not ours.
    let ours: Vec<&str> = stderr
        .lines()
        .filter(|l| l.contains("tutti-kernel"))
        .collect();
    assert!(
        out.status.success() && ours.is_empty(),
        "systemd-analyze verify: {stderr}\n{unit}"
    );
}

#[test]
fn launchd_plist_parses_with_the_expected_keys() {
    let dir = tempfile::tempdir().expect("tempdir");
    let state = dir.path().join("state");
    let plist = print_service(&state, Some("macos"));
    let path = dir.path().join("dev.tutti.kernel.plist");
    std::fs::write(&path, &plist).expect("write plist");
    // Python's plistlib is a real property-list parser.
    let script = r#"
import json, plistlib, sys
with open(sys.argv[1], "rb") as f:
    print(json.dumps(plistlib.load(f)))
"#;
    let out = Command::new("python3")
        .arg("-c")
        .arg(script)
        .arg(&path)
        .output()
        .expect("python3");
    assert!(
        out.status.success(),
        "plistlib: {}\n{plist}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(v["Label"], "dev.tutti.kernel");
    assert_eq!(v["RunAtLoad"], true);
    assert_eq!(v["KeepAlive"], true);
    let args: Vec<String> = v["ProgramArguments"]
        .as_array()
        .expect("ProgramArguments")
        .iter()
        .filter_map(|a| a.as_str().map(str::to_owned))
        .collect();
    assert!(args[0].ends_with("tutti-kernel"), "{args:?}");
    assert_eq!(
        &args[1..],
        ["--state-dir".to_string(), state.display().to_string()]
    );
    for key in ["StandardOutPath", "StandardErrorPath"] {
        let p = v[key].as_str().unwrap_or_default();
        assert!(
            p.starts_with(&state.join("logs").display().to_string()),
            "{key} = {p}"
        );
    }
}

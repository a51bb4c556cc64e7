//! `omnidev dashboard` against a real detached pod, spoken to over a real
//! socket as a browser would (and as an attacker's page would): the
//! secret, `Host` and `Origin` checks, a GET that never acts, the pods'
//! records as server-sent events, an action that gives a new pid, and a
//! stop from the CLI told to the page without it asking.

#[path = "support/context.rs"]
mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::Child;
use std::time::{Duration, Instant};

use common::{TestContext, service, wait_for};
use omnidev_test_support::free_port;

const DEADLINE: Duration = Duration::from_secs(30);

fn profile(port: u16) -> String {
    format!(
        r#"
[ports]
server = {port}

[services.server]
command = ["python3", "-u", "-c", "import http.server, sys\nprint('\\x1b[32mserving\\x1b[0m')\nhttp.server.HTTPServer(('127.0.0.1', int(sys.argv[1])), http.server.SimpleHTTPRequestHandler).serve_forever()", "{{port.server}}"]
ready = {{ http = "http://127.0.0.1:{{port.server}}/", interval-ms = 100 }}
"#
    )
}

/// A dashboard that is stopped (by pid) when dropped.
struct Dashboard {
    child: Child,
    port: u16,
    token: String,
}

impl Drop for Dashboard {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn dashboard(ctx: &TestContext) -> Dashboard {
    Dashboard::started(ctx.spawn(&["dashboard"]))
}

impl Dashboard {
    /// The dashboard `child` runs, once it has printed its URL.
    fn started(mut child: Child) -> Self {
        let stdout = child.stdout.take().expect("stdout");
        let mut line = String::new();
        BufReader::new(stdout)
            .read_line(&mut line)
            .expect("its URL");
        // `dashboard http://127.0.0.1:PORT/?token=SECRET`
        let url = line
            .trim()
            .strip_prefix("dashboard http://127.0.0.1:")
            .expect(&line);
        let (port, token) = url.split_once("/?token=").expect(&line);
        Dashboard {
            port: port.parse().expect("a port"),
            token: token.to_owned(),
            child,
        }
    }
}

/// One HTTP/1.1 exchange; the status code and what came back within
/// `read_for` (the body of a stream so far).
fn exchange(port: u16, head: &str, body: &str, read_for: Duration) -> (u16, String) {
    try_exchange(port, head, body, read_for).unwrap_or_else(|| panic!("no answer to {head:?}"))
}

/// [`exchange`], `None` when the connection is refused, reset or ends
/// without a status line.
fn try_exchange(port: u16, head: &str, body: &str, read_for: Duration) -> Option<(u16, String)> {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).ok()?;
    let request = format!(
        "{head}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(request.as_bytes()).ok()?;
    stream
        .set_read_timeout(Some(Duration::from_millis(200)))
        .ok()?;
    let mut got = Vec::new();
    let until = Instant::now() + read_for;
    let mut chunk = [0u8; 16 * 1024];
    while Instant::now() < until {
        match stream.read(&mut chunk) {
            Ok(0) => break,
            Ok(n) => got.extend_from_slice(&chunk[..n]),
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) => {}
            Err(_) => return None,
        }
    }
    let text = String::from_utf8_lossy(&got).into_owned();
    let code = text.split(' ').nth(1)?.parse().ok()?;
    Some((code, text))
}

impl Dashboard {
    fn get(&self, path: &str, headers: &str) -> (u16, String) {
        let head = format!(
            "GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{}{headers}",
            self.port
        );
        exchange(self.port, &head, "", DEADLINE)
    }

    fn cookie(&self) -> String {
        format!("\r\nCookie: omnidev-dashboard={}", self.token)
    }

    fn post(&self, path: &str, headers: &str, body: &str) -> (u16, String) {
        let head = format!(
            "POST {path} HTTP/1.1\r\nHost: 127.0.0.1:{}\r\nContent-Type: application/json{headers}",
            self.port
        );
        exchange(self.port, &head, body, DEADLINE)
    }
}

/// The name of the checkout's pod directory.
fn pod_name(ctx: &TestContext) -> String {
    let status = ctx.json(&["status", "--json"]);
    let dir = status["pod-dir"].as_str().expect("pod-dir");
    dir.rsplit('/').next().expect("a name").to_owned()
}

fn server_pid(ctx: &TestContext) -> i64 {
    let status = ctx.json(&["status", "--json"]);
    service(&status, "server")["pid"].as_i64().expect("a pid")
}

#[test]
fn the_dashboard_serves_its_user_only_and_acts_on_post_only() {
    let ctx = TestContext::new();
    ctx.write("omnidev.toml", &profile(free_port()));
    ctx.write(".git/HEAD", "ref: refs/heads/feature-x\n");
    let _pods = ctx.stop_on_drop();
    ctx.run_ok(&["up", "--detach"]);
    let pod = pod_name(&ctx);
    let dash = dashboard(&ctx);
    let cookie = dash.cookie();

    // The secret, the Host, the Origin.
    assert_eq!(dash.get("/", "").0, 403, "no secret");
    assert_eq!(
        dash.get("/api/pods", "\r\nCookie: omnidev-dashboard=0000")
            .0,
        403
    );
    let rebound = format!(
        "GET /api/pods HTTP/1.1\r\nHost: attacker.example:{}{cookie}",
        dash.port
    );
    assert_eq!(
        exchange(dash.port, &rebound, "", DEADLINE).0,
        403,
        "DNS rebinding"
    );
    let foreign = format!("{cookie}\r\nOrigin: http://attacker.example");
    assert_eq!(dash.get("/api/pods", &foreign).0, 403, "another site");
    let (code, said) = dash.get(&format!("/?token={}", dash.token), "");
    assert_eq!(code, 303, "{said}");
    assert!(said.contains("HttpOnly; SameSite=Strict"), "{said}");
    let (code, page) = dash.get("/", &cookie);
    assert!(
        code == 200 && page.contains("<title>omnidev pods</title>"),
        "{page}"
    );

    // The pod, as `ls --json` has it.
    let (code, pods) = dash.get("/api/pods", &cookie);
    assert_eq!(code, 200, "{pods}");
    assert!(pods.contains(&format!("/{pod}\",\"repo\"")), "{pods}");
    assert!(pods.contains("\"running\":true"), "{pods}");
    assert!(
        pods.contains(&format!(r#""branches":{{"{pod}":"feature-x"}}"#)),
        "{pods}"
    );

    // Its records: the status, then its line (colour kept, no other control).
    let (code, events) = exchange(
        dash.port,
        &format!(
            "GET /api/events?pod={pod} HTTP/1.1\r\nHost: 127.0.0.1:{}{cookie}",
            dash.port
        ),
        "",
        Duration::from_secs(3),
    );
    assert_eq!(code, 200, "{events}");
    assert!(events.contains("text/event-stream"), "{events}");
    assert!(events.contains("\"kind\":\"status\""), "{events}");
    assert!(
        events.contains(r#""text":"\u001b[32mserving\u001b[0m""#),
        "{events}"
    );
    assert_eq!(dash.get("/api/events?pod=..", &cookie).0, 404);

    // A GET never acts; a POST without the secret in its header neither.
    let before = server_pid(&ctx);
    let restart = format!(r#"{{"pod":"{pod}","action":"restart","service":"server"}}"#);
    assert_eq!(dash.get("/api/act", &cookie).0, 405);
    assert_eq!(dash.post("/api/act", &cookie, &restart).0, 403);
    assert_eq!(server_pid(&ctx), before, "nothing restarted");
    let header = format!("\r\nX-Omnidev-Token: {}", dash.token);
    let (code, answer) = dash.post("/api/act", &header, &restart);
    assert_eq!(code, 200, "{answer}");
    assert!(answer.contains("\"ok\":true"), "{answer}");
    assert_ne!(server_pid(&ctx), before, "a new pid");

    // A stop from the CLI reaches a page that waits, unasked.
    a_stop_is_told_unasked(&ctx, &dash);

    // One dashboard a user: a second one gives the first one's URL; the
    // next one, once it is gone, serves on the same port.
    let port = dash.port;
    let again = ctx.run_ok(&["dashboard"]);
    assert!(
        again.starts_with(&format!("dashboard http://127.0.0.1:{port}/?token=")),
        "{again}"
    );
    drop(dash);
    assert_eq!(dashboard(&ctx).port, port, "the recorded port again");
}

/// `omnidev stop` of the checkout's pod is told to a page that waits on
/// `/api/pods/changes`, which then lists the pod stopped.
fn a_stop_is_told_unasked(ctx: &TestContext, dash: &Dashboard) {
    let cookie = dash.cookie();
    let mut changes = TcpStream::connect(("127.0.0.1", dash.port)).expect("connect");
    write!(
        changes,
        "GET /api/pods/changes HTTP/1.1\r\nHost: 127.0.0.1:{}{cookie}\r\n\r\n",
        dash.port
    )
    .expect("send");
    let mut changes = BufReader::new(changes);
    let mut line = String::new();
    loop {
        line.clear();
        changes.read_line(&mut line).expect("its head");
        if line.trim().is_empty() {
            break;
        }
    }
    ctx.run_ok(&["stop"]);
    changes
        .get_mut()
        .set_read_timeout(Some(DEADLINE))
        .expect("timeout");
    let mut told = String::new();
    while !told.contains("data: changed") {
        line.clear();
        assert!(
            changes.read_line(&mut line).expect("a change") > 0,
            "{told}"
        );
        told.push_str(&line);
    }
    wait_for("the pod listed stopped", DEADLINE, || {
        dash.get("/api/pods", &cookie)
            .1
            .contains("\"running\":false")
    });
}

/// Resident memory of `pid`, in bytes.
fn rss(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|kb| kb.trim().trim_end_matches(" kB").parse::<u64>().ok())
        .map_or(0, |kb| kb * 1024)
}

/// A page that stops reading a flooding pod's stream costs at most its
/// budget and is dropped (its connection ends); `up` of a stopped pod is
/// refused without `--allow-up` and starts it with it.
#[test]
fn a_stalled_page_is_dropped_and_up_needs_allow_up() {
    let ctx = TestContext::new();
    ctx.write(
        "omnidev.toml",
        r#"
[services.flood]
command = ["python3", "-c", "import sys\nwhile True: sys.stdout.write('x' * 200 + '\\n')"]
"#,
    );
    let _pods = ctx.stop_on_drop();
    ctx.run_ok(&["up", "--detach"]);
    let pod = pod_name(&ctx);
    let dash = dashboard(&ctx);
    let before = rss(dash.child.id());
    let mut stalled = TcpStream::connect(("127.0.0.1", dash.port)).expect("connect");
    write!(
        stalled,
        "GET /api/events?pod={pod} HTTP/1.1\r\nHost: 127.0.0.1:{}{}\r\n\r\n",
        dash.port,
        dash.cookie()
    )
    .expect("send");
    // Not read for 5 s while the pod floods.
    let mut peak = 0;
    let until = Instant::now() + Duration::from_secs(5);
    while Instant::now() < until {
        peak = peak.max(rss(dash.child.id()));
        std::thread::sleep(Duration::from_millis(50));
    }
    eprintln!(
        "dashboard: {} MiB before, peak {} MiB",
        before >> 20,
        peak >> 20
    );
    assert!(
        peak < before + 32 * 1024 * 1024,
        "a stalled page cost {} MiB",
        (peak - before) >> 20
    );
    // Dropped: what was sent is read, then the end.
    stalled.set_read_timeout(Some(DEADLINE)).expect("timeout");
    let mut sink = Vec::new();
    let read = stalled.read_to_end(&mut sink);
    assert!(
        read.is_ok(),
        "the stalled page's stream did not end: {read:?}"
    );

    ctx.run_ok(&["stop"]);
    let up = format!(r#"{{"pod":"{pod}","action":"up"}}"#);
    let header = format!("\r\nX-Omnidev-Token: {}", dash.token);
    let (code, said) = dash.post("/api/act", &header, &up);
    assert_eq!(code, 403, "{said}");
    drop(dash);
    let dash = Dashboard::started(ctx.spawn(&["dashboard", "--allow-up"]));
    let header = format!("\r\nX-Omnidev-Token: {}", dash.token);
    let (code, said) = dash.post("/api/act", &header, &up);
    assert_eq!(code, 200, "{said}");
    assert!(said.contains("\"ok\":true"), "{said}");
    assert_eq!(ctx.json(&["status", "--json"])["running"], true);
}

/// Connections that never send a request (a local process holding them
/// open) take at most the dashboard's slots and are let go once their
/// head is late: one beyond the slots is closed at once, and the user's
/// own page is answered again soon after.
#[test]
fn idle_connections_are_bounded_and_let_go() {
    let ctx = TestContext::new();
    let dash = dashboard(&ctx);
    let idle: Vec<TcpStream> = (0..300)
        .map(|_| TcpStream::connect(("127.0.0.1", dash.port)).expect("connect"))
        .collect();
    // The slots are taken: one more is closed unread.
    wait_for(
        "a connection beyond the slots closed at once",
        DEADLINE,
        || {
            let mut extra = TcpStream::connect(("127.0.0.1", dash.port)).expect("connect");
            extra
                .set_read_timeout(Some(Duration::from_secs(2)))
                .expect("timeout");
            let mut byte = [0u8; 1];
            matches!(extra.read(&mut byte), Ok(0))
        },
    );
    // Once the idle ones' heads are late, the page is answered again.
    wait_for("the dashboard answering again", DEADLINE, || {
        let head = format!(
            "GET /api/pods HTTP/1.1\r\nHost: 127.0.0.1:{}{}",
            dash.port,
            dash.cookie()
        );
        try_exchange(dash.port, &head, "", Duration::from_secs(2))
            .is_some_and(|(code, _)| code == 200)
    });
    drop(idle);
}

/// A page that goes away lets go of its pod's follower slot at once, even
/// on a pod that prints nothing (the pod serves 32 followers at most):
/// after 40 pages came and went, the next one is still served.
#[test]
fn a_page_that_goes_away_lets_go_of_the_pods_follower() {
    let ctx = TestContext::new();
    ctx.write(
        "omnidev.toml",
        "[services.quiet]\ncommand = [\"sleep\", \"3600\"]\n",
    );
    let _pods = ctx.stop_on_drop();
    ctx.run_ok(&["up", "--detach"]);
    let pod = pod_name(&ctx);
    let dash = dashboard(&ctx);
    let page = || {
        let head = format!(
            "GET /api/events?pod={pod} HTTP/1.1\r\nHost: 127.0.0.1:{}{}",
            dash.port,
            dash.cookie()
        );
        // The status record comes first; the page then leaves.
        let until = Instant::now() + DEADLINE;
        loop {
            let got = try_exchange(dash.port, &head, "", Duration::from_millis(300));
            if got.is_some_and(|(_, text)| text.contains("\"kind\":\"status\"")) {
                return true;
            }
            if Instant::now() > until {
                return false;
            }
        }
    };
    for n in 0..40 {
        assert!(page(), "page {n} was not served");
    }
    assert!(page(), "a page after 40 came and went");
}

/// `--open` hands the URL to the browser opener (a stand-in `xdg-open`
/// here) and reaps it: no zombie of it stays beside the dashboard.
#[cfg(target_os = "linux")]
#[test]
fn open_hands_the_url_to_the_opener_and_reaps_it() {
    let ctx = TestContext::new();
    let bin = ctx.home.join("bin");
    std::fs::create_dir_all(&bin).expect("bin");
    let said = ctx.home.join("opened");
    omnidev_test_support::write_script(
        &bin.join("xdg-open"),
        &format!("echo \"$1\" > '{}'\n", said.display()),
    );
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let mut command = ctx.command();
    command
        .args(["dashboard", "--open"])
        .env("PATH", path)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null());
    let dash = Dashboard::started(command.spawn().expect("spawn"));
    wait_for("the opener to be given the URL", DEADLINE, || {
        std::fs::read_to_string(&said).is_ok_and(|url| {
            url.trim() == format!("http://127.0.0.1:{}/?token={}", dash.port, dash.token)
        })
    });
    // The dashboard starts no other process: once the opener is reaped,
    // it has no child at all (a zombie would stay listed).
    let children = || {
        std::fs::read_to_string(format!("/proc/{0}/task/{0}/children", dash.child.id()))
            .unwrap_or_default()
    };
    wait_for("the opener reaped", DEADLINE, || {
        children().trim().is_empty()
    });
}

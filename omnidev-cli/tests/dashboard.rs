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
        BufReader::new(stdout).read_line(&mut line).expect("its URL");
        // `dashboard http://127.0.0.1:PORT/?token=SECRET`
        let url = line.trim().strip_prefix("dashboard http://127.0.0.1:").expect(&line);
        let (port, token) = url.split_once("/?token=").expect(&line);
        Dashboard { port: port.parse().expect("a port"), token: token.to_owned(), child }
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
    let request =
        format!("{head}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}", body.len());
    stream.write_all(request.as_bytes()).ok()?;
    stream.set_read_timeout(Some(Duration::from_millis(200))).ok()?;
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
        let head = format!("GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{}{headers}", self.port);
        exchange(self.port, &head, "", DEADLINE)
    }

    /// The header that carries the secret on the page's requests.
    fn secret(&self) -> String {
        format!("\r\nX-Omnidev-Token: {}", self.token)
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
    let secret = dash.secret();

    // The secret, the Host, the Origin; a cookie is no secret.
    assert_eq!(dash.get("/", "").0, 403, "no secret");
    assert_eq!(dash.get("/api/pods", "\r\nX-Omnidev-Token: 0000").0, 403);
    let cookie = format!("\r\nCookie: omnidev-dashboard={}", dash.token);
    assert_eq!(dash.get("/api/pods", &cookie).0, 403, "a cookie");
    let rebound = format!("GET /api/pods HTTP/1.1\r\nHost: attacker.example:{}{secret}", dash.port);
    assert_eq!(exchange(dash.port, &rebound, "", DEADLINE).0, 403, "DNS rebinding");
    let foreign = format!("{secret}\r\nOrigin: http://attacker.example");
    assert_eq!(dash.get("/api/pods", &foreign).0, 403, "another site");
    // The URL it printed: the page, and no cookie.
    let (code, page) = dash.get(&format!("/?token={}", dash.token), "");
    assert!(code == 200 && page.contains("<title>omnidev pods</title>"), "{page}");
    assert!(!page.to_ascii_lowercase().contains("set-cookie"), "{page}");
    assert!(page.to_ascii_lowercase().contains("cache-control: no-store"), "{page}");

    // The pod, as `ls --json` has it.
    let (code, pods) = dash.get("/api/pods", &secret);
    assert_eq!(code, 200, "{pods}");
    assert!(pods.contains(&format!("/{pod}\",\"repo\"")), "{pods}");
    assert!(pods.contains("\"running\":true"), "{pods}");
    assert!(pods.contains(&format!(r#""branches":{{"{pod}":"feature-x"}}"#)), "{pods}");

    // Its records: the status, then its line (colour kept, no other control).
    let (code, events) = exchange(
        dash.port,
        &format!(
            "GET /api/events?pod={pod}&token={} HTTP/1.1\r\nHost: 127.0.0.1:{}",
            dash.token, dash.port
        ),
        "",
        Duration::from_secs(3),
    );
    assert_eq!(code, 200, "{events}");
    assert!(events.contains("text/event-stream"), "{events}");
    assert!(events.contains("\"kind\":\"status\""), "{events}");
    assert!(events.contains(r#""text":"\u001b[32mserving\u001b[0m""#), "{events}");
    assert_eq!(dash.get("/api/events?pod=..", &secret).0, 404);

    // A GET never acts; a POST without the secret in its header neither.
    let before = server_pid(&ctx);
    let restart = format!(r#"{{"pod":"{pod}","action":"restart","service":"server"}}"#);
    assert_eq!(dash.get("/api/act", &secret).0, 405);
    assert_eq!(dash.post("/api/act", &cookie, &restart).0, 403);
    let in_query = format!("/api/act?token={}", dash.token);
    assert_eq!(dash.post(&in_query, "", &restart).0, 403);
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
    assert!(again.starts_with(&format!("dashboard http://127.0.0.1:{port}/?token=")), "{again}");
    let old = dash.token.clone();
    drop(dash);
    let next = dashboard(&ctx);
    assert_eq!(next.port, port, "the recorded port again");
    assert_ne!(next.token, old, "a new secret for each dashboard");
    let stale = format!("\r\nX-Omnidev-Token: {old}");
    assert_eq!(next.get("/api/pods", &stale).0, 403, "the old secret");
}

/// `omnidev stop` of the checkout's pod is told to a page that waits on
/// `/api/pods/changes`, which then lists the pod stopped.
fn a_stop_is_told_unasked(ctx: &TestContext, dash: &Dashboard) {
    let secret = dash.secret();
    let mut changes = TcpStream::connect(("127.0.0.1", dash.port)).expect("connect");
    write!(
        changes,
        "GET /api/pods/changes HTTP/1.1\r\nHost: 127.0.0.1:{}{secret}\r\n\r\n",
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
    changes.get_mut().set_read_timeout(Some(DEADLINE)).expect("timeout");
    let mut told = String::new();
    while !told.contains("data: changed") {
        line.clear();
        assert!(changes.read_line(&mut line).expect("a change") > 0, "{told}");
        told.push_str(&line);
    }
    wait_for("the pod listed stopped", DEADLINE, || {
        dash.get("/api/pods", &secret).1.contains("\"running\":false")
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
        dash.secret()
    )
    .expect("send");
    // Not read for 5 s while the pod floods.
    let mut peak = 0;
    let until = Instant::now() + Duration::from_secs(5);
    while Instant::now() < until {
        peak = peak.max(rss(dash.child.id()));
        std::thread::sleep(Duration::from_millis(50));
    }
    eprintln!("dashboard: {} MiB before, peak {} MiB", before >> 20, peak >> 20);
    assert!(peak < before + 32 * 1024 * 1024, "a stalled page cost {} MiB", (peak - before) >> 20);
    // Dropped: what was sent is read, then the end.
    stalled.set_read_timeout(Some(DEADLINE)).expect("timeout");
    let mut sink = Vec::new();
    let read = stalled.read_to_end(&mut sink);
    assert!(read.is_ok(), "the stalled page's stream did not end: {read:?}");

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

/// The page's database buttons: a snapshot, its listing, a destructive
/// change, the restore that undoes it; a restore without a label is
/// refused with why.
#[test]
fn the_dashboard_snapshots_and_restores_a_pods_database() {
    let ctx = TestContext::new();
    let _stop = ctx.stop_on_drop();
    ctx.sqlite_pod();
    ctx.sqlite("create table t(x); insert into t values (1), (2);");
    let dash = dashboard(&ctx);
    let pod = pod_name(&ctx);
    let header = format!("\r\nX-Omnidev-Token: {}", dash.token);
    let ask = |body: String| dash.post("/api/act", &header, &body);
    let (code, said) = ask(format!(r#"{{"pod":"{pod}","action":"snapshot","label":"before"}}"#));
    assert_eq!(code, 200, "{said}");
    assert!(said.contains("snapshot lite/before"), "{said}");
    ctx.sqlite("drop table t;");
    let (code, said) = ask(format!(r#"{{"pod":"{pod}","action":"snapshots"}}"#));
    assert_eq!(code, 200, "{said}");
    assert!(said.contains(r#""label":"before""#), "{said}");
    let (code, said) = ask(format!(r#"{{"pod":"{pod}","action":"restore"}}"#));
    assert_eq!(code, 409, "{said}");
    assert!(said.contains("restore needs a `label`"), "{said}");
    let (code, said) =
        ask(format!(r#"{{"pod":"{pod}","action":"restore","service":"lite","label":"before"}}"#));
    assert_eq!(code, 200, "{said}");
    assert_eq!(ctx.sqlite("select sum(x) from t;"), "3");
}

/// Connections that never send a request (another local user holding
/// them open) do not starve the owner: while 256 are held, each of the
/// owner's 25 requests is answered, and the strangers the dashboard keeps
/// open are bounded.
#[test]
fn idle_strangers_do_not_starve_the_owner() {
    let ctx = TestContext::new();
    let dash = dashboard(&ctx);
    let idle: Vec<TcpStream> =
        (0..256).map(|_| TcpStream::connect(("127.0.0.1", dash.port)).expect("connect")).collect();
    let head = format!("GET /api/pods HTTP/1.1\r\nHost: 127.0.0.1:{}{}", dash.port, dash.secret());
    let answered = (0..25)
        .filter(|_| {
            try_exchange(dash.port, &head, "", Duration::from_secs(5))
                .is_some_and(|(code, _)| code == 200)
        })
        .count();
    assert_eq!(answered, 25, "the owner's requests answered");
    let sockets = open_sockets(dash.child.id());
    assert!(sockets < 64, "the dashboard holds {sockets} sockets");
    drop(idle);
}

/// The sockets `pid` has open.
fn open_sockets(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .expect("its descriptors")
        .filter_map(|entry| std::fs::read_link(entry.ok()?.path()).ok())
        .filter(|target| target.to_string_lossy().starts_with("socket:"))
        .count()
}

/// CPU time `pid` has used, in clock ticks.
#[cfg(target_os = "linux")]
fn cpu_ticks(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("its stat");
    let after = stat.rsplit_once(')').expect("a stat line").1;
    let fields: Vec<&str> = after.split_whitespace().collect();
    // utime and stime: fields 14 and 15, the 12th and 13th after `)`.
    fields[11].parse::<u64>().expect("utime") + fields[12].parse::<u64>().expect("stime")
}

/// Out of descriptors (a low `RLIMIT_NOFILE` and many connections), the
/// accept loop waits instead of spinning, and serves again once
/// descriptors come back.
#[cfg(target_os = "linux")]
#[test]
fn out_of_descriptors_the_dashboard_neither_spins_nor_stops() {
    use std::os::unix::process::CommandExt as _;
    let ctx = TestContext::new();
    let mut command = ctx.command();
    command
        .arg("dashboard")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null());
    // SAFETY: setrlimit is async-signal-safe and touches only the child.
    unsafe {
        command.pre_exec(|| {
            let limit = libc::rlimit { rlim_cur: 40, rlim_max: 40 };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &raw const limit) == 0 {
                Ok(())
            } else {
                Err(std::io::Error::last_os_error())
            }
        });
    }
    let dash = Dashboard::started(command.spawn().expect("spawn"));
    let hogged: Vec<TcpStream> =
        (0..100).filter_map(|_| TcpStream::connect(("127.0.0.1", dash.port)).ok()).collect();
    std::thread::sleep(Duration::from_millis(500));
    let before = cpu_ticks(dash.child.id());
    std::thread::sleep(Duration::from_secs(3));
    let spent = cpu_ticks(dash.child.id()) - before;
    // Spinning costs a core: 300 ticks in 3 s (less on a busy machine).
    assert!(spent < 50, "{spent} ticks of CPU in 3 s with no descriptor left");
    drop(hogged);
    let head = format!("GET /api/pods HTTP/1.1\r\nHost: 127.0.0.1:{}{}", dash.port, dash.secret());
    wait_for("the dashboard serving again", DEADLINE, || {
        try_exchange(dash.port, &head, "", Duration::from_secs(2))
            .is_some_and(|(code, _)| code == 200)
    });
}

/// Another user binds the port a stopped dashboard recorded and answers
/// as a dashboard would: the next dashboard sends it nothing secret (not
/// the old secret, not the new one), serves on another port, and the old
/// secret is worth nothing.
#[test]
fn a_squatter_on_the_recorded_port_learns_nothing() {
    let ctx = TestContext::new();
    let first = dashboard(&ctx);
    let (port, old) = (first.port, first.token.clone());
    drop(first);
    let squatter = std::net::TcpListener::bind(("127.0.0.1", port)).expect("squat");
    let heard = std::sync::Arc::new(std::sync::Mutex::new(Vec::<u8>::new()));
    let ear = heard.clone();
    std::thread::spawn(move || {
        for stream in squatter.incoming() {
            let Ok(mut stream) = stream else { continue };
            let _ = stream.set_read_timeout(Some(Duration::from_millis(500)));
            let mut chunk = [0u8; 4096];
            while let Ok(n) = stream.read(&mut chunk) {
                if n == 0 {
                    break;
                }
                ear.lock().expect("heard").extend_from_slice(&chunk[..n]);
                // It says yes to anything.
                let _ = stream.write_all(
                    b"HTTP/1.1 200 OK\r\nContent-Length: 64\r\n\r\n\
                      0000000000000000000000000000000000000000000000000000000000000000",
                );
            }
        }
    });
    let next = dashboard(&ctx);
    assert_ne!(next.port, port, "the squatted port is not taken for its");
    assert_ne!(next.token, old);
    let heard = String::from_utf8_lossy(&heard.lock().expect("heard")).into_owned();
    assert!(!heard.contains(&old), "the old secret sent: {heard}");
    assert!(!heard.contains(&next.token), "the new secret sent: {heard}");
    assert!(heard.contains("challenge="), "it was asked, nothing more: {heard}");
    // And a dashboard on its own port is still proven to be the one.
    let again = ctx.run_ok(&["dashboard"]);
    assert_eq!(
        again.trim(),
        format!("dashboard http://127.0.0.1:{}/?token={}", next.port, next.token)
    );
}

/// Pods whose checkout names need escaping in a URL are one name end to
/// end: listed, and their records (services, output) streamed.
#[test]
fn pods_with_names_that_need_escaping_show_their_services() {
    let ctx = TestContext::new();
    let names = ["my app", "café", "a@b", "a+b", "100%"];
    let mut pods = Vec::new();
    for name in names {
        let repo = ctx.root.join(name);
        std::fs::create_dir_all(repo.join(".git")).expect("checkout");
        std::fs::write(
            repo.join("omnidev.toml"),
            "[services.hello]\ncommand = [\"sh\", \"-c\", \"echo hello from here; exec sleep 3600\"]\n",
        )
        .expect("profile");
        let repo = repo.to_str().expect("a UTF-8 path").to_owned();
        ctx.run_ok(&["up", "--detach", "--repo", &repo]);
        pods.push(repo);
    }
    let _stop = StopAll(&ctx, pods.clone());
    let dash = dashboard(&ctx);
    let (code, listed) = dash.get("/api/pods", &dash.secret());
    assert_eq!(code, 200, "{listed}");
    let listing: serde_json::Value =
        serde_json::from_str(listed.split("\r\n\r\n").nth(1).expect("a body")).expect("JSON");
    let dirs: Vec<String> = listing["list"]["pods"]
        .as_array()
        .expect("pods")
        .iter()
        .map(|pod| {
            pod["pod-dir"].as_str().expect("pod-dir").rsplit('/').next().expect("a name").to_owned()
        })
        .collect();
    assert_eq!(dirs.len(), names.len(), "{dirs:?}");
    for dir in dirs {
        let encoded = percent_encode(&dir);
        let head = format!(
            "GET /api/events?pod={encoded}&token={} HTTP/1.1\r\nHost: 127.0.0.1:{}",
            dash.token, dash.port
        );
        let mut seen = String::new();
        wait_for(&format!("{dir}'s service and output"), DEADLINE, || {
            seen = exchange(dash.port, &head, "", Duration::from_secs(2)).1;
            seen.contains("\"name\":\"hello\"") && seen.contains("hello from here")
        });
    }
}

/// Stops the pods of the checkouts it holds when dropped.
struct StopAll<'c>(&'c TestContext, Vec<String>);

impl Drop for StopAll<'_> {
    fn drop(&mut self) {
        for repo in &self.1 {
            let _ = self.0.run(&["stop", "--repo", repo]);
        }
    }
}

/// `text` as `encodeURIComponent` writes it.
fn percent_encode(text: &str) -> String {
    use std::fmt::Write as _;
    text.bytes().fold(String::new(), |mut out, byte| {
        if byte.is_ascii_alphanumeric() || b"-_.!~*'()".contains(&byte) {
            out.push(byte as char);
        } else {
            let _ = write!(out, "%{byte:02X}");
        }
        out
    })
}

/// A page that goes away lets go of its pod's follower slot at once, even
/// on a pod that prints nothing (the pod serves 32 followers at most):
/// after 40 pages came and went, the next one is still served.
#[test]
fn a_page_that_goes_away_lets_go_of_the_pods_follower() {
    let ctx = TestContext::new();
    ctx.write("omnidev.toml", "[services.quiet]\ncommand = [\"sleep\", \"3600\"]\n");
    let _pods = ctx.stop_on_drop();
    ctx.run_ok(&["up", "--detach"]);
    let pod = pod_name(&ctx);
    let dash = dashboard(&ctx);
    let page = || {
        let head = format!(
            "GET /api/events?pod={pod} HTTP/1.1\r\nHost: 127.0.0.1:{}{}",
            dash.port,
            dash.secret()
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

/// `--open` hands the browser opener (a stand-in `xdg-open` here) a
/// private file that goes on to the URL, so the secret is in no
/// process's arguments while it runs, and reaps it: no zombie of it stays
/// beside the dashboard.
#[cfg(target_os = "linux")]
#[test]
fn open_puts_the_secret_on_no_command_line_and_reaps_the_opener() {
    let ctx = TestContext::new();
    let bin = ctx.home.join("bin");
    std::fs::create_dir_all(&bin).expect("bin");
    let said = ctx.home.join("opened");
    let release = ctx.home.join("release");
    // It says what it was given, then stays until the test has looked.
    omnidev_test_support::write_script(
        &bin.join("xdg-open"),
        &format!(
            "printf '%s\\n' \"$@\" > '{said}.tmp' && mv '{said}.tmp' '{said}'\n\
             i=0; while [ ! -e '{release}' ] && [ $i -lt 300 ]; do sleep 0.1; i=$((i+1)); done\n",
            said = said.display(),
            release = release.display()
        ),
    );
    let path = format!("{}:{}", bin.display(), std::env::var("PATH").unwrap_or_default());
    let mut command = ctx.command();
    command
        .args(["dashboard", "--open"])
        .env("PATH", path)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null());
    let dash = Dashboard::started(command.spawn().expect("spawn"));
    wait_for("the opener to be run", DEADLINE, || said.is_file());
    let given = std::fs::read_to_string(&said).expect("its arguments");
    assert!(!given.contains(&dash.token), "{given}");
    // No process's arguments carry the secret while the opener runs.
    for entry in std::fs::read_dir("/proc").expect("/proc").flatten() {
        let cmdline = std::fs::read(entry.path().join("cmdline")).unwrap_or_default();
        assert!(
            !String::from_utf8_lossy(&cmdline).contains(&dash.token),
            "the secret in the arguments of {}",
            entry.path().display()
        );
    }
    // What it was given goes on to the URL, and only its user reads it.
    let page = std::path::Path::new(given.trim());
    let text = std::fs::read_to_string(page).expect("the page it was given");
    let url = format!("http://127.0.0.1:{}/?token={}", dash.port, dash.token);
    assert!(text.contains(&format!("content=\"0;url={url}\"")), "{text}");
    let mode = std::os::unix::fs::PermissionsExt::mode(
        &std::fs::metadata(page).expect("stat").permissions(),
    );
    assert_eq!(mode & 0o077, 0, "{mode:o}");
    std::fs::write(&release, "").expect("release");
    // The dashboard starts no other process: once the opener is reaped,
    // it has no child at all (a zombie would stay listed).
    let children = || {
        std::fs::read_to_string(format!("/proc/{0}/task/{0}/children", dash.child.id()))
            .unwrap_or_default()
    };
    wait_for("the opener reaped", DEADLINE, || children().trim().is_empty());
}

/// The page shows core's label and tone, as the TUI does: a wrapped
/// service (`uv` with one child) by its main process's pid, a one-shot
/// that exited 0 quiet, one that crashed for good bad.
#[test]
fn the_page_shows_the_main_pid_and_a_clean_exit_is_quiet() {
    let ctx = TestContext::new();
    omnidev_test_support::write_script(&ctx.repo.join("uv"), "sleep 300 &\nwait\n");
    ctx.write(
        "omnidev.toml",
        r#"
[services.wrapped]
command = ["./uv"]

[services.once]
command = ["sh", "-c", "exit 0"]
restart = "never"

[services.broken]
command = ["sh", "-c", "exit 3"]
restart = "never"
"#,
    );
    let _stop = ctx.stop_on_drop();
    let _ = ctx.run(&["up", "--detach"]);
    let mut main = 0;
    wait_for("the wrapper's child known as its main process", DEADLINE, || {
        let status = ctx.json(&["status", "--json"]);
        let wrapped = service(&status, "wrapped");
        main = wrapped["main-pid"].as_u64().unwrap_or(0);
        main != 0 && Some(main) != wrapped["pid"].as_u64()
    });
    let pod = ctx.json(&["status", "--json"]);
    let shown = ctx.dashboard_told(&pod, "states", |told| {
        told["wrapped"]["label"] == format!("running pid {main}").as_str()
    });
    assert_eq!(shown["wrapped"]["tone"], "up", "{shown}");
    assert_eq!(shown["once"]["label"], "exited (exit code 0)", "{shown}");
    assert_eq!(shown["once"]["tone"], "quiet", "{shown}");
    assert_eq!(shown["broken"]["tone"], "bad", "{shown}");
}

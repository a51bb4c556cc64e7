//! Case: `omnidev dashboard` in a real headless Chromium, driven through
//! ChromeDriver (the W3C WebDriver protocol, spoken over a plain socket):
//! two running pods of two worktrees with their services and URLs, a line
//! a service prints shown within a second, the restart button giving a
//! new pid, a pod stopped from the CLI shown stopped without a reload, and
//! the browser sending no secret to another server on 127.0.0.1, and the
//! page retrying a stream that keeps failing after a growing pause.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};
use serde_json::{Value, json};

use super::control::omnidev_ok;
use super::{Ctx, SOON, UP};

/// A child process killed (by its pid) when dropped.
struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// One WebDriver request; the response's `value`.
fn webdriver(port: u16, method: &str, path: &str, body: Option<&Value>) -> Result<Value> {
    let body = body.map(Value::to_string).unwrap_or_default();
    let mut stream = TcpStream::connect(("127.0.0.1", port)).context("connect to chromedriver")?;
    stream.set_read_timeout(Some(UP))?;
    write!(
        stream,
        "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )?;
    // ChromeDriver keeps the connection open: the body is as long as its
    // Content-Length says.
    let mut answer = Vec::new();
    let mut chunk = [0u8; 16 * 1024];
    let body = loop {
        let n = stream.read(&mut chunk)?;
        ensure!(n > 0, "chromedriver hung up");
        answer.extend_from_slice(&chunk[..n]);
        let text = String::from_utf8_lossy(&answer);
        let Some((head, body)) = text.split_once("\r\n\r\n") else {
            continue;
        };
        let length = head
            .lines()
            .find_map(|line| {
                let (name, value) = line.split_once(':')?;
                name.eq_ignore_ascii_case("content-length")
                    .then(|| value.trim().parse::<usize>().ok())?
            })
            .context("no Content-Length")?;
        if body.len() >= length {
            break body.to_owned();
        }
    };
    let value: Value = serde_json::from_str(&body).with_context(|| format!("not JSON: {body}"))?;
    if let Some(error) = value["value"].get("error") {
        bail!("{method} {path}: {error}: {}", value["value"]["message"]);
    }
    Ok(value["value"].clone())
}

/// A browser session.
pub(super) struct Browser {
    port: u16,
    session: String,
    _driver: Killed,
}

impl Browser {
    pub(super) fn start(ctx: &Ctx) -> Result<Self> {
        // A port free now (chromedriver takes it at once).
        let port = std::net::TcpListener::bind(("127.0.0.1", 0))?.local_addr()?.port();
        let driver = ctx
            .command("chromedriver")
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .context("start chromedriver")?;
        let driver = Killed(driver);
        let deadline = Instant::now() + SOON;
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            ensure!(Instant::now() < deadline, "chromedriver did not listen");
            std::thread::sleep(Duration::from_millis(50));
        }
        // The flags keep Chromium off the network this machine does not
        // have and out of the user's profile.
        let args = [
            "--headless=new",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--window-size=1280,1000",
        ];
        let capabilities = json!({"capabilities": {"alwaysMatch": {
            "goog:chromeOptions": {"binary": "/usr/bin/chromium", "args": args}
        }}});
        let session = webdriver(port, "POST", "/session", Some(&capabilities))?;
        let session = session["sessionId"].as_str().context("no session id")?.to_owned();
        Ok(Self { port, session, _driver: driver })
    }

    fn call(&self, method: &str, path: &str, body: Option<&Value>) -> Result<Value> {
        let path = format!("/session/{}{path}", self.session);
        webdriver(self.port, method, &path, body)
    }

    pub(super) fn open(&self, url: &str) -> Result<()> {
        self.call("POST", "/url", Some(&json!({ "url": url }))).map(drop)
    }

    /// The value of `script` (a function body) in the page.
    pub(super) fn eval(&self, script: &str) -> Result<Value> {
        self.call("POST", "/execute/sync", Some(&json!({ "script": script, "args": [] })))
    }

    /// Waits until `script` gives something other than `null` or `false`.
    fn wait(&self, what: &str, timeout: Duration, script: &str) -> Result<Value> {
        let deadline = Instant::now() + timeout;
        loop {
            let value = self.eval(script)?;
            if !value.is_null() && value != Value::Bool(false) {
                return Ok(value);
            }
            if Instant::now() > deadline {
                bail!("{what}: not within {timeout:?}");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn screenshot(&self, width: u32, height: u32, to: &Path) -> Result<()> {
        let rect = json!({ "width": width, "height": height });
        self.call("POST", "/window/rect", Some(&rect))?;
        std::thread::sleep(Duration::from_millis(300));
        let png = self.call("GET", "/screenshot", None)?;
        let png = decode_base64(png.as_str().context("no screenshot")?)?;
        std::fs::write(to, png).with_context(|| to.display().to_string())
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        let _ = self.call("DELETE", "", None);
    }
}

fn decode_base64(text: &str) -> Result<Vec<u8>> {
    const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = Vec::with_capacity(text.len() * 3 / 4);
    let (mut bits, mut held) = (0u32, 0u32);
    for byte in text.bytes().filter(|b| *b != b'=') {
        let value = ALPHABET.iter().position(|a| *a == byte).context("not base64")?;
        bits = (bits << 6) | u32::try_from(value)?;
        held += 6;
        if held >= 8 {
            held -= 8;
            out.push(u8::try_from((bits >> held) & 0xff)?);
        }
    }
    Ok(out)
}

/// The pid `status --json` gives the server of the pod of `repo`.
fn server_pid(ctx: &mut Ctx, repo: &Path) -> Result<u64> {
    let status = omnidev_ok(ctx, repo, &["status", "--json"], SOON)?;
    let status: Value = serde_json::from_str(&status).context("status --json")?;
    status["services"]
        .as_array()
        .and_then(|services| services.iter().find(|s| s["name"] == "server"))
        .and_then(|server| server["pid"].as_u64())
        .with_context(|| format!("no server pid: {status}"))
}

/// The pod directory's name of the pod of `repo`.
fn pod_name(ctx: &mut Ctx, repo: &Path) -> Result<String> {
    let status = omnidev_ok(ctx, repo, &["status", "--json"], SOON)?;
    let status: Value = serde_json::from_str(&status).context("status --json")?;
    let dir = status["pod-dir"].as_str().context("no pod-dir")?;
    Ok(dir.rsplit('/').next().unwrap_or(dir).to_owned())
}

pub fn dashboard_in_chromium_two_worktrees(ctx: &mut Ctx) -> Result<()> {
    let main = ctx.checkout("dash")?;
    let worktree = ctx.dir.join("dash-feature");
    let added = ctx
        .command("git")
        .args(["worktree", "add", "-q", "-b", "feature"])
        .arg(&worktree)
        .current_dir(&main)
        .status()?;
    ensure!(added.success(), "git worktree add failed");
    let repos = [main, worktree];
    for repo in &repos {
        omnidev_ok(ctx, repo, &["up", "--detach", "--no-vite"], UP)?;
    }
    let names = [pod_name(ctx, &repos[0])?, pod_name(ctx, &repos[1])?];

    let mut dashboard = ctx.omnidev();
    dashboard.arg("dashboard").stdout(Stdio::piped());
    let mut dashboard = Killed(dashboard.spawn().context("start omnidev dashboard")?);
    let mut said = String::new();
    BufReader::new(dashboard.0.stdout.take().context("stdout")?).read_line(&mut said)?;
    let url = said
        .trim()
        .strip_prefix("dashboard ")
        .with_context(|| format!("no URL: {said:?}"))?
        .to_owned();

    let browser = Browser::start(ctx)?;
    browser.open(&url)?;
    for (name, branch) in names.iter().zip(["main", "feature"]) {
        // Its services with their state; the server's URL a link.
        let script = format!(
            r#"const pod = document.querySelector('[data-pod="{name}"]');
               if (!pod || pod.dataset.state !== "running") return null;
               const rows = pod.querySelectorAll("tbody tr").length;
               const link = pod.querySelector('tr[data-service="server"] a');
               return rows === 2 && link && pod.innerText.includes("on {branch}") ? link.href : null;"#
        );
        let link = browser.wait(&format!("pod {name} with its services"), UP, &script)?;
        ensure!(
            link.as_str().is_some_and(|l| l.starts_with("http://localhost:")),
            "the server's URL: {link}"
        );
    }

    // What the pod and its services hold, told while the page follows it.
    browser.wait(
        "the pod's usage on the page",
        UP,
        &format!(
            r#"const pod = document.querySelector('[data-pod="{}"]');
               const row = pod.querySelector('tr[data-service="server"] [data-usage]');
               return pod.querySelector("[data-pod-usage]").textContent.startsWith("uses ")
                 && row && row.textContent.includes(" MiB, ");"#,
            names[0]
        ),
    )?;
    a_printed_line_shows_within_a_second(ctx, &browser, &names[0])?;
    the_restart_button_gives_a_new_pid(ctx, &browser, &names[0], &repos[0])?;
    the_snapshot_and_restore_buttons(&browser, &names[0])?;

    let desktop = ctx.dir.join("dashboard-desktop.png");
    browser.screenshot(1280, 1000, &desktop)?;
    let narrow = ctx.dir.join("dashboard-narrow.png");
    browser.screenshot(400, 900, &narrow)?;
    ctx.note(format!("screenshots: {} {}", desktop.display(), narrow.display()));

    // Stopped from the CLI: shown stopped, the page not reloaded.
    browser.eval("window.notReloaded = true;")?;
    omnidev_ok(ctx, &repos[1], &["stop"], SOON)?;
    browser.wait(
        "the stopped pod shown stopped",
        SOON,
        &format!(
            r#"return window.notReloaded === true &&
                document.querySelector('[data-pod="{}"]').dataset.state === "stopped";"#,
            names[1]
        ),
    )?;
    no_secret_reaches_another_port(&browser, &url)?;
    a_failing_stream_is_retried_after_a_growing_pause(ctx, &browser)?;
    drop(browser);
    drop(dashboard);
    omnidev_ok(ctx, &repos[0], &["stop"], SOON)?;
    ctx.wait_no_pod_process(SOON)
}

/// The browser that has the dashboard open goes to another server on
/// 127.0.0.1 (another user's, say): what it sends there carries no secret
/// (a cookie would: cookies are not bound to a port).
fn no_secret_reaches_another_port(browser: &Browser, url: &str) -> Result<()> {
    let token = url.rsplit_once("token=").context("a secret in the URL")?.1.to_owned();
    let other = std::net::TcpListener::bind(("127.0.0.1", 0))?;
    let port = other.local_addr()?.port();
    let heard = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
    let ear = heard.clone();
    std::thread::spawn(move || {
        for stream in other.incoming() {
            let Ok(mut stream) = stream else { continue };
            let _ = stream.set_read_timeout(Some(Duration::from_secs(1)));
            let mut request = [0u8; 16 * 1024];
            let n = stream.read(&mut request).unwrap_or(0);
            if let Ok(mut heard) = ear.lock() {
                heard.push_str(&String::from_utf8_lossy(&request[..n]));
            }
            let _ = stream.write_all(
                b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: 22\r\n\
                  Connection: close\r\n\r\n<title>other</title>ok",
            );
        }
    });
    browser.open(&format!("http://127.0.0.1:{port}/"))?;
    browser.wait("the other server's page", SOON, "return document.title === \"other\";")?;
    let heard = heard.lock().map(|h| h.clone()).unwrap_or_default();
    ensure!(heard.starts_with("GET / "), "the other server heard: {heard:?}");
    ensure!(
        !heard.contains(&token),
        "the browser sent the dashboard's secret to another port: {heard:?}"
    );
    Ok(())
}

/// A line the server of pod `name` prints (it logs each request) is on the
/// page within a second.
fn a_printed_line_shows_within_a_second(
    ctx: &mut Ctx,
    browser: &Browser,
    name: &str,
) -> Result<()> {
    let port = browser.eval(&format!(
        r#"return new URL(document.querySelector('[data-pod="{name}"] tr[data-service="server"] a').href).port;"#
    ))?;
    let port: u16 = port.as_str().context("a port")?.parse()?;
    let mark = format!("/dashboard-e2e-{}", std::process::id());
    let mut request = TcpStream::connect(("127.0.0.1", port))?;
    write!(request, "GET {mark} HTTP/1.0\r\n\r\n")?;
    let asked = Instant::now();
    browser.wait(
        "the request's line on the page",
        Duration::from_secs(5),
        &format!(
            r#"return document.querySelector('[data-log="{name}"]').innerText.includes("{mark}");"#
        ),
    )?;
    let took = asked.elapsed();
    ctx.note(format!("a printed line reached the page in {took:?}"));
    ensure!(took <= Duration::from_secs(1), "the line took {took:?}");
    Ok(())
}

/// The restart button of the server of pod `name` (of `repo`): a new pid,
/// on the page and for the CLI.
fn the_restart_button_gives_a_new_pid(
    ctx: &mut Ctx,
    browser: &Browser,
    name: &str,
    repo: &Path,
) -> Result<()> {
    let before = server_pid(ctx, repo)?;
    browser.eval(&format!(
        r#"document.querySelector('[data-pod="{name}"] tr[data-service="server"] [data-action="restart"]').click();"#
    ))?;
    let shown = browser.wait(
        "a new server pid on the page",
        UP,
        &format!(
            r#"const pid = document.querySelector('[data-pod="{name}"] tr[data-service="server"]')?.dataset.pid;
               return pid && pid !== "{before}" ? pid : null;"#
        ),
    )?;
    let after = server_pid(ctx, repo)?;
    ensure!(after != before, "restart kept pid {before}");
    ensure!(shown == Value::String(after.to_string()), "page {shown}, CLI {after}");
    Ok(())
}

/// The pod's "snapshot db" button lists a snapshot of its database (the
/// example's SQLite file), whose "restore" button puts it back.
fn the_snapshot_and_restore_buttons(browser: &Browser, name: &str) -> Result<()> {
    let pod = format!(r#"document.querySelector('[data-pod="{name}"]')"#);
    browser.eval(&format!(r#"{pod}.querySelector('header [data-action="snapshot"]').click();"#))?;
    browser.wait(
        "a snapshot listed on the page",
        UP,
        &format!(r#"return {pod}.querySelector('li[data-snapshot^="db/"] [data-action="restore"]') ? true : null;"#),
    )?;
    browser.eval(&format!(
        r#"{pod}.querySelector('li[data-snapshot^="db/"] [data-action="restore"]').click();"#
    ))?;
    let restored = browser.wait(
        "the restore said on the page",
        UP,
        &format!(r#"return {pod}.querySelector("header").innerText.includes("restored db/") ? true : null;"#),
    );
    if restored.is_err() {
        // What the page said instead (an error, a message of another action).
        let header =
            browser.eval(&format!(r#"return {pod}.querySelector("header").innerText;"#))?;
        bail!("the restore did not say so within {UP:?}; the pod's header: {header}");
    }
    Ok(())
}

/// The dashboard's page, served by a stand-in server whose one pod runs
/// but whose event stream always fails: the page asks for it again after
/// a pause that grows, never in a loop (it once asked 50 times a second).
fn a_failing_stream_is_retried_after_a_growing_pause(
    ctx: &mut Ctx,
    browser: &Browser,
) -> Result<()> {
    const PAGE: &str = include_str!("../../../omnidev-cli/src/dashboard/page.html");
    let server = std::net::TcpListener::bind(("127.0.0.1", 0))?;
    let port = server.local_addr()?.port();
    let asked = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counted = asked.clone();
    std::thread::spawn(move || {
        for stream in server.incoming() {
            let Ok(mut stream) = stream else { continue };
            let _ = stream.set_read_timeout(Some(Duration::from_secs(1)));
            let mut head = [0u8; 8192];
            let n = stream.read(&mut head).unwrap_or(0);
            let head = String::from_utf8_lossy(&head[..n]);
            let path = head.split(' ').nth(1).unwrap_or_default();
            let (status, kind, body) = if path.starts_with("/?token=") {
                let page = PAGE.replace("{{TOKEN}}", "00").replace("{{ALLOW_UP}}", "no");
                ("200 OK", "text/html", page)
            } else if path.starts_with("/api/pods?") || path == "/api/pods" {
                let pods = r#"{"list":{"pods":[{"pod-dir":"/nowhere/stub-pod","repo":"/nowhere/stub","running":true}]},"branches":{}}"#;
                ("200 OK", "application/json", pods.to_owned())
            } else {
                if path.starts_with("/api/events") {
                    counted.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                }
                ("404 Not Found", "text/plain", "no such pod\n".to_owned())
            };
            let _ = write!(
                stream,
                "HTTP/1.1 {status}\r\nContent-Type: {kind}\r\nContent-Length: {}\r\n\
                 Connection: close\r\n\r\n{body}",
                body.len()
            );
        }
    });
    browser.open(&format!("http://127.0.0.1:{port}/?token=00"))?;
    browser.wait(
        "the stand-in pod listed",
        SOON,
        r#"return document.querySelector('[data-pod="stub-pod"]') !== null;"#,
    )?;
    let watched = Duration::from_secs(6);
    std::thread::sleep(watched);
    let asked = asked.load(std::sync::atomic::Ordering::Relaxed);
    ctx.note(format!("a failing stream was asked for {asked} times in {watched:?}"));
    // At 0, 1, 3 s (and 7 s): a few, whatever the machine's speed.
    ensure!((1..=5).contains(&asked), "a failing stream asked for {asked} times in {watched:?}");
    Ok(())
}

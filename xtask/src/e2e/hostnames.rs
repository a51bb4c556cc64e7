//! Pods' own host names (`[pod] hostnames`, `{host.pod}`): in a real
//! browser, two worktrees' apps logged in on their own host names keep
//! their own cookies, where on `localhost` (a cookie belongs to a host,
//! not a port) the second login takes the first one's place.

use std::path::Path;

use anyhow::{Context, Result, ensure};

use super::control::omnidev_ok;
use super::dashboard::Browser;
use super::{Ctx, SOON, UP};

/// A login that sets a cookie and a page that shows the cookie it got.
const APP: &str = r#"import http.server, sys, urllib.parse
class App(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        url = urllib.parse.urlsplit(self.path)
        self.send_response(200)
        if url.path == "/login":
            who = urllib.parse.parse_qs(url.query).get("as", ["?"])[0]
            self.send_header("Set-Cookie", f"who={who}; Path=/")
            body = b"logged in"
        else:
            body = (self.headers.get("Cookie") or "none").encode()
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *args):
        pass
http.server.ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), App).serve_forever()
"#;

const PROFILE: &str = r#"[pod]
hostnames = true

[ports]
app = 18400

[services.app]
command = ["python3", "app.py", "{port.app}"]
ready = { http = "http://127.0.0.1:{port.app}/whoami" }
grace-ms = 1000

[urls]
app = "http://localhost:{port.app}"
"#;

/// The app's URL as `status --json` of the pod of `repo` gives it.
fn app_url(ctx: &mut Ctx, repo: &Path) -> Result<String> {
    let status = omnidev_ok(ctx, repo, &["status", "--json"], SOON)?;
    let status: serde_json::Value = serde_json::from_str(&status)?;
    (status["urls"].as_array().into_iter().flatten())
        .find(|url| url["name"] == "app")
        .and_then(|url| url["url"].as_str())
        .map(str::to_owned)
        .with_context(|| format!("no app URL: {status}"))
}

pub fn pod_host_names_keep_cookies_apart(ctx: &mut Ctx) -> Result<()> {
    let mut repos = Vec::new();
    let mut urls = Vec::new();
    for (name, branch) in [("shop", "main"), ("shop-login", "login")] {
        let repo = ctx.dir.join(name);
        std::fs::create_dir_all(&repo)?;
        std::fs::write(repo.join("app.py"), APP)?;
        std::fs::write(repo.join("omnidev.toml"), PROFILE)?;
        let made =
            ctx.command("git").args(["init", "-q", "-b", branch]).current_dir(&repo).status()?;
        ensure!(made.success(), "git init failed");
        omnidev_ok(ctx, &repo, &["up", "--detach"], UP)?;
        urls.push(app_url(ctx, &repo)?);
        repos.push(repo);
    }
    ensure!(
        urls[0].starts_with("http://main.shop.localhost:")
            && urls[1].starts_with("http://login.shop-login.localhost:"),
        "each pod's URL on its own host name: {urls:?}"
    );
    let browser = Browser::start(ctx)?;
    let page = |url: String| -> Result<String> {
        browser.open(&url)?;
        let text = browser.eval("return document.body.innerText;")?;
        Ok(text.as_str().unwrap_or_default().trim().to_owned())
    };
    page(format!("{}/login?as=one", urls[0]))?;
    page(format!("{}/login?as=two", urls[1]))?;
    let first = page(format!("{}/whoami", urls[0]))?;
    let second = page(format!("{}/whoami", urls[1]))?;
    ensure!(
        first == "who=one" && second == "who=two",
        "each pod keeps its own login: {first:?}, {second:?}"
    );
    // On localhost the two ports share one cookie jar: the second login
    // takes the first one's place (what host names are for).
    let on_localhost = |url: &str| {
        let port = url.rsplit(':').next().unwrap_or_default();
        format!("http://localhost:{port}")
    };
    page(format!("{}/login?as=three", on_localhost(&urls[0])))?;
    page(format!("{}/login?as=four", on_localhost(&urls[1])))?;
    let shared = page(format!("{}/whoami", on_localhost(&urls[0])))?;
    ensure!(shared == "who=four", "localhost's ports share cookies: {shared:?}");
    ctx.note(format!("{} and {}: their own cookies", urls[0], urls[1]));
    drop(browser);
    for repo in &repos {
        omnidev_ok(ctx, repo, &["stop"], SOON)?;
    }
    ctx.wait_no_pod_process(SOON)
}

/// The status of the pod of `repo`.
fn status(ctx: &mut Ctx, repo: &Path) -> Result<serde_json::Value> {
    let (_, out) = super::control::omnidev(ctx, repo, &["status", "--json"], SOON)?;
    Ok(serde_json::from_str(&out)?)
}

/// Service `name` of a status.
fn service<'s>(status: &'s serde_json::Value, name: &str) -> &'s serde_json::Value {
    (status["services"].as_array().into_iter().flatten())
        .find(|s| s["name"] == name)
        .unwrap_or(&serde_json::Value::Null)
}

/// Waits until `check` of the status of the pod of `repo` holds.
fn wait_status(
    ctx: &mut Ctx,
    repo: &Path,
    what: &str,
    check: impl Fn(&serde_json::Value) -> bool,
) -> Result<serde_json::Value> {
    let deadline = std::time::Instant::now() + UP;
    loop {
        let now = status(ctx, repo)?;
        if check(&now) {
            return Ok(now);
        }
        ensure!(std::time::Instant::now() < deadline, "{what}: not within {UP:?}: {now}");
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
}

/// Two worktrees of the bundled example's backend, two frontend-only
/// checkouts each linked to its own: each frontend gets its backend's
/// URL, waits for it, and follows it down and back up; the other pair
/// is untouched.
pub fn two_frontends_each_linked_to_its_own_backend(ctx: &mut Ctx) -> Result<()> {
    let api = ctx.checkout("api")?;
    let api_2 = ctx.dir.join("api-2");
    let added = ctx
        .command("git")
        .args(["worktree", "add", "-q", "-b", "feature"])
        .arg(&api_2)
        .current_dir(&api)
        .status()?;
    ensure!(added.success(), "git worktree add failed");
    let backends = [api, api_2];
    for backend in &backends {
        omnidev_ok(ctx, backend, &["up", "--detach", "--no-vite"], UP)?;
    }
    let mut fronts = Vec::new();
    for (front, backend) in [("front-1", "../api"), ("front-2", "../api-2")] {
        let repo = ctx.dir.join(front);
        std::fs::create_dir_all(repo.join(".git"))?;
        std::fs::write(
            repo.join("omnidev.toml"),
            format!(
                r#"[links.backend]
checkout = "{backend}"

[services.web]
command = ["sh", "-c", "echo \"api=$API\"; exec sleep 300"]
depends-on = {{ "backend.server" = "ready" }}
grace-ms = 1000

[services.web.env]
API = "{{link.backend.url.server}}"
"#
            ),
        )?;
        omnidev_ok(ctx, &repo, &["up", "--detach"], UP)?;
        fronts.push(repo);
    }
    for (front, backend) in fronts.clone().iter().zip(backends.clone().iter()) {
        let theirs = status(ctx, backend)?;
        let port = theirs["ports"]["server"].as_u64().context("a server port")?;
        let said = omnidev_ok(ctx, front, &["logs", "web"], SOON)?;
        ensure!(
            said.contains(&format!("api=http://localhost:{port}")),
            "{} got its own backend's URL (port {port}): {said}",
            front.display()
        );
    }
    let before = status(ctx, &fronts[0])?;
    let web = service(&before, "web")["pid"].clone();
    let other = service(&status(ctx, &fronts[1])?, "web")["pid"].clone();

    // Backend 1 down: frontend 1's web is stopped and waits, blocked on
    // it; frontend 2 is untouched.
    omnidev_ok(ctx, &backends[0], &["stop"], SOON)?;
    wait_status(ctx, &fronts[0], "frontend 1 blocked on its backend", |s| {
        let web = service(s, "web");
        web["state"] == "blocked"
            && web["pid"].is_null()
            && (web["reason"].as_str())
                .is_some_and(|r| r.starts_with("waiting for backend.server: "))
    })?;
    let untouched = status(ctx, &fronts[1])?;
    ensure!(
        service(&untouched, "backend.server")["ready"] == true
            && service(&untouched, "web")["pid"] == other,
        "frontend 2 untouched: {untouched}"
    );

    // Back: frontend 1's web restarts once its backend is ready again.
    omnidev_ok(ctx, &backends[0], &["up", "--detach", "--no-vite"], UP)?;
    wait_status(ctx, &fronts[0], "frontend 1 following its backend back", |s| {
        service(s, "backend.server")["ready"] == true
            && service(s, "web")["pid"].is_u64()
            && service(s, "web")["pid"] != web
    })?;
    ctx.note("each frontend waited for and followed its own backend");
    for repo in fronts.iter().chain(&backends) {
        omnidev_ok(ctx, repo, &["stop"], SOON)?;
    }
    ctx.wait_no_pod_process(SOON)
}

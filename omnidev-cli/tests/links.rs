//! `[links.NAME]`: a checkout's pod wired to another checkout's pod by
//! name — its ports, URLs and databases in placeholders — found by path or
//! by a worktree's branch, pointed elsewhere with `up --link`, reported by
//! `status`; and the links that cannot be followed, each with a clear
//! error.

#[path = "support/context.rs"]
mod common;

use std::path::{Path, PathBuf};

use common::{TestContext, service, stderr, wait_for};
use omnidev_test_support::git;

const DEADLINE: std::time::Duration = std::time::Duration::from_secs(60);

/// A checkout `name` beside the context's, whose pod serves `api` (an
/// HTTP server) and has an SQLite database `main`.
fn backend(ctx: &TestContext, name: &str) -> PathBuf {
    let dir = ctx.root.join(name);
    std::fs::create_dir_all(dir.join(".git")).expect("mkdir");
    write_backend_profile(&dir);
    dir
}

/// The backend's profile in `dir`, its port's base a quiet port of this
/// test's own (tests run at once, each with its own port registry).
fn write_backend_profile(dir: &Path) {
    let base = omnidev_test_support::ports::quiet_ports(1)[0];
    std::fs::write(
        dir.join("omnidev.toml"),
        r#"
[ports]
api = BASE

[databases.main]
engine = "sqlite"

[services.api]
command = ["python3", "-m", "http.server", "{port.api}", "--bind", "127.0.0.1"]
ready = { tcp = "127.0.0.1:{port.api}" }
grace-ms = 1000

[urls]
api = "http://localhost:{port.api}"
"#
        .replace("BASE", &base.to_string()),
    )
    .expect("write");
}

/// The context's checkout as a frontend linked to `checkout` as
/// `backend`: its service prints what it was given of the backend.
fn frontend(ctx: &TestContext, checkout: &str) {
    ctx.write(
        "omnidev.toml",
        &format!(
            r#"
[links.backend]
checkout = "{checkout}"

[services.web]
command = ["sh", "-c", "echo \"api=$API port=$API_PORT db=$API_DB\"; exec sleep 300"]
grace-ms = 1000

[services.web.env]
API = "{{link.backend.url.api}}"
API_PORT = "{{link.backend.port.api}}"
API_DB = "{{link.backend.db.main.path}}"
"#
        ),
    );
}

fn up_in(ctx: &TestContext, dir: &Path) {
    ctx.run_ok(&["up", "--detach", "--repo", &dir.to_string_lossy()]);
}

fn stop_in(ctx: &TestContext, dir: &Path) {
    let _ = ctx.run(&["stop", "--repo", &dir.to_string_lossy()]);
}

fn port_of(ctx: &TestContext, dir: &Path) -> u64 {
    let status = ctx.json(&["status", "--json", "--repo", &dir.to_string_lossy()]);
    status["ports"]["api"].as_u64().expect("the api port")
}

/// The line the frontend's `web` printed.
fn web_said(ctx: &TestContext) -> String {
    let mut said = String::new();
    wait_for("web's line", DEADLINE, || {
        said = ctx.run_ok(&["logs", "web"]);
        said.contains("api=")
    });
    said
}

#[test]
fn a_frontend_gets_its_backends_url_port_and_database_and_status_says_so() {
    let ctx = TestContext::new();
    let api = backend(&ctx, "backend");
    frontend(&ctx, "../backend");
    // Before the backend ever ran there is no pod to read.
    let refused = ctx.assert(&["up", "--detach"]).failure();
    let said = stderr(&refused);
    assert!(said.contains("link `backend`") && said.contains("has no pod yet"), "{said}");
    assert!(said.contains("omnidev up --detach --repo"), "{said}");

    up_in(&ctx, &api);
    let _stop = ctx.stop_on_drop();
    let port = port_of(&ctx, &api);
    ctx.run_ok(&["up", "--detach"]);
    let said = web_said(&ctx);
    let api_pod = ctx.json(&["status", "--json", "--repo", &api.to_string_lossy()]);
    let db = Path::new(api_pod["pod-dir"].as_str().expect("pod-dir")).join("data/main/main.db");
    assert!(
        said.contains(&format!("api=http://localhost:{port} port={port} db={}", db.display())),
        "{said}"
    );
    // What the link resolved to, and whether that pod runs.
    let status = ctx.json(&["status", "--json"]);
    let link = &status["links"]["backend"];
    assert_eq!(link["checkout"], api.to_string_lossy().as_ref(), "{status}");
    assert_eq!(link["ports"]["api"], port, "{status}");
    assert_eq!(link["running"], true, "{status}");
    // The same in the dashboard's page and in the pod's first events.
    let shown = ctx.dashboard_told(&status, "links", |_| true);
    assert_eq!(shown["backend"], *link, "{shown}");
    let events = ctx.run_ok(&["events", "--json"]);
    let told = (events.lines())
        .map(|l| serde_json::from_str::<serde_json::Value>(l).expect("a record"))
        .find(|r| r["kind"] == "link")
        .unwrap_or_else(|| panic!("no link event: {events}"));
    assert_eq!(told["name"], "backend", "{told}");
    assert_eq!(told["checkout"], link["checkout"], "{told}");
    assert_eq!(told["ports"]["api"], port, "{told}");
    stop_in(&ctx, &api);
    let status = ctx.json(&["status", "--json"]);
    assert_eq!(status["links"]["backend"]["running"], false, "{status}");
    let text = ctx.run_ok(&["status"]);
    assert!(text.contains("link    backend → "), "{text}");
    // A link only reads: the stopped backend's pod is byte for byte the
    // same after the frontend started again on it.
    let backend_pod = Path::new(api_pod["pod-dir"].as_str().expect("pod-dir")).to_owned();
    let before = common::listing(&backend_pod, Path::new("/nothing"));
    ctx.run_ok(&["stop"]);
    ctx.run_ok(&["up", "--detach"]);
    assert!(service(&ctx.json(&["status", "--json"]), "web")["pid"].is_u64());
    assert_eq!(common::listing(&backend_pod, Path::new("/nothing")), before);
}

#[test]
fn up_link_points_a_link_at_another_checkout_for_one_run() {
    let ctx = TestContext::new();
    let first = backend(&ctx, "backend");
    let second = backend(&ctx, "backend-2");
    frontend(&ctx, "../backend");
    up_in(&ctx, &first);
    up_in(&ctx, &second);
    let _stop_first = StopIn(&ctx, first.clone());
    let _stop_second = StopIn(&ctx, second.clone());
    let port = port_of(&ctx, &second);
    assert_ne!(port, port_of(&ctx, &first));
    let _stop = ctx.stop_on_drop();
    ctx.run_ok(&["up", "--detach", "--link", "backend=../backend-2"]);
    assert!(web_said(&ctx).contains(&format!("port={port} ")));
    // A link the profile does not declare cannot be pointed anywhere.
    ctx.run_ok(&["stop"]);
    let refused = ctx.assert(&["up", "--detach", "--link", "api=../backend"]).failure();
    assert!(stderr(&refused).contains("link `api`: is not declared"));
}

#[test]
fn a_link_names_a_worktree_by_its_branch() {
    let ctx = TestContext::new();
    // One repository: this checkout on `main`, the backend a worktree of
    // it on branch `api`.
    std::fs::remove_dir_all(ctx.repo.join(".git")).expect("rm");
    git(&ctx.repo, &["init", "-q"]);
    git(&ctx.repo, &["commit", "-q", "--allow-empty", "-m", "one"]);
    let api = ctx.root.join("api-worktree");
    git(&ctx.repo, &["worktree", "add", "-q", "-b", "api", &api.to_string_lossy()]);
    write_backend_profile(&api);
    frontend(&ctx, "api");
    up_in(&ctx, &api);
    let _stop_api = StopIn(&ctx, api.clone());
    let port = port_of(&ctx, &api);
    let _stop = ctx.stop_on_drop();
    ctx.run_ok(&["up", "--detach"]);
    assert!(web_said(&ctx).contains(&format!("port={port} ")));
}

#[test]
fn links_that_cannot_be_followed_say_why() {
    let ctx = TestContext::new();
    let refused = |ctx: &TestContext| stderr(&ctx.assert(&["up", "--detach"]).failure());
    // Missing.
    frontend(&ctx, "../nowhere");
    let said = refused(&ctx);
    assert!(said.contains("`../nowhere` is neither a directory"), "{said}");
    // Itself.
    frontend(&ctx, ".");
    let said = refused(&ctx);
    assert!(said.contains("is this checkout itself"), "{said}");
    // A loop: the backend links back to this checkout.
    let api = backend(&ctx, "backend");
    let mut profile = std::fs::read_to_string(api.join("omnidev.toml")).expect("read");
    profile.push_str("\n[links.front]\ncheckout = \"../repo\"\n");
    std::fs::write(api.join("omnidev.toml"), profile).expect("write");
    frontend(&ctx, "../backend");
    let said = refused(&ctx);
    assert!(said.contains("links go round in a loop"), "{said}");
    assert!(said.contains("repo → ") && said.contains("backend → "), "{said}");
    // A placeholder of an undeclared link is the profile's error.
    ctx.write("omnidev.toml", "[services.web]\ncommand = [\"echo\", \"{link.api.port.x}\"]\n");
    let said = stderr(&ctx.assert(&["profile", "check"]).failure());
    assert!(said.contains("unknown link `api`"), "{said}");
    // Nothing was left running.
    let status: serde_json::Value =
        serde_json::from_slice(&ctx.run(&["status", "--json"]).stdout).expect("status");
    assert_eq!(status["running"], false, "{status}");
}

/// Stops the pod of a checkout when dropped.
struct StopIn<'c>(&'c TestContext, PathBuf);

impl Drop for StopIn<'_> {
    fn drop(&mut self) {
        stop_in(self.0, &self.1);
    }
}

/// `depends-on = { "backend.api" = "ready" }`: the frontend's service
/// waits, shown blocked on the watch's words, while the linked backend is
/// stopped, starts once the backend's service is ready, and is stopped to
/// wait again (`link-down`, `link-up` events) when it goes down and comes
/// back.
#[test]
fn a_service_waits_for_a_linked_pods_service_and_follows_it() {
    let ctx = TestContext::new();
    let api = backend(&ctx, "backend");
    // The backend ran once (its pod exists) and is stopped now.
    up_in(&ctx, &api);
    stop_in(&ctx, &api);
    let _stop_api = StopIn(&ctx, api.clone());
    ctx.write(
        "omnidev.toml",
        r#"
[links.backend]
checkout = "../backend"

[services.web]
command = ["sh", "-c", "echo started; exec sleep 300"]
depends-on = { "backend.api" = "ready" }
grace-ms = 1000
"#,
    );
    let _stop = ctx.stop_on_drop();
    // Detached with a short wait: the backend is not there to be ready.
    let _ = ctx.run(&["up", "--detach", "--ready-timeout", "2"]);
    let state = |name: &str| {
        let status: serde_json::Value =
            serde_json::from_slice(&ctx.run(&["status", "--json"]).stdout).expect("status");
        service(&status, name).clone()
    };
    wait_for("web blocked on the watch's words", DEADLINE, || {
        let web = state("web");
        web["state"] == "blocked"
            && (web["reason"].as_str()).is_some_and(|r| {
                r.starts_with("waiting for backend.api: the pod ") && r.ends_with(" is not running")
            })
    });
    assert_eq!(state("backend.api")["state"], "blocked");
    assert!(state("web")["pid"].is_null());
    // Told once, in its own words, however long it waits.
    let said = ctx.run_ok(&["logs", "backend.api"]);
    assert_eq!(said.matches("down: the pod ").count(), 1, "{said}");

    up_in(&ctx, &api);
    wait_for("web started once the backend is ready", DEADLINE, || state("web")["pid"].is_u64());
    assert_eq!(state("backend.api")["ready"], true);
    let first = state("web")["pid"].as_u64();

    // Down: web is stopped and blocked; up again: web starts after it.
    stop_in(&ctx, &api);
    wait_for("web stopped and blocked on the backend", DEADLINE, || {
        let web = state("web");
        web["state"] == "blocked" && web["pid"].is_null()
    });
    up_in(&ctx, &api);
    wait_for("web restarted once the backend is back", DEADLINE, || {
        let web = state("web");
        web["pid"].is_u64() && web["pid"].as_u64() != first
    });
    assert_eq!(state("backend.api")["ready"], true);
    let events = ctx.run_ok(&["events", "--json", "backend.api"]);
    let mut kinds: Vec<&str> = (events.lines())
        .filter_map(|l| l.split("\"kind\":\"").nth(1)?.split('"').next())
        .filter(|k| k.starts_with("link-"))
        .collect();
    // (Down twice in a row when the watch saw the stop begin, then the
    // pod gone: two reasons.)
    kinds.dedup();
    assert_eq!(kinds, ["link-down", "link-up", "link-down", "link-up"], "{events}");
}

/// `up --with-links` starts a linked pod that never ran, in its own
/// checkout and in the background, before this one; without it the pod
/// is never started by a link.
#[test]
fn with_links_starts_the_linked_pods_that_do_not_run() {
    let ctx = TestContext::new();
    let api = backend(&ctx, "backend");
    frontend(&ctx, "../backend");
    let _stop_api = StopIn(&ctx, api.clone());
    let _stop = ctx.stop_on_drop();
    let said = ctx.assert(&["up", "--detach", "--with-links"]).success();
    assert!(stderr(&said).contains("starting the pod of link `backend`"), "{}", stderr(&said));
    let backend_status = ctx.json(&["status", "--json", "--repo", &api.to_string_lossy()]);
    assert_eq!(backend_status["running"], true, "{backend_status}");
    let port = backend_status["ports"]["api"].as_u64().expect("a port");
    assert!(web_said(&ctx).contains(&format!("port={port} ")));
    // Running already: started again by nobody, said by nobody.
    ctx.run_ok(&["stop"]);
    let said = ctx.assert(&["up", "--detach", "--with-links"]).success();
    assert!(!stderr(&said).contains("starting the pod"), "{}", stderr(&said));
    assert_eq!(
        ctx.json(&["status", "--json", "--repo", &api.to_string_lossy()])["pid"],
        backend_status["pid"]
    );
}

/// A link added to the profile of a running pod is followed by
/// `reload-profile` (resolved again, as `up` resolves it); `status` then
/// shows it.
#[test]
fn a_reload_follows_a_link_added_to_the_profile() {
    let ctx = TestContext::new();
    let api = backend(&ctx, "backend");
    up_in(&ctx, &api);
    let _stop_api = StopIn(&ctx, api.clone());
    ctx.write(
        "omnidev.toml",
        "[services.web]\ncommand = [\"sh\", \"-c\", \"echo api=none; exec sleep 300\"]\ngrace-ms = 1000\n",
    );
    let _stop = ctx.stop_on_drop();
    ctx.run_ok(&["up", "--detach"]);
    frontend(&ctx, "../backend");
    ctx.run_ok(&["reload-profile"]);
    let port = port_of(&ctx, &api);
    wait_for("web restarted with the backend's URL", DEADLINE, || {
        ctx.run_ok(&["logs", "web"]).contains(&format!("api=http://localhost:{port}"))
    });
    let status = ctx.json(&["status", "--json"]);
    assert_eq!(status["links"]["backend"]["checkout"], api.to_string_lossy().as_ref(), "{status}");
}

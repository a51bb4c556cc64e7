//! The Omnigent profile rendered for a real checkout: the environment every
//! service gets, and the commands and dependencies of its services.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use omnidev_core::{Condition, PrepareWhen, ProbeSpec, ServiceSpec};
use omnidev_pod::{Error, Profile, RenderContext, Selection};
use omnidev_test_support::write_script;

struct Fixture {
    _tmp: tempfile::TempDir,
    repo: PathBuf,
    pod: PathBuf,
    bin: PathBuf,
}

fn fixture() -> Fixture {
    let tmp = tempfile::tempdir().expect("tempdir");
    let repo = tmp.path().join("omnigent");
    for dir in ["omnigent", "web", ".git"] {
        std::fs::create_dir_all(repo.join(dir)).expect("mkdir");
    }
    let bin = tmp.path().join("bin");
    std::fs::create_dir(&bin).expect("mkdir");
    Fixture { pod: tmp.path().join("pod"), repo, bin, _tmp: tmp }
}

fn fake_tool(dir: &Path, name: &str) -> PathBuf {
    write_script(&dir.join(name), "exit 0\n")
}

fn context(f: &Fixture) -> RenderContext {
    let mut ctx = RenderContext {
        repo: f.repo.clone(),
        pod_dir: f.pod.clone(),
        path: f.bin.clone().into_os_string(),
        ..Default::default()
    };
    ctx.ports.0.insert("server".into(), 6800);
    ctx.ports.0.insert("vite".into(), 5200);
    ctx.inherited_env.insert("HOME".into(), "/home/ada".into());
    ctx.runtime_dir = Some("/run/user/1000/omnidev".into());
    ctx
}

fn service<'a>(services: &'a [ServiceSpec], name: &str) -> &'a ServiceSpec {
    services.iter().find(|s| s.name == name).expect("service")
}

#[test]
fn every_service_gets_the_pod_environment() {
    let f = fixture();
    fake_tool(&f.bin, "npm");
    let pod = f.pod.display().to_string();
    let rendered = Profile::omnigent().render(&context(&f)).expect("render");

    let expected = BTreeMap::from([
        ("OMNIGENT_DATA_DIR".to_owned(), format!("{pod}/data/omnigent")),
        ("OMNIGENT_DATABASE_URI".to_owned(), format!("sqlite:///{pod}/data/omnigent/chat.db")),
        ("OMNIGENT_URL".to_owned(), "http://127.0.0.1:6800".to_owned()),
        ("OMNIGENT_CONFIG_HOME".to_owned(), format!("{pod}/config")),
        // The pod's own runtime and temp directories, and omnidev's.
        ("XDG_RUNTIME_DIR".to_owned(), format!("{pod}/run")),
        ("TMPDIR".to_owned(), format!("{pod}/tmp")),
        ("OMNIDEV_RUNTIME_DIR".to_owned(), "/run/user/1000/omnidev".to_owned()),
    ]);
    assert_eq!(*rendered.env, expected, "no LAN origins: no OMNIGENT_WS_ALLOWED_ORIGINS");

    for name in ["server", "host"] {
        let env = &service(&rendered.services, name).command.env;
        assert_eq!(env["OMNIGENT_LOG_TTY_FD"], "2");
        assert_eq!(env["OMNIGENT_LOG_FORCE_COLOR"], "1");
        assert_eq!(env["OMNIGENT_SKIP_WEB_UI"], "true");
        assert_eq!(env["OMNIGENT_URL"], "http://127.0.0.1:6800");
    }
    let vite = &service(&rendered.services, "vite").command.env;
    assert!(vite.get("OMNIGENT_LOG_TTY_FD").is_none());
    assert_eq!(vite["OMNIGENT_URL"], "http://127.0.0.1:6800", "read by web/vite.config.ts");
    assert_eq!(rendered.urls, [], "every URL is a service's");
    let urls: Vec<_> = rendered
        .services
        .iter()
        .flat_map(|s| s.urls.iter().map(|u| (s.name.as_str(), u.name.as_str(), u.url.as_str())))
        .collect();
    assert_eq!(
        urls,
        [("server", "server", "http://localhost:6800"), ("vite", "ui", "http://localhost:5200"),]
    );
    assert_eq!(rendered.debounce, Duration::from_millis(100));
}

#[test]
fn lan_origins_merge_with_the_inherited_value() {
    let f = fixture();
    fake_tool(&f.bin, "npm");
    let mut ctx = context(&f);
    ctx.lan_origins = vec!["http://10.0.0.5:5200".into(), "http://192.168.1.2:5200".into()];
    ctx.inherited_env.insert(
        "OMNIGENT_WS_ALLOWED_ORIGINS".into(),
        " https://app.example , http://10.0.0.5:5200,,https://app.example".into(),
    );
    let rendered = Profile::omnigent().render(&ctx).expect("render");
    let merged = "https://app.example,http://10.0.0.5:5200,http://192.168.1.2:5200";
    assert_eq!(rendered.env["OMNIGENT_WS_ALLOWED_ORIGINS"], merged);
    assert_eq!(
        service(&rendered.services, "server").command.env["OMNIGENT_WS_ALLOWED_ORIGINS"],
        merged
    );

    // Inherited value but no LAN origins: the variable is not set by omnidev.
    ctx.lan_origins.clear();
    let rendered = Profile::omnigent().render(&ctx).expect("render");
    assert!(!rendered.env.contains_key("OMNIGENT_WS_ALLOWED_ORIGINS"));
}

#[test]
fn the_backend_runs_on_the_checkouts_python_whatever_uv_python_says() {
    let f = fixture();
    std::fs::write(f.repo.join(".python-version"), "3.13\n").expect("write");
    let mut ctx = RenderContext::from_process_env(f.repo.clone(), f.pod.clone(), context(&f).ports);
    ctx.selection.skip = vec!["vite".into()];
    ctx.inherited_env.insert("UV_PYTHON".into(), "3.11".into());
    let rendered = Profile::omnigent().render(&ctx).expect("render");
    let server = &service(&rendered.services, "server").command.args;
    assert_eq!(server[..5], ["run", "--python", "3.13", "--with=", "omnigent"]);
    let host = &service(&rendered.services, "host").command.args;
    assert_eq!(host[..4], ["run", "--python", "3.13", "omnigent"]);
    std::fs::write(f.repo.join(".python-version"), "3.13 --oops\n").expect("write");
    let ctx = RenderContext { python: omnidev_pod::python::PythonPin::of_checkout(&f.repo), ..ctx };
    let error = Profile::omnigent().render(&ctx).expect_err("bad pin");
    assert!(error.to_string().contains(".python-version"), "{error}");
}

#[test]
fn omnigent_services_commands_and_dependencies() {
    let f = fixture();
    let npm = fake_tool(&f.bin, "npm");
    let ctx = context(&f);
    let rendered = Profile::omnigent().render(&ctx).expect("render");
    let pod = f.pod.display().to_string();
    assert_eq!(
        rendered.services.iter().map(|s| s.name.as_str()).collect::<Vec<_>>(),
        ["server", "host", "vite"]
    );

    let server = service(&rendered.services, "server");
    assert_eq!(server.command.program, "uv");
    assert_eq!(
        server.command.args,
        [
            "run",
            "--python",
            "3.12",
            "--with=",
            "omnigent",
            "--log-to-stderr",
            "server",
            "--host",
            "127.0.0.1",
            "--port",
            "6800",
            "--database-uri",
            &format!("sqlite:///{pod}/data/omnigent/chat.db"),
            "--artifact-location",
            &format!("{pod}/artifacts"),
        ]
    );
    assert_eq!(server.command.cwd, f.repo.join("."));
    let readiness = server.readiness.as_ref().expect("probe");
    assert_eq!(
        readiness.probe,
        ProbeSpec::Http { url: "http://127.0.0.1:6800/health".into(), host: None }
    );
    assert!(server.depends_on.is_empty());
    assert_eq!(rendered.watch.len(), 1);
    assert_eq!(rendered.watch[0].service, "server");
    assert_eq!(rendered.watch[0].globs, ["omnigent/**/*.py"]);

    let host = service(&rendered.services, "host");
    assert_eq!(
        host.command.args,
        [
            "run",
            "--python",
            "3.12",
            "omnigent",
            "--log-to-stderr",
            "host",
            "--server",
            "http://127.0.0.1:6800"
        ]
    );
    assert_eq!(host.depends_on.len(), 1);
    assert_eq!(host.depends_on[0].service, "server");
    assert_eq!(host.depends_on[0].condition, Condition::Ready);

    let vite = service(&rendered.services, "vite");
    assert_eq!(vite.command.program, npm.display().to_string());
    assert_eq!(
        vite.command.args,
        ["run", "dev", "--", "--host", "127.0.0.1", "--port", "5200", "--strictPort"]
    );
    assert_eq!(vite.command.cwd, f.repo.join("web"));
    assert_eq!(vite.prepare.len(), 1);
    let install = &vite.prepare[0];
    assert_eq!(install.command.args, ["install"]);
    assert_eq!(install.heartbeat, Duration::from_secs(5));
    match &install.when {
        PrepareWhen::Stale { target, sources } => {
            assert_eq!(target, &f.repo.join("web/node_modules"));
            assert!(sources.contains(&f.repo.join("web/package.json")));
            assert!(sources.contains(&f.repo.join("web/package-lock.json")));
        }
        PrepareWhen::Always => panic!("install should run only when stale"),
    }
}

#[test]
fn pnpm_through_corepack_passes_flags_directly_and_vite_host_is_templated() {
    let f = fixture();
    std::fs::write(f.repo.join("web/pnpm-lock.yaml"), "").expect("lockfile");
    let corepack = fake_tool(&f.bin, "corepack");
    let mut ctx = context(&f);
    ctx.hosts.insert("vite".into(), "0.0.0.0".into());
    let rendered = Profile::omnigent().render(&ctx).expect("render");
    let vite = service(&rendered.services, "vite");
    assert_eq!(vite.command.program, corepack.display().to_string());
    assert_eq!(
        vite.command.args,
        ["pnpm", "run", "dev", "--host", "0.0.0.0", "--port", "5200", "--strictPort"]
    );
    assert_eq!(vite.prepare[0].name, "pnpm install");
}

#[test]
fn missing_package_manager_is_a_clear_error_unless_vite_is_skipped() {
    let f = fixture();
    let mut ctx = context(&f);
    let err = Profile::omnigent().render(&ctx).expect_err("no npm on PATH");
    let help = miette::Diagnostic::help(&err).map(|h| h.to_string()).unwrap_or_default();
    assert!(matches!(err, Error::PackageManagerMissing { .. }));
    assert!(err.to_string().contains("npm"), "{err}");
    assert!(help.contains("--no-vite"), "{help}");

    ctx.selection = Selection { skip: vec!["vite".into()], ..Default::default() };
    let rendered = Profile::omnigent().render(&ctx).expect("--no-vite needs no npm");
    assert_eq!(rendered.services.len(), 2);
}

#[test]
fn selection_drops_dangling_dependencies_and_rejects_unknown_names() {
    let f = fixture();
    let mut ctx = context(&f);
    // `--only host` brings the server the host depends on, edge kept.
    ctx.selection = Selection { only: vec!["host".into()], ..Default::default() };
    let rendered = Profile::omnigent().render(&ctx).expect("render");
    let names: Vec<&str> = rendered.services.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(names, ["server", "host"]);
    assert_eq!(rendered.services[1].depends_on[0].service, "server");

    // `--only host --no-deps`: the host alone, its edge dropped.
    ctx.selection.exact = true;
    let rendered = Profile::omnigent().render(&ctx).expect("render");
    assert_eq!(rendered.services.len(), 1);
    assert!(rendered.services[0].depends_on.is_empty());
    assert!(rendered.watch.is_empty());

    // `--only host --skip server`: skip comes last, and the edge goes.
    ctx.selection =
        Selection { only: vec!["host".into()], skip: vec!["server".into()], ..Default::default() };
    let rendered = Profile::omnigent().render(&ctx).expect("render");
    assert_eq!(rendered.services.len(), 1);
    assert!(rendered.services[0].depends_on.is_empty());

    ctx.selection.only = vec!["db".into()];
    let err = Profile::omnigent().render(&ctx).expect_err("unknown");
    assert!(err.to_string().contains("db") && err.to_string().contains("server"), "{err}");
}

#[test]
fn a_pod_of_only_a_database_server_runs_that_server() {
    let parse = |text: &str| Profile::parse(text, "omnidev.toml").expect("parse");
    let server = parse("[databases.main]\nengine = \"postgres\"\n");
    let selected = Selection::default().to_run(&server).expect("the server runs");
    assert!(selected.is_empty(), "{selected:?}");
    let skipped = Selection { skip: vec!["main".into()], ..Default::default() };
    assert!(matches!(skipped.to_run(&server), Err(Error::NothingToRun { .. })));
    // A file is no server: nothing would run.
    let file = parse("[databases.main]\nengine = \"sqlite\"\n");
    assert!(matches!(Selection::default().to_run(&file), Err(Error::NothingToRun { .. })));
}

/// Renders `profile` (the checkout's `omnidev.toml`) with port `api` at 7001.
fn render_with_api_port(f: &Fixture, profile: &str) -> omnidev_pod::RenderedPod {
    std::fs::write(f.repo.join("omnidev.toml"), profile).expect("write");
    let (profile, _) = Profile::load(&f.repo, None).expect("load");
    let mut ctx = context(f);
    ctx.ports.0.insert("api".into(), 7001);
    profile.render(&ctx).expect("render")
}

#[test]
fn a_repo_profile_renders_probes_signals_and_extra_args() {
    let f = fixture();
    let rendered = render_with_api_port(
        &f,
        r#"
[ports]
api = 7000

[services.api]
command = ["python3", "-m", "http.server"]
args = ["{port.api}"]
cwd = "omnigent"
stop-signal = "SIGINT"
grace-ms = 1500
restart = "on-failure"
ready = { tcp = "127.0.0.1:{port.api}", interval-ms = 200, timeout-ms = 3000 }

[services.check]
command = ["sh", "-c", "echo {{braces}} {env.HOME}"]
depends-on = { api = "started" }
ready = { command = ["true"] }
"#,
    );
    let api = service(&rendered.services, "api");
    assert_eq!(api.command.args, ["-m", "http.server", "7001"]);
    assert_eq!(api.command.cwd, f.repo.join("omnigent"));
    assert_eq!(api.stop.signal, libc::SIGINT);
    assert_eq!(api.stop.grace, Duration::from_millis(1500));
    assert_eq!(api.restart, omnidev_core::RestartPolicy::OnFailure);
    let readiness = api.readiness.as_ref().expect("ready");
    assert_eq!(readiness.probe, ProbeSpec::Tcp { address: "127.0.0.1:7001".into() });
    assert_eq!(readiness.interval, Duration::from_millis(200));
    assert_eq!(
        readiness.listener,
        Some(7001),
        "a probe on a pod port wants the service's own listener"
    );
    let check = service(&rendered.services, "check");
    assert_eq!(check.command.args, ["-c", "echo {braces} /home/ada"]);
    assert_eq!(check.depends_on[0].condition, Condition::Started);
    assert!(matches!(check.readiness.as_ref().expect("ready").probe, ProbeSpec::Command(_)));
    assert_eq!(check.readiness.as_ref().expect("ready").listener, None);
    // No [env]: the pod's own directories alone.
    assert_eq!(
        rendered.env.keys().collect::<Vec<_>>(),
        ["OMNIDEV_RUNTIME_DIR", "TMPDIR", "XDG_RUNTIME_DIR"]
    );
}

#[test]
fn the_listener_check_covers_pod_ports_only_and_can_be_turned_off() {
    let f = fixture();
    let rendered = render_with_api_port(
        &f,
        r#"
[ports]
api = 7000

[services.api]
command = ["api"]
ready = { http = "http://127.0.0.1:{port.api}/health?x=1" }

[services.proxied]
command = ["proxy"]
ready = { tcp = "[::1]:{port.api}", own-listener = false }

[services.outside]
command = ["outside"]
ready = { http = "http://example.test:8080/" }
"#,
    );
    let listener =
        |name: &str| service(&rendered.services, name).readiness.as_ref().expect("ready").listener;
    assert_eq!(listener("api"), Some(7001));
    assert_eq!(listener("proxied"), None);
    assert_eq!(listener("outside"), None);
}

/// The real Omnigent's shape: a pnpm workspace whose lockfile is at the
/// root and none in `web/`.
fn pnpm_workspace(f: &Fixture) {
    std::fs::write(
        f.repo.join("package.json"),
        r#"{"name": "omnigent", "private": true, "packageManager": "pnpm@11.15.1"}"#,
    )
    .expect("write");
    std::fs::write(f.repo.join("pnpm-workspace.yaml"), "packages:\n  - web\n").expect("write");
    std::fs::write(f.repo.join("pnpm-lock.yaml"), "lockfileVersion: '9.0'\n").expect("write");
    std::fs::write(f.repo.join("web/package.json"), r#"{"name": "web"}"#).expect("write");
}

#[test]
fn pnpm_workspace_installs_at_the_root_and_watches_its_lockfile() {
    let f = fixture();
    pnpm_workspace(&f);
    let pnpm = fake_tool(&f.bin, "pnpm");
    fake_tool(&f.bin, "npm");
    let rendered = Profile::omnigent().render(&context(&f)).expect("render");
    let vite = service(&rendered.services, "vite");
    assert_eq!(vite.command.program, pnpm.display().to_string());
    assert_eq!(vite.command.cwd, f.repo.join("web"));
    assert_eq!(vite.command.env["COREPACK_ENABLE_DOWNLOAD_PROMPT"], "0");
    let install = &vite.prepare[0];
    assert_eq!(install.name, "pnpm install");
    assert_eq!(install.command.program, pnpm.display().to_string());
    assert_eq!(install.command.cwd, f.repo);
    assert_eq!(install.command.args, ["install", "--filter", "web..."]);
    assert_eq!(install.command.env["COREPACK_ENABLE_DOWNLOAD_PROMPT"], "0");
    let PrepareWhen::Stale { target, sources } = &install.when else {
        panic!("install should run only when stale");
    };
    assert_eq!(target, &f.repo.join("node_modules"));
    for input in ["pnpm-lock.yaml", "pnpm-workspace.yaml", "package.json", "web/package.json"] {
        assert!(sources.contains(&f.repo.join(input)), "{input}: {sources:?}");
    }
}

#[test]
fn profile_package_manager_and_filter_override_detection() {
    let f = fixture();
    pnpm_workspace(&f);
    let bun = fake_tool(&f.bin, "bun");
    let mut profile = Profile::omnigent();
    let vite = profile.services.get_mut("vite").expect("vite");
    vite.package_manager = Some("bun".into());
    vite.install_filter = Some("web".into());
    let text = profile.to_toml().expect("toml");
    let profile = Profile::parse(&text, "omnidev.toml").expect("round trip");
    let rendered = profile.render(&context(&f)).expect("render");
    let vite = service(&rendered.services, "vite");
    assert_eq!(vite.command.program, bun.display().to_string());
    let install = &vite.prepare[0];
    assert_eq!(install.command.cwd, f.repo);
    assert_eq!(install.command.args, ["install", "--filter", "web"]);
    assert!(vite.command.env.get("COREPACK_ENABLE_DOWNLOAD_PROMPT").is_none());

    let err = Profile::parse(
        "[services.web]\nscript = \"dev\"\npackage-manager = \"cargo\"\n",
        "omnidev.toml",
    )
    .expect_err("unknown manager");
    assert!(err.to_string().contains("omnidev.toml:3:1"), "{err}");
    let err = Profile::parse(
        "[services.web]\nscript = \"dev\"\nnode-version = \"newest\"\n",
        "omnidev.toml",
    )
    .expect_err("bad range");
    assert!(err.to_string().contains("newest"), "{err}");
}

#[test]
fn a_broken_manifest_is_a_clear_error_unless_vite_is_skipped() {
    let f = fixture();
    fake_tool(&f.bin, "npm");
    std::fs::write(f.repo.join("web/package.json"), "{ \"name\": ").expect("write");
    let mut ctx = context(&f);
    let err = Profile::omnigent().render(&ctx).expect_err("broken JSON");
    assert!(matches!(err, Error::Manifest { .. }), "{err}");
    let help = miette::Diagnostic::help(&err).map(|h| h.to_string()).unwrap_or_default();
    assert!(help.contains("--no-vite"), "{help}");
    ctx.selection.skip = vec!["vite".into()];
    Profile::omnigent().render(&ctx).expect("--no-vite reads no manifest");
}

#[test]
fn a_node_below_the_floor_makes_the_service_unavailable() {
    let f = fixture();
    pnpm_workspace(&f);
    fake_tool(&f.bin, "pnpm");
    let node = f.bin.join("node");
    let write_node = |version: &str| {
        write_script(&node, &format!("echo {version}\n"));
    };
    write_node("v20.0.0");
    let rendered = Profile::omnigent().render(&context(&f)).expect("render");
    let reason =
        service(&rendered.services, "vite").unavailable.clone().expect("pnpm 11 needs Node 22.13");
    assert!(
        reason.contains("v20.0.0")
            && reason.contains("pnpm@11.15.1")
            && reason.contains("--no-vite"),
        "{reason}"
    );
    assert!(service(&rendered.services, "server").unavailable.is_none());

    write_node("v24.1.0");
    let rendered = Profile::omnigent().render(&context(&f)).expect("render");
    assert_eq!(service(&rendered.services, "vite").unavailable, None);

    // engines.node of web/package.json counts too.
    std::fs::write(
        f.repo.join("web/package.json"),
        r#"{"name": "web", "engines": {"node": ">=25"}}"#,
    )
    .expect("write");
    let rendered = Profile::omnigent().render(&context(&f)).expect("render");
    let reason =
        service(&rendered.services, "vite").unavailable.clone().expect("engines.node >=25");
    assert!(reason.contains("engines.node") && reason.contains(">=25"), "{reason}");
}

/// inherited < the pod's own directories < pod env files < `[env]` <
/// service env files < service `env`;
/// `{env.X}` sees the pod's files; `{env.X:-d}` stands in for an unset one.
#[test]
fn env_files_layer_in_the_documented_order() {
    let f = fixture();
    std::fs::write(
        f.repo.join(".env"),
        "# shared\nexport FROM_POD=pod\nLAYER=pod-file\nQUOTED=\"a # b\"\nDB=sqlite:///x.db\n",
    )
    .expect("write");
    std::fs::write(f.repo.join(".env.local"), "LAYER=pod-local\n").expect("write");
    std::fs::write(f.repo.join("api.env"), "LAYER=service-file\nSERVICE_ONLY=1\n").expect("write");
    let mut ctx = context(&f);
    ctx.inherited_env.insert("LAYER".into(), "inherited".into());
    ctx.inherited_env.insert("FROM_POD".into(), "inherited".into());
    ctx.ports.0.insert("api".into(), 7001);
    let profile = Profile::parse(
        r#"
[pod]
env-files = [".env", ".env.local", ".env.missing"]

[ports]
api = 7000

[env]
PROFILE = "{env.LAYER}"

[services.api]
command = ["python3", "-c", "pass", "{env.DB}", "{env.UNSET:-fallback}"]
env-files = ["api.env"]
env = { FINAL = "{env.FROM_POD}" }

[services.plain]
command = ["true"]
env = { LAYER = "service-env" }
"#,
        "omnidev.toml",
    )
    .expect("parse");
    let rendered = profile.render(&ctx).expect("render");
    let api = service(&rendered.services, "api");
    let env = &api.command.env;
    assert_eq!(env["LAYER"], "service-file", "service files over [env] and pod files");
    assert_eq!(env["SERVICE_ONLY"], "1");
    assert_eq!(env["FROM_POD"], "pod", "pod files over the inherited environment");
    assert_eq!(env["QUOTED"], "a # b");
    // `{env.LAYER}` sees the last pod file, not the service's.
    assert_eq!(env["PROFILE"], "pod-local");
    assert_eq!(env["FINAL"], "pod");
    assert_eq!(api.command.args[2..], ["sqlite:///x.db", "fallback"]);
    let plain = service(&rendered.services, "plain");
    assert_eq!(plain.command.env["LAYER"], "service-env", "service env over everything");
    assert!(plain.command.env.get("SERVICE_ONLY").is_none());
    // What `omnidev run` sets: the pod files and [env], no service's own.
    assert_eq!(rendered.env["LAYER"], "pod-local");
    assert!(!rendered.env.contains_key("SERVICE_ONLY"));
}

/// The pod's own `XDG_RUNTIME_DIR` and `TMPDIR` are under everything the
/// profile sets: an `[env]` or a service's `env` may point them elsewhere.
#[test]
fn the_profile_may_set_the_pods_own_directories_otherwise() {
    let f = fixture();
    let profile = Profile::parse(
        r#"
[env]
TMPDIR = "/scratch"

[services.api]
command = ["true"]
env = { XDG_RUNTIME_DIR = "{pod}/sockets" }

[services.plain]
command = ["true"]
"#,
        "omnidev.toml",
    )
    .expect("parse");
    let rendered = profile.render(&context(&f)).expect("render");
    let pod = f.pod.display().to_string();
    let api = &service(&rendered.services, "api").command.env;
    assert_eq!(api["TMPDIR"], "/scratch");
    assert_eq!(api["XDG_RUNTIME_DIR"], format!("{pod}/sockets"));
    let plain = &service(&rendered.services, "plain").command.env;
    assert_eq!(plain["XDG_RUNTIME_DIR"], format!("{pod}/run"));
    assert_eq!(plain["OMNIDEV_RUNTIME_DIR"], "/run/user/1000/omnidev");
}

/// An unset `{env.X}` without a default stops the render, pointing at the
/// placeholder as written — unless only an unselected service uses it.
#[test]
fn an_unset_env_placeholder_is_an_error_with_line_and_column() {
    let f = fixture();
    let text = "[services.api]\ncommand = [\"run\", \"--db\", \"{env.DATABASE_URL}\"]\n\n\
                [services.other]\ncommand = [\"true\"]\n";
    let profile = Profile::parse(text, "omnidev.toml").expect("parse");
    let mut ctx = context(&f);
    let error = profile.render(&ctx).expect_err("unset");
    let Error::Profile { origin, line, column, message } = &error else {
        panic!("unexpected error {error}");
    };
    assert_eq!((origin.as_str(), *line, *column), ("omnidev.toml", 2, 28), "{message}");
    assert!(message.contains("DATABASE_URL") && message.contains(":-"), "{message}");

    ctx.selection.only = vec!["other".into()];
    profile.render(&ctx).expect("api is not rendered");

    ctx.selection.only.clear();
    ctx.inherited_env.insert("DATABASE_URL".into(), "postgres://x".into());
    let rendered = profile.render(&ctx).expect("set now");
    assert_eq!(service(&rendered.services, "api").command.args[1], "postgres://x");
}

/// `replicas = N` (or `--scale`) runs `NAME.1` … `NAME.N`: each with its
/// own `{port.NAME}` (replica 1 keeps the port named like the service),
/// its own URL and watch rule; a dependent waits for every replica; the
/// install runs once, in replica 1, which the others start after.
#[test]
fn replicas_are_services_of_their_own_with_their_own_ports() {
    let f = fixture();
    std::fs::write(f.repo.join("requirements.txt"), "flask\n").expect("write");
    let profile = Profile::parse(
        r#"
[ports]
web = 5000

[urls]
web = { url = "http://localhost:{port.web}", service = "web" }

[services.web]
command = ["serve", "--port", "{port.web}"]
ready = { tcp = "127.0.0.1:{port.web}" }
watch = ["app/**"]
python-deps = true
replicas = 2

[services.client]
command = ["true"]
depends-on = { web = "ready" }
"#,
        "omnidev.toml",
    )
    .expect("parse");
    let scale = BTreeMap::from([("web".to_owned(), 3)]);
    let bases = profile.port_bases(&scale);
    assert_eq!(
        bases,
        [("web".to_owned(), 5000), ("web.2".to_owned(), 5001), ("web.3".to_owned(), 5002)]
    );
    let mut ctx = context(&f);
    ctx.path = std::env::var_os("PATH").unwrap_or_default();
    ctx.ports.0.extend([("web".into(), 5000), ("web.2".into(), 5007)]);
    let rendered = profile.render(&ctx).expect("render");
    let names: Vec<&str> = rendered.services.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(names, ["web.1", "web.2", "client"]);
    let (one, two) = (service(&rendered.services, "web.1"), service(&rendered.services, "web.2"));
    assert_eq!(one.command.args, ["--port", "5000"]);
    assert_eq!(two.command.args, ["--port", "5007"]);
    assert_eq!(one.urls[0].name, "web.1");
    assert_eq!(two.urls[0].url, "http://localhost:5007");
    assert!(rendered.urls.is_empty(), "{:?}", rendered.urls);
    // One install, in replica 1; replica 2 starts once replica 1 has.
    assert_eq!(one.prepare.len(), 1);
    assert!(two.prepare.is_empty());
    assert_eq!(two.depends_on.len(), 1);
    assert_eq!(two.depends_on[0].service, "web.1");
    assert_eq!(two.depends_on[0].condition, Condition::Started);
    // Both share the venv the install makes.
    assert_eq!(one.command.env["VIRTUAL_ENV"], two.command.env["VIRTUAL_ENV"]);
    let client = service(&rendered.services, "client");
    let deps: Vec<&str> = client.depends_on.iter().map(|d| d.service.as_str()).collect();
    assert_eq!(deps, ["web.1", "web.2"]);
    let watched: Vec<&str> = rendered.watch.iter().map(|w| w.service.as_str()).collect();
    assert_eq!(watched, ["web.1", "web.2"]);

    // `--scale` over `replicas`; one copy is still `web.1` (going from
    // two to one stops `web.2` alone), with the same URL and port.
    ctx.scale = BTreeMap::from([("web".to_owned(), 1)]);
    let rendered = profile.render(&ctx).expect("render");
    let names: Vec<&str> = rendered.services.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(names, ["web.1", "client"]);
    let alone = service(&rendered.services, "web.1");
    assert_eq!(alone, one, "replica 1 unchanged");
    // Without `replicas` or `--scale`, the plain name.
    let plain =
        Profile::parse("[services.web]\ncommand = [\"x\"]\n", "omnidev.toml").expect("parse");
    ctx.scale.clear();
    let rendered = plain.render(&ctx).expect("render");
    assert_eq!(rendered.services[0].name, "web");

    let err = profile.check_scale(&BTreeMap::from([("web".to_owned(), 65)])).expect_err("too many");
    assert!(err.to_string().contains("1 to 64"), "{err}");
    let err = Profile::parse("[services.a]\ncommand = [\"x\"]\nreplicas = 0\n", "omnidev.toml")
        .expect_err("no copy");
    assert!(err.to_string().contains("replicas"), "{err}");
}

/// `up --db postgres` (or mariadb) moves the Omnigent profile's database
/// to a server of the pod's own, with the URL scheme and the Python driver
/// Omnigent takes there and a port of the database's name; an engine it
/// does not list is refused, naming where a profile lists them.
#[test]
fn omnigent_moves_its_database_to_a_server_with_its_driver() {
    use omnidev_pod::database::DbEngine;
    let f = fixture();
    let mut ctx = context(&f);
    ctx.ports.0.insert("db".into(), 5440);
    let sqlite = Profile::omnigent().databases_of(&ctx).expect("parts");
    assert_eq!(sqlite["db"]["driver"], "");
    for (engine, scheme, driver) in [
        (DbEngine::Postgres, "postgresql+psycopg://omnidev@/db?host=", "psycopg[binary]>=3.1,<4"),
        (DbEngine::Mariadb, "mysql+pymysql://", "pymysql>=1.1,<2"),
    ] {
        let mut profile = Profile::omnigent();
        profile.choose_engine(engine).expect("a server");
        let parts = &profile.databases_of(&ctx).expect("parts")["db"];
        assert!(parts["url"].starts_with(scheme), "{}", parts["url"]);
        assert_eq!(parts["driver"], driver);
        assert_eq!(parts["port"], "5440");
        let bases = profile.port_bases(&BTreeMap::new());
        assert!(bases.iter().any(|(name, _)| name == "db"), "{bases:?}");
    }
    let error = Profile::omnigent().choose_engine(DbEngine::Redis).expect_err("no redis");
    assert!(error.to_string().contains("no database of the profile runs on redis"), "{error}");
}

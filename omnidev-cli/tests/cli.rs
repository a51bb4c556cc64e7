//! The `omnidev` binary's user-facing errors and `profile show`, run for
//! real in a temp HOME/XDG context and snapshotted.

#[path = "support/context.rs"]
mod common;

use std::time::Duration;

use common::{Signal, TestContext, signal, wait_for};

#[test]
fn help() {
    let ctx = TestContext::new();
    let output = ctx.cmd().arg("--help").assert().success();
    let output = output.get_output();
    TestContext::settings().bind(|| insta::assert_snapshot!(ctx.render(output)));
}

/// `help up`: overview, keys, exit codes and examples after the options.
#[test]
fn help_up() {
    let ctx = TestContext::new();
    let output = ctx.cmd().args(["help", "up"]).assert().success();
    let output = output.get_output();
    TestContext::settings().bind(|| insta::assert_snapshot!(ctx.render(output)));
}

/// In a checkout whose profile is not Omnigent's, help names the
/// profile's own ports and services and hides the Omnigent-only flags.
#[test]
fn help_fits_the_checkouts_profile() {
    let ctx = TestContext::new();
    ctx.write(
        "omnidev.toml",
        "[ports]\napi = 8100\nweb = 8200\n\n[services.api]\ncommand = [\"true\"]\n\n\
         [services.worker]\ncommand = [\"true\"]\n",
    );
    for args in [&["--help"][..], &["up", "--help"], &["help", "up"]] {
        let output = ctx.cmd().args(args).assert().success();
        let output = output.get_output();
        let text = String::from_utf8_lossy(&output.stdout);
        // Neither as options nor in `up`'s examples and keys.
        for omnigent_only in [
            "--server-port",
            "--vite-port",
            "--vite-host",
            "--no-vite",
            "--trust-lan-origins",
            "backend",
        ] {
            assert!(!text.contains(omnigent_only), "{args:?}: {text}");
        }
        if args != ["--help"] {
            assert!(text.contains("omnidev --only api "), "{args:?}: {text}");
            assert!(text.contains("--port api=7000 "), "{args:?}: {text}");
        }
        let words = text.split_whitespace().collect::<Vec<_>>().join(" ");
        assert!(words.contains("(this profile's ports: api, web)"), "{text}");
        assert!(words.contains("(this profile's services: api, worker)"), "{text}");
    }
    let output = ctx.cmd().arg("--help").assert().success();
    TestContext::settings().bind(|| insta::assert_snapshot!(ctx.render(output.get_output())));
    // The Omnigent profile, named with --profile, brings them back.
    let omnigent = ctx.root.join("omnigent.toml");
    std::fs::write(&omnigent, omnidev_pod::profile::OMNIGENT_PROFILE).expect("write");
    let output = ctx.cmd().arg("--profile").arg(&omnigent).arg("--help").assert().success();
    let text = String::from_utf8_lossy(&output.get_output().stdout);
    assert!(
        text.lines()
            .any(|line| line.contains("--server-port <N>") && line.contains("Omnigent profile:")),
        "{text}"
    );
    assert!(text.contains("--trust-lan-origins"), "{text}");
}

/// `restart --help` says what it restarts without an argument, in general
/// and for this checkout's profile.
#[test]
fn help_restart() {
    let ctx = TestContext::new();
    ctx.write(
        "omnidev.toml",
        "[services.api]\ncommand = [\"true\"]\nwatch = [\"src/**\"]\n\n\
         [services.worker]\ncommand = [\"true\"]\n",
    );
    let output = ctx.cmd().args(["restart", "--help"]).assert().success();
    let output = output.get_output();
    TestContext::settings().bind(|| insta::assert_snapshot!(ctx.render(output)));
}

/// `completions --help` lists the shells once and says where each script goes.
#[test]
fn help_completions() {
    let ctx = TestContext::new();
    let output = ctx.cmd().args(["completions", "--help"]).assert().success();
    let text = String::from_utf8_lossy(&output.get_output().stdout);
    assert_eq!(text.matches("powershell").count(), 3, "{text}");
    assert!(text.contains("~/.config/fish/completions/omnidev.fish"), "{text}");
}

/// `completions --install fish` writes where fish looks (XDG_CONFIG_HOME)
/// and a real fish, given only that environment, completes a subcommand
/// from it; `--install bash` writes a script bash sources into a
/// `complete` rule for omnidev.
#[test]
fn completions_install_lands_where_fish_and_bash_load_it() {
    let ctx = TestContext::new();
    let output = ctx.cmd().args(["completions", "fish", "--install"]).assert().success();
    let output = output.get_output();
    let text = ctx.render(output);
    let file = ctx.home.join(".config-xdg/fish/completions/omnidev.fish");
    assert!(
        String::from_utf8_lossy(&output.stdout).starts_with(&format!("wrote {}\n", file.display())),
        "{text}"
    );
    let fish = std::process::Command::new("fish")
        .args(["--no-config", "-c"])
        .arg(format!("source {}; complete -C 'omnidev sta'", file.display()))
        .env("HOME", &ctx.home)
        .output()
        .expect("fish (apt-get install fish)");
    let offered = String::from_utf8_lossy(&fish.stdout);
    assert!(offered.lines().any(|line| line.starts_with("status")), "{offered}");

    let _output = ctx.cmd().args(["completions", "bash", "--install"]).assert().success();
    let file = ctx.home.join(".local/share/bash-completion/completions/omnidev");
    let bash = std::process::Command::new("bash")
        .args(["--norc", "-c"])
        .arg(format!("source {} && complete -p omnidev", file.display()))
        .output()
        .expect("bash");
    assert!(String::from_utf8_lossy(&bash.stdout).contains("omnidev"), "{bash:?}");
}

/// `omnidev man DIR` writes a roff page per visible command, `omnidev.1`
/// naming every visible subcommand.
#[test]
fn man_pages_for_every_visible_command() {
    let ctx = TestContext::new();
    let dir = ctx.home.join("man");
    ctx.cmd().arg("man").arg(&dir).assert().success();
    let top = std::fs::read_to_string(dir.join("omnidev.1")).expect("omnidev.1");
    assert!(top.starts_with(".ie"), "{top}");
    assert!(top.contains(".TH omnidev 1"), "{top}");
    for name in ["up", "status", "logs", "completions"] {
        assert!(top.contains(&format!("omnidev\\-{name}(1)")), "{name}: {top}");
        assert!(dir.join(format!("omnidev-{name}.1")).is_file(), "{name}");
    }
    assert!(!dir.join("omnidev-refresh.1").exists(), "hidden commands get no page");
    assert!(dir.join("omnidev-profile-show.1").is_file());
}

/// The embedded profile prints verbatim: one header comment, and it parses.
#[test]
fn profile_show_embedded_is_the_profile_verbatim() {
    let ctx = TestContext::new();
    let output = ctx.cmd().args(["profile", "show", "--embedded"]).assert().success();
    let output = output.get_output();
    let text = String::from_utf8_lossy(&output.stdout);
    assert_eq!(text, omnidev_pod::profile::OMNIGENT_PROFILE);
}

/// Runs `command`, which must fail with exit code 1; its rendered output.
fn fails(ctx: &TestContext, command: &mut assert_cmd::Command) -> String {
    ctx.render(command.assert().code(1).get_output())
}

#[test]
fn usage_error_exits_2() {
    let ctx = TestContext::new();
    let _output = ctx.cmd().args(["--port", "server"]).assert().code(2);
}

#[test]
fn not_in_a_checkout() {
    let ctx = TestContext::new();
    let outside = ctx.root.join("elsewhere");
    std::fs::create_dir_all(&outside).expect("mkdir");
    let text = fails(&ctx, ctx.cmd().current_dir(&outside).arg("--headless"));
    TestContext::settings().bind(|| insta::assert_snapshot!(text));
}

#[test]
fn wrong_repo_shape() {
    let ctx = TestContext::new();
    let text = fails(&ctx, ctx.cmd().arg("--headless"));
    assert!(text.contains("omnigent"), "{text}");
    TestContext::settings().bind(|| insta::assert_snapshot!(text));
}

/// A `--profile FILE` that does not exist: the cause once, and a hint
/// asking for read access only.
#[test]
fn missing_profile_file() {
    let ctx = TestContext::new();
    let text =
        fails(&ctx, ctx.cmd().args(["--headless", "--profile"]).arg(ctx.root.join("nope.toml")));
    assert_eq!(text.matches("No such file or directory").count(), 1, "{text}");
    assert!(!text.contains("write"), "{text}");
    TestContext::settings().bind(|| insta::assert_snapshot!(text));
}

#[test]
fn profile_with_an_unknown_key() {
    let ctx = TestContext::new();
    ctx.write("omnidev.toml", "[services.app]\ncommand = [\"true\"]\nrestrat = \"never\"\n");
    let text = fails(&ctx, ctx.cmd().arg("--headless"));
    assert!(text.contains("omnidev.toml:3:1"), "{text}");
    TestContext::settings().bind(|| insta::assert_snapshot!(text));
}

/// A process that listens on a free port of 127.0.0.1 until killed, and
/// the port (killed when dropped).
struct Holder(std::process::Child, String);

impl Holder {
    fn start() -> Self {
        use std::io::BufRead;
        let mut child = std::process::Command::new("python3")
            .args([
                "-c",
                "import socket, time; s = socket.socket(); s.bind(('127.0.0.1', 0)); \
                 s.listen(); print(s.getsockname()[1], flush=True); time.sleep(120)",
            ])
            .stdout(std::process::Stdio::piped())
            .spawn()
            .expect("python3");
        let mut port = String::new();
        std::io::BufReader::new(child.stdout.take().expect("stdout"))
            .read_line(&mut port)
            .expect("port");
        Holder(child, port.trim().to_owned())
    }
}

impl Drop for Holder {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A forced port that is busy is an error naming the holder, as at run
/// time, before anything starts.
#[test]
fn busy_server_port_fails_before_anything_starts() {
    let ctx = TestContext::new();
    ctx.omnigent_shape();
    let held = Holder::start();
    let port = held.1.clone();
    let text = fails(&ctx, ctx.cmd().args(["--headless", "--no-vite", "--server-port", &port]));
    assert!(text.contains(&port), "{text}");
    let holder = format!("(held by pid {} (", held.0.id());
    assert!(text.contains(&holder), "{text}");
    assert!(text.contains("python3 -c import socket"), "{text}");
    // Nothing was started: no state file, no logs.
    let pod = ctx.pod_dir().expect("pod dir");
    assert!(!pod.join("state.json").exists());
    let mut settings = TestContext::settings();
    // The interpreter's path differs from machine to machine.
    settings.add_filter(
        r"\(held by pid (\d+|\[PID\]) \(\S*python3 -c import .*\)\)",
        "(held by pid [PID] (python3 -c …))",
    );
    settings.bind(|| insta::assert_snapshot!(text));
}

#[test]
fn missing_package_manager() {
    let ctx = TestContext::new();
    ctx.omnigent_shape();
    ctx.write("web/package.json", "{}");
    ctx.write("web/pnpm-lock.yaml", "");
    let empty_bin = ctx.root.join("bin");
    std::fs::create_dir_all(&empty_bin).expect("mkdir");
    let text = fails(&ctx, ctx.cmd().env("PATH", &empty_bin).arg("--headless"));
    assert!(text.contains("pnpm") && text.contains("--no-vite"), "{text}");
    TestContext::settings().bind(|| insta::assert_snapshot!(text));
}

#[test]
fn pod_already_running() {
    let ctx = TestContext::new();
    ctx.write(
        "omnidev.toml",
        "[services.sleeper]\ncommand = [\"sleep\", \"300\"]\ngrace-ms = 1000\n",
    );
    let mut first = ctx.spawn(&["--headless"]);
    wait_for("the first pod to start", Duration::from_secs(20), || {
        ctx.pod_dir().is_some_and(|p| p.join("state.json").exists())
    });
    let output = ctx.cmd().arg("--headless").assert();
    signal(first.id(), Signal::SIGTERM);
    let status = first.wait().expect("wait");
    let text = ctx.render(output.code(1).get_output());
    assert!(text.contains(&first.id().to_string()), "{text}");
    assert!(status.success(), "first pod exit: {status:?}");
    TestContext::settings().bind(|| insta::assert_snapshot!(text));
}

#[test]
fn profile_show_outside_a_checkout_prints_the_embedded_profile() {
    let ctx = TestContext::new();
    let outside = ctx.root.join("elsewhere");
    std::fs::create_dir_all(&outside).expect("mkdir");
    let output = ctx.cmd().current_dir(&outside).args(["profile", "show"]).assert().success();
    let output = output.get_output();
    let text = String::from_utf8_lossy(&output.stdout);
    assert!(text.contains("[services.server]"), "{text}");
    // What is shown parses back as a profile.
    let body: String = text.lines().skip(1).collect::<Vec<_>>().join("\n");
    omnidev_pod::Profile::parse(&body, "shown").expect("shown profile parses");
}

#[test]
fn profile_show_prints_the_repo_profile() {
    let ctx = TestContext::new();
    ctx.write("omnidev.toml", "[services.app]\ncommand = [\"true\"]\n");
    let output = ctx.cmd().args(["profile", "show"]).assert().success();
    let output = output.get_output();
    TestContext::settings().bind(|| insta::assert_snapshot!(ctx.render(output)));
}

/// `profile check` on a good profile prints the services in start order;
/// on a cycle or a bad `restart` it exits 1 with the line of each edge or
/// the allowed values — and never starts anything.
#[test]
fn profile_check_prints_the_graph_or_the_problem() {
    let ctx = TestContext::new();
    let good = "[ports]\napi = 8100\n\n\
                [services.migrate]\ncommand = [\"python3\", \"-c\", \"print('migrated')\"]\nrestart = \"never\"\n\n\
                [services.api]\ncommand = [\"python3\", \"-m\", \"http.server\", \"{port.api}\"]\n\
                depends-on = { migrate = \"started\" }\nready = { http = \"http://127.0.0.1:{port.api}/\" }\n\n\
                [services.worker]\ncommand = [\"sh\", \"-c\", \"echo working; sleep 1000\"]\n\
                depends-on = { api = \"ready\" }\nyield = true\n";
    ctx.write("omnidev.toml", good);
    let output = ctx.cmd().args(["profile", "check"]).assert().success();
    let output = output.get_output();
    let text = ctx.render(output);
    TestContext::settings().bind(|| insta::assert_snapshot!("profile_check_ok", text));

    ctx.write("omnidev.toml", &good.replace("restart = \"never\"", "restart = true"));
    let text = fails(&ctx, ctx.cmd().args(["profile", "check"]));
    assert!(text.contains("omnidev.toml:6:11"), "{text}");
    TestContext::settings().bind(|| insta::assert_snapshot!("profile_check_bad_restart", text));

    ctx.write(
        "omnidev.toml",
        &good.replace("restart = \"never\"", "depends-on = { worker = \"ready\" }"),
    );
    let text = fails(&ctx, ctx.cmd().args(["profile", "check"]));
    TestContext::settings().bind(|| insta::assert_snapshot!("profile_check_cycle", text));
    // `profile show` refuses a cyclic profile too, and `up` starts nothing.
    fails(&ctx, ctx.cmd().args(["profile", "show"]));
    fails(&ctx, ctx.cmd().arg("--headless"));
    assert!(ctx.pod_dir().is_none_or(|pod| !pod.join("state.json").exists()), "nothing ran");
}

/// A program the service will not find is a warning of `profile check`
/// (exit 0: a prepare step or another PATH may bring it); one it finds,
/// on its own PATH or by a path from its directory, is not; the first
/// program of a `sh -c` script (a Procfile line) is looked up too.
#[test]
fn profile_check_warns_of_a_program_not_on_the_services_path() {
    let ctx = TestContext::new();
    let bin = ctx.repo.join("tools");
    std::fs::create_dir_all(&bin).expect("tools");
    omnidev_test_support::write_script(&bin.join("own-tool"), "exit 0");
    ctx.write(
        "omnidev.toml",
        "[services.web]\ncommand = [\"omnidev-test-no-such-server\"]\n\n\
         [services.tool]\ncommand = [\"own-tool\"]\nenv = { PATH = \"{repo}/tools\" }\n\n\
         [services.local]\ncommand = [\"./tools/own-tool\"]\n\n\
         [services.gone]\ncommand = [\"./tools/not-here\"]\n\n\
         [services.procfile]\ncommand = [\"sh\", \"-c\", \"omnidev-test-no-such-cli --config x.py\"]\n\n\
         [services.shexec]\ncommand = [\"/bin/sh\", \"-c\", \"exec own-tool -v\"]\n\
         env = { PATH = \"{repo}/tools\" }\n\n\
         [services.shvar]\ncommand = [\"sh\", \"-c\", \"$TOOL --serve\"]\n",
    );
    let output = ctx.cmd().args(["profile", "check"]).assert().success();
    let text = String::from_utf8_lossy(&output.get_output().stdout).into_owned();
    let warned = |name: &str| {
        text.lines()
            .skip_while(|line| !line.trim_start().starts_with(&format!("{name} ")))
            .nth(1)
            .is_some_and(|facts| facts.contains("WARNING"))
    };
    assert!(
        text.contains("WARNING: `omnidev-test-no-such-server` is not on the PATH the service gets"),
        "{text}"
    );
    assert!(warned("web") && warned("gone") && warned("procfile"), "{text}");
    assert!(text.contains("`omnidev-test-no-such-cli` is not on the PATH"), "{text}");
    // A script's word that is plainly a program is looked up; one that
    // needs the shell to say what it is (`$TOOL`) is not guessed at.
    assert!(!warned("tool") && !warned("local") && !warned("shexec") && !warned("shvar"), "{text}");
}

/// The profile reference is in the binary: `omnidev help profile`.
#[test]
fn help_profile_prints_the_reference() {
    let ctx = TestContext::new();
    let output = ctx.cmd().args(["help", "profile"]).assert().success();
    let output = output.get_output();
    let text = String::from_utf8_lossy(&output.stdout);
    for needle in
        ["# The profile format", "env-files", "{env.NAME:-DEFAULT}", "depends-on", "yield = true"]
    {
        assert!(text.contains(needle), "{needle} missing from:\n{text}");
    }
}

/// A shell's `${VAR:-0}` in a command reads as a placeholder: the error
/// says how to write the brace literally, and the doubled form runs.
#[test]
fn a_literal_brace_error_says_to_double_it() {
    use predicates::prelude::PredicateBooleanExt as _;
    let ctx = TestContext::new();
    ctx.write("omnidev.toml", "[services.a]\ncommand = [\"sh\", \"-c\", \"exit ${CODE:-0}\"]\n");
    ctx.assert(&["profile", "check"]).code(1).stderr(
        predicates::str::contains("unknown placeholder `{CODE:-0}`").and(
            predicates::str::contains(
                "a literal brace is written twice: `{{CODE:-0}}` stands for `{CODE:-0}`",
            ),
        ),
    );
    ctx.write(
        "omnidev.toml",
        "[services.a]\ncommand = [\"sh\", \"-c\", \"exit ${{CODE:-0}}\"]\nrestart = \"never\"\n",
    );
    ctx.run_ok(&["profile", "check"]);
    ctx.run_ok(&["up", "--headless"]);
}

/// A watch rule that matches no file of the checkout (a wrong directory)
/// is a warning of `profile check`; one that matches a file is not.
#[test]
fn profile_check_warns_of_a_watch_rule_that_matches_nothing() {
    let ctx = TestContext::new();
    ctx.write("app/main.py", "print('hi')\n");
    ctx.write(
        "omnidev.toml",
        "[services.good]\ncommand = [\"true\"]\nwatch = [\"app/**/*.py\"]\n\n\
         [services.lost]\ncommand = [\"true\"]\nwatch = [\"src/**\"]\n",
    );
    let text = ctx.run_ok(&["profile", "check"]);
    let facts = |name: &str| {
        text.lines()
            .skip_while(|line| !line.trim_start().starts_with(&format!("{name} ")))
            .nth(1)
            .unwrap_or_default()
            .to_owned()
    };
    assert!(facts("lost").contains("WARNING: watch src/** matches no file"), "{text}");
    assert!(!facts("good").contains("WARNING"), "{text}");
}

/// An `OMNIDEV_CONTAINMENT` that names no mechanism is refused before
/// anything is made, in the foreground and with `--detach` alike.
#[test]
fn a_bad_containment_choice_is_refused_before_a_pod_is_made() {
    let ctx = TestContext::new();
    ctx.write("omnidev.toml", "[services.app]\ncommand = [\"sleep\", \"300\"]\n");
    for args in [&["up", "--detach"][..], &["up", "--headless"]] {
        let text = fails(&ctx, ctx.cmd().env("OMNIDEV_CONTAINMENT", "cgroups").args(args));
        assert!(text.contains("OMNIDEV_CONTAINMENT=cgroups names no mechanism"), "{text}");
        assert!(ctx.pod_dir().is_none(), "a pod was made: {args:?}");
    }
}

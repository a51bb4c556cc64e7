//! `omnidev init`: the profile it writes from a Procfile runs (real
//! processes on their own ports), a second `init` refuses and changes
//! nothing, `--force` replaces, and the written text is pinned.

#[path = "support/context.rs"]
mod common;

use std::io::{Read as _, Write as _};
use std::net::TcpStream;
use std::time::Duration;

use common::{TestContext, stderr, wait_for};
use predicates::prelude::*;
use predicates::str::contains;

const DEADLINE: Duration = Duration::from_secs(60);

/// An HTTP GET of `/` on 127.0.0.1:`port`; the status line, if any.
fn get(port: u64) -> Option<String> {
    let port = u16::try_from(port).ok()?;
    let mut stream = TcpStream::connect(("127.0.0.1", port)).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    stream.write_all(b"GET / HTTP/1.0\r\nHost: localhost\r\n\r\n").ok()?;
    let mut text = String::new();
    let _ = stream.read_to_string(&mut text);
    text.lines().next().map(str::to_owned)
}

#[test]
fn init_from_a_procfile_writes_a_profile_that_runs_and_a_second_init_refuses() {
    let ctx = TestContext::new();
    ctx.write(
        "Procfile",
        "# two static servers\n\
         web: exec python3 -m http.server $PORT --bind 127.0.0.1\n\
         docs: exec python3 -m http.server \"$PORT\" --bind 127.0.0.1 --directory .git\n",
    );
    let out = ctx.run_ok(&["init"]);
    let profile = ctx.repo.join("omnidev.toml");
    assert!(
        out.starts_with(&format!(
            "wrote {} from {}: 2 services (web, docs)\n",
            profile.display(),
            ctx.repo.join("Procfile").display()
        )),
        "{out}"
    );
    assert!(out.contains("omnidev profile check"), "{out}");
    let written = std::fs::read_to_string(&profile).expect("read omnidev.toml");
    ctx.run_ok(&["profile", "check"]);

    let _stop = ctx.stop_on_drop();
    ctx.run_ok(&["up", "--detach"]);
    let status = ctx.json(&["status", "--json"]);
    let web = status["ports"]["web"].as_u64().expect("web port");
    let docs = status["ports"]["docs"].as_u64().expect("docs port");
    assert_ne!(web, docs, "{status}");
    // Each process got its own port as $PORT and serves on it.
    for port in [web, docs] {
        wait_for(&format!("an HTTP answer on port {port}"), DEADLINE, || {
            get(port).is_some_and(|line| line.contains(" 200 "))
        });
    }
    ctx.run_ok(&["stop"]);

    // A second init refuses: exit 1, the file untouched.
    let again =
        ctx.assert(&["init"]).code(1).stderr(contains("already exists").and(contains("--force")));
    TestContext::settings().bind(|| {
        insta::assert_snapshot!("init_refuses_an_existing_profile", ctx.filter(&stderr(&again)));
    });
    assert_eq!(std::fs::read_to_string(&profile).expect("read"), written);

    // --force replaces it (here with the same text: the Procfile is the same).
    std::fs::write(&profile, "# mine\n").expect("write");
    let out = ctx.run_ok(&["init", "--force"]);
    assert!(out.starts_with("replaced "), "{out}");
    assert_eq!(std::fs::read_to_string(&profile).expect("read"), written);
}

#[test]
fn init_without_a_procfile_writes_the_generic_template() {
    let ctx = TestContext::new();
    let out = ctx.run_ok(&["init"]);
    assert!(out.contains("(no Procfile: a template to edit): 1 service (app)"), "{out}");
    ctx.run_ok(&["profile", "check"]);
}

#[test]
fn a_bad_procfile_is_an_error_with_its_line_and_writes_nothing() {
    let ctx = TestContext::new();
    ctx.write("Procfile", "web: ./web\nworker ./work\n");
    let refused = ctx
        .assert(&["init"])
        .code(1)
        .stderr(contains("Procfile:2: \"worker ./work\" is not `name: command`"));
    TestContext::settings().bind(|| {
        insta::assert_snapshot!("init_a_bad_procfile", ctx.filter(&stderr(&refused)));
    });
    assert!(!ctx.repo.join("omnidev.toml").exists());
}

#[test]
fn written_profile_from_a_procfile_with_a_release_step() {
    let processes = omnidev_pod::init::parse_procfile(
        "release: ./manage.py migrate\n\
         web: gunicorn app:wsgi --bind 127.0.0.1:$PORT\n\
         worker: celery -A app worker --concurrency={2}\n",
        "Procfile".as_ref(),
    )
    .expect("parse");
    insta::assert_snapshot!(omnidev_pod::init::from_procfile(
        &processes,
        &omnidev_pod::init::Layout::default()
    ));
}

/// A checkout whose path holds a line break: the error names it on one
/// line, the break shown (`^J`), never a second line of the message.
#[test]
fn a_line_break_in_the_checkout_path_is_shown_not_obeyed() {
    let ctx = TestContext::new();
    let repo = ctx.root.join("nl\nrepo");
    std::fs::create_dir_all(repo.join(".git")).expect("mkdir");
    std::fs::write(repo.join("omnidev.toml"), "# the user's\n").expect("write");
    let arg = repo.to_str().expect("utf-8");
    let said = stderr(&ctx.assert(&["init", "--repo", arg]).code(1));
    let message = said
        .lines()
        .find(|line| line.contains("already exists"))
        .unwrap_or_else(|| panic!("no message: {said}"));
    assert!(message.contains("nl^Jrepo/omnidev.toml"), "{said}");
    assert!(!said.contains("nl\nrepo"), "{said}");
    assert_eq!(std::fs::read_to_string(repo.join("omnidev.toml")).expect("read"), "# the user's\n");
}

/// Writes a wheel of a package `omnidev-greeter` whose console script
/// `omnidev-greeter` prints `hello from the venv`, into `dir`; its file
/// name. Made here, so installing it needs no network.
fn greeter_wheel(dir: &std::path::Path) -> String {
    const NAME: &str = "omnidev_greeter-0.1-py3-none-any.whl";
    std::fs::create_dir_all(dir).expect("mkdir");
    let script = r#"
import sys, zipfile
files = {
    "omnidev_greeter/__init__.py": "def main():\n    print('hello from the venv', flush=True)\n",
    "omnidev_greeter-0.1.dist-info/METADATA": "Metadata-Version: 2.1\nName: omnidev-greeter\nVersion: 0.1\n",
    "omnidev_greeter-0.1.dist-info/WHEEL": "Wheel-Version: 1.0\nGenerator: omnidev-test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    "omnidev_greeter-0.1.dist-info/entry_points.txt": "[console_scripts]\nomnidev-greeter = omnidev_greeter:main\n",
}
record = "".join(f"{name},,\n" for name in files) + "omnidev_greeter-0.1.dist-info/RECORD,,\n"
with zipfile.ZipFile(sys.argv[1], "w") as wheel:
    for name, text in files.items():
        wheel.writestr(name, text)
    wheel.writestr("omnidev_greeter-0.1.dist-info/RECORD", record)
"#;
    let status = std::process::Command::new("python3")
        .args(["-c", script])
        .arg(dir.join(NAME))
        .status()
        .expect("python3");
    assert!(status.success(), "the wheel was written");
    NAME.to_owned()
}

/// A Procfile app as foreman's users run one: `omnidev init` loads its
/// `.env` for every service, and for its `requirements.txt` writes the
/// `python-deps` step, which makes the venv (real `uv`, a wheel made here,
/// offline) whose program the service then finds on its PATH.
#[test]
fn a_procfile_apps_env_file_and_python_requirements_reach_its_service() {
    let ctx = TestContext::new();
    let wheel = greeter_wheel(&ctx.repo.join("wheels"));
    ctx.write("requirements.txt", &format!("./wheels/{wheel}\n"));
    // Values with `$` as foreman and honcho keep them.
    ctx.write(
        ".env",
        "TIMES=2\nUV_OFFLINE=1\nPASSWORD=pa$$word\nFIVE=$5\nBANG=\"abc$!def\"\nHOME_AS_IS='$HOME'\n",
    );
    ctx.write(
        "Procfile",
        "web: echo \"times=$TIMES venv=$VIRTUAL_ENV\"; \
         echo \"pw=$PASSWORD five=$FIVE bang=$BANG home=$HOME_AS_IS\"; omnidev-greeter; \
         exec python3 -m http.server $PORT --bind 127.0.0.1\n",
    );
    ctx.run_ok(&["init"]);
    let profile = std::fs::read_to_string(ctx.repo.join("omnidev.toml")).expect("read");
    assert!(profile.contains("env-files = [\".env\"]"), "{profile}");
    assert!(profile.contains("python-deps = true"), "{profile}");
    // Its base away from the other tests' Procfile pods, which share 5000.
    let port = omnidev_test_support::free_port();
    ctx.write("omnidev.toml", &profile.replace("web = 5000", &format!("web = {port}")));
    let _stop = ctx.stop_on_drop();
    ctx.run_ok(&["up", "--detach"]);
    let logs = ctx.run_ok(&["logs", "web"]);
    let venv = ctx.repo.join(".venv");
    assert!(logs.contains(&format!("times=2 venv={}", venv.display())), "{logs}");
    assert!(logs.contains("pw=pa$$word five=$5 bang=abc$!def home=$HOME\n"), "{logs}");
    assert!(logs.contains("hello from the venv"), "{logs}");
    assert!(venv.join("bin/omnidev-greeter").is_file());
}

/// A `.env` line the other dotenv readers would take differently (a
/// `$NAME` they expand) is an error naming the file, the line and the
/// fix, before anything starts.
#[test]
fn an_env_line_read_differently_elsewhere_is_an_error_with_its_line() {
    let ctx = TestContext::new();
    ctx.write(".env", "A=1\nURL=http://$HOST:8000/\n");
    ctx.write("Procfile", "web: python3 -m http.server $PORT\n");
    ctx.run_ok(&["init"]);
    let refused = ctx.cmd().args(["profile", "check"]).assert().failure();
    let error = stderr(&refused);
    for said in [".env", "line 2", "\"$HOST\"", "'single quotes'"] {
        assert!(error.contains(said), "{said}: {error}");
    }
    ctx.write(".env", "A=1\nURL='http://$HOST:8000/'\n");
    ctx.run_ok(&["profile", "check"]);
}

/// `Procfile.dev` is read before `Procfile` (and said); `-f FILE` reads
/// the one named; `--force` keeps the replaced file's mode.
#[test]
fn procfile_dev_comes_first_and_f_names_the_procfile() {
    use std::os::unix::fs::PermissionsExt as _;
    let ctx = TestContext::new();
    ctx.write("Procfile", "web: ./web\n");
    ctx.write("Procfile.dev", "dev: ./dev-server\n");
    let out = ctx.run_ok(&["init"]);
    assert!(
        out.contains(&format!("from {}: 1 service (dev)", ctx.repo.join("Procfile.dev").display())),
        "{out}"
    );
    let profile = ctx.repo.join("omnidev.toml");
    std::fs::set_permissions(&profile, std::fs::Permissions::from_mode(0o640)).expect("chmod");
    let out = ctx.run_ok(&["init", "--force", "-f", "Procfile"]);
    assert!(out.contains("1 service (web)"), "{out}");
    let mode = std::fs::metadata(&profile).expect("stat").permissions().mode();
    assert_eq!(mode & 0o777, 0o640);
    ctx.assert(&["init", "--force", "-f", "Procfile.missing"])
        .code(1)
        .stderr(contains("Procfile.missing"));
}

//! The remote-commit sources against real local servers and repositories:
//! the GitHub API against an HTTP server on 127.0.0.1, `git ls-remote`
//! against a bare repository, and the fallback between them.

use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use omnidev_install::{DefaultSource, Error, GitHubApi, GitLsRemote, Source};
use omnidev_test_support::{git, write_script};

const SHA: &str = "0123456789abcdef0123456789abcdef01234567";

/// How the test server answers.
#[derive(Clone, Copy)]
enum Reply {
    Sha,
    Status500,
    Hang,
}

/// A tiny HTTP/1.1 server that records request heads.
struct Server {
    base: String,
    requests: Arc<Mutex<Vec<String>>>,
}

fn serve(reply: Reply) -> Server {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let base = format!("http://{}", listener.local_addr().expect("addr"));
    let requests = Arc::new(Mutex::new(Vec::new()));
    let seen = Arc::clone(&requests);
    std::thread::spawn(move || {
        let mut kept_open: Vec<TcpStream> = Vec::new();
        for stream in listener.incoming() {
            let Ok(mut connection) = stream else { continue };
            let mut head = String::new();
            let mut reader = BufReader::new(connection.try_clone().expect("clone"));
            loop {
                let mut line = String::new();
                if reader.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
                    break;
                }
                head.push_str(&line);
            }
            seen.lock().expect("lock").push(head);
            match reply {
                Reply::Sha => {
                    let _ = write!(
                        connection,
                        "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{SHA}",
                        SHA.len()
                    );
                }
                Reply::Status500 => {
                    let _ = write!(
                        connection,
                        "HTTP/1.1 500 Internal Server Error\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
                    );
                }
                Reply::Hang => kept_open.push(connection),
            }
        }
    });
    Server { base, requests }
}

/// A bare repository with `main`, `x/main`, a lightweight tag `v1` and an
/// annotated tag `v2`; returns (URL, main's sha, v1's sha, v2's commit).
fn bare_repo(root: &Path) -> (String, String, String, String) {
    let bare = root.join("repo.git");
    let work = root.join("work");
    std::fs::create_dir_all(&work).expect("dirs");
    git(root, &["init", "--bare", "-q", bare.to_str().expect("utf8")]);
    git(&work, &["init", "-q"]);
    std::fs::write(work.join("a"), "1").expect("write");
    git(&work, &["add", "a"]);
    git(&work, &["commit", "-qm", "one"]);
    let v1 = git(&work, &["rev-parse", "HEAD"]);
    git(&work, &["tag", "v1"]);
    git(&work, &["branch", "x/main"]);
    std::fs::write(work.join("a"), "2").expect("write");
    git(&work, &["commit", "-qam", "two"]);
    let v2 = git(&work, &["rev-parse", "HEAD"]);
    git(&work, &["tag", "-a", "v2", "-m", "v2"]);
    std::fs::write(work.join("a"), "3").expect("write");
    git(&work, &["commit", "-qam", "three"]);
    let main = git(&work, &["rev-parse", "HEAD"]);
    let url = format!("file://{}", bare.display());
    git(&work, &["push", "-q", &url, "main", "x/main", "--tags"]);
    (url, main, v1, v2)
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime")
}

#[test]
fn github_api_request_and_answer() {
    let server = serve(Reply::Sha);
    let api = GitHubApi::new(&server.base, Duration::from_secs(10)).expect("client");
    let sha = runtime()
        .block_on(api.remote_commit("https://github.com/omnigent-ai/omnigent.git", "main"))
        .expect("lookup");
    assert_eq!(sha, SHA);
    let requests = server.requests.lock().expect("lock").clone();
    assert_eq!(requests.len(), 1);
    let head = requests[0].to_ascii_lowercase();
    assert!(head.starts_with("get /repos/omnigent-ai/omnigent/commits/main http/1.1"), "{head}");
    assert!(head.contains("accept: application/vnd.github.sha"), "{head}");
    assert!(head.contains("user-agent: omnidev/"), "{head}");
}

#[test]
fn github_api_errors_and_timeout() {
    let rt = runtime();
    let server = serve(Reply::Status500);
    let api = GitHubApi::new(&server.base, Duration::from_secs(10)).expect("client");
    let error =
        rt.block_on(api.remote_commit("https://github.com/o/r.git", "main")).expect_err("500");
    assert!(matches!(&error, Error::GitHub { message, .. } if message.contains("500")), "{error}");

    let server = serve(Reply::Hang);
    let api = GitHubApi::new(&server.base, Duration::from_millis(300)).expect("client");
    let error =
        rt.block_on(api.remote_commit("https://github.com/o/r.git", "main")).expect_err("timeout");
    assert!(matches!(&error, Error::GitHub { message, .. } if message == "timed out"), "{error}");

    let error = rt
        .block_on(api.remote_commit("https://example.com/o/r.git", "main"))
        .expect_err("not github");
    assert!(matches!(error, Error::NotGitHub { .. }));
}

#[test]
fn github_api_refuses_an_unsafe_ref_without_asking() {
    let server = serve(Reply::Sha);
    let api = GitHubApi::new(&server.base, Duration::from_secs(10)).expect("client");
    let rt = runtime();
    for reference in ["../../../user", "-x", "a b"] {
        let error = rt
            .block_on(api.remote_commit("https://github.com/o/r.git", reference))
            .expect_err("rejected");
        assert!(matches!(error, Error::UnsafeRef { .. }), "{reference}: {error}");
    }
    assert_eq!(server.requests.lock().expect("lock").len(), 0, "no request was sent");
}

#[test]
fn git_ls_remote_matches_exact_refs() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (url, main, v1, v2) = bare_repo(dir.path());
    let git = GitLsRemote::default();
    let rt = runtime();
    assert_eq!(rt.block_on(git.remote_commit(&url, "main")).expect("main"), main);
    assert_eq!(rt.block_on(git.remote_commit(&url, "x/main")).expect("x/main"), v1);
    assert_eq!(rt.block_on(git.remote_commit(&url, "v1")).expect("v1"), v1);
    assert_eq!(rt.block_on(git.remote_commit(&url, "v2")).expect("peeled v2"), v2);
    let error = rt.block_on(git.remote_commit(&url, "nope")).expect_err("missing ref");
    assert!(matches!(error, Error::RefNotFound { .. }), "{error}");
    let error = rt
        .block_on(git.remote_commit(&format!("{url}-missing"), "main"))
        .expect_err("missing repo");
    assert!(matches!(error, Error::Git { .. }), "{error}");
}

#[test]
fn git_ls_remote_is_killed_after_its_timeout() {
    let dir = tempfile::tempdir().expect("temp dir");
    let marker = dir.path().join("ran");
    let helper_pid = dir.path().join("helper-pid");
    // Like git with its ssh or remote-helper child: the grandchild must go
    // too, which only the process-group kill does.
    let fake = write_script(
        &dir.path().join("slow-git"),
        &format!(
            "touch '{}'\nsleep 30 &\necho $! > '{}'\nwait\n",
            marker.display(),
            helper_pid.display()
        ),
    );
    let git = GitLsRemote { program: fake, timeout: Duration::from_millis(300) };
    let error =
        runtime().block_on(git.remote_commit("file:///nowhere.git", "main")).expect_err("timeout");
    assert!(
        matches!(&error, Error::Git { message, .. } if message.contains("no answer")),
        "{error}"
    );
    assert!(marker.exists(), "the fake git ran");
    let pid = std::fs::read_to_string(&helper_pid).expect("helper pid");
    let pid: u32 = pid.trim().parse().expect("a pid");
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    // Gone, or a zombie waiting for init to reap it.
    while omnidev_core::platform::stat(pid).is_some_and(|s| !s.is_zombie()) {
        assert!(std::time::Instant::now() < deadline, "the timed-out git's child {pid} survived");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn unsafe_repo_or_ref_never_reaches_git() {
    let dir = tempfile::tempdir().expect("temp dir");
    let marker = dir.path().join("ran");
    let fake = write_script(&dir.path().join("git"), &format!("touch '{}'\n", marker.display()));
    let git = GitLsRemote { program: fake, timeout: Duration::from_secs(10) };
    let rt = runtime();
    for (repo, reference) in [
        (format!("--upload-pack=touch {}", marker.display()), "main"),
        ("ext::sh -c touch% /tmp/x".to_owned(), "main"),
        ("file:///r.git".to_owned(), "-main"),
    ] {
        let error = rt.block_on(git.remote_commit(&repo, reference)).expect_err("rejected");
        assert!(matches!(error, Error::UnsafeRepo { .. } | Error::UnsafeRef { .. }), "{error}");
    }
    assert!(!marker.exists(), "no process ran");
}

#[test]
fn default_source_falls_back_to_git_when_the_api_fails_or_hangs() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (url, main, _, _) = bare_repo(dir.path());
    // git itself is real; the wrapper only maps the github.com URL onto the
    // local bare repository (`url.<base>.insteadOf`).
    let real_git = which("git");
    let wrapper = write_script(
        &dir.path().join("git-wrapper"),
        &format!(
            "GIT_CONFIG_COUNT=1 GIT_CONFIG_KEY_0='url.{url}.insteadOf' \
             GIT_CONFIG_VALUE_0='https://github.com/o/r.git' exec '{}' \"$@\"\n",
            real_git.display()
        ),
    );
    let rt = runtime();
    for reply in [Reply::Status500, Reply::Hang] {
        let server = serve(reply);
        let source = DefaultSource {
            github: GitHubApi::new(&server.base, Duration::from_millis(500)).expect("client"),
            git: GitLsRemote { program: wrapper.clone(), timeout: Duration::from_secs(20) },
        };
        let sha = rt
            .block_on(source.remote_commit("https://github.com/o/r.git", "main"))
            .expect("fallback");
        assert_eq!(sha, main);
        assert_eq!(server.requests.lock().expect("lock").len(), 1, "the API was asked first");
    }

    // A working API answers without git.
    let server = serve(Reply::Sha);
    let source = DefaultSource {
        github: GitHubApi::new(&server.base, Duration::from_secs(10)).expect("client"),
        git: GitLsRemote {
            program: dir.path().join("no-such-git"),
            timeout: Duration::from_secs(1),
        },
    };
    let sha = rt.block_on(source.remote_commit("https://github.com/o/r.git", "main")).expect("api");
    assert_eq!(sha, SHA);

    // A non-GitHub repository goes straight to git.
    let source = DefaultSource {
        github: GitHubApi::new("http://127.0.0.1:9", Duration::from_secs(1)).expect("client"),
        git: GitLsRemote::default(),
    };
    assert_eq!(rt.block_on(source.remote_commit(&url, "main")).expect("git"), main);
}

fn which(program: &str) -> PathBuf {
    let path = std::env::var_os("PATH").expect("PATH");
    std::env::split_paths(&path)
        .map(|dir| dir.join(program))
        .find(|candidate| candidate.is_file())
        .expect("program on PATH")
}

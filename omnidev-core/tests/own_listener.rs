//! Readiness that is provably the service's own: another process answering
//! on the service's port never makes it ready, and a port lost to such a
//! process is moved by the port mover (real processes, real sockets).

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use omnidev_core::spec::{Dependency, ProbeSpec, Readiness};
use omnidev_core::{
    Condition, EventKind, Moved, PortMover, ServiceSpec, ServiceState, Supervisor, SupervisorConfig,
};
use omnidev_test_support::free_port;

const DEADLINE: Duration = Duration::from_secs(60);

/// An HTTP server on 127.0.0.1:PORT answering 200 with `body`; exits 1
/// when the port is taken.
const SERVER: &str = r"import http.server, sys
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        b = sys.argv[2].encode()
        self.send_response(200)
        self.send_header('Content-Length', str(len(b)))
        self.end_headers()
        self.wfile.write(b)
    def log_message(self, *a):
        pass
import time
time.sleep(float(sys.argv[3]))  # a slow boot: the window another process uses
s = http.server.HTTPServer(('127.0.0.1', int(sys.argv[1])), H)
print('listening', flush=True)
s.serve_forever()
";

/// Another process answering 200 on `port`.
struct Foreign(Child);

impl Foreign {
    fn start(port: u16) -> Self {
        let mut server = Command::new("python3");
        server.args(["-c", SERVER, &port.to_string(), "foreign", "0"]);
        Self::spawn(&mut server)
    }

    /// Runs `command` until it prints `listening`.
    fn spawn(command: &mut Command) -> Self {
        let mut child = command.stdout(Stdio::piped()).spawn().expect("python3");
        let mut line = String::new();
        BufReader::new(child.stdout.take().expect("stdout")).read_line(&mut line).expect("read");
        assert_eq!(line.trim(), "listening");
        Self(child)
    }
}

impl Drop for Foreign {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn web(port: u16, boot: &str) -> ServiceSpec {
    let mut spec = ServiceSpec::new(
        "web",
        "python3",
        ["-c".to_owned(), SERVER.to_owned(), port.to_string(), "mine".to_owned(), boot.to_owned()],
        ".",
    );
    spec.readiness = Some(Readiness {
        probe: ProbeSpec::Http { url: format!("http://127.0.0.1:{port}/"), host: None },
        interval: Duration::from_millis(100),
        timeout: Duration::from_secs(60),
        listener: Some(port),
    });
    spec
}

fn services(port: u16, boot: &str) -> Vec<ServiceSpec> {
    let mut after = ServiceSpec::new("after", "sleep", ["300"], ".");
    after.command.env.insert("WEB_PORT".into(), port.to_string());
    after.depends_on = vec![Dependency { service: "web".into(), condition: Condition::Ready }];
    vec![web(port, boot), after]
}

/// Moves `web` to a fixed new port, or refuses (a forced port).
#[derive(Debug)]
struct Mover {
    to: Option<u16>,
    asked: Mutex<Vec<(u16, String)>>,
}

impl PortMover for Mover {
    fn move_port(&self, service: &str, port: u16, holder: &str) -> Result<Moved, String> {
        assert_eq!(service, "web");
        self.asked.lock().expect("lock").push((port, holder.to_owned()));
        match self.to {
            Some(to) => Ok(Moved { port: to, services: services(to, "0") }),
            None => Err(format!("port {port} is forced, and is held by {holder}")),
        }
    }
}

async fn start(port: u16, mover: Arc<Mover>) -> (Supervisor, Arc<Mutex<Vec<String>>>) {
    let config = SupervisorConfig {
        // Slow to bind at first: the probe meets the other process's 200s.
        services: services(port, "2"),
        port_mover: Some(mover),
        ..SupervisorConfig::default()
    };
    let builder = Supervisor::builder(config).expect("a valid graph");
    let mut events = builder.subscribe();
    let supervisor = builder.run().await.expect("start");
    let seen = Arc::new(Mutex::new(Vec::new()));
    let log = seen.clone();
    tokio::spawn(async move {
        while let Some(event) = events.recv().await {
            if !matches!(event.kind, EventKind::Log { .. }) {
                log.lock().expect("lock").push(event.to_string());
            }
        }
    });
    (supervisor, seen)
}

async fn wait_until(what: &str, condition: impl FnMut() -> bool) {
    omnidev_test_support::poll_until_async(what, DEADLINE, condition).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_foreign_listener_is_never_ready_and_the_port_moves() {
    let lost = free_port();
    let foreign = Foreign::start(lost);
    let to = free_port();
    let mover = Arc::new(Mover { to: Some(to), asked: Mutex::default() });
    let (supervisor, seen) = start(lost, mover.clone()).await;
    let holder = format!("pid {}", foreign.0.id());
    wait_until("`after` to start once web is ready on its new port", || {
        seen.lock().expect("lock").iter().any(|l| l.starts_with("after started"))
    })
    .await;
    let asked = mover.asked.lock().expect("lock").clone();
    assert_eq!(asked.len(), 1, "{asked:?}");
    assert_eq!(asked[0].0, lost);
    assert!(asked[0].1.starts_with(&holder), "{asked:?}");
    let lines = seen.lock().expect("lock").clone();
    let held = format!("port {lost} is held by {holder}");
    assert!(lines.iter().any(|l| l.starts_with(&held) && l.ends_with("not by web")), "{lines:#?}");
    assert!(
        lines.iter().any(|l| l == &format!("web: moved web from port {lost} to port {to}")),
        "{lines:#?}"
    );
    let moved_at = lines.iter().position(|l| l.contains("moved web")).expect("moved");
    // Not ready on the other process's answers: only after the move.
    let ready_at = lines.iter().position(|l| l == "web ready");
    assert!(ready_at.is_some_and(|r| r > moved_at), "{lines:#?}");
    // `after` waited for the real web: it started once, after the move.
    let after_starts = lines.iter().filter(|l| l.starts_with("after started")).count();
    let moved_at = lines.iter().position(|l| l.contains("moved web")).expect("moved");
    let after_at = lines.iter().position(|l| l.starts_with("after started"));
    assert_eq!(after_starts, 1, "{lines:#?}");
    assert!(after_at.is_some_and(|a| a > moved_at), "{lines:#?}");
    let body = reqwest::get(format!("http://127.0.0.1:{to}/"))
        .await
        .expect("get")
        .text()
        .await
        .expect("body");
    assert_eq!(body, "mine");
    supervisor.shutdown().await.expect("shutdown");
    drop(foreign);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_port_that_cannot_move_fails_the_service_naming_the_holder() {
    let lost = free_port();
    let foreign = Foreign::start(lost);
    let mover = Arc::new(Mover { to: None, asked: Mutex::default() });
    let (supervisor, seen) = start(lost, mover).await;
    let failed = || {
        supervisor.snapshot().into_iter().find_map(|s| match s.state {
            ServiceState::Failed { reason } if s.name == "web" => Some(reason),
            _ => None,
        })
    };
    wait_until("web to fail", || failed().is_some()).await;
    let reason = failed().expect("failed");
    assert!(
        reason.contains(&format!("pid {}", foreign.0.id())) && reason.contains("forced"),
        "{reason}"
    );
    let lines = seen.lock().expect("lock").clone();
    assert!(
        !lines.iter().any(|l| l.starts_with("after started") || l == "web ready"),
        "{lines:#?}"
    );
    supervisor.shutdown().await.expect("shutdown");
}

/// A process listening on `host:port` (`socket.AF_INET6` for an IPv6
/// host), accepting and closing connections, until killed.
fn listen_only(host: &str, port: u16) -> Command {
    let family = if host.contains(':') { "socket.AF_INET6" } else { "socket.AF_INET" };
    let mut command = Command::new("python3");
    command.args([
        "-c",
        &format!(
            "import socket\ns=socket.socket({family})\ns.bind(('{host}',{port}))\ns.listen()\n\
             print('listening',flush=True)\nwhile True: s.accept()[0].close()"
        ),
    ]);
    command
}

/// The listener answering at the probe's own address decides: a service
/// listening only on `[::1]:P` is not made ready by another process on
/// `127.0.0.1:P` that its probe (on `127.0.0.1:P`) reaches, however its
/// own listener on the same port looks; probed at `[::1]:P` it is ready.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_foreign_listener_on_the_probed_family_is_not_the_service() {
    assert!(
        std::net::TcpListener::bind("[::1]:0").is_ok(),
        "this test needs IPv6 on the loopback (bind [::1]:0 failed)"
    );
    let port = loop {
        // A port free on both families.
        let port = free_port();
        if std::net::TcpListener::bind(("::1", port)).is_ok() {
            break port;
        }
    };
    let foreign = Foreign::spawn(&mut listen_only("127.0.0.1", port));
    let service = |name: &str, probe_host: &str| {
        let listen = listen_only("::1", port);
        let mut spec = ServiceSpec::new(
            name,
            "python3",
            listen.get_args().map(|a| a.to_string_lossy().into_owned()),
            ".",
        );
        spec.readiness = Some(Readiness {
            probe: ProbeSpec::Tcp { address: format!("{probe_host}:{port}") },
            interval: Duration::from_millis(100),
            timeout: Duration::from_secs(60),
            listener: Some(port),
        });
        spec
    };
    for (probe_host, ready) in [("127.0.0.1", false), ("[::1]", true)] {
        let config = SupervisorConfig {
            services: vec![service("web", probe_host)],
            // Each attempt's error is an event: what the probe meets once
            // the service listens too.
            debug: true,
            ..SupervisorConfig::default()
        };
        let builder = Supervisor::builder(config).expect("a valid graph");
        let mut events = builder.subscribe();
        let supervisor = builder.run().await.expect("start");
        let held = format!("port {port} is held by pid {}", foreign.0.id());
        let mut lines = Vec::new();
        let mut listening = false;
        let outcome = tokio::time::timeout(DEADLINE, async {
            while let Some(event) = events.recv().await {
                let text = event.to_string();
                lines.push(text.clone());
                if let EventKind::Log { line } = &event.kind {
                    listening |= line.text == "listening";
                    continue;
                }
                // Ready, or an attempt once the service listens that met
                // the other process.
                if text == "web ready" || (listening && text.contains(&held)) {
                    return text;
                }
            }
            panic!("events ended: {lines:#?}");
        })
        .await
        .unwrap_or_else(|_| panic!("neither ready nor held: {lines:#?}"));
        if ready {
            assert_eq!(outcome, "web ready", "probed at {probe_host}: {lines:#?}");
        } else {
            assert!(
                outcome.contains("readiness attempt") && outcome.contains(&held),
                "probed at {probe_host}, the other process answered: {lines:#?}"
            );
        }
        supervisor.shutdown().await.expect("shutdown");
    }
    drop(foreign);
}

//! Supervises two processes with `omnidev-core` alone: `api`, a TCP server
//! with a readiness probe, and `client`, which depends on `api` being ready
//! and then talks to it once. Prints every event, waits until both have
//! ended (the client exits 0 after its request; then the api is stopped),
//! and exits 0 only if the client got its answer.
//!
//! ```text
//! supervise-two        (needs python3 on PATH)
//! ```

use std::process::ExitCode;
use std::time::Duration;

use omnidev_core::{
    Condition, Dependency, EventKind, ProbeSpec, Readiness, RestartPolicy, ServiceSpec,
    ServiceState, Supervisor, SupervisorConfig,
};

const SERVER: &str = "import socket,sys
s=socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(('127.0.0.1', int(sys.argv[1]))); s.listen()
print('api listening', flush=True)
while True:
    c,_=s.accept(); c.sendall(b'hello from api\\n'); c.close()";

const CLIENT: &str = "import socket,sys
c=socket.create_connection(('127.0.0.1', int(sys.argv[1])))
print('client got:', c.recv(100).decode().strip(), flush=True)";

#[tokio::main]
async fn main() -> ExitCode {
    match run().await {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(error) => {
            eprintln!("supervise-two: {error}");
            ExitCode::FAILURE
        }
    }
}

async fn run() -> Result<bool, Box<dyn std::error::Error>> {
    // A port free now; the api binds it a moment later.
    let port = std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port()
        .to_string();
    let mut api = ServiceSpec::new("api", "python3", ["-c", SERVER, &port], ".");
    api.readiness = Some(Readiness {
        probe: ProbeSpec::Tcp {
            address: format!("127.0.0.1:{port}"),
        },
        interval: Duration::from_millis(200),
        timeout: Duration::from_secs(30),
        listener: None,
    });
    let mut client = ServiceSpec::new("client", "python3", ["-c", CLIENT, &port], ".");
    // A one-shot: it ends after its request and is not started again.
    client.restart = RestartPolicy::Never;
    client.depends_on = vec![Dependency {
        service: "api".into(),
        condition: Condition::Ready,
    }];

    let supervisor = Supervisor::builder(SupervisorConfig {
        services: vec![api, client],
        ..Default::default()
    })?
    .run()
    .await?;
    let mut events = supervisor.subscribe();
    let mut client_ok = false;
    let deadline = tokio::time::sleep(Duration::from_secs(60));
    tokio::pin!(deadline);
    loop {
        tokio::select! {
            () = &mut deadline => break,
            event = events.recv() => {
                let Some(event) = event else { break };
                println!("{event}");
                if event.service.as_deref() == Some("client")
                    && let EventKind::State { state: ServiceState::Exited { status } } = &event.kind
                {
                    client_ok = status.success();
                    break;
                }
            }
        }
    }
    supervisor.shutdown().await?;
    Ok(client_ok)
}

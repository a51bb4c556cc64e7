"""The backend: `/health`, `/env`, a sqlite database and an artifacts directory."""

import json
import os
import sqlite3
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from omnigent.log import Stop, log

ENV_CONTRACT = (
    "OMNIGENT_DATA_DIR",
    "OMNIGENT_DATABASE_URI",
    "OMNIGENT_CONFIG_HOME",
    "OMNIGENT_URL",
    "OMNIGENT_WS_ALLOWED_ORIGINS",
    "OMNIGENT_LOG_TTY_FD",
    "OMNIGENT_LOG_FORCE_COLOR",
)


def database_path(uri: str) -> str:
    """`sqlite:///relative.db` or `sqlite:////absolute/path.db` → the file path."""
    prefix = "sqlite:///"
    if not uri.startswith(prefix):
        raise SystemExit(f"omnigent-server: unsupported --database-uri {uri!r} (want {prefix}PATH)")
    return uri[len(prefix):]


def run(args) -> int:
    db_path = database_path(args.database_uri)
    if os.path.dirname(db_path):
        os.makedirs(os.path.dirname(db_path), exist_ok=True)
    os.makedirs(args.artifact_location, exist_ok=True)
    lock = threading.Lock()
    db = sqlite3.connect(db_path, check_same_thread=False)
    db.execute("CREATE TABLE IF NOT EXISTS starts (pid INTEGER, at REAL)")
    db.execute("INSERT INTO starts VALUES (?, ?)", (os.getpid(), time.time()))
    db.commit()

    class Handler(BaseHTTPRequestHandler):
        def _json(self, status: int, body: dict) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self):
            if self.path == "/health":
                self._json(200, {"status": "ok", "pid": os.getpid()})
            elif self.path == "/env":
                with lock:
                    starts = db.execute("SELECT COUNT(*) FROM starts").fetchone()[0]
                self._json(200, {
                    "pid": os.getpid(),
                    "env": {name: os.environ.get(name) for name in ENV_CONTRACT},
                    "database": os.path.abspath(db_path),
                    "starts": starts,
                    "artifacts": os.path.abspath(args.artifact_location),
                })
            else:
                self._json(404, {"error": f"no route {self.path}"})

        def log_message(self, format, *fmt_args):
            # Health polls would drown the log; everything else is worth a line.
            if not self.path.startswith("/health"):
                log("server", f"{self.command} {self.path} -> {fmt_args[1] if len(fmt_args) > 1 else ''}")

    # A slow boot on request (the e2e uses it to open the window in which
    # another process takes the port before the server binds it).
    delay = float(os.environ.get("OMNIGENT_EXAMPLE_BOOT_DELAY") or 0)
    if delay > 0:
        log("server", f"booting for {delay:g}s before binding port {args.port}")
        time.sleep(delay)
    httpd = ThreadingHTTPServer((args.host, args.port), Handler)
    httpd.daemon_threads = True
    log("server", f"listening on http://{args.host}:{args.port} pid={os.getpid()} database={os.path.abspath(db_path)}")
    try:
        httpd.serve_forever(poll_interval=0.2)
    except (Stop, KeyboardInterrupt):
        log("server", "stopping")
    finally:
        httpd.server_close()
        db.close()
    # Like uvicorn's "Finished server process": the last word comes a
    # moment after the stop signal, once open work is done.
    time.sleep(0.3)
    log("server", f"shutdown complete pid={os.getpid()}")
    return 0

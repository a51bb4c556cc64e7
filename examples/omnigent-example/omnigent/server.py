"""The backend: `/health`, `/env`, a database (an SQLite file, or a Postgres
or MariaDB server through the driver `uv run --with` brought) and an
artifacts directory."""

import json
import os
import sqlite3
import threading
import time
import urllib.parse
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


def connect(uri: str):
    """A connection to the database `uri` names, its parameter mark, and
    what `/env` says of it: SQLite (`sqlite:///PATH`), Postgres
    (`postgresql+psycopg://…`, psycopg 3) or MariaDB (`mysql+pymysql://…`
    with `?unix_socket=`), as Omnigent's own URLs name them."""
    scheme = uri.split("://", 1)[0].split("+", 1)[0]
    if scheme == "sqlite":
        path = database_path(uri)
        if os.path.dirname(path):
            os.makedirs(os.path.dirname(path), exist_ok=True)
        return sqlite3.connect(path, check_same_thread=False), "?", os.path.abspath(path)
    if scheme in ("postgresql", "postgres"):
        import psycopg

        conn = psycopg.connect("postgresql://" + uri.split("://", 1)[1], autocommit=True)
        return conn, "%s", "postgres"
    if scheme == "mysql":
        import pymysql

        url = urllib.parse.urlsplit(uri)
        query = urllib.parse.parse_qs(url.query)
        conn = pymysql.connect(
            user=urllib.parse.unquote(url.username or ""),
            database=url.path.lstrip("/"),
            unix_socket=query["unix_socket"][0],
            autocommit=True,
        )
        return conn, "%s", "mariadb"
    raise SystemExit(f"omnigent-server: unsupported --database-uri {uri!r}")


def run(args) -> int:
    db, mark, where = connect(args.database_uri)
    os.makedirs(args.artifact_location, exist_ok=True)
    lock = threading.Lock()

    def execute(sql: str, params=()):
        cursor = db.cursor()
        cursor.execute(sql.replace("?", mark), params)
        return cursor

    execute("CREATE TABLE IF NOT EXISTS starts (pid INTEGER, at REAL)")
    execute("INSERT INTO starts VALUES (?, ?)", (os.getpid(), time.time()))
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
                    starts = execute("SELECT COUNT(*) FROM starts").fetchone()[0]
                self._json(200, {
                    "pid": os.getpid(),
                    "env": {name: os.environ.get(name) for name in ENV_CONTRACT},
                    "database": where,
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
    log("server", f"listening on http://{args.host}:{args.port} pid={os.getpid()} database={where}")
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

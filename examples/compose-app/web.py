"""The web process: /health counts a visit in the app's Postgres."""
import http.server
import os
import subprocess


def visits():
    done = subprocess.run(
        ["psql", "-X", "-tA", "-v", "ON_ERROR_STOP=1", os.environ["DATABASE_URL"], "-c",
         "INSERT INTO visits DEFAULT VALUES; SELECT count(*) FROM visits"],
        capture_output=True, text=True, timeout=10,
    )
    if done.returncode != 0:
        raise RuntimeError(done.stderr.strip())
    return int(done.stdout.split()[-1])


class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        if self.path != "/health":
            self.send_error(404)
            return
        try:
            body, code = f'{{"visits": {visits()}}}', 200
        except Exception as error:  # the database is the point of the check
            body, code = f'{{"error": "{error}"}}', 503
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(body.encode())


port = int(os.environ["PORT"])
print(f"web: listening on {port}", flush=True)
http.server.ThreadingHTTPServer(("127.0.0.1", port), Handler).serve_forever()

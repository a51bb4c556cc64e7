"""The helper daemon: waits for the server's `/health`, then logs a heartbeat."""

import json
import os
import socket
import time
import urllib.request

from omnigent.log import Stop, log


def server_pid(server: str):
    """The server's pid from `/health`, or None when it does not answer 200."""
    try:
        with urllib.request.urlopen(f"{server}/health", timeout=1) as response:
            if response.status == 200:
                return json.load(response).get("pid")
    except (OSError, ValueError):
        pass
    return None


def run(args) -> int:
    try:
        pid = server_pid(args.server)
        ready = "yes" if pid is not None else "no"
        log("host", f"started pid={os.getpid()} server={args.server} server-ready-at-start={ready}")
        while pid is None:
            time.sleep(0.2)
            pid = server_pid(args.server)
        # The same line as the real host's, which omnidev's profile waits for.
        log("host", f"Connected as '{socket.gethostname()}' (server pid={pid})")
        while True:
            time.sleep(args.heartbeat)
            now = server_pid(args.server)
            if now is None:
                log("host", "heartbeat: server unreachable")
            else:
                log("host", f"heartbeat: server pid={now} ok")
    except (Stop, KeyboardInterrupt):
        log("host", "stopping")
    return 0

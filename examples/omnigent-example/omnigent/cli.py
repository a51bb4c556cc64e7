"""Command line: `omnigent [--log-to-stderr] server|host ...`."""

import argparse

from omnigent import __version__, host, log, server


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="omnigent")
    parser.add_argument("--log-to-stderr", action="store_true", help="write logs to stderr")
    parser.add_argument("--version", action="version", version=f"omnigent {__version__} (example)")
    commands = parser.add_subparsers(dest="command", required=True)

    s = commands.add_parser("server", help="run the backend HTTP server")
    s.add_argument("--host", default="127.0.0.1")
    s.add_argument("--port", type=int, default=6767)
    s.add_argument("--database-uri", default="sqlite:///omnigent.db")
    s.add_argument("--artifact-location", default="artifacts")

    h = commands.add_parser("host", help="run the helper daemon that talks to the server")
    h.add_argument("--server", default="http://127.0.0.1:6767")
    h.add_argument("--heartbeat", type=float, default=5.0, help="seconds between heartbeat lines")

    args = parser.parse_args(argv)
    log.use_stderr(args.log_to_stderr)
    log.exit_on_sigterm()
    if args.command == "server":
        return server.run(args)
    return host.run(args)

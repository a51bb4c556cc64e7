"""The worker: a beat a second into the broker's Redis database, and a
mark in the cache's (REDIS_URL), spoken in Redis's own protocol."""
import os
import socket
import time
import urllib.parse


def connect(url):
    parts = urllib.parse.urlsplit(url)
    conn = socket.create_connection((parts.hostname, parts.port or 6379), timeout=5)
    reader = conn.makefile("rb")

    def call(*words):
        data = b"*%d\r\n" % len(words)
        for word in words:
            word = str(word).encode()
            data += b"$%d\r\n%s\r\n" % (len(word), word)
        conn.sendall(data)
        line = reader.readline()
        if line.startswith(b"-"):
            raise RuntimeError(line.decode().strip())
        return line

    if parts.password:
        call("AUTH", urllib.parse.unquote(parts.password))
    call("SELECT", parts.path.strip("/") or "0")
    return call


broker = connect(os.environ["CELERY_BROKER_URL"])
cache = connect(os.environ["REDIS_URL"])
cache("SET", "worker:started", int(time.time()))
print("worker: connected", flush=True)
while True:
    broker("INCR", "worker:beats")
    time.sleep(1)

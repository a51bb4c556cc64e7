// A small stand-in for `vite`: serves a page and proxies /api/* to OMNIGENT_URL.
// Flags: --host ADDR, --port N, --strictPort (fail when N is busy instead of
// trying the next port), the way Vite treats them.
import http from "node:http";
import { banner } from "omnigent-banner";

function parseArgs(argv) {
  const options = { host: "localhost", port: 5173, strictPort: false };
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i];
    const [name, inline] = arg.split("=", 2);
    const value = () => (inline !== undefined ? inline : argv[++i]);
    if (name === "--host") options.host = value();
    else if (name === "--port") options.port = Number(value());
    else if (name === "--strictPort") options.strictPort = true;
    else if (name === "--") continue;
    else {
      console.error(`omnigent-web: unknown argument ${arg}`);
      process.exit(2);
    }
  }
  return options;
}

const options = parseArgs(process.argv.slice(2));
const apiTarget = process.env.OMNIGENT_URL || "http://127.0.0.1:6767";
console.log(`omnigent-web: OMNIGENT_URL=${apiTarget}`);

const server = http.createServer((req, res) => {
  if (req.url.startsWith("/api/")) {
    const target = new URL(req.url.slice("/api".length), apiTarget);
    const upstream = http.request(target, { method: req.method, headers: req.headers }, (up) => {
      res.writeHead(up.statusCode, up.headers);
      up.pipe(res);
    });
    upstream.on("error", (err) => {
      res.writeHead(502, { "content-type": "text/plain" });
      res.end(`proxy error: ${err.message}\n`);
    });
    req.pipe(upstream);
    return;
  }
  res.writeHead(200, { "content-type": "text/html" });
  res.end(banner(apiTarget));
});

let port = options.port;
server.on("error", (err) => {
  if (err.code === "EADDRINUSE" && !options.strictPort) {
    console.log(`omnigent-web: port ${port} is in use, trying ${port + 1}`);
    port += 1;
    server.listen(port, options.host);
    return;
  }
  if (err.code === "EADDRINUSE") {
    console.error(`omnigent-web: error: port ${port} is already in use (--strictPort)`);
  } else {
    console.error(`omnigent-web: error: ${err.message}`);
  }
  process.exit(1);
});
server.on("listening", () => {
  console.log(`omnigent-web: ready pid=${process.pid}`);
  console.log(`  ➜  Local:   http://${options.host}:${port}/`);
});
server.listen(port, options.host);

for (const signal of ["SIGTERM", "SIGINT", "SIGHUP"]) {
  process.on(signal, () => {
    console.log(`omnigent-web: stopping (${signal})`);
    server.close();
    process.exit(0);
  });
}

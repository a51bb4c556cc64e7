// Runs as `postinstall`: one line per `npm install`, counted by the e2e tests.
import { appendFileSync } from "node:fs";

appendFileSync(new URL("./.install-log", import.meta.url), `${new Date().toISOString()} pid=${process.pid}\n`);
console.log("omnigent-web: dependencies installed");

// Runs as `postinstall`: one line per install, counted by the e2e tests.
// Records which package manager ran it and from where (INIT_CWD is the
// directory the install was started in: the workspace root for pnpm).
import { appendFileSync } from "node:fs";

const agent = (process.env.npm_config_user_agent || "unknown").split(" ")[0];
const from = process.env.INIT_CWD || "unknown";
appendFileSync(
  new URL("./.install-log", import.meta.url),
  `${new Date().toISOString()} pid=${process.pid} agent=${agent} init-cwd=${from}\n`,
);
console.log(`omnigent-web: dependencies installed by ${agent}`);

// The page the example dev server serves at `/`.
export function banner(apiTarget) {
  return `<!doctype html>
<html><head><title>omnigent example</title></head>
<body><h1>omnigent example UI</h1><p>API proxied to ${apiTarget}</p></body></html>
`;
}

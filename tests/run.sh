#!/usr/bin/env bash
# The project's test command: the README gives it to users and .ci/run calls it.
# It installs whatever the tests need on a fresh Debian machine with the Rust toolchain,
# then runs every test (unit tests, integration tests over real HTTP against the
# built-in simulator, the command line through the built binary, and repo-fix tasks on
# real fixture repositories).
set -euo pipefail
cd "$(dirname "$0")/.."

# Repo-fix tests clone and diff repositories (git) and run the fixtures' test suites
# (python3). MCP tests drive the reference MCP servers from npm (Node.js). The compare
# report's page is loaded in headless Chromium.
missing=()
command -v git >/dev/null 2>&1 || missing+=(git)
command -v python3 >/dev/null 2>&1 || missing+=(python3)
command -v node >/dev/null 2>&1 || missing+=(nodejs)
command -v npm >/dev/null 2>&1 || missing+=(npm)
command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1 || missing+=(chromium)
if [ ${#missing[@]} -gt 0 ]; then
  echo "tests/run.sh: installing ${missing[*]}" >&2
  sudo_cmd=()
  [ "$(id -u)" -eq 0 ] || sudo_cmd=(sudo)
  "${sudo_cmd[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq "${missing[@]}"
fi

# The MCP servers and the MCP conformance suite, at the versions pinned in
# tests/mcp/package-lock.json (the suite brings its own Node 22).
if [ ! -f tests/mcp/node_modules/.installed ] || [ tests/mcp/package-lock.json -nt tests/mcp/node_modules/.installed ]; then
  echo "tests/run.sh: installing the MCP test servers (npm ci in tests/mcp)" >&2
  npm ci --prefix tests/mcp --no-audit --no-fund --loglevel=error
  touch tests/mcp/node_modules/.installed
fi

# The overlay workspace tests mount overlayfs inside the binary's own mount namespace,
# which needs root (CAP_SYS_ADMIN); they fail, saying so, without it.
[ "$(id -u)" -eq 0 ] || echo "tests/run.sh: not running as root: the overlay workspace tests (tests/integration/workspaces.rs) will fail; run the tests as root" >&2

cargo test --locked "$@"

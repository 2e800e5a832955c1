#!/usr/bin/env bash
# The project's test command: the README gives it to users and .ci/run calls it.
# It installs whatever the tests need on a fresh Debian machine with the Rust toolchain,
# then runs every test (unit tests, integration tests over real HTTP against the
# built-in simulator, and the command line through the built binary).
set -euo pipefail
cd "$(dirname "$0")/.."

# Nothing outside the Rust toolchain is needed yet: the simulator is built in.
# (Later: npm packages for MCP servers are installed here.)

cargo test --locked "$@"

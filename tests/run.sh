#!/usr/bin/env bash
# The project's test command: the README gives it to users and .ci/run calls it.
# It installs whatever the tests need on a fresh Debian machine with the Rust toolchain,
# then runs every test (unit tests, integration tests over real HTTP against the
# built-in simulator, the command line through the built binary, and repo-fix tasks on
# real fixture repositories).
set -euo pipefail
cd "$(dirname "$0")/.."

# Repo-fix tests clone and diff repositories (git) and run the fixtures' test suites
# (python3).
missing=()
command -v git >/dev/null 2>&1 || missing+=(git)
command -v python3 >/dev/null 2>&1 || missing+=(python3)
if [ ${#missing[@]} -gt 0 ]; then
  echo "tests/run.sh: installing ${missing[*]}" >&2
  sudo_cmd=()
  [ "$(id -u)" -eq 0 ] || sudo_cmd=(sudo)
  "${sudo_cmd[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq "${missing[@]}"
fi

cargo test --locked "$@"

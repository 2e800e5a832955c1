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

# The overlay workspace tests mount overlayfs inside the binary's own mount namespace:
# as root, and again as nobody (through setpriv) inside a user namespace of the
# binary's own.
# The reflink workspace tests need a folder on a filesystem with reflinks: a small XFS
# image made with reflink=1, loop-mounted under target/ (as root) and unmounted at the
# end; AGENTBATCH_TEST_REFLINK_DIR set beforehand (a folder on btrfs or XFS) is used
# instead.
if [ -z "${AGENTBATCH_TEST_REFLINK_DIR:-}" ]; then
  if [ "$(id -u)" -ne 0 ]; then
    echo "tests/run.sh: not running as root, so no XFS image can be mounted for the reflink workspace tests: run as root, or set AGENTBATCH_TEST_REFLINK_DIR to a folder on btrfs or XFS (reflink=1)" >&2
    exit 1
  fi
  if ! command -v mkfs.xfs >/dev/null 2>&1; then
    echo "tests/run.sh: installing xfsprogs (the reflink workspace tests' XFS image)" >&2
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq xfsprogs
  fi
  mkdir -p target
  xfs_img="$PWD/target/test-xfs.img"
  xfs_dir="$PWD/target/test-xfs"
  # A mount left by a run that was killed is reused.
  if ! mountpoint -q "$xfs_dir" 2>/dev/null; then
    rm -f "$xfs_img"
    mkdir -p "$xfs_dir"
    truncate -s 512M "$xfs_img"
    mkfs.xfs -q -m reflink=1 "$xfs_img"
    mount -o loop "$xfs_img" "$xfs_dir" || {
      echo "tests/run.sh: cannot loop-mount an XFS image at $xfs_dir (no loop devices here?): set AGENTBATCH_TEST_REFLINK_DIR to a folder on btrfs or XFS (reflink=1)" >&2
      exit 1
    }
  fi
  trap 'umount "$xfs_dir" 2>/dev/null && rm -f "$xfs_img"' EXIT
  export AGENTBATCH_TEST_REFLINK_DIR="$xfs_dir"
fi

cargo test --locked "$@"

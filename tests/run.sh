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
# report's page is loaded in headless Chromium. The database tests need PostgreSQL's
# server binaries (a throwaway cluster is started below) unless AGENTBATCH_TEST_PG_URL
# names a server. The instruction-count guard (tests/integration/instructions.rs) runs
# the runner under valgrind, and fails without it.
missing=()
command -v git >/dev/null 2>&1 || missing+=(git)
command -v python3 >/dev/null 2>&1 || missing+=(python3)
command -v node >/dev/null 2>&1 || missing+=(nodejs)
command -v npm >/dev/null 2>&1 || missing+=(npm)
command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1 || missing+=(chromium)
command -v valgrind >/dev/null 2>&1 || missing+=(valgrind)
# Per-task containers (tests/integration/containers.rs): podman with runc, and
# mmdebstrap to make the base image from Debian's mirror (no registry is reachable).
command -v podman >/dev/null 2>&1 || missing+=(podman)
command -v runc >/dev/null 2>&1 || missing+=(runc)
command -v mmdebstrap >/dev/null 2>&1 || missing+=(mmdebstrap)
# The pull tests pull from a real registry server on loopback (Debian's docker-registry).
command -v docker-registry >/dev/null 2>&1 || missing+=(docker-registry)
[ -n "${AGENTBATCH_TEST_PG_URL:-}" ] || compgen -G '/usr/lib/postgresql/*/bin/initdb' >/dev/null || missing+=(postgresql)
[ -n "${AGENTBATCH_TEST_PG_URL:-}" ] || command -v openssl >/dev/null 2>&1 || missing+=(openssl)
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

# Headless Chromium's driver for the report page tests (puppeteer-core, no browser
# download: the tests launch the system's chromium), pinned in tests/browser.
if [ ! -f tests/browser/node_modules/.installed ] || [ tests/browser/package-lock.json -nt tests/browser/node_modules/.installed ]; then
  echo "tests/run.sh: installing the browser driver (npm ci in tests/browser)" >&2
  PUPPETEER_SKIP_DOWNLOAD=1 npm ci --prefix tests/browser --no-audit --no-fund --loglevel=error
  touch tests/browser/node_modules/.installed
fi

# Python packages the tests use (an independent JSON Schema validator; the official OTLP
# protobuf definitions the test OTLP receiver decodes with; pydantic and the official
# harbor and swebench packages the export tests validate with), in a virtual environment
# of their own, pinned in tests/python/requirements.txt and, installed without their
# dependencies, tests/python/requirements-no-deps.txt (which says why).
if ! python3 -c 'import venv, ensurepip' >/dev/null 2>&1; then
  echo "tests/run.sh: installing python3-venv" >&2
  sudo_cmd=()
  [ "$(id -u)" -eq 0 ] || sudo_cmd=(sudo)
  "${sudo_cmd[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq python3-venv
fi
if [ ! -f tests/python/.venv/.installed ] || [ tests/python/requirements.txt -nt tests/python/.venv/.installed ] || [ tests/python/requirements-no-deps.txt -nt tests/python/.venv/.installed ]; then
  echo "tests/run.sh: installing the tests' Python packages (tests/python/.venv)" >&2
  rm -rf tests/python/.venv
  python3 -m venv tests/python/.venv
  tests/python/.venv/bin/pip install --quiet --disable-pip-version-check -r tests/python/requirements.txt
  tests/python/.venv/bin/pip install --quiet --disable-pip-version-check --no-deps --ignore-requires-python -r tests/python/requirements-no-deps.txt
  touch tests/python/.venv/.installed
fi
export AGENTBATCH_TEST_PYTHON="$PWD/tests/python/.venv/bin/python"

# What the tests set up is undone on exit, whatever the exit status (which is kept): the
# throwaway PostgreSQL server and its folder, and the XFS image's mount (both below).
# Nothing here may fail under set -e, or later steps would be skipped.
cleanup() {
  local rc=$?
  if [ -n "${podman_service_pid:-}" ]; then
    kill "$podman_service_pid" 2>/dev/null || true
  fi
  if [ -n "${registry_pid:-}" ]; then
    kill "$registry_pid" 2>/dev/null || true
  fi
  if [ -n "${podman_dir:-}" ]; then
    rm -rf "$podman_dir" || true
  fi
  if [ -n "${pg_dir:-}" ]; then
    if [ -f "$pg_dir/data/postmaster.pid" ] && ! pg_run "$pg_bin/pg_ctl" -D "$pg_dir/data" -s -m immediate -w stop; then
      echo "tests/run.sh: could not stop the test PostgreSQL server (pid $(head -n 1 "$pg_dir/data/postmaster.pid" 2>/dev/null)); its folder is deleted, which makes it shut down within a minute" >&2
    fi
    rm -rf "$pg_dir" || true
  fi
  if [ -n "${xfs_mounted:-}" ]; then
    umount "$xfs_dir" 2>/dev/null && rm -f "$xfs_img" || true
  fi
  exit "$rc"
}
trap cleanup EXIT

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
  xfs_mounted=1
  export AGENTBATCH_TEST_REFLINK_DIR="$xfs_dir"
fi

# The database tests get a throwaway PostgreSQL cluster: a fresh initdb in a temporary
# folder, on a free port of 127.0.0.1 only, its Unix socket in that folder, trust auth,
# no fsync. The package's own cluster and service are not used (no init system needed).
# The URL's user is the cluster's superuser, so each test may create its own database.
# AGENTBATCH_TEST_PG_URL set beforehand is used instead.
if [ -z "${AGENTBATCH_TEST_PG_URL:-}" ]; then
  pg_bin=$(printf '%s\n' /usr/lib/postgresql/*/bin/initdb | sort -V | tail -n 1)
  pg_bin=${pg_bin%/initdb}
  if [ ! -x "$pg_bin/initdb" ]; then
    echo "tests/run.sh: no PostgreSQL server in /usr/lib/postgresql/*/bin: install it (apt-get install postgresql), or set AGENTBATCH_TEST_PG_URL to a server's URL whose user may create databases" >&2
    exit 1
  fi
  # PostgreSQL refuses to run as root: as root the server runs as the package's postgres
  # user (nobody without it), which owns the cluster's folder. Its commands run from that
  # folder, as the repository may be out of that user's reach.
  pg_as=()
  if [ "$(id -u)" -eq 0 ]; then
    pg_os_user=postgres
    id -u "$pg_os_user" >/dev/null 2>&1 || pg_os_user=nobody
    pg_as=(setpriv --reuid="$pg_os_user" --regid="$(id -g "$pg_os_user")" --init-groups)
  fi
  pg_run() { (cd "$pg_dir" && "${pg_as[@]}" "$@"); }
  pg_dir=$(mktemp -d "${TMPDIR:-/tmp}/agentbatch-pg.XXXXXX")
  [ ${#pg_as[@]} -eq 0 ] || chown "$pg_os_user:" "$pg_dir"
  if ! pg_run test -w "$pg_dir"; then
    echo "tests/run.sh: ${pg_os_user:-$(id -un)} cannot write to $pg_dir (the test PostgreSQL cluster's folder): set TMPDIR to a folder it can reach" >&2
    exit 1
  fi
  pg_port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  if ! pg_run "$pg_bin/initdb" -D "$pg_dir/data" -U agentbatch --auth=trust -E UTF8 --locale=C --no-sync >"$pg_dir/initdb.log" 2>&1; then
    echo "tests/run.sh: initdb failed for the test PostgreSQL cluster; the end of its output:" >&2
    tail -n 20 "$pg_dir/initdb.log" >&2
    exit 1
  fi
  # TLS: a throwaway CA and a server certificate for the name localhost only (so that
  # verify-full by address fails, as it must); the role tls_only may connect over TLS
  # only, so a test that gets in as tls_only got in encrypted.
  if ! pg_run sh -c 'mkdir tls && cd tls &&
      openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout ca.key -out ca.pem -days 3 -subj /CN=agentbatch-test-ca &&
      openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout server.key -out server.csr -subj /CN=localhost &&
      printf "subjectAltName=DNS:localhost\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n" >server.ext &&
      openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial -out server.pem -days 3 -extfile server.ext &&
      chmod 600 server.key' >"$pg_dir/tls.log" 2>&1; then
    echo "tests/run.sh: openssl could not make the test PostgreSQL server's certificates; its output:" >&2
    tail -n 20 "$pg_dir/tls.log" >&2
    exit 1
  fi
  pg_run sh -c 'printf "hostssl all tls_only 127.0.0.1/32 trust\nhost all tls_only 127.0.0.1/32 reject\nhost all tls_only ::1/128 reject\n" | cat - data/pg_hba.conf >data/pg_hba.new && mv data/pg_hba.new data/pg_hba.conf'
  cat >>"$pg_dir/data/postgresql.conf" <<EOF
ssl = on
ssl_cert_file = '$pg_dir/tls/server.pem'
ssl_key_file = '$pg_dir/tls/server.key'
listen_addresses = '127.0.0.1'
port = $pg_port
unix_socket_directories = '$pg_dir'
fsync = off
synchronous_commit = off
full_page_writes = off
EOF
  # pg_ctl -w returns once the server accepts connections.
  if ! pg_run "$pg_bin/pg_ctl" -D "$pg_dir/data" -l "$pg_dir/server.log" -s -w -t 30 start; then
    echo "tests/run.sh: the test PostgreSQL server did not start on 127.0.0.1:$pg_port; the end of its log:" >&2
    tail -n 20 "$pg_dir/server.log" >&2
    exit 1
  fi
  if ! "$pg_bin/createdb" -h 127.0.0.1 -p "$pg_port" -U agentbatch agentbatch; then
    echo "tests/run.sh: cannot create the test database on 127.0.0.1:$pg_port; the end of the server's log:" >&2
    tail -n 20 "$pg_dir/server.log" >&2
    exit 1
  fi
  if ! "$pg_bin/createuser" -h 127.0.0.1 -p "$pg_port" -U agentbatch --superuser tls_only; then
    echo "tests/run.sh: cannot create the test server's role tls_only" >&2
    exit 1
  fi
  export AGENTBATCH_TEST_PG_URL="postgres://agentbatch@127.0.0.1:$pg_port/agentbatch"
  export AGENTBATCH_TEST_PG_CA="$pg_dir/tls/ca.pem"
fi

# The container tests: podman's settings for this kind of machine in a containers.conf
# of the tests' own (conmon's hard nproc limit is below podman's default, and crun
# refuses cgroup v1's hybrid layout: docs/guide/containers.md), a base image (Debian
# minbase with python3 and git) made once with mmdebstrap and cached as a tarball in
# target/, and podman's Docker API service, which the `docker` command line is pointed
# at (DOCKER_HOST). A `docker` command comes from Docker's CLI where the machine has one,
# else from podman-docker.
mkdir -p target
printf '[containers]\ndefault_ulimits = ["nofile=20000:20000", "nproc=32768:32768"]\n[engine]\nruntime = "runc"\n' >target/containers.conf
export CONTAINERS_CONF="$PWD/target/containers.conf"
if ! command -v docker >/dev/null 2>&1; then
  echo "tests/run.sh: installing podman-docker (a docker command for the container tests)" >&2
  sudo_cmd=()
  [ "$(id -u)" -eq 0 ] || sudo_cmd=(sudo)
  DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq podman-docker
fi
export AGENTBATCH_TEST_IMAGE=localhost/agentbatch-test-base:1
if ! podman image exists "$AGENTBATCH_TEST_IMAGE"; then
  if [ ! -s target/container-base.tar ]; then
    echo "tests/run.sh: making the container tests' base image with mmdebstrap (about a minute, once)" >&2
    rm -f target/container-base.tar.part
    if ! mmdebstrap --quiet --variant=minbase --include=python3,git --format=tar bookworm target/container-base.tar.part >target/mmdebstrap.log 2>&1; then
      echo "tests/run.sh: mmdebstrap could not make the base image; the end of its output:" >&2
      tail -n 20 target/mmdebstrap.log >&2
      exit 1
    fi
    mv target/container-base.tar.part target/container-base.tar
  fi
  podman import --quiet target/container-base.tar "$AGENTBATCH_TEST_IMAGE" >/dev/null
fi
# The suite tests' images (tests/integration/suites.rs) add pytest and patch to it, from
# Debian's packages (as SWE-bench's instance images have their test runner).
export AGENTBATCH_TEST_PY_IMAGE=localhost/agentbatch-test-py:1
if ! podman image exists "$AGENTBATCH_TEST_PY_IMAGE"; then
  echo "tests/run.sh: making the suite tests' image (pytest and patch from Debian's packages)" >&2
  py_ctx=$(mktemp -d "${TMPDIR:-/tmp}/agentbatch-py.XXXXXX")
  printf 'FROM %s\nRUN apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends python3-pytest patch >/dev/null && rm -rf /var/lib/apt/lists/*\n' "$AGENTBATCH_TEST_IMAGE" >"$py_ctx/Dockerfile"
  if ! podman build -q -t "$AGENTBATCH_TEST_PY_IMAGE" "$py_ctx" >target/py-image.log 2>&1; then
    echo "tests/run.sh: the suite tests' image could not be built; the end of its log:" >&2
    tail -n 20 target/py-image.log >&2
    exit 1
  fi
  rm -rf "$py_ctx"
fi
podman_dir=$(mktemp -d "${TMPDIR:-/tmp}/agentbatch-podman.XXXXXX")
podman system service --time=0 "unix://$podman_dir/podman.sock" >"$podman_dir/service.log" 2>&1 &
podman_service_pid=$!
for _ in $(seq 100); do [ -S "$podman_dir/podman.sock" ] && break; sleep 0.1; done
if [ ! -S "$podman_dir/podman.sock" ]; then
  echo "tests/run.sh: podman system service did not start; its log:" >&2
  tail -n 20 "$podman_dir/service.log" >&2
  exit 1
fi
export DOCKER_HOST="unix://$podman_dir/podman.sock"
# A registry server on a free port of 127.0.0.1, plain HTTP, which podman is told to
# trust (registries.conf of the tests' own), for the pull tests.
registry_port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
mkdir -p "$podman_dir/registry"
printf 'version: 0.1\nstorage:\n  filesystem:\n    rootdirectory: %s\nhttp:\n  addr: 127.0.0.1:%s\n' "$podman_dir/registry" "$registry_port" >"$podman_dir/registry.yml"
docker-registry serve "$podman_dir/registry.yml" >"$podman_dir/registry.log" 2>&1 &
registry_pid=$!
printf '[[registry]]\nlocation = "127.0.0.1:%s"\ninsecure = true\n' "$registry_port" >"$podman_dir/registries.conf"
export CONTAINERS_REGISTRIES_CONF="$podman_dir/registries.conf"
export AGENTBATCH_TEST_REGISTRY="127.0.0.1:$registry_port"
for _ in $(seq 100); do python3 -c "import socket; socket.create_connection(('127.0.0.1', $registry_port), 1)" 2>/dev/null && break; sleep 0.1; done

# The crate as `cargo package` makes it for crates.io builds on its own (nothing it
# needs left out), and a build from it still names its commit (from the
# .cargo_vcs_info.json cargo writes, as it has no .git). Run before the tests, since
# its check build shares target/debug: only with the whole suite, not a filtered run.
if [ $# -eq 0 ]; then
  cargo package --locked --allow-dirty --quiet
  head=$(git rev-parse HEAD 2>/dev/null || echo unknown)
  packaged=$(target/debug/agentbatch --version)
  case "$packaged" in
    *"(commit $head)") ;;
    *) echo "tests/run.sh: the packaged crate's build says '$packaged', not commit $head" >&2; exit 1 ;;
  esac
  echo "tests/run.sh: cargo package: $(du -h target/package/agentbatch-*.crate | cut -f1) crate, builds on its own ($packaged)" >&2
else
  echo "tests/run.sh: a filtered run: the cargo package check is left to the whole suite" >&2
fi

if [ $# -eq 0 ]; then
  # The worker image's test (tests/integration/worker_image.rs) compiles the crate inside
  # a container, 3-4 minutes of both cores from a cold cache: it runs alone first, so it
  # does not slow the timing-sensitive tests that would run beside it.
  # Its failure is reported at the end, not in place of the rest of the suite.
  image_rc=0
  cargo test --locked --test integration -- worker_image:: || image_rc=$?
  cargo test --locked -- --skip worker_image::
  if [ "$image_rc" -ne 0 ]; then
    echo "tests/run.sh: the worker image's tests failed (their output is above, before the rest of the suite's)" >&2
    exit "$image_rc"
  fi
else
  cargo test --locked "$@"
fi

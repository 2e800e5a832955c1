# The agentbatch worker image: the binary, and what repo-fix tasks' commands commonly
# need (git, python3, bash). Job files and the repositories they name are mounted (or
# copied into a derived image) at the same relative places as on the machine that ran
# `agentbatch run --queue`. See docs/launch/README.md.
#
#   docker build --build-arg AGENTBATCH_COMMIT="$(git rev-parse HEAD)" -t agentbatch .
#   docker run --rm -e AGENTBATCH_QUEUE_URL -e PGPASSWORD -e ANTHROPIC_API_KEY \
#     -v "$PWD:/work" agentbatch worker --run-id nightly-1202 --job jobs/repo-fix.yaml
#
# The base images are build arguments (BUILD_IMAGE with the Rust toolchain,
# RUNTIME_IMAGE a Debian), for a registry mirror or images made locally.

ARG BUILD_IMAGE=rust:1-bookworm
ARG RUNTIME_IMAGE=debian:bookworm-slim

FROM ${BUILD_IMAGE} AS build
# The build context has no .git: the commit `agentbatch --version` names comes from here.
ARG AGENTBATCH_COMMIT=unknown
ENV AGENTBATCH_COMMIT=${AGENTBATCH_COMMIT}
WORKDIR /src
# What Cargo.toml's `include` lists (a test checks the two agree).
COPY Cargo.toml Cargo.lock build.rs README.md ./
COPY src ./src
RUN cargo build --release --locked

FROM ${RUNTIME_IMAGE}
RUN apt-get update \
 && apt-get install -y --no-install-recommends ca-certificates git python3 bash \
 && rm -rf /var/lib/apt/lists/*
COPY --from=build /src/target/release/agentbatch /usr/local/bin/agentbatch
WORKDIR /work
ENTRYPOINT ["agentbatch"]

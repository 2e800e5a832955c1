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
# The Cargo profile: release for use; the tests build `dev` (3.5 minutes cold
# on 2 cores, against about 11 for release).
ARG PROFILE=release
WORKDIR /src
# What Cargo.toml's `include` lists (a test checks the two agree).
COPY Cargo.toml Cargo.lock build.rs README.md ./
COPY src ./src
# The binary is copied out in the same step, so /src/target may be a cache mounted for
# the build (`podman build -v DIR:/src/target`, as the tests do): it is then not in the
# layer.
RUN cargo build --profile "$PROFILE" --locked \
 && cp "target/$(if [ "$PROFILE" = dev ]; then echo debug; else echo "$PROFILE"; fi)/agentbatch" /usr/local/bin/agentbatch

FROM ${RUNTIME_IMAGE}
RUN apt-get update \
 && apt-get install -y --no-install-recommends ca-certificates git python3 bash \
 && rm -rf /var/lib/apt/lists/*
COPY --from=build /usr/local/bin/agentbatch /usr/local/bin/agentbatch
WORKDIR /work
ENTRYPOINT ["agentbatch"]

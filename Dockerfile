# The agentbatch worker image: the binary, and what repo-fix tasks' commands commonly
# need (git, python3, bash). Job files and the repositories they name are mounted (or
# copied into a derived image) at the same relative places as on the machine that ran
# `agentbatch run --queue`. See docs/launch/README.md.
#
#   docker build -t agentbatch .
#   docker run --rm -e AGENTBATCH_QUEUE_URL -e PGPASSWORD -e ANTHROPIC_API_KEY \
#     -v "$PWD:/work" agentbatch worker --run-id nightly-1202 --job jobs/repo-fix.yaml

FROM rust:1-bookworm AS build
WORKDIR /src
COPY Cargo.toml Cargo.lock ./
COPY src ./src
RUN cargo build --release --locked

FROM debian:bookworm-slim
RUN apt-get update \
 && apt-get install -y --no-install-recommends ca-certificates git python3 bash \
 && rm -rf /var/lib/apt/lists/*
COPY --from=build /src/target/release/agentbatch /usr/local/bin/agentbatch
WORKDIR /work
ENTRYPOINT ["agentbatch"]

# Multi-stage build of `app`. The runtime image holds the binary (librdkafka linked in
# statically; OpenSSL and zlib from the system, for Kafka over TLS) and runs as a non-root user. `app serve` is the default command; `app worker`, `app migrate` and
# `app health` are the other verbs (see `app --help`).
FROM rust:1.95-bookworm AS build
WORKDIR /src
# Dependencies first, in a layer of their own: a change to the sources rebuilds only the
# project's crates. Stub sources with the real manifests build every dependency once.
COPY Cargo.toml Cargo.lock ./
COPY migrations/Cargo.toml ./migrations/Cargo.toml
# The fake Toss API and the bench harness are workspace members (tests and local runs only):
# their manifests and sources come along so that the workspace resolves; neither is built
# into the image.
COPY fake-toss ./fake-toss
COPY bench ./bench
RUN mkdir -p src/bin migrations/src \
 && echo 'fn main() {}' > src/bin/app.rs \
 && touch src/lib.rs migrations/src/lib.rs \
 && cargo build --release --locked --bin app \
 && rm -rf src migrations/src
COPY migrations ./migrations
COPY src ./src
# The real sources are newer than the stub's build: cargo rebuilds the project's crates.
RUN touch src/lib.rs src/bin/app.rs migrations/src/lib.rs \
 && cargo build --release --locked --bin app

FROM debian:bookworm-slim
RUN apt-get update \
 && apt-get install -y --no-install-recommends ca-certificates libssl3 \
 && rm -rf /var/lib/apt/lists/* \
 && useradd --system --uid 10001 --home-dir /app --create-home app \
 && mkdir -p /app/data && chown app /app/data
COPY --from=build /src/target/release/app /usr/local/bin/app
USER app
WORKDIR /app
# The embedded default keeps its SQLite file in data/: a volume keeps it across containers.
VOLUME ["/app/data"]
ENV APP__HTTP__BIND=0.0.0.0:8080 \
    APP__WORKER__HTTP__BIND=0.0.0.0:8081 \
    APP__LOG__FORMAT=json
EXPOSE 8080 8081
# `app health` asks this container's own /health/ready (add `--worker` for a worker).
HEALTHCHECK --interval=10s --timeout=5s --start-period=20s --retries=3 CMD ["app", "health"]
ENTRYPOINT ["app"]
CMD ["serve"]

# Multi-stage build of `app`. The runtime image holds the binary only and runs as a
# non-root user. `app serve` is the default command; `app worker` and `app migrate` are
# the other verbs (see `app --help`).
FROM rust:1.95-bookworm AS build
WORKDIR /src
COPY Cargo.toml Cargo.lock ./
COPY migrations ./migrations
COPY src ./src
RUN cargo build --release --locked --bin app

FROM debian:bookworm-slim
RUN apt-get update \
 && apt-get install -y --no-install-recommends ca-certificates \
 && rm -rf /var/lib/apt/lists/* \
 && useradd --system --uid 10001 --home-dir /app --create-home app
COPY --from=build /src/target/release/app /usr/local/bin/app
USER app
WORKDIR /app
ENV APP__HTTP__BIND=0.0.0.0:8080
EXPOSE 8080
ENTRYPOINT ["app"]
CMD ["serve"]

# memd in a container: build with the Rust toolchain, run on a slim Debian.
FROM rust:1.95-bookworm AS build
WORKDIR /src
COPY . .
RUN cargo build --release --locked --bin memd

FROM debian:bookworm-slim
RUN apt-get update && apt-get install -y --no-install-recommends ca-certificates && rm -rf /var/lib/apt/lists/*
COPY --from=build /src/target/release/memd /usr/local/bin/memd
ENV MEMD_LISTEN=0.0.0.0:7070
EXPOSE 7070
ENTRYPOINT ["memd"]
CMD ["serve"]

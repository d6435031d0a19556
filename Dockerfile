# syntax=docker/dockerfile:1
# check=experimental=all
#
# One image for every service of the stack: `rolloutledger serve --only <service>`,
# `rolloutledger migrate`, and the other subcommands. docker-compose.yml builds it
# once and runs it as several containers.

# build compiles a static binary (no cgo), with module and build caches.
FROM golang:1.26-bookworm AS build
WORKDIR /src
# No separate `go mod download` layer: it would fetch the test-only modules
# too; the build fetches what the binary imports, into the cache mount.
COPY . .
RUN --mount=type=cache,target=/go/pkg/mod --mount=type=cache,target=/root/.cache/go-build \
    CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o /out/rolloutledger ./cmd/rolloutledger
# The projector's state directory, owned by the runtime user so that a named
# volume mounted over it starts out writable.
RUN mkdir -p /out/state && chown 65532:65532 /out/state

# runtime has no shell and no package manager, and runs as a non-root user (65532).
FROM gcr.io/distroless/static-debian12:nonroot AS runtime
COPY --from=build /out/rolloutledger /usr/local/bin/rolloutledger
COPY --from=build --chown=65532:65532 /out/state /var/lib/rolloutledger
USER 65532:65532
WORKDIR /var/lib/rolloutledger
EXPOSE 7070
# The image has no curl or wget: the binary probes its own /healthz. A
# container that listens elsewhere overrides this (docker-compose.yml does).
HEALTHCHECK --interval=10s --timeout=5s --start-period=30s --retries=3 \
    CMD ["/usr/local/bin/rolloutledger", "healthcheck", "--url", "http://127.0.0.1:7070/healthz"]
ENTRYPOINT ["/usr/local/bin/rolloutledger"]
CMD ["serve", "--addr", "0.0.0.0:7070", "--data", "/var/lib/rolloutledger"]

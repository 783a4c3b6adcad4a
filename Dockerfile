# The kaas broker image: a static binary on scratch, run as a non-root user.
# `make image` builds the same image without a container engine (deploy/image); the two
# hold the same files and the same config (deploy/image/image.go states it in Go).
#
#   docker build -t kaas:latest .
#   docker build --build-arg VERSION=1.0.0 --build-arg REVISION=$(git rev-parse HEAD) \
#     --build-arg CREATED=$(git log -1 --format=%cI) -t kaas:1.0.0 .
#
# The build context keeps .git (see .dockerignore) so the binary is stamped with its
# revision (`kaas --version`).
ARG GO_VERSION=1.26.8

FROM golang:${GO_VERSION} AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN CGO_ENABLED=0 go build -trimpath -buildvcs=auto -o /out/kaas ./cmd/kaas \
 && mkdir -m 0700 /out/data

FROM scratch
ARG VERSION=dev
ARG REVISION=
ARG CREATED=1970-01-01T00:00:00Z
COPY --from=build /out/kaas /kaas
COPY --from=build --chown=65532:65532 /out/data /data
# The binary's defaults are loopback and ./data; in a container it listens on every
# interface and keeps its data on the volume. Clients need an address they can reach:
# set KAAS_ADVERTISED_LISTENERS=PLAINTEXT://<host>:9092.
ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    KAAS_LISTENERS=PLAINTEXT://0.0.0.0:9092 \
    KAAS_HTTP_LISTEN=0.0.0.0:9644 \
    KAAS_DATA_DIR=/data
LABEL org.opencontainers.image.title=kaas \
      org.opencontainers.image.version=${VERSION} \
      org.opencontainers.image.revision=${REVISION} \
      org.opencontainers.image.created=${CREATED}
USER 65532:65532
WORKDIR /
EXPOSE 9092/tcp 9644/tcp
VOLUME ["/data"]
STOPSIGNAL SIGTERM
ENTRYPOINT ["/kaas"]

# syntax=docker/dockerfile:1
#
# respmeter image: a static binary on distroless, running as non-root.
#
#   docker build -t respmeter \
#     --build-arg VERSION=$(git describe --tags --always --dirty) \
#     --build-arg COMMIT=$(git rev-parse HEAD) .
#   docker run --rm -p 6380:6380 -p 9121:9121 -e RESPMETER_UPSTREAM=redis:6379 respmeter
#
# Inside a container, loopback addresses are unreachable from outside it, so
# the image sets RESPMETER_LISTEN and RESPMETER_ADMIN to 0.0.0.0 (environment
# variables override the config file; flags override both). The upstream
# default, 127.0.0.1:6379, is the container itself: set RESPMETER_UPSTREAM or
# pass --upstream. The admin server (/metrics, /stats) has no authentication;
# publish port 9121 only where it should be reachable.

FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
# The build context has no .git, so the Go toolchain cannot stamp the
# version: "respmeter version" prints VERSION and COMMIT (main.version and
# main.commit), or "(devel)" when they are not given.
ARG VERSION=""
ARG COMMIT=""
RUN CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -X main.version=${VERSION} -X main.commit=${COMMIT}" -o /out/respmeter ./cmd/respmeter

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/respmeter /usr/local/bin/respmeter
COPY configs/passthrough.yaml /etc/respmeter/passthrough.yaml
ENV RESPMETER_LISTEN=0.0.0.0:6380 \
    RESPMETER_ADMIN=0.0.0.0:9121
USER nonroot:nonroot
EXPOSE 6380 9121
ENTRYPOINT ["respmeter"]
CMD ["proxy", "--config", "/etc/respmeter/passthrough.yaml"]

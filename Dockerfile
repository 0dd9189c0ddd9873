# airlock proxy image: a static binary on an empty base, running as an unprivileged user.
#   docker build -t airlock:dev --build-arg VERSION=$(git describe --always --dirty) .
# The sandbox spawner's native backend needs root and namespaces; this image runs the proxy.
ARG GO_VERSION=1.26

FROM golang:${GO_VERSION} AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=dev
RUN CGO_ENABLED=0 GOOS=linux go build -trimpath -ldflags "-s -w -X main.version=${VERSION}" -o /out/airlock ./cmd/airlock \
 && mkdir -p /out/state /out/etc \
 && echo 'airlock:x:65532:65532:airlock:/var/lib/airlock:/airlock' > /out/etc/passwd \
 && echo 'airlock:x:65532:' > /out/etc/group

FROM scratch
COPY --from=build /etc/ssl/certs/ca-certificates.crt /etc/ssl/certs/ca-certificates.crt
COPY --from=build /out/etc/passwd /out/etc/group /etc/
COPY --from=build /out/airlock /airlock
COPY --from=build --chown=65532:65532 /out/state /var/lib/airlock
ENV AIRLOCK_HOME=/var/lib/airlock HOME=/var/lib/airlock
USER 65532:65532
# 3128: proxy listener for sandboxes; 9090: admin API (/metrics, /healthz, approvals)
EXPOSE 3128 9090
ENTRYPOINT ["/airlock"]
CMD ["proxy", "--config", "/etc/airlock/airlock.yaml"]

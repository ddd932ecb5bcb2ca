# trawl's container image: a static binary (CGO_ENABLED=0) on distroless,
# which has CA certificates and a nonroot user and nothing else.
#
#   docker build -t trawl .
#   docker run --rm trawl crawl https://example.com/
#
# deploy/compose.yaml runs a broker and N workers from this image; see
# docs/deploy.md.
ARG GO_VERSION=1.26

FROM golang:${GO_VERSION} AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o /out/trawl ./cmd/trawl

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/trawl /usr/local/bin/trawl
# The default mode keeps its state in ./.trawl: the nonroot user's home.
WORKDIR /home/nonroot
USER nonroot:nonroot
ENTRYPOINT ["/usr/local/bin/trawl"]
CMD ["--help"]

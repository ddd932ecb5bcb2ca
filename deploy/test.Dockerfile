# The test variant of ../Dockerfile, for hosts that cannot pull a base
# image: the static binary (CGO_ENABLED=0 go build) on nothing at all.
# integration/image_test.go builds it from a folder holding this file and
# the binary, named trawl.
FROM scratch
COPY trawl /usr/local/bin/trawl
WORKDIR /data
ENTRYPOINT ["/usr/local/bin/trawl"]
CMD ["--help"]

module kaas/deploy/image

go 1.26.8

require (
	github.com/google/go-containerregistry v0.22.1
	github.com/twmb/franz-go v1.22.3
)

require (
	github.com/klauspost/compress v1.20.3 // indirect
	github.com/opencontainers/go-digest v1.0.0 // indirect
	github.com/opencontainers/image-spec v1.1.1 // indirect
	github.com/pierrec/lz4/v4 v4.1.33 // indirect
	github.com/twmb/franz-go/pkg/kmsg v1.15.1 // indirect
	golang.org/x/sync v0.22.0 // indirect
)

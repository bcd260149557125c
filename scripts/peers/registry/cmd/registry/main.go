// The registry of github.com/distribution/distribution/v3 (its cmd/registry) with the storage a test needs:
// the filesystem driver and htpasswd auth. Upstream's main also links the S3, Azure and GCS drivers, whose
// SDKs nothing here uses: without them 68 modules (74 MB) are downloaded instead of 105 (171 MB), and a cold
// build takes 82 s instead of 96 s (2 cores, measured alike).
package main

import (
	"github.com/distribution/distribution/v3/registry"
	_ "github.com/distribution/distribution/v3/registry/auth/htpasswd"
	_ "github.com/distribution/distribution/v3/registry/storage/driver/filesystem"
	_ "github.com/distribution/distribution/v3/registry/storage/driver/inmemory"
)

func main() {
	// RootCmd's commands exit non-zero themselves on failure, as upstream's main relies on.
	_ = registry.RootCmd.Execute()
}

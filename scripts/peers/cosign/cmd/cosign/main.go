// cosign (github.com/sigstore/cosign/v2's cmd/cosign) with the signers a test needs: key files and keyless.
// Upstream's main also registers the AWS, Azure, GCP and HashiCorp Vault KMS providers (kms:// keys), which
// nothing here uses: without them a cold build downloads 231 modules (257 MB) instead of 263 (267 MB); the
// compile is no shorter (275 s of CPU either way, from empty caches on 2 cores), as cosign's registry client
// links the same clouds' credential helpers anyway.
// Upstream's rewriting of deprecated single-dash flags is left out too (it needs a package internal to cosign).
package main

import (
	"errors"
	"log"
	"os"

	"github.com/sigstore/cosign/v2/cmd/cosign/cli"
	cosignerrors "github.com/sigstore/cosign/v2/cmd/cosign/errors"
)

func main() {
	if err := cli.New().Execute(); err != nil {
		// A CosignError carries the exit code of its kind of failure, as upstream's main exits with.
		var failed *cosignerrors.CosignError
		if errors.As(err, &failed) {
			log.Printf("error during command execution: %v", err)
			os.Exit(failed.ExitCode())
		}
		log.Fatalf("error during command execution: %v", err)
	}
}

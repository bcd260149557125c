// cosign (github.com/sigstore/cosign/v2's cmd/cosign) with the signers a test needs: key files and keyless.
// Upstream's main also registers the AWS, Azure, GCP and HashiCorp Vault KMS providers (kms:// keys), which
// nothing here uses; the registry credential helpers stay, as cosign's registry client links them anyway.
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

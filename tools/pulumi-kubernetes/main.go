// The Pulumi Kubernetes provider, built from its Go module.
//
// Upstream's main embeds schema files that its Makefile generates and that are gitignored, so the
// module as served by the Go proxy does not build; this main embeds the same schema and mapping,
// copied from the module cache by `make tools`, and stamps the provider version into the schema
// the way upstream's generate.go does.
package main

import (
	_ "embed"
	"encoding/json"
	"log"

	"github.com/pulumi/pulumi-kubernetes/provider/v4/pkg/provider"
	"github.com/pulumi/pulumi-kubernetes/provider/v4/pkg/version"
)

//go:embed schema.json
var schema []byte

//go:embed terraform-mapping.json
var terraformMapping []byte

func main() {
	var spec map[string]any
	if err := json.Unmarshal(schema, &spec); err != nil {
		log.Fatalf("cannot read the embedded schema: %v", err)
	}
	spec["version"] = version.Version
	versioned, err := json.Marshal(spec)
	if err != nil {
		log.Fatalf("cannot write the schema: %v", err)
	}
	provider.Serve("kubernetes", version.Version, versioned, terraformMapping)
}

// terraform-provider-holdfast: Holdfast stores and appliances on libvirt.
package main

import (
	"context"
	"flag"
	"log"

	"github.com/hashicorp/terraform-plugin-framework/providerserver"

	"github.com/holdfast/terraform-provider-holdfast/internal/provider"
)

// version is set at release build time (-ldflags "-X main.version=...").
var version = "dev"

func main() {
	debug := flag.Bool("debug", false, "run with support for debuggers such as delve")
	flag.Parse()
	err := providerserver.Serve(context.Background(), provider.New(version), providerserver.ServeOpts{
		// The address a local dev_overrides block in ~/.terraformrc names (see README.md).
		Address: "registry.terraform.io/holdfast/holdfast",
		Debug:   *debug,
	})
	if err != nil {
		log.Fatal(err.Error())
	}
}

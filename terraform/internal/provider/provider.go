// Package provider is Holdfast's Terraform provider: Holdfast stores and appliances on
// libvirt, made for what a Holdfast appliance is (a kernel booted directly, a mirrored
// store, a console that says when it is ready) rather than for general-purpose VMs.
package provider

import (
	"context"
	"net/url"
	"os"

	"github.com/hashicorp/terraform-plugin-framework/datasource"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/provider"
	"github.com/hashicorp/terraform-plugin-framework/provider/schema"
	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/types"
)

const (
	defaultURI = "qemu:///system"
	// Environment variables that stand in for the provider's attributes.
	uriVariable             = "HOLDFAST_LIBVIRT_URI"
	holdfastCommandVariable = "HOLDFAST_COMMAND"
)

type holdfastProvider struct {
	version string
}

type providerModel struct {
	URI             types.String `tfsdk:"uri"`
	HoldfastCommand types.String `tfsdk:"holdfast_command"`
}

// New makes the provider; version is the release's, "dev" for a local build, "test" in the
// acceptance tests.
func New(version string) func() provider.Provider {
	return func() provider.Provider { return &holdfastProvider{version: version} }
}

func (p *holdfastProvider) Metadata(_ context.Context, _ provider.MetadataRequest, resp *provider.MetadataResponse) {
	resp.TypeName = "holdfast"
	resp.Version = p.version
}

func (p *holdfastProvider) Schema(_ context.Context, _ provider.SchemaRequest, resp *provider.SchemaResponse) {
	resp.Schema = schema.Schema{
		Description: "Holdfast stores, appliances and hot-standby pairs on libvirt.",
		Attributes: map[string]schema.Attribute{
			"uri": schema.StringAttribute{
				Optional: true,
				Description: "The libvirt connection URI (default qemu:///system, or $" + uriVariable + "). " +
					"The provider must run on the libvirt host: it formats stores and reads console logs there.",
			},
			"holdfast_command": schema.StringAttribute{
				Optional: true,
				Description: "The holdfast CLI that formats stores: a binary, or a Holdfast source tree whose " +
					"./holdfast builds and runs it (default $" + holdfastCommandVariable + ", else holdfast on PATH).",
			},
		},
	}
}

func (p *holdfastProvider) Configure(ctx context.Context, req provider.ConfigureRequest, resp *provider.ConfigureResponse) {
	var config providerModel
	resp.Diagnostics.Append(req.Config.Get(ctx, &config)...)
	if resp.Diagnostics.HasError() {
		return
	}
	uri := firstNonEmpty(config.URI.ValueString(), os.Getenv(uriVariable), defaultURI)
	if parsed, err := url.Parse(uri); err != nil || parsed.Host != "" {
		resp.Diagnostics.AddAttributeError(path.Root("uri"), "The provider must run on the libvirt host",
			uri+" is not a local libvirt URI: the provider formats stores, checks what QEMU can reach and reads "+
				"console logs on the host itself. Run Terraform there, with a URI such as qemu:///system.")
		return
	}
	command := firstNonEmpty(config.HoldfastCommand.ValueString(), os.Getenv(holdfastCommandVariable), "holdfast")
	// The connection is made when a resource first needs it, so that `terraform validate`
	// and a plan with nothing to read work without a libvirtd.
	client := newClient(uri, command)
	resp.ResourceData = client
	resp.DataSourceData = client
}

func (p *holdfastProvider) Resources(context.Context) []func() resource.Resource {
	return []func() resource.Resource{newStoreResource, newApplianceResource, newPairResource}
}

func (p *holdfastProvider) DataSources(context.Context) []func() datasource.DataSource {
	return []func() datasource.DataSource{newPairStatusDataSource}
}

func firstNonEmpty(values ...string) string {
	for _, value := range values {
		if value != "" {
			return value
		}
	}
	return ""
}

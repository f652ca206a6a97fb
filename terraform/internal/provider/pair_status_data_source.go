package provider

import (
	"context"
	"errors"

	"github.com/hashicorp/terraform-plugin-framework/attr"
	"github.com/hashicorp/terraform-plugin-framework/datasource"
	"github.com/hashicorp/terraform-plugin-framework/datasource/schema"
	"github.com/hashicorp/terraform-plugin-framework/types"
)

// holdfast_pair_status: what a running pair's supervisor reports now (`holdfast pair status
// --json`): which node is the primary, the mode, the term, the promotions so far, each
// node's role and state and the standby's lag. For outputs, checks and monitoring wiring;
// it changes with every failover, which is why it is not part of holdfast_pair.
type pairStatusDataSource struct {
	client *client
}

type pairStatusModel struct {
	Name        types.String `tfsdk:"name"`
	StateDir    types.String `tfsdk:"state_dir"`
	Endpoint    types.String `tfsdk:"endpoint"`
	Mode        types.String `tfsdk:"mode"`
	LagBytesMax types.Int64  `tfsdk:"lag_bytes_max"`
	Term        types.Int64  `tfsdk:"term"`
	Promotions  types.Int64  `tfsdk:"promotions"`
	Primary     types.String `tfsdk:"primary"`
	Standby     types.String `tfsdk:"standby"`
	Nodes       types.List   `tfsdk:"nodes"`
}

var pairStatusNodeType = types.ObjectType{AttrTypes: map[string]attr.Type{
	"node":      types.Int64Type,
	"vm":        types.StringType,
	"role":      types.StringType,
	"state":     types.StringType,
	"lag_bytes": types.Int64Type,
}}

func newPairStatusDataSource() datasource.DataSource { return &pairStatusDataSource{} }

func (d *pairStatusDataSource) Metadata(_ context.Context, req datasource.MetadataRequest, resp *datasource.MetadataResponse) {
	resp.TypeName = req.ProviderTypeName + "_pair_status"
}

func (d *pairStatusDataSource) Schema(_ context.Context, _ datasource.SchemaRequest, resp *datasource.SchemaResponse) {
	resp.Schema = schema.Schema{
		Description: "A running Holdfast pair as its supervisor reports it now (`holdfast pair status --json`).",
		Attributes: map[string]schema.Attribute{
			"name":          schema.StringAttribute{Required: true, Description: "The pair's name."},
			"state_dir":     schema.StringAttribute{Optional: true, Description: "The holdfast state directory (default the CLI's)."},
			"endpoint":      schema.StringAttribute{Computed: true, Description: "Where TP1 clients connect."},
			"mode":          schema.StringAttribute{Computed: true, Description: "The replication mode."},
			"lag_bytes_max": schema.Int64Attribute{Computed: true, Description: "The async mode's lag bound in bytes."},
			"term":          schema.Int64Attribute{Computed: true, Description: "The current term (one more with each promotion)."},
			"promotions":    schema.Int64Attribute{Computed: true, Description: "Promotions recorded in the pair's history."},
			"primary":       schema.StringAttribute{Computed: true, Description: "The primary's VM."},
			"standby":       schema.StringAttribute{Computed: true, Description: "The standby's VM (empty when there is none)."},
			"nodes": schema.ListNestedAttribute{
				Computed:    true,
				Description: "Each node: number, VM, role, state (serving, consistent, copying, failed: ...) and, on the standby's row, its lag.",
				NestedObject: schema.NestedAttributeObject{Attributes: map[string]schema.Attribute{
					"node":      schema.Int64Attribute{Computed: true},
					"vm":        schema.StringAttribute{Computed: true},
					"role":      schema.StringAttribute{Computed: true},
					"state":     schema.StringAttribute{Computed: true},
					"lag_bytes": schema.Int64Attribute{Computed: true},
				}},
			},
		},
	}
}

func (d *pairStatusDataSource) Configure(_ context.Context, req datasource.ConfigureRequest, _ *datasource.ConfigureResponse) {
	if req.ProviderData != nil {
		d.client = req.ProviderData.(*client)
	}
}

func (d *pairStatusDataSource) Read(ctx context.Context, req datasource.ReadRequest, resp *datasource.ReadResponse) {
	var model pairStatusModel
	resp.Diagnostics.Append(req.Config.Get(ctx, &model)...)
	if resp.Diagnostics.HasError() {
		return
	}
	name := model.Name.ValueString()
	status, err := d.client.pairStatusOf(ctx, model.StateDir.ValueString(), name)
	if errors.Is(err, errPairDown) {
		resp.Diagnostics.AddError("Holdfast pair "+name+" is not up",
			"No supervisor answers for pair "+name+" in "+pairDirOf(model.StateDir.ValueString(), name)+": bring it up (holdfast pair up "+name+" --detach, or a holdfast_pair resource).")
		return
	}
	if err != nil {
		resp.Diagnostics.AddError("Cannot read Holdfast pair "+name+"'s status", err.Error())
		return
	}
	model.Endpoint = types.StringValue(status.Endpoint)
	model.Mode = types.StringValue(status.Mode)
	model.LagBytesMax = types.Int64Value(status.LagBytesMax)
	model.Term = types.Int64Value(status.Term)
	model.Promotions = types.Int64Value(status.Promotions)
	primary, _, _ := status.node("primary")
	standby, _, _ := status.node("standby")
	model.Primary = types.StringValue(primary)
	model.Standby = types.StringValue(standby)
	nodes := make([]attr.Value, 0, len(status.Nodes))
	for _, node := range status.Nodes {
		lag := types.Int64Null()
		if node.LagBytes != nil {
			lag = types.Int64Value(*node.LagBytes)
		}
		nodes = append(nodes, types.ObjectValueMust(pairStatusNodeType.AttrTypes, map[string]attr.Value{
			"node":      types.Int64Value(node.Node),
			"vm":        types.StringValue(node.VM),
			"role":      types.StringValue(node.Role),
			"state":     types.StringValue(node.State),
			"lag_bytes": lag,
		}))
	}
	model.Nodes = types.ListValueMust(pairStatusNodeType, nodes)
	resp.Diagnostics.Append(resp.State.Set(ctx, model)...)
}

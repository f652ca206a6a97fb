package provider

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/terraform-plugin-framework-validators/int64validator"
	"github.com/hashicorp/terraform-plugin-framework-validators/stringvalidator"
	"github.com/hashicorp/terraform-plugin-framework/attr"
	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/booldefault"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/int64default"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/int64planmodifier"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/planmodifier"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/stringdefault"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/stringplanmodifier"
	"github.com/hashicorp/terraform-plugin-framework/types"
)

// holdfast_pair: a hot-standby pair of TP1 appliances run by `holdfast pair up` (the
// supervisor: both VMs, the replication link, failover, the client endpoint). The provider
// drives the CLI rather than libvirt directly, since the supervisor is what makes two VMs a
// pair: create is `pair up --detach`, read `pair status --json` (and, under libvirt, the
// domains themselves), a new mode is `pair mode` with the pair serving throughout, and
// destroy is `pair down` with a bounded wait. What cannot change in a running pair (its
// stores, image, VMs' settings) has RequiresReplace, so the plan says "must be replaced".
type pairResource struct {
	client *client
}

type pairModel struct {
	ID                  types.String `tfsdk:"id"`
	Name                types.String `tfsdk:"name"`
	Mode                types.String `tfsdk:"mode"`
	LagBytesMax         types.Int64  `tfsdk:"lag_bytes_max"`
	LibvirtURI          types.String `tfsdk:"libvirt_uri"`
	ImageDir            types.String `tfsdk:"image_dir"`
	StoreMiB            types.Int64  `tfsdk:"store_mib"`
	MemoryMiB           types.Int64  `tfsdk:"memory_mib"`
	Accel               types.String `tfsdk:"accel"`
	TP1Port             types.Int64  `tfsdk:"tp1_port"`
	Exporter            types.String `tfsdk:"exporter"`
	StateDir            types.String `tfsdk:"state_dir"`
	Up                  types.Bool   `tfsdk:"up"`
	WaitForStandby      types.Bool   `tfsdk:"wait_for_standby"`
	ReadyTimeoutSeconds types.Int64  `tfsdk:"ready_timeout_seconds"`
	DownTimeoutSeconds  types.Int64  `tfsdk:"down_timeout_seconds"`
	KeepStores          types.Bool   `tfsdk:"keep_stores_on_destroy"`
	Endpoint            types.String `tfsdk:"endpoint"`
	Primary             types.String `tfsdk:"primary"`
	Standby             types.String `tfsdk:"standby"`
	Nodes               types.List   `tfsdk:"nodes"`
}

var pairNodeType = types.ObjectType{AttrTypes: map[string]attr.Type{
	"node":   types.Int64Type,
	"vm":     types.StringType,
	"role":   types.StringType,
	"domain": types.StringType,
}}

const (
	defaultPairMode        = "sync-durable"
	defaultPairStoreMiB    = 2048
	defaultReadyTimeout    = 300
	defaultPairDownTimeout = 60
)

func newPairResource() resource.Resource { return &pairResource{} }

func (r *pairResource) Metadata(_ context.Context, req resource.MetadataRequest, resp *resource.MetadataResponse) {
	resp.TypeName = req.ProviderTypeName + "_pair"
}

// importedKey marks, in the resource's private state, a pair that came in by import.
const importedKey = "imported"

// replaceUnlessAdopted: the attribute forces a new pair, except when it had no value in the
// state of an imported pair (the supervisor does not report it, so an import cannot read
// it): then the configuration's value is taken as what the running pair has, an update
// that changes nothing. A pair this provider made has every such setting in its state, so
// a change from the CLI's default to a value is a replacement too.
func replaceUnlessAdopted(ctx context.Context, state attr.Value, private interface {
	GetKey(context.Context, string) ([]byte, diag.Diagnostics)
}) bool {
	if !state.IsNull() {
		return true
	}
	imported, _ := private.GetKey(ctx, importedKey)
	return len(imported) == 0
}

const replaceDescription = "Changing it makes a new pair (unless it had no value in the state of an imported pair)."

func replaceUnlessAdoptedString() planmodifier.String {
	return stringplanmodifier.RequiresReplaceIf(func(ctx context.Context, req planmodifier.StringRequest, resp *stringplanmodifier.RequiresReplaceIfFuncResponse) {
		resp.RequiresReplace = replaceUnlessAdopted(ctx, req.StateValue, req.Private)
	}, replaceDescription, replaceDescription)
}

func replaceUnlessAdoptedInt64() planmodifier.Int64 {
	return int64planmodifier.RequiresReplaceIf(func(ctx context.Context, req planmodifier.Int64Request, resp *int64planmodifier.RequiresReplaceIfFuncResponse) {
		resp.RequiresReplace = replaceUnlessAdopted(ctx, req.StateValue, req.Private)
	}, replaceDescription, replaceDescription)
}

func (r *pairResource) Schema(_ context.Context, _ resource.SchemaRequest, resp *resource.SchemaResponse) {
	replaceString := []planmodifier.String{replaceUnlessAdoptedString()}
	replaceInt64 := []planmodifier.Int64{replaceUnlessAdoptedInt64()}
	resp.Schema = schema.Schema{
		Description: "A hot-standby pair of Holdfast TP1 appliances run by `holdfast pair up --detach` (the supervisor: " +
			"both VMs, the replication link, failover, the client endpoint on 127.0.0.1). The mode changes in place; " +
			"the stores, the image and the VMs' settings make a new pair, and the plan says so.",
		Attributes: map[string]schema.Attribute{
			"id": schema.StringAttribute{
				Computed: true, PlanModifiers: []planmodifier.String{stringplanmodifier.UseStateForUnknown()},
				Description: "The pair's name. Import: `terraform import holdfast_pair.x NAME`, or the pair's directory " +
					"(STATE_DIR/pairs/NAME) for a pair outside the default state directory.",
			},
			"name": schema.StringAttribute{
				Required: true, PlanModifiers: []planmodifier.String{stringplanmodifier.RequiresReplace()},
				Validators:  []validatorString{nameValidator{}, stringvalidator.LengthAtMost(62)},
				Description: "The pair's name; its VMs are NAME-1 and NAME-2. Changing it makes a new pair.",
			},
			"mode": schema.StringAttribute{
				Optional: true, Computed: true, Default: stringdefault.StaticString(defaultPairMode),
				Validators: []validatorString{stringvalidator.OneOf("sync-durable", "sync-received", "async")},
				Description: "Replication mode: sync-durable (the default: a commit is acknowledged once durable on both), " +
					"sync-received or async. Changes in place (`holdfast pair mode`), the pair serving throughout.",
			},
			"lag_bytes_max": schema.Int64Attribute{
				Optional: true, Computed: true,
				PlanModifiers: []planmodifier.Int64{int64planmodifier.UseStateForUnknown()},
				Validators:    []validatorInt64{int64validator.AtLeast(1)},
				Description:   "The async mode's lag bound in bytes (default the pair's, 16 MiB at first). Changes in place.",
			},
			"libvirt_uri": schema.StringAttribute{
				Optional: true, PlanModifiers: replaceString,
				Description: "Run both VMs as libvirt domains at this URI (`pair up --libvirt URI`; e.g. qemu:///system) " +
					"instead of as the supervisor's own QEMU processes. Changing it makes a new pair.",
			},
			"image_dir": schema.StringAttribute{
				Optional: true, PlanModifiers: replaceString,
				Description: "The TP1 image (`holdfast image build --manifest services/tp1-manifest.toml --out DIR`; " +
					"default build/tp1-image in the CLI's source tree). Changing it makes a new pair.",
			},
			"store_mib": schema.Int64Attribute{
				Optional: true, Computed: true, Default: int64default.StaticInt64(defaultPairStoreMiB),
				PlanModifiers: []planmodifier.Int64{int64planmodifier.RequiresReplace()},
				Validators:    []validatorInt64{int64validator.Between(4, 1048576)},
				Description: "Each store mirror's size in MiB (default 2048; the TP1 database needs about 140 MiB and its " +
					"first checkpoint the log). Each node has two mirrors. Changing it makes a new pair.",
			},
			"memory_mib": schema.Int64Attribute{
				Optional: true, PlanModifiers: replaceInt64,
				Validators:  []validatorInt64{int64validator.Between(128, 1048576)},
				Description: "Guest memory of each VM in MiB (default the CLI's, 512). Changing it makes a new pair.",
			},
			"accel": schema.StringAttribute{
				Optional: true, PlanModifiers: replaceString,
				Validators:  []validatorString{stringvalidator.OneOf("auto", "kvm", "tcg")},
				Description: "auto (the default: KVM only where its probe is fast), kvm or tcg. Changing it makes a new pair.",
			},
			"tp1_port": schema.Int64Attribute{
				Optional: true, PlanModifiers: replaceInt64,
				Validators:  []validatorInt64{int64validator.Between(0, 65535)},
				Description: "The client endpoint's port on 127.0.0.1 (default: a free one; see endpoint). Changing it makes a new pair.",
			},
			"exporter": schema.StringAttribute{
				Optional: true, PlanModifiers: replaceString,
				Description: "Serve the exporter (every VM and pair's metrics) from the supervisor on this loopback " +
					"address, e.g. 127.0.0.1:9717. Changing it makes a new pair.",
			},
			"state_dir": schema.StringAttribute{
				Optional: true, PlanModifiers: []planmodifier.String{stringplanmodifier.RequiresReplace()},
				Description: "The holdfast state directory (HOLDFAST_STATE_DIR) holding pairs/NAME: stores, pair.json, " +
					"console logs, the supervisor's socket (default the CLI's). Changing it makes a new pair.",
			},
			"up": schema.BoolAttribute{
				Optional: true, Computed: true, Default: booldefault.StaticBool(true),
				Description: "Whether the pair runs (default true). A pair found down (its supervisor gone) is a change " +
					"back to true in the next plan, and apply brings it up again from its stores; false takes it down " +
					"and keeps its stores.",
			},
			"wait_for_standby": schema.BoolAttribute{
				Optional: true, Computed: true, Default: booldefault.StaticBool(true),
				Description: "Create (and bringing the pair up) returns once the standby holds a whole copy " +
					"(\"consistent\"), not only once the primary serves (default true).",
			},
			"ready_timeout_seconds": schema.Int64Attribute{
				Optional: true, Computed: true, Default: int64default.StaticInt64(defaultReadyTimeout),
				Validators: []validatorInt64{int64validator.Between(1, 86400)},
				Description: "How long create may wait for the pair to serve (default 300); past it, what was started " +
					"is taken down and removed and the apply fails.",
			},
			"down_timeout_seconds": schema.Int64Attribute{
				Optional: true, Computed: true, Default: int64default.StaticInt64(defaultPairDownTimeout),
				Validators:  []validatorInt64{int64validator.Between(1, 3600)},
				Description: "How long destroy waits for the supervisor and both VMs to be gone after `pair down` (default 60).",
			},
			"keep_stores_on_destroy": schema.BoolAttribute{
				Optional: true, Computed: true, Default: booldefault.StaticBool(false),
				Description: "Destroy removes the pair's directory, stores included, unless this is true (then a pair " +
					"made again with this name resumes from them). Use lifecycle { prevent_destroy = true } for a pair " +
					"whose data must stay.",
			},
			"endpoint": schema.StringAttribute{
				Computed:    true,
				Description: "Where TP1 clients connect (127.0.0.1:PORT): the supervisor moves it to the primary on failover.",
			},
			"primary": schema.StringAttribute{
				Computed: true, Description: "The VM that is the primary now (NAME-1 or NAME-2).",
			},
			"standby": schema.StringAttribute{
				Computed: true, Description: "The VM that is the standby now (empty when the pair has none).",
			},
			"nodes": schema.ListNestedAttribute{
				Computed: true,
				Description: "Both nodes: number, VM name, role (primary, standby, fenced...) and, under libvirt, " +
					"the libvirt domain (holdfast-pair-NAME-N-HASH; empty otherwise).",
				NestedObject: schema.NestedAttributeObject{Attributes: map[string]schema.Attribute{
					"node":   schema.Int64Attribute{Computed: true},
					"vm":     schema.StringAttribute{Computed: true},
					"role":   schema.StringAttribute{Computed: true},
					"domain": schema.StringAttribute{Computed: true},
				}},
			},
		},
	}
}

func (r *pairResource) Configure(_ context.Context, req resource.ConfigureRequest, _ *resource.ConfigureResponse) {
	if req.ProviderData != nil {
		r.client = req.ProviderData.(*client)
	}
}

// upArguments is the `holdfast pair up` command line for the planned pair.
func (m *pairModel) upArguments() []string {
	arguments := []string{"up", m.Name.ValueString(), "--detach", "--mode", m.Mode.ValueString(),
		"--store-mib", strconv.FormatInt(m.StoreMiB.ValueInt64(), 10),
		"--ready-timeout-seconds", strconv.FormatInt(m.ReadyTimeoutSeconds.ValueInt64(), 10)}
	if !m.LagBytesMax.IsNull() && !m.LagBytesMax.IsUnknown() {
		arguments = append(arguments, "--lag-bytes-max", strconv.FormatInt(m.LagBytesMax.ValueInt64(), 10))
	}
	if !m.LibvirtURI.IsNull() {
		arguments = append(arguments, "--libvirt", m.LibvirtURI.ValueString())
	}
	if !m.ImageDir.IsNull() {
		arguments = append(arguments, "--image-dir", m.ImageDir.ValueString())
	}
	if !m.MemoryMiB.IsNull() {
		arguments = append(arguments, "--memory-mib", strconv.FormatInt(m.MemoryMiB.ValueInt64(), 10))
	}
	if !m.Accel.IsNull() {
		arguments = append(arguments, "--accel", m.Accel.ValueString())
	}
	if !m.TP1Port.IsNull() {
		arguments = append(arguments, "--tp1-port", strconv.FormatInt(m.TP1Port.ValueInt64(), 10))
	}
	if !m.Exporter.IsNull() {
		arguments = append(arguments, "--exporter", m.Exporter.ValueString())
	}
	return arguments
}

// setFromStatus fills what the supervisor reports.
func (m *pairModel) setFromStatus(status *pairStatus) {
	m.ID = m.Name
	m.Up = types.BoolValue(true)
	m.Mode = types.StringValue(status.Mode)
	m.LagBytesMax = types.Int64Value(status.LagBytesMax)
	m.Endpoint = types.StringValue(status.Endpoint)
	// Whether the VMs run under libvirt is the supervisor's to say (and an import learns it).
	if status.Libvirt != nil {
		m.LibvirtURI = types.StringValue(*status.Libvirt)
	} else {
		m.LibvirtURI = types.StringNull()
	}
	primary, _, _ := status.node("primary")
	standby, _, _ := status.node("standby")
	m.Primary = types.StringValue(primary)
	m.Standby = types.StringValue(standby)
	nodes := make([]attr.Value, 0, len(status.Nodes))
	for _, node := range status.Nodes {
		domain := ""
		if node.Domain != nil {
			domain = *node.Domain
		}
		nodes = append(nodes, types.ObjectValueMust(pairNodeType.AttrTypes, map[string]attr.Value{
			"node":   types.Int64Value(node.Node),
			"vm":     types.StringValue(node.VM),
			"role":   types.StringValue(node.Role),
			"domain": types.StringValue(domain),
		}))
	}
	m.Nodes = types.ListValueMust(pairNodeType, nodes)
}

// setDown records a pair whose supervisor is gone but whose stores and pair.json remain.
func (m *pairModel) setDown(record *pairRecord) {
	m.ID = m.Name
	m.Up = types.BoolValue(false)
	m.Mode = types.StringValue(record.Mode)
	m.LagBytesMax = types.Int64Value(record.LagBytesMax)
	m.StoreMiB = types.Int64Value(record.StoreMiB)
	m.Endpoint = types.StringValue("")
	m.Primary = types.StringValue("")
	m.Standby = types.StringValue("")
	m.Nodes = types.ListValueMust(pairNodeType, []attr.Value{})
}

// fillDefaults gives the provider's own settings their defaults where the state has none
// (after an import), so that an imported pair plans no change for them.
func (m *pairModel) fillDefaults() {
	if m.Up.IsNull() {
		m.Up = types.BoolValue(true)
	}
	if m.WaitForStandby.IsNull() {
		m.WaitForStandby = types.BoolValue(true)
	}
	if m.ReadyTimeoutSeconds.IsNull() {
		m.ReadyTimeoutSeconds = types.Int64Value(defaultReadyTimeout)
	}
	if m.DownTimeoutSeconds.IsNull() {
		m.DownTimeoutSeconds = types.Int64Value(defaultPairDownTimeout)
	}
	if m.KeepStores.IsNull() {
		m.KeepStores = types.BoolValue(false)
	}
}

// bringUp runs `pair up --detach` and waits for the pair to serve. On any failure it takes
// down what it started and, if it made the pair's directory, removes it: a failed apply
// leaves no half-made pair behind (upstream #921) for the next one to trip over.
func (r *pairResource) bringUp(ctx context.Context, plan *pairModel) error {
	name, stateDir := plan.Name.ValueString(), plan.StateDir.ValueString()
	dir := pairDirOf(stateDir, name)
	_, statErr := os.Stat(dir)
	madeHere := errors.Is(statErr, os.ErrNotExist)
	limit := time.Duration(plan.ReadyTimeoutSeconds.ValueInt64()) * time.Second
	deadline := time.Now().Add(limit)
	// `pair up --detach` keeps the same limit and, past it, stops what it started and says
	// why; the margin is for that.
	upContext, cancel := context.WithDeadline(ctx, deadline.Add(90*time.Second))
	defer cancel()
	output, err := r.client.runPair(upContext, stateDir, plan.upArguments()...)
	var status *pairStatus
	if err == nil {
		// The standby has been heard from; a whole copy may take a little longer.
		status, err = r.client.waitForPair(ctx, stateDir, name, plan.WaitForStandby.ValueBool(), deadline.Add(10*time.Second))
	} else if upContext.Err() != nil {
		err = fmt.Errorf("`holdfast pair up` did not return within %d s (ready_timeout_seconds): %w", int(limit.Seconds()), err)
	}
	if err != nil {
		cleanup := r.takeDown(context.Background(), stateDir, name, 30*time.Second, plan.LibvirtURI.ValueString())
		if madeHere {
			if removeErr := os.RemoveAll(dir); removeErr != nil && cleanup == nil {
				cleanup = removeErr
			}
		}
		if cleanup != nil {
			err = fmt.Errorf("%w\n(and taking down what was started failed too: %v; run holdfast pair down %s)", err, cleanup, name)
		}
		if strings.TrimSpace(output) != "" && !strings.Contains(err.Error(), strings.TrimSpace(output)) {
			err = fmt.Errorf("%w\n%s", err, tail(output, 20))
		}
		return err
	}
	plan.setFromStatus(status)
	return nil
}

// takeDown runs `pair down` if a supervisor answers and waits, at most limit, for it and,
// under libvirt, both domains to be gone.
func (r *pairResource) takeDown(ctx context.Context, stateDir, name string, limit time.Duration, libvirtURI string) error {
	deadline := time.Now().Add(limit)
	downContext, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	// The domains to see gone: the supervisor names them while it runs.
	var domains []string
	if status, err := r.client.pairStatusOf(ctx, stateDir, name); err == nil {
		domains = status.domains()
	}
	if output, err := r.client.runPair(downContext, stateDir, "down", name); err != nil && !strings.Contains(output, "is not up") {
		return err
	}
	if err := r.client.waitForPairDown(ctx, stateDir, name, deadline); err != nil {
		return err
	}
	if libvirtURI == "" || len(domains) == 0 {
		return nil
	}
	// `pair down` undefines them; wait (bounded) until libvirt has none left.
	for {
		_, known, err := libvirtDomains(libvirtURI, domains)
		if err != nil {
			return err
		}
		if len(known) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("pair %s is down but libvirt at %s still has %s: remove with virsh destroy / virsh undefine",
				name, libvirtURI, strings.Join(known, ", "))
		}
		time.Sleep(250 * time.Millisecond)
	}
}

func (r *pairResource) Create(ctx context.Context, req resource.CreateRequest, resp *resource.CreateResponse) {
	var plan pairModel
	resp.Diagnostics.Append(req.Plan.Get(ctx, &plan)...)
	if resp.Diagnostics.HasError() {
		return
	}
	name, stateDir := plan.Name.ValueString(), plan.StateDir.ValueString()
	fail := func(err error) { resp.Diagnostics.AddError("Cannot create the Holdfast pair "+name, err.Error()) }
	if _, err := r.client.pairStatusOf(ctx, stateDir, name); err == nil {
		fail(fmt.Errorf("pair %s is up already: adopt it with `terraform import <address> %s`, or choose another name", name, name))
		return
	} else if !errors.Is(err, errPairDown) {
		fail(err)
		return
	}
	if record, err := readPairRecord(stateDir, name); err != nil {
		fail(err)
		return
	} else if record != nil {
		resp.Diagnostics.AddWarning("Holdfast pair "+name+" resumes from its stores",
			fmt.Sprintf("%s holds pair %s's stores from before: it comes up from them, with its data. Remove that directory first for an empty pair.", pairDirOf(stateDir, name), name))
	}
	if !plan.Up.ValueBool() {
		fail(errors.New("a new pair is made by bringing it up: create it with up = true (the default)"))
		return
	}
	if err := r.bringUp(ctx, &plan); err != nil {
		fail(err)
		return
	}
	resp.Diagnostics.Append(resp.State.Set(ctx, plan)...)
}

func (r *pairResource) Read(ctx context.Context, req resource.ReadRequest, resp *resource.ReadResponse) {
	var state pairModel
	resp.Diagnostics.Append(req.State.Get(ctx, &state)...)
	if resp.Diagnostics.HasError() {
		return
	}
	state.fillDefaults()
	name, stateDir := state.Name.ValueString(), state.StateDir.ValueString()
	status, err := r.client.pairStatusOf(ctx, stateDir, name)
	switch {
	case errors.Is(err, errPairDown):
		record, err := readPairRecord(stateDir, name)
		if err != nil {
			resp.Diagnostics.AddError("Cannot read the Holdfast pair "+name, err.Error())
			return
		}
		if record == nil {
			resp.State.RemoveResource(ctx)
			return
		}
		state.setDown(record)
	case err != nil:
		resp.Diagnostics.AddError("Cannot read the Holdfast pair "+name, err.Error())
		return
	default:
		state.setFromStatus(status)
		if record, err := readPairRecord(stateDir, name); err == nil && record != nil {
			state.StoreMiB = types.Int64Value(record.StoreMiB)
		}
		if uri := state.LibvirtURI.ValueString(); uri != "" {
			// The supervisor says which domains it runs; libvirt says whether they do.
			domains := status.domains()
			running, _, err := libvirtDomains(uri, domains)
			switch {
			case err != nil:
				resp.Diagnostics.AddWarning("Cannot see pair "+name+"'s domains in libvirt", err.Error())
			case len(domains) != 2:
				resp.Diagnostics.AddWarning("Pair "+name+" does not run under libvirt",
					fmt.Sprintf("libvirt_uri is %s but the supervisor names %d libvirt domains", uri, len(domains)))
			case len(running) != 2:
				resp.Diagnostics.AddWarning("Pair "+name+" has a VM down in libvirt",
					fmt.Sprintf("libvirt at %s runs %v of %v. The supervisor fails over from a lost primary; "+
						"`holdfast pair rejoin %s` brings the other back as the standby.", uri, running, domains, name))
			}
		}
	}
	resp.Diagnostics.Append(resp.State.Set(ctx, state)...)
}

func (r *pairResource) Update(ctx context.Context, req resource.UpdateRequest, resp *resource.UpdateResponse) {
	var plan, prior pairModel
	resp.Diagnostics.Append(req.Plan.Get(ctx, &plan)...)
	resp.Diagnostics.Append(req.State.Get(ctx, &prior)...)
	if resp.Diagnostics.HasError() {
		return
	}
	name, stateDir := plan.Name.ValueString(), plan.StateDir.ValueString()
	fail := func(err error) { resp.Diagnostics.AddError("Cannot update the Holdfast pair "+name, err.Error()) }
	status, err := r.client.pairStatusOf(ctx, stateDir, name)
	if err != nil && !errors.Is(err, errPairDown) {
		fail(err)
		return
	}
	running := err == nil
	switch {
	case !plan.Up.ValueBool():
		if running {
			if err := r.takeDown(ctx, stateDir, name, time.Duration(plan.DownTimeoutSeconds.ValueInt64())*time.Second, plan.LibvirtURI.ValueString()); err != nil {
				fail(err)
				return
			}
		}
		record, err := readPairRecord(stateDir, name)
		if err != nil || record == nil {
			fail(fmt.Errorf("pair %s is down but its pair.json cannot be read: %v", name, err))
			return
		}
		// The mode is recorded for the next `pair up`; nothing runs to send it to.
		mode, lag := plan.Mode.ValueString(), plan.LagBytesMax
		plan.setDown(record)
		plan.Mode = types.StringValue(mode)
		if !lag.IsUnknown() {
			plan.LagBytesMax = lag
		}
	case !running:
		// `pair up` takes the mode and lag bound it is given and records them.
		if err := r.bringUp(ctx, &plan); err != nil {
			fail(err)
			return
		}
	default:
		arguments := []string{"mode", name, plan.Mode.ValueString()}
		if !plan.LagBytesMax.IsUnknown() && !plan.LagBytesMax.IsNull() {
			arguments = append(arguments, "--lag-bytes-max", strconv.FormatInt(plan.LagBytesMax.ValueInt64(), 10))
		}
		if plan.Mode.ValueString() != status.Mode || (!plan.LagBytesMax.IsUnknown() && plan.LagBytesMax.ValueInt64() != status.LagBytesMax) {
			if _, err := r.client.runPair(ctx, stateDir, arguments...); err != nil {
				fail(err)
				return
			}
		}
		if status, err = r.client.pairStatusOf(ctx, stateDir, name); err != nil {
			fail(err)
			return
		}
		plan.setFromStatus(status)
	}
	resp.Diagnostics.Append(resp.State.Set(ctx, plan)...)
}

func (r *pairResource) Delete(ctx context.Context, req resource.DeleteRequest, resp *resource.DeleteResponse) {
	var state pairModel
	resp.Diagnostics.Append(req.State.Get(ctx, &state)...)
	if resp.Diagnostics.HasError() {
		return
	}
	state.fillDefaults()
	name, stateDir := state.Name.ValueString(), state.StateDir.ValueString()
	limit := time.Duration(state.DownTimeoutSeconds.ValueInt64()) * time.Second
	if err := r.takeDown(ctx, stateDir, name, limit, state.LibvirtURI.ValueString()); err != nil {
		resp.Diagnostics.AddError("Cannot destroy the Holdfast pair "+name, err.Error())
		return
	}
	if !state.KeepStores.ValueBool() {
		if err := os.RemoveAll(pairDirOf(stateDir, name)); err != nil {
			resp.Diagnostics.AddError("Cannot remove the Holdfast pair "+name+"'s directory", err.Error())
		}
	}
}

// ImportState takes NAME (a pair in the CLI's default state directory) or the pair's
// directory, STATE_DIR/pairs/NAME.
func (r *pairResource) ImportState(ctx context.Context, req resource.ImportStateRequest, resp *resource.ImportStateResponse) {
	name := req.ID
	if strings.Contains(req.ID, "/") {
		dir := filepath.Clean(req.ID)
		name = filepath.Base(dir)
		if filepath.Base(filepath.Dir(dir)) != "pairs" {
			resp.Diagnostics.AddError("Not a pair's directory", req.ID+" is not STATE_DIR/pairs/NAME: give the pair's name, or its directory")
			return
		}
		resp.Diagnostics.Append(resp.State.SetAttribute(ctx, path.Root("state_dir"), filepath.Dir(filepath.Dir(dir)))...)
	}
	resp.Diagnostics.Append(resp.State.SetAttribute(ctx, path.Root("id"), name)...)
	resp.Diagnostics.Append(resp.State.SetAttribute(ctx, path.Root("name"), name)...)
	resp.Diagnostics.Append(resp.Private.SetKey(ctx, importedKey, []byte(`true`))...)
}

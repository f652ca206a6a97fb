package provider

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	libvirt "github.com/digitalocean/go-libvirt"
	"github.com/hashicorp/terraform-plugin-framework-validators/int64validator"
	"github.com/hashicorp/terraform-plugin-framework-validators/stringvalidator"
	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/booldefault"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/int64default"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/listplanmodifier"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/planmodifier"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/stringdefault"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/stringplanmodifier"
	"github.com/hashicorp/terraform-plugin-framework/types"
)

// holdfast_appliance: one Holdfast VM under libvirt. Its name, its disks and its state
// directory make it what it is and force a new VM; the rest (image, memory, kernel command
// line, TP1 port, domain type) change in place, with a graceful restart when QEMU must be
// started again, and the plan says which is which (upstream #1069).
type applianceResource struct {
	client *client
}

type applianceModel struct {
	ID                     types.String `tfsdk:"id"`
	Name                   types.String `tfsdk:"name"`
	Disks                  types.List   `tfsdk:"disks"`
	ImageDir               types.String `tfsdk:"image_dir"`
	MemoryMiB              types.Int64  `tfsdk:"memory_mib"`
	KernelAppend           types.String `tfsdk:"kernel_append"`
	TP1Port                types.Int64  `tfsdk:"tp1_port"`
	DomainType             types.String `tfsdk:"domain_type"`
	StateDir               types.String `tfsdk:"state_dir"`
	ReadyLine              types.String `tfsdk:"ready_line"`
	ReadyTimeoutSeconds    types.Int64  `tfsdk:"ready_timeout_seconds"`
	ShutdownTimeoutSeconds types.Int64  `tfsdk:"shutdown_timeout_seconds"`
	Running                types.Bool   `tfsdk:"running"`
	ConsoleLog             types.String `tfsdk:"console_log"`
	ControlSocket          types.String `tfsdk:"control_socket"`
}

const defaultStateDir = "/var/lib/holdfast/libvirt"

func newApplianceResource() resource.Resource { return &applianceResource{} }

func (r *applianceResource) Metadata(_ context.Context, req resource.MetadataRequest, resp *resource.MetadataResponse) {
	resp.TypeName = req.ProviderTypeName + "_appliance"
}

func (r *applianceResource) Schema(_ context.Context, _ resource.SchemaRequest, resp *resource.SchemaResponse) {
	replace := []planmodifier.String{stringplanmodifier.RequiresReplace()}
	known := []planmodifier.String{stringplanmodifier.UseStateForUnknown()}
	resp.Schema = schema.Schema{
		Description: "One Holdfast VM under libvirt: PVH direct kernel boot of the kernel `holdfast image build` makes, " +
			"the store's volumes as virtio disks in order, the serial console to a log file, the TP1 port forwarded from 127.0.0.1.",
		Attributes: map[string]schema.Attribute{
			"id": schema.StringAttribute{
				Computed: true, PlanModifiers: known,
				Description: "The domain's name; `terraform import holdfast_appliance.x NAME` adopts an appliance.",
			},
			"name": schema.StringAttribute{
				Required: true, PlanModifiers: replace, Validators: []validatorString{nameValidator{}},
				Description: "The libvirt domain's name. Changing it makes a new VM.",
			},
			"disks": schema.ListAttribute{
				Required: true, ElementType: types.StringType,
				PlanModifiers: []planmodifier.List{listplanmodifier.RequiresReplace()},
				Description:   "The store's volumes, in mirror order (holdfast_store's volume_paths). Changing them makes a new VM.",
			},
			"image_dir": schema.StringAttribute{
				Required:    true,
				Description: "The directory `holdfast image build` wrote (holdfast-kernel.elf, initial.hfi). Changes restart the VM.",
			},
			"memory_mib": schema.Int64Attribute{
				Optional: true, Computed: true, Default: int64default.StaticInt64(256),
				Validators:  []validatorInt64{int64validator.Between(64, 1048576)},
				Description: "Guest memory in MiB (default 256). Changes restart the VM.",
			},
			"kernel_append": schema.StringAttribute{
				Optional: true, Computed: true, Default: stringdefault.StaticString(""),
				Description: "The kernel command line (holdfast run --append). Changes restart the VM.",
			},
			"tp1_port": schema.Int64Attribute{
				Optional: true, Computed: true, Default: int64default.StaticInt64(0),
				Validators: []validatorInt64{int64validator.Between(0, 65535)},
				Description: "Forward 127.0.0.1:PORT on the host to the guest's TP1 port 7100 over QEMU's user network " +
					"(0, the default: no network device). Never libvirt's NAT network. Changes restart the VM.",
			},
			"domain_type": schema.StringAttribute{
				Optional: true, Computed: true, Default: stringdefault.StaticString("qemu"),
				Validators:  []validatorString{stringvalidator.OneOf("qemu", "kvm")},
				Description: "qemu (TCG, the default) or kvm; `holdfast accel` says which is fast here. Changes restart the VM.",
			},
			"state_dir": schema.StringAttribute{
				Optional: true, Computed: true, Default: stringdefault.StaticString(defaultStateDir),
				PlanModifiers: replace,
				Description: "Where NAME/console.log and NAME/control.sock go (default " + defaultStateDir + "); with " +
					"HOLDFAST_STATE_DIR set to it, `holdfast checkpoint` and `holdfast vm counters` reach the VM. Changing it makes a new VM.",
			},
			"ready_line": schema.StringAttribute{
				Optional: true, Computed: true, Default: stringdefault.StaticString("HOLDFAST-READY"),
				Description: "Create and restarts wait for a console line containing this (default the kernel's HOLDFAST-READY; " +
					"the TP1 appliance says \"tp1: serving on 7100\"). No IP address is waited for.",
			},
			"ready_timeout_seconds": schema.Int64Attribute{
				Optional: true, Computed: true, Default: int64default.StaticInt64(300),
				Validators:  []validatorInt64{int64validator.Between(1, 86400)},
				Description: "How long to wait for ready_line before the VM is removed and the apply fails (default 300).",
			},
			"shutdown_timeout_seconds": schema.Int64Attribute{
				Optional: true, Computed: true, Default: int64default.StaticInt64(60),
				Validators: []validatorInt64{int64validator.Between(1, 3600)},
				Description: "Destroy and restarts first take a checkpoint through the admin service and wait for it to " +
					"commit, at most this long (default 60), then stop QEMU with SIGTERM.",
			},
			"running": schema.BoolAttribute{
				Optional: true, Computed: true, Default: booldefault.StaticBool(true),
				Description: "Whether the VM runs (default true). A VM found stopped (its kernel ended it, or someone " +
					"did) is a change back to true in the next plan, and apply starts it and waits for its ready line; " +
					"false stops it as destroy does and keeps its definition.",
			},
			"console_log": schema.StringAttribute{
				Computed: true, PlanModifiers: known,
				Description: "The serial console's log file (kept after destroy).",
			},
			"control_socket": schema.StringAttribute{
				Computed: true, PlanModifiers: known,
				Description: "The host's end of the VM's control channel (COM2), where its admin service answers.",
			},
		},
	}
}

func (r *applianceResource) Configure(_ context.Context, req resource.ConfigureRequest, _ *resource.ConfigureResponse) {
	if req.ProviderData != nil {
		r.client = req.ProviderData.(*client)
	}
}

func (m *applianceModel) spec(ctx context.Context) (applianceSpec, diag.Diagnostics) {
	var disks []string
	diagnostics := m.Disks.ElementsAs(ctx, &disks, false)
	name := m.Name.ValueString()
	stateDir := m.StateDir.ValueString()
	return applianceSpec{
		Name:       name,
		DomainType: m.DomainType.ValueString(),
		MemoryMiB:  m.MemoryMiB.ValueInt64(),
		// As written: Terraform requires the state to hold what the configuration says.
		ImageDir:               m.ImageDir.ValueString(),
		KernelAppend:           m.KernelAppend.ValueString(),
		Disks:                  disks,
		TP1Port:                m.TP1Port.ValueInt64(),
		ConsoleLog:             filepath.Join(stateDir, name, "console.log"),
		ControlSocket:          filepath.Join(stateDir, name, "control.sock"),
		ReadyLine:              m.ReadyLine.ValueString(),
		ReadyTimeoutSeconds:    m.ReadyTimeoutSeconds.ValueInt64(),
		ShutdownTimeoutSeconds: m.ShutdownTimeoutSeconds.ValueInt64(),
		StateDir:               stateDir,
		Running:                m.Running.ValueBool(),
	}, diagnostics
}

func (m *applianceModel) setFrom(spec applianceSpec) {
	m.ID = types.StringValue(spec.Name)
	m.Name = types.StringValue(spec.Name)
	m.Disks = stringList(spec.Disks)
	m.ImageDir = types.StringValue(spec.ImageDir)
	m.MemoryMiB = types.Int64Value(spec.MemoryMiB)
	m.KernelAppend = types.StringValue(spec.KernelAppend)
	m.TP1Port = types.Int64Value(spec.TP1Port)
	m.DomainType = types.StringValue(spec.DomainType)
	m.StateDir = types.StringValue(spec.StateDir)
	m.ReadyLine = types.StringValue(spec.ReadyLine)
	m.ReadyTimeoutSeconds = types.Int64Value(spec.ReadyTimeoutSeconds)
	m.ShutdownTimeoutSeconds = types.Int64Value(spec.ShutdownTimeoutSeconds)
	m.Running = types.BoolValue(spec.Running)
	m.ConsoleLog = types.StringValue(spec.ConsoleLog)
	m.ControlSocket = types.StringValue(spec.ControlSocket)
}

// preflight finds before anything is defined what would make QEMU fail: a missing image,
// a file QEMU's user cannot reach (upstream #1163).
func preflight(spec applianceSpec) error {
	for _, file := range []string{spec.kernelPath(), spec.initialImagePath()} {
		if _, err := os.Stat(file); err != nil {
			return fmt.Errorf("%v. Fix: build the image (./holdfast image build --manifest MANIFEST --out %s) or point image_dir at one", err, spec.ImageDir)
		}
	}
	checks := [][2]string{
		{spec.kernelPath(), "the kernel"},
		{spec.initialImagePath(), "the initial image"},
		{spec.ControlSocket, "the control socket"},
	}
	for _, disk := range spec.Disks {
		if _, err := os.Stat(disk); err != nil {
			return fmt.Errorf("store disk: %w", err)
		}
		checks = append(checks, [2]string{disk, "the store disk"})
	}
	for _, check := range checks {
		if err := checkQemuCanReach(check[0], check[1]); err != nil {
			return err
		}
	}
	return nil
}

func (r *applianceResource) Create(ctx context.Context, req resource.CreateRequest, resp *resource.CreateResponse) {
	var plan applianceModel
	resp.Diagnostics.Append(req.Plan.Get(ctx, &plan)...)
	if resp.Diagnostics.HasError() {
		return
	}
	spec, diagnostics := plan.spec(ctx)
	resp.Diagnostics.Append(diagnostics...)
	if resp.Diagnostics.HasError() {
		return
	}
	fail := func(err error) {
		resp.Diagnostics.AddError("Cannot create the Holdfast appliance "+spec.Name, err.Error())
	}
	if err := os.MkdirAll(filepath.Dir(spec.ControlSocket), 0o755); err != nil {
		fail(err)
		return
	}
	if err := preflight(spec); err != nil {
		fail(err)
		return
	}
	l, err := r.client.connect()
	if err != nil {
		fail(err)
		return
	}
	if _, err := l.DomainLookupByName(spec.Name); err == nil {
		fail(fmt.Errorf("libvirt already has a domain %q: adopt it with `terraform import <address> %s` or choose another name", spec.Name, spec.Name))
		return
	}
	domainXML, err := spec.DomainXML()
	if err != nil {
		fail(err)
		return
	}
	domain, err := l.DomainDefineXML(domainXML)
	if err != nil {
		fail(fmt.Errorf("defining the domain: %w", err))
		return
	}
	if !spec.Running {
		plan.setFrom(spec)
		resp.Diagnostics.Append(resp.State.Set(ctx, plan)...)
		return
	}
	// From here a failure removes the domain: a failed apply leaves nothing half-made for
	// the next one to trip over (upstream #921), and Terraform's state has no VM either.
	if err := startAndWait(ctx, l, domain, spec); err != nil {
		_ = l.DomainDestroy(domain)
		if undefineErr := l.DomainUndefine(domain); undefineErr != nil {
			err = fmt.Errorf("%w\n(and removing the domain failed too: %v; remove it with virsh undefine %s)", err, undefineErr, spec.Name)
		}
		fail(err)
		return
	}
	plan.setFrom(spec)
	resp.Diagnostics.Append(resp.State.Set(ctx, plan)...)
}

// startAndWait starts the defined domain and waits for its ready line.
func startAndWait(ctx context.Context, l *libvirt.Libvirt, domain libvirt.Domain, spec applianceSpec) error {
	// A socket left by a QEMU that was killed would make the new one's bind fail.
	_ = os.Remove(spec.ControlSocket)
	if err := l.DomainCreate(domain); err != nil {
		if strings.Contains(err.Error(), "ermission denied") {
			return fmt.Errorf("starting the domain: %w\nFix: QEMU's user must reach every file the domain names "+
				"(kernel, initial image, disks, %s): chmod o+x the directories above them, or move them to /var/lib/holdfast", err, filepath.Dir(spec.ConsoleLog))
		}
		return fmt.Errorf("starting the domain: %w", err)
	}
	return waitForReadyLine(ctx, spec.ConsoleLog, spec.ReadyLine, time.Duration(spec.ReadyTimeoutSeconds)*time.Second,
		func() (bool, error) { return isActive(l, domain) })
}

func uuidString(uuid libvirt.UUID) string {
	b := uuid[:]
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}

func isActive(l *libvirt.Libvirt, domain libvirt.Domain) (bool, error) {
	active, err := l.DomainIsActive(domain)
	return active == 1, err
}

// stopGracefully stops a running appliance without losing anything. Holdfast has no ACPI
// power button to press (libvirt's DomainShutdown would wait for nothing, and upstream's
// destroy pulls the plug, #356/#1060): its clean stop is a committed checkpoint, after
// which stopping QEMU loses nothing that ran. So: `checkpoint now` through the admin
// service, wait for it to commit, at most shutdown_timeout_seconds, then SIGTERM to QEMU
// (libvirt's graceful destroy, which lets QEMU flush its disks), and SIGKILL only if that
// fails. It returns a warning when a step could not be done gracefully.
func stopGracefully(ctx context.Context, l *libvirt.Libvirt, domain libvirt.Domain, spec applianceSpec) (string, error) {
	active, err := isActive(l, domain)
	if err != nil || !active {
		return "", err
	}
	var warnings []string
	deadline := time.Now().Add(time.Duration(spec.ShutdownTimeoutSeconds) * time.Second)
	if err := checkpointAndWait(ctx, spec.ControlSocket, deadline); err != nil {
		warnings = append(warnings, fmt.Sprintf("no checkpoint was committed before %s stopped (%v): it restarts from its last checkpoint and journal", spec.Name, err))
	}
	if err := l.DomainDestroyFlags(domain, libvirt.DomainDestroyGraceful); err != nil {
		if active, _ := isActive(l, domain); active {
			warnings = append(warnings, fmt.Sprintf("QEMU did not end on SIGTERM (%v): killed", err))
			if err := l.DomainDestroy(domain); err != nil && !isLibvirtError(err, libvirt.ErrOperationInvalid) {
				return strings.Join(warnings, "; "), err
			}
		}
	}
	return strings.Join(warnings, "; "), nil
}

func (r *applianceResource) lookup(name string) (*libvirt.Libvirt, libvirt.Domain, error) {
	l, err := r.client.connect()
	if err != nil {
		return nil, libvirt.Domain{}, err
	}
	domain, err := l.DomainLookupByName(name)
	return l, domain, err
}

func readSpec(l *libvirt.Libvirt, domain libvirt.Domain) (applianceSpec, error) {
	// The persistent definition, not the running one: after an update that needed no
	// restart the definition is what the next start runs.
	text, err := l.DomainGetXMLDesc(domain, libvirt.DomainXMLInactive)
	if err != nil {
		return applianceSpec{}, err
	}
	return parseDomainXML(text)
}

func (r *applianceResource) Read(ctx context.Context, req resource.ReadRequest, resp *resource.ReadResponse) {
	var state applianceModel
	resp.Diagnostics.Append(req.State.Get(ctx, &state)...)
	if resp.Diagnostics.HasError() {
		return
	}
	l, domain, err := r.lookup(state.ID.ValueString())
	if libvirt.IsNotFound(err) {
		resp.State.RemoveResource(ctx)
		return
	}
	if err != nil {
		resp.Diagnostics.AddError("Cannot read the Holdfast appliance", err.Error())
		return
	}
	spec, err := readSpec(l, domain)
	if err != nil {
		resp.Diagnostics.AddError("Cannot read the Holdfast appliance", err.Error())
		return
	}
	if spec.Running, err = isActive(l, domain); err != nil {
		resp.Diagnostics.AddError("Cannot read the Holdfast appliance", err.Error())
		return
	}
	state.setFrom(spec)
	resp.Diagnostics.Append(resp.State.Set(ctx, state)...)
}

func (r *applianceResource) Update(ctx context.Context, req resource.UpdateRequest, resp *resource.UpdateResponse) {
	var plan, prior applianceModel
	resp.Diagnostics.Append(req.Plan.Get(ctx, &plan)...)
	resp.Diagnostics.Append(req.State.Get(ctx, &prior)...)
	if resp.Diagnostics.HasError() {
		return
	}
	next, diagnostics := plan.spec(ctx)
	resp.Diagnostics.Append(diagnostics...)
	previous, moreDiagnostics := prior.spec(ctx)
	resp.Diagnostics.Append(moreDiagnostics...)
	if resp.Diagnostics.HasError() {
		return
	}
	fail := func(err error) {
		resp.Diagnostics.AddError("Cannot update the Holdfast appliance "+next.Name, err.Error())
	}
	l, domain, err := r.lookup(next.Name)
	if err != nil {
		fail(err)
		return
	}
	active, err := isActive(l, domain)
	if err != nil {
		fail(err)
		return
	}
	restart := previous.restartDiffers(next)
	stop := active && (restart || !next.Running)
	start := next.Running && (restart || !active)
	if start {
		if err := preflight(next); err != nil {
			fail(err)
			return
		}
	}
	next.UUID = uuidString(domain.UUID)
	domainXML, err := next.DomainXML()
	if err != nil {
		fail(err)
		return
	}
	if stop {
		warning, err := stopGracefully(ctx, l, domain, previous)
		if warning != "" {
			resp.Diagnostics.AddWarning("Holdfast appliance "+next.Name+" was not stopped gracefully", warning)
		}
		if err != nil {
			fail(err)
			return
		}
	}
	// Redefining a running domain changes its persistent definition only, which is all a
	// change that needs no restart (the provider's own settings in the metadata) needs.
	if domain, err = l.DomainDefineXML(domainXML); err != nil {
		fail(fmt.Errorf("redefining the domain: %w", err))
		return
	}
	if start {
		if err := startAndWait(ctx, l, domain, next); err != nil {
			// The new definition is in place but the VM does not run: the state says so,
			// and the next plan shows running = false -> true.
			next.Running = false
			plan.setFrom(next)
			resp.Diagnostics.Append(resp.State.Set(ctx, plan)...)
			fail(err)
			return
		}
	}
	plan.setFrom(next)
	resp.Diagnostics.Append(resp.State.Set(ctx, plan)...)
}

func (r *applianceResource) Delete(ctx context.Context, req resource.DeleteRequest, resp *resource.DeleteResponse) {
	var state applianceModel
	resp.Diagnostics.Append(req.State.Get(ctx, &state)...)
	if resp.Diagnostics.HasError() {
		return
	}
	spec, diagnostics := state.spec(ctx)
	resp.Diagnostics.Append(diagnostics...)
	l, domain, err := r.lookup(spec.Name)
	if libvirt.IsNotFound(err) {
		return
	}
	if err != nil {
		resp.Diagnostics.AddError("Cannot destroy the Holdfast appliance", err.Error())
		return
	}
	warning, err := stopGracefully(ctx, l, domain, spec)
	if warning != "" {
		resp.Diagnostics.AddWarning("Holdfast appliance "+spec.Name+" was not stopped gracefully", warning)
	}
	if err != nil {
		resp.Diagnostics.AddError("Cannot destroy the Holdfast appliance", err.Error())
		return
	}
	if err := l.DomainUndefine(domain); err != nil && !libvirt.IsNotFound(err) {
		resp.Diagnostics.AddError("Cannot destroy the Holdfast appliance", err.Error())
		return
	}
	if err := os.Remove(spec.ControlSocket); err != nil && !errors.Is(err, os.ErrNotExist) {
		resp.Diagnostics.AddWarning("Leftover control socket", err.Error())
	}
}

func (r *applianceResource) ImportState(ctx context.Context, req resource.ImportStateRequest, resp *resource.ImportStateResponse) {
	resource.ImportStatePassthroughID(ctx, path.Root("id"), req, resp)
}

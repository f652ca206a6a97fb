package provider

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	libvirt "github.com/digitalocean/go-libvirt"
	"github.com/hashicorp/terraform-plugin-framework-validators/int64validator"
	"github.com/hashicorp/terraform-plugin-framework/attr"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/int64default"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/int64planmodifier"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/listplanmodifier"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/planmodifier"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/stringplanmodifier"
	"github.com/hashicorp/terraform-plugin-framework/types"
)

// holdfast_store: a Holdfast single-level store on libvirt volumes, one per mirror, made
// raw in a storage pool and formatted by `holdfast store format`. Nothing about a store
// changes in place: its geometry is written on its disks, so every attribute forces a new
// store, and the plan says so.
type storeResource struct {
	client *client
}

type storeModel struct {
	ID          types.String `tfsdk:"id"`
	Name        types.String `tfsdk:"name"`
	Pool        types.String `tfsdk:"pool"`
	SizeMiB     types.Int64  `tfsdk:"size_mib"`
	Mirrors     types.Int64  `tfsdk:"mirrors"`
	VolumePaths types.List   `tfsdk:"volume_paths"`
}

func newStoreResource() resource.Resource { return &storeResource{} }

func (r *storeResource) Metadata(_ context.Context, req resource.MetadataRequest, resp *resource.MetadataResponse) {
	resp.TypeName = req.ProviderTypeName + "_store"
}

func (r *storeResource) Schema(_ context.Context, _ resource.SchemaRequest, resp *resource.SchemaResponse) {
	replace := []planmodifier.String{stringplanmodifier.RequiresReplace()}
	resp.Schema = schema.Schema{
		Description: "A Holdfast store: raw volumes in a libvirt storage pool, one per mirror, formatted with " +
			"`holdfast store format`. Every attribute forces a new store (its geometry is on its disks).",
		Attributes: map[string]schema.Attribute{
			"id": schema.StringAttribute{
				Computed:      true,
				Description:   "POOL/NAME; `terraform import holdfast_store.x POOL/NAME` adopts a store.",
				PlanModifiers: []planmodifier.String{stringplanmodifier.UseStateForUnknown()},
			},
			"name": schema.StringAttribute{
				Required:      true,
				Description:   "The store's name; its volumes are NAME-mirror0.img, NAME-mirror1.img.",
				PlanModifiers: replace,
				Validators:    []validatorString{nameValidator{}},
			},
			"pool": schema.StringAttribute{
				Required:      true,
				Description:   "The libvirt storage pool the volumes go in; it must exist and be active.",
				PlanModifiers: replace,
			},
			"size_mib": schema.Int64Attribute{
				Required:      true,
				Description:   "Size of each volume in MiB (at least 4: smaller logs cannot hold a checkpoint).",
				PlanModifiers: []planmodifier.Int64{int64planmodifier.RequiresReplace()},
				Validators:    []validatorInt64{int64validator.Between(4, 1048576)},
			},
			"mirrors": schema.Int64Attribute{
				Optional:      true,
				Computed:      true,
				Default:       int64default.StaticInt64(2),
				Description:   "How many mirrors (volumes): 2 (the default), or 1 for a store with no mirror.",
				PlanModifiers: []planmodifier.Int64{int64planmodifier.RequiresReplace()},
				Validators:    []validatorInt64{int64validator.Between(1, 2)},
			},
			"volume_paths": schema.ListAttribute{
				Computed:      true,
				ElementType:   types.StringType,
				Description:   "The volumes' paths on the host, in mirror order: give them to holdfast_appliance's disks.",
				PlanModifiers: []planmodifier.List{listplanmodifier.UseStateForUnknown()},
			},
		},
	}
}

func (r *storeResource) Configure(_ context.Context, req resource.ConfigureRequest, _ *resource.ConfigureResponse) {
	if req.ProviderData != nil {
		r.client = req.ProviderData.(*client)
	}
}

func volumeName(store string, mirror int) string {
	return fmt.Sprintf("%s-mirror%d.img", store, mirror)
}

func (r *storeResource) Create(ctx context.Context, req resource.CreateRequest, resp *resource.CreateResponse) {
	var plan storeModel
	resp.Diagnostics.Append(req.Plan.Get(ctx, &plan)...)
	if resp.Diagnostics.HasError() {
		return
	}
	l, pool, err := r.client.pool(plan.Pool.ValueString())
	if err != nil {
		resp.Diagnostics.AddError("Cannot create the Holdfast store", err.Error())
		return
	}
	name := plan.Name.ValueString()
	mirrors := int(plan.Mirrors.ValueInt64())
	for mirror := 0; mirror < mirrors; mirror++ {
		if _, err := l.StorageVolLookupByName(pool, volumeName(name, mirror)); err == nil {
			resp.Diagnostics.AddError("Cannot create the Holdfast store", fmt.Sprintf(
				"volume %s already exists in pool %s: adopt it with `terraform import <address> %s/%s`, or choose another name",
				volumeName(name, mirror), pool.Name, pool.Name, name))
			return
		}
	}
	// Whatever fails from here removes what was made: no half-made store is left behind
	// for the next apply to trip over (upstream #921).
	var created []libvirt.StorageVol
	cleanUp := func() {
		for _, volume := range created {
			_ = l.StorageVolDelete(volume, libvirt.StorageVolDeleteNormal)
		}
	}
	var paths []string
	for mirror := 0; mirror < mirrors; mirror++ {
		volumeXML := fmt.Sprintf(`<volume><name>%s</name><capacity unit="MiB">%d</capacity><allocation>0</allocation>`+
			`<target><format type="raw"/></target></volume>`, volumeName(name, mirror), plan.SizeMiB.ValueInt64())
		volume, err := l.StorageVolCreateXML(pool, volumeXML, 0)
		if err != nil {
			cleanUp()
			resp.Diagnostics.AddError("Cannot create the Holdfast store", fmt.Sprintf("creating volume %s in pool %s: %v", volumeName(name, mirror), pool.Name, err))
			return
		}
		created = append(created, volume)
		volumePath, err := l.StorageVolGetPath(volume)
		if err != nil {
			cleanUp()
			resp.Diagnostics.AddError("Cannot create the Holdfast store", err.Error())
			return
		}
		paths = append(paths, volumePath)
	}
	// --force: the volumes exist (empty) because libvirt made them.
	arguments := append([]string{"store", "format", "--force", "--size-mib", strconv.FormatInt(plan.SizeMiB.ValueInt64(), 10)}, paths...)
	if _, err := r.client.runHoldfast(ctx, arguments...); err != nil {
		cleanUp()
		detail := err.Error()
		if strings.Contains(detail, "ermission denied") {
			detail += "\nFix: run Terraform as a user that can write the pool's directory (its volumes are formatted on this host)."
		}
		resp.Diagnostics.AddError("Cannot format the Holdfast store", detail)
		return
	}
	_ = l.StoragePoolRefresh(pool, 0)
	plan.ID = types.StringValue(pool.Name + "/" + name)
	plan.VolumePaths = stringList(paths)
	resp.Diagnostics.Append(resp.State.Set(ctx, plan)...)
}

func stringList(values []string) types.List {
	elements := make([]attr.Value, 0, len(values))
	for _, value := range values {
		elements = append(elements, types.StringValue(value))
	}
	return types.ListValueMust(types.StringType, elements)
}

func (r *storeResource) Read(ctx context.Context, req resource.ReadRequest, resp *resource.ReadResponse) {
	var state storeModel
	resp.Diagnostics.Append(req.State.Get(ctx, &state)...)
	if resp.Diagnostics.HasError() {
		return
	}
	poolName, name, found := strings.Cut(state.ID.ValueString(), "/")
	if !found {
		resp.Diagnostics.AddError("Bad holdfast_store id", fmt.Sprintf("%q is not POOL/NAME", state.ID.ValueString()))
		return
	}
	l, err := r.client.connect()
	if err != nil {
		resp.Diagnostics.AddError("Cannot read the Holdfast store", err.Error())
		return
	}
	pool, err := l.StoragePoolLookupByName(poolName)
	if isLibvirtError(err, libvirt.ErrNoStoragePool) {
		resp.State.RemoveResource(ctx)
		return
	}
	if err != nil {
		resp.Diagnostics.AddError("Cannot read the Holdfast store", err.Error())
		return
	}
	var paths []string
	var capacityBytes uint64
	for mirror := 0; mirror < 2; mirror++ {
		volume, err := l.StorageVolLookupByName(pool, volumeName(name, mirror))
		if isLibvirtError(err, libvirt.ErrNoStorageVol) {
			break
		}
		if err != nil {
			resp.Diagnostics.AddError("Cannot read the Holdfast store", err.Error())
			return
		}
		_, capacity, _, err := l.StorageVolGetInfo(volume)
		if err != nil {
			resp.Diagnostics.AddError("Cannot read the Holdfast store", err.Error())
			return
		}
		if mirror > 0 && capacity != capacityBytes {
			resp.Diagnostics.AddError("The Holdfast store's mirrors differ", fmt.Sprintf(
				"%s is %d bytes, %s %d: they are not one store", volumeName(name, 0), capacityBytes, volumeName(name, mirror), capacity))
			return
		}
		capacityBytes = capacity
		volumePath, err := l.StorageVolGetPath(volume)
		if err != nil {
			resp.Diagnostics.AddError("Cannot read the Holdfast store", err.Error())
			return
		}
		paths = append(paths, volumePath)
	}
	if len(paths) == 0 {
		// Gone outside Terraform: the next plan makes it again.
		resp.State.RemoveResource(ctx)
		return
	}
	if known := state.Mirrors.ValueInt64(); !state.Mirrors.IsNull() && int64(len(paths)) < known {
		// A lost mirror is not a smaller store: reading it as one would plan to replace the
		// store, destroying the mirror that holds the data. Holdfast resilvers a blank
		// volume online, so say how to give it one, and keep the state as it was.
		missing := volumeName(name, len(paths))
		resp.Diagnostics.AddWarning("A mirror of Holdfast store "+state.ID.ValueString()+" is missing",
			fmt.Sprintf("volume %s is gone from pool %s. Make a blank one of the same size (virsh vol-create-as %s %s %dM "+
				"--format raw); the appliance resilvers it online.", missing, poolName, poolName, missing, capacityBytes>>20))
		return
	}
	state.Name = types.StringValue(name)
	state.Pool = types.StringValue(poolName)
	state.SizeMiB = types.Int64Value(int64(capacityBytes >> 20))
	state.Mirrors = types.Int64Value(int64(len(paths)))
	state.VolumePaths = stringList(paths)
	resp.Diagnostics.Append(resp.State.Set(ctx, state)...)
}

func (r *storeResource) Update(_ context.Context, _ resource.UpdateRequest, resp *resource.UpdateResponse) {
	// Every attribute requires replacement, so Terraform never asks for an update.
	resp.Diagnostics.AddError("holdfast_store cannot change in place", "every attribute of a store forces a new one")
}

func (r *storeResource) Delete(ctx context.Context, req resource.DeleteRequest, resp *resource.DeleteResponse) {
	var state storeModel
	resp.Diagnostics.Append(req.State.Get(ctx, &state)...)
	if resp.Diagnostics.HasError() {
		return
	}
	poolName, name, _ := strings.Cut(state.ID.ValueString(), "/")
	l, pool, err := r.client.pool(poolName)
	if err != nil {
		resp.Diagnostics.AddError("Cannot delete the Holdfast store", err.Error())
		return
	}
	for mirror := 0; mirror < 2; mirror++ {
		volume, err := l.StorageVolLookupByName(pool, volumeName(name, mirror))
		if isLibvirtError(err, libvirt.ErrNoStorageVol) {
			continue
		}
		if err == nil {
			err = l.StorageVolDelete(volume, libvirt.StorageVolDeleteNormal)
		}
		if err != nil {
			resp.Diagnostics.AddError("Cannot delete the Holdfast store", fmt.Sprintf("volume %s: %v", volumeName(name, mirror), err))
			return
		}
	}
}

func (r *storeResource) ImportState(ctx context.Context, req resource.ImportStateRequest, resp *resource.ImportStateResponse) {
	if _, _, found := strings.Cut(req.ID, "/"); !found {
		resp.Diagnostics.AddError("Bad import id", fmt.Sprintf("%q is not POOL/NAME", req.ID))
		return
	}
	resource.ImportStatePassthroughID(ctx, path.Root("id"), req, resp)
}

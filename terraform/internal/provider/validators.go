package provider

import (
	"context"
	"regexp"

	"github.com/hashicorp/terraform-plugin-framework/schema/validator"
)

type (
	validatorString = validator.String
	validatorInt64  = validator.Int64
)

// The names `holdfast run --name` takes (hypervisor-glue/holdfast/src/paths.rs): one path
// component that reads well in messages, since it names files and sockets too.
var namePattern = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}$`)

type nameValidator struct{}

func (nameValidator) Description(context.Context) string {
	return "1 to 64 letters, digits, '-', '_' or '.', not starting with '.' or '-'"
}

func (v nameValidator) MarkdownDescription(ctx context.Context) string { return v.Description(ctx) }

func (v nameValidator) ValidateString(ctx context.Context, req validator.StringRequest, resp *validator.StringResponse) {
	if req.ConfigValue.IsNull() || req.ConfigValue.IsUnknown() {
		return
	}
	if !namePattern.MatchString(req.ConfigValue.ValueString()) {
		resp.Diagnostics.AddAttributeError(req.Path, "Not a Holdfast name",
			req.ConfigValue.ValueString()+" is not a name: use "+v.Description(ctx))
	}
}

provider "holdfast" {
  # Default qemu:///system, or $HOLDFAST_LIBVIRT_URI. Run Terraform on the libvirt host.
  uri = "qemu:///system"
  # A holdfast binary, or a Holdfast source tree whose ./holdfast builds it
  # (default $HOLDFAST_COMMAND, else holdfast on PATH).
  holdfast_command = "/opt/holdfast"
}

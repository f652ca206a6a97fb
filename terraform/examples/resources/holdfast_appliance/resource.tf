# One Holdfast VM on the store above, booting the image `holdfast image build --manifest
# services/persist-manifest.toml --out build/persist` made. Import: terraform import
# holdfast_appliance.app app
resource "holdfast_appliance" "app" {
  name      = "app"
  disks     = holdfast_store.app.volume_paths
  image_dir = "/opt/holdfast/build/persist"

  memory_mib    = 256
  kernel_append = "holdfast.checkpoint-interval-ms=2000"
  tp1_port      = 7100

  running                  = true
  ready_line               = "HOLDFAST-READY"
  ready_timeout_seconds    = 300
  shutdown_timeout_seconds = 60
}

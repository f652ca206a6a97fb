# A hot-standby pair of TP1 appliances (VMs app-1 and app-2) serving TP1 on 127.0.0.1:7100.
# Import: terraform import holdfast_pair.app app (or /var/lib/holdfast/pairs/app).
resource "holdfast_pair" "app" {
  name      = "app"
  image_dir = "/opt/holdfast/build/tp1-image"
  state_dir = "/var/lib/holdfast"

  # In place: holdfast pair mode.
  mode          = "sync-durable"
  lag_bytes_max = 16777216

  # Each of these makes a new pair.
  libvirt_uri = "qemu:///system"
  store_mib   = 2048
  memory_mib  = 512
  accel       = "auto"
  tp1_port    = 7100
  exporter    = "127.0.0.1:9717"

  wait_for_standby       = true
  ready_timeout_seconds  = 300
  down_timeout_seconds   = 60
  keep_stores_on_destroy = false
}

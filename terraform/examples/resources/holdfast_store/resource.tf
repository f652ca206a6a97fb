# Two raw volumes, app-mirror0.img and app-mirror1.img, in pool "holdfast", formatted as one
# mirrored Holdfast store. Import: terraform import holdfast_store.app holdfast/app
resource "holdfast_store" "app" {
  name     = "app"
  pool     = "holdfast"
  size_mib = 64
}

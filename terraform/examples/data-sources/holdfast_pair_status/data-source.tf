# What the pair's supervisor reports now: the primary, the mode, the term, each node's state.
data "holdfast_pair_status" "app" {
  name      = holdfast_pair.app.name
  state_dir = holdfast_pair.app.state_dir
}

output "app_primary" {
  value = data.holdfast_pair_status.app.primary
}

# The TP1 appliance on the local libvirtd: a mirrored 2 GiB store and one VM serving TP1 on
# 127.0.0.1:7100. See ../../README.md for what to run before (the image, the pool) and after
# (a token, load, run, check).

terraform {
  required_version = ">= 1.5"
  required_providers {
    holdfast = {
      source = "holdfast/holdfast"
    }
  }
}

variable "holdfast_source" {
  description = "A Holdfast source tree: its ./holdfast formats the store, and its build/tp1-image is booted."
  type        = string
}

variable "pool" {
  description = "The libvirt storage pool for the store's volumes (it must exist and be active)."
  type        = string
  default     = "holdfast"
}

variable "tp1_port" {
  description = "The port on 127.0.0.1 that is forwarded to the appliance's TP1 service."
  type        = number
  default     = 7100
}

variable "domain_type" {
  description = "qemu (TCG) or kvm: `holdfast accel` says which is fast on this host."
  type        = string
  default     = "qemu"
}

provider "holdfast" {
  uri              = "qemu:///system"
  holdfast_command = var.holdfast_source
}

resource "holdfast_store" "tp1" {
  name = "tp1"
  pool = var.pool
  # The TP1 database is about 140 MiB of pages, and the first checkpoint needs the log.
  size_mib = 2048
}

resource "holdfast_appliance" "tp1" {
  name        = "tp1"
  disks       = holdfast_store.tp1.volume_paths
  image_dir   = "${var.holdfast_source}/build/tp1-image"
  memory_mib  = 512
  tp1_port    = var.tp1_port
  domain_type = var.domain_type
  # Ready when the TP1 service listens, not merely when the kernel is up.
  ready_line = "tp1: serving on 7100"
}

output "tp1_address" {
  value = "127.0.0.1:${holdfast_appliance.tp1.tp1_port}"
}

output "console_log" {
  value = holdfast_appliance.tp1.console_log
}

output "token_command" {
  description = "Mints an operator token through the appliance's control channel."
  value       = "HOLDFAST_STATE_DIR=${holdfast_appliance.tp1.state_dir} ${var.holdfast_source}/holdfast tp1 token ${holdfast_appliance.tp1.name} operator --admin"
}

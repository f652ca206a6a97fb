# A monitored hot-standby pair of TP1 appliances: `holdfast pair up` (both VMs, the
# replication link, failover, the client endpoint on 127.0.0.1:7100), the exporter and a
# Prometheus with Holdfast's alert rules (`holdfast monitor up`). deploy/README.md runs it.

terraform {
  required_version = ">= 1.5"
  required_providers {
    holdfast = {
      source = "holdfast/holdfast"
    }
  }
}

variable "holdfast_source" {
  description = "A Holdfast source tree: its ./holdfast runs the pair, and its build/tp1-image is booted."
  type        = string
}

variable "state_dir" {
  description = "The holdfast state directory: the pair's stores, logs and sockets, and monitoring's."
  type        = string
  default     = "/var/lib/holdfast"
}

variable "libvirt_uri" {
  description = "Run both VMs as libvirt domains at this URI (e.g. qemu:///system); null: as the supervisor's own QEMUs."
  type        = string
  default     = null
}

variable "accel" {
  description = "auto (KVM only where it is fast), kvm or tcg."
  type        = string
  default     = "auto"
}

variable "mode" {
  description = "Replication mode: sync-durable, sync-received or async."
  type        = string
  default     = "sync-durable"
}

variable "store_mib" {
  description = "Each store mirror's size in MiB (the TP1 database needs about 140 MiB, and its first checkpoint the log)."
  type        = number
  default     = 2048
}

variable "tp1_port" {
  description = "The pair's client endpoint on 127.0.0.1: TP1 clients connect here, whichever node is the primary."
  type        = number
  default     = 7100
}

variable "exporter_port" {
  description = "The exporter's port on 127.0.0.1 (every VM's and the pair's metrics)."
  type        = number
  default     = 9717
}

variable "prometheus_port" {
  description = "Prometheus's port on 127.0.0.1."
  type        = number
  default     = 9090
}

provider "holdfast" {
  holdfast_command = var.holdfast_source
}

resource "holdfast_pair" "tp1" {
  name        = "tp1"
  mode        = var.mode
  libvirt_uri = var.libvirt_uri
  image_dir   = "${var.holdfast_source}/build/tp1-image"
  store_mib   = var.store_mib
  accel       = var.accel
  tp1_port    = var.tp1_port
  state_dir   = var.state_dir
}

# The exporter finds every VM and pair under the state directory; Prometheus scrapes it and
# evaluates monitoring/rules. Made again when the pair is; `monitor down` on destroy.
resource "terraform_data" "monitoring" {
  triggers_replace = [holdfast_pair.tp1.id, var.exporter_port, var.prometheus_port]
  input = {
    holdfast  = "${var.holdfast_source}/holdfast"
    state_dir = var.state_dir
  }

  provisioner "local-exec" {
    command     = "${self.input.holdfast} monitor up --exporter-port ${var.exporter_port} --prometheus-port ${var.prometheus_port}"
    environment = { HOLDFAST_STATE_DIR = self.input.state_dir }
  }

  provisioner "local-exec" {
    when        = destroy
    command     = "${self.input.holdfast} monitor down"
    environment = { HOLDFAST_STATE_DIR = self.input.state_dir }
  }
}

data "holdfast_pair_status" "tp1" {
  name       = holdfast_pair.tp1.name
  state_dir  = holdfast_pair.tp1.state_dir
  depends_on = [terraform_data.monitoring]
}

output "endpoint" {
  description = "Where TP1 clients connect."
  value       = holdfast_pair.tp1.endpoint
}

output "primary" {
  value = data.holdfast_pair_status.tp1.primary
}

output "metrics" {
  value = "http://127.0.0.1:${var.exporter_port}/metrics"
}

output "prometheus" {
  value = "http://127.0.0.1:${var.prometheus_port}/"
}

output "token_command" {
  description = "Mints an operator token on the primary (tokens are replicated to the standby)."
  value       = "HOLDFAST_STATE_DIR=${var.state_dir} ${var.holdfast_source}/holdfast tp1 token ${holdfast_pair.tp1.primary} operator --admin"
}

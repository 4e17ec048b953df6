output "head" {
  value       = google_compute_instance.node[0].name
  description = "The first VM, which ran cluster setup"
}

output "ssh_command" {
  value       = "gcloud compute ssh --tunnel-through-iap --zone ${var.zone} ${google_compute_instance.node[0].name}"
  description = "Log in to the head"
}

output "shared" {
  value       = "${google_filestore_instance.shared.networks[0].ip_addresses[0]}:/${local.share_name}"
  description = "The Filestore share mounted at /shared"
}

# hpctrain training cluster on Google Cloud: a VPC network with one subnet,
# a firewall open only inside it (plus ssh through IAP), Cloud NAT for
# package downloads (the VMs have no public address), N VMs in a compact
# placement policy with machine type and GPU count as variables, a Filestore
# share mounted at /shared, and a startup script that installs the hpctrain
# package; the first VM then runs `hpctrain cluster setup` over every VM and
# ends with `hpctrain doctor`.
#   terraform init && terraform apply -var project=my-project -var package_url=...

terraform {
  required_version = ">= 1.3"
  required_providers {
    google = {
      source  = "hashicorp/google"
      version = ">= 5.0"
    }
  }
}

provider "google" {
  project = var.project
  region  = var.region
  zone    = var.zone
}

locals {
  prefix     = "hpct-${var.name}"
  hosts      = [for i in range(var.node_count) : "${local.prefix}-${i}"]
  share_name = "shared"
}

resource "google_compute_network" "net" {
  name                    = "${local.prefix}-net"
  auto_create_subnetworks = false
  mtu                     = 8896
}

resource "google_compute_subnetwork" "subnet" {
  name                     = "${local.prefix}-subnet"
  network                  = google_compute_network.net.id
  region                   = var.region
  ip_cidr_range            = var.subnet_cidr
  private_ip_google_access = true
}

# Every port between cluster members, nothing else from inside or outside.
resource "google_compute_firewall" "internal" {
  name          = "${local.prefix}-internal"
  network       = google_compute_network.net.id
  direction     = "INGRESS"
  source_ranges = [var.subnet_cidr]
  allow {
    protocol = "all"
  }
}

# ssh only from Google's IAP range (gcloud compute ssh --tunnel-through-iap).
resource "google_compute_firewall" "iap_ssh" {
  name          = "${local.prefix}-iap-ssh"
  network       = google_compute_network.net.id
  direction     = "INGRESS"
  source_ranges = ["35.235.240.0/20"]
  allow {
    protocol = "tcp"
    ports    = ["22"]
  }
}

resource "google_compute_router" "router" {
  name    = "${local.prefix}-router"
  network = google_compute_network.net.id
  region  = var.region
}

resource "google_compute_router_nat" "nat" {
  name                               = "${local.prefix}-nat"
  router                             = google_compute_router.router.name
  region                             = var.region
  nat_ip_allocate_option             = "AUTO_ONLY"
  source_subnetwork_ip_ranges_to_nat = "ALL_SUBNETWORKS_ALL_IP_RANGES"
}

resource "google_filestore_instance" "shared" {
  name     = "${local.prefix}-fs"
  location = var.zone
  tier     = "BASIC_HDD"
  file_shares {
    name        = local.share_name
    capacity_gb = var.filestore_gb
  }
  networks {
    network = google_compute_network.net.name
    modes   = ["MODE_IPV4"]
  }
}

resource "google_compute_resource_policy" "compact" {
  name   = "${local.prefix}-compact"
  region = var.region
  group_placement_policy {
    collocation = "COLLOCATED"
  }
}

resource "google_compute_instance" "node" {
  count                     = var.node_count
  name                      = local.hosts[count.index]
  machine_type              = var.machine_type
  zone                      = var.zone
  allow_stopping_for_update = true
  resource_policies         = var.gpu_count == 0 ? [google_compute_resource_policy.compact.id] : []
  labels = {
    hpctrain = var.name
  }

  boot_disk {
    initialize_params {
      image = "debian-cloud/debian-12"
      size  = var.disk_gb
    }
  }

  network_interface {
    subnetwork = google_compute_subnetwork.subnet.id
  }

  dynamic "guest_accelerator" {
    for_each = var.gpu_count > 0 ? [1] : []
    content {
      type  = var.gpu_type
      count = var.gpu_count
    }
  }

  # GPU VMs cannot live-migrate.
  scheduling {
    on_host_maintenance = var.gpu_count > 0 ? "TERMINATE" : "MIGRATE"
  }

  service_account {
    scopes = ["cloud-platform"]
  }

  metadata = {
    enable-oslogin = "FALSE"
  }

  metadata_startup_script = <<-EOT
    #!/bin/bash
    # Every VM: mount the share, install hpctrain. The first VM: make the
    # cluster key, wait for every VM, run cluster setup, then doctor.
    set -euxo pipefail
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -q
    apt-get install -y -q nfs-common curl
    mkdir -p /shared
    mountpoint -q /shared || mount -t nfs -o vers=3 "${google_filestore_instance.shared.networks[0].ip_addresses[0]}:/${local.share_name}" /shared
    curl -fsSL --max-time 600 -o /tmp/hpctrain.deb "${var.package_url}"
    apt-get install -y -q /tmp/hpctrain.deb
    # The head's key reaches the others through the share.
    install -d -m 700 /root/.ssh
    if [ "$(hostname -s)" = "${local.hosts[0]}" ]; then
      [ -f /root/.ssh/hpctrain_cluster ] || ssh-keygen -q -t ed25519 -N "" -f /root/.ssh/hpctrain_cluster
      install -d -m 700 /shared/.hpctrain
      cp /root/.ssh/hpctrain_cluster.pub /shared/.hpctrain/head.pub
      printf '%s\n' "${join("\n", local.hosts)}" > /etc/hpctrain-hosts
      while read -r host; do
        for _ in $(seq 120); do
          ssh -n -i /root/.ssh/hpctrain_cluster -o BatchMode=yes -o ConnectTimeout=5 -o StrictHostKeyChecking=accept-new "root@$host" true && break
          sleep 10
        done
      done < /etc/hpctrain-hosts
      hpctrain cluster setup --hostfile /etc/hpctrain-hosts -i /root/.ssh/hpctrain_cluster --ssh-user root \
        --user "${var.training_user}" --shared-dir /shared --shared-type existing
      su - "${var.training_user}" -c "hpctrain doctor --hostfile /etc/hpctrain-hosts"
    else
      for _ in $(seq 120); do [ -f /shared/.hpctrain/head.pub ] && break; sleep 10; done
      grep -qxF "$(cat /shared/.hpctrain/head.pub)" /root/.ssh/authorized_keys 2>/dev/null ||
        cat /shared/.hpctrain/head.pub >> /root/.ssh/authorized_keys
      sed -i 's/^#\?PermitRootLogin.*/PermitRootLogin prohibit-password/' /etc/ssh/sshd_config
      systemctl reload ssh
    fi
  EOT

  depends_on = [google_compute_router_nat.nat]
}

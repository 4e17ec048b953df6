variable "project" {
  type        = string
  description = "The Google Cloud project"
}

variable "region" {
  type        = string
  default     = "us-central1"
  description = "Region of the subnet, router and placement policy"
}

variable "zone" {
  type        = string
  default     = "us-central1-a"
  description = "Zone of the VMs and the Filestore share"
}

variable "name" {
  type        = string
  default     = "train"
  description = "Suffix of every resource's name"
}

variable "node_count" {
  type        = number
  default     = 3
  description = "How many VMs (the first is the head)"
}

variable "machine_type" {
  type        = string
  default     = "c2-standard-16"
  description = "Machine type of every VM (a2-highgpu-1g and the like for GPUs)"
}

variable "gpu_count" {
  type        = number
  default     = 0
  description = "GPUs per VM (0: CPU only)"
}

variable "gpu_type" {
  type        = string
  default     = "nvidia-tesla-t4"
  description = "Accelerator type when gpu_count > 0"
}

variable "disk_gb" {
  type        = number
  default     = 50
  description = "Boot disk size"
}

variable "subnet_cidr" {
  type        = string
  default     = "10.43.0.0/20"
  description = "The subnet's range; the firewall opens every port inside it only"
}

variable "filestore_gb" {
  type        = number
  default     = 1024
  description = "Capacity of the Filestore share (BASIC_HDD: at least 1024)"
}

variable "package_url" {
  type        = string
  description = "URL of hpctrain_<version>_amd64.deb (make package builds it)"
}

variable "training_user" {
  type        = string
  default     = "train"
  description = "The user hpctrain cluster setup makes on every VM"
}

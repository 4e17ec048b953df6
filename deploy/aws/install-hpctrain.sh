#!/bin/bash
# ParallelCluster OnNodeConfigured action: install the hpctrain package given
# as the first argument (a URL of hpctrain_<version>_amd64.deb) with its
# dependencies. Idempotent; bounded in time by curl's and apt's own timeouts.
set -euo pipefail
url="${1:?usage: install-hpctrain.sh URL-of-hpctrain.deb}"
export DEBIAN_FRONTEND=noninteractive
curl -fsSL --max-time 600 -o /tmp/hpctrain.deb "$url"
apt-get update -q
apt-get install -y -q /tmp/hpctrain.deb
hpctrain --version

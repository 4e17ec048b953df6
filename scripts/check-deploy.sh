#!/usr/bin/env bash
# Offline checks of the deploy recipes (deploy/ by default, or the files and
# folders given): YAML/JSON parse, CloudFormation references and resource
# properties, ParallelCluster config, Terraform through python-hcl2 (from the
# environment scripts/install-deps.sh makes; HPCT_TEST_TOOLS_ENV names another),
# Kubernetes manifests against the MPIJob v2beta1 schema and the core API,
# Dockerfiles, shellcheck, ansible-lint. Exits non-zero naming the file, the
# line and place, and the broken name. See scripts/check_deploy/.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
for tool in python3 shellcheck; do
  command -v "$tool" >/dev/null || { echo "check-deploy: $tool is missing: run scripts/install-deps.sh" >&2; exit 2; }
done
python3 -c 'import yaml, jsonschema' 2>/dev/null ||
  { echo "check-deploy: python3-yaml and python3-jsonschema are missing: run scripts/install-deps.sh" >&2; exit 2; }
exec python3 "$here/check_deploy/check_deploy.py" "$@"

#!/usr/bin/env bash
# scripts/check-deploy.sh refuses what each format's own tool would refuse,
# and names it. The shipped recipes must pass; then each case breaks one
# thing (a reference, an undeclared variable, a misspelt required key, a
# parse error) in its own copy of one recipe folder, and the checker, run
# once over every case's copy (one run keeps this test fast on a loaded
# machine), must exit 1 with, for each case, a line naming the case's file
# and the broken name. Label deploy.
# The perl substitutions are single-quoted on purpose ($1, ${...} are theirs).
# shellcheck disable=SC2016,SC2001
set -uo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
check="$repo/scripts/check-deploy.sh"
tmp="$(mktemp -d /tmp/hpct-check-deploy.XXXXXX)"
trap 'rm -rf "$tmp"' EXIT
failures=0

if out="$("$check" 2>&1)"; then
  echo "ok   shipped recipes pass: $(echo "$out" | tail -1)"
else
  echo "FAIL shipped recipes: the checker refused them:"; echo "$out" | sed 's/^/    /'
  failures=$((failures + 1))
fi

n=0
names=() files=() wants=()
# brk NAME FILE PERL-SUBSTITUTION WANTED...: FILE relative to deploy/.
brk() {
  local name="$1" file="$2" subst="$3"
  shift 3
  n=$((n + 1))
  local dir="$tmp/case$n"
  mkdir -p "$dir/$(dirname "$file")"
  cp -r "$repo/deploy/$(dirname "$file")/." "$dir/$(dirname "$file")/"
  cp "$dir/$file" "$dir/$file.orig"
  perl -0pi -e "$subst" "$dir/$file"
  if cmp -s "$dir/$file" "$dir/$file.orig"; then
    echo "FAIL $name: the substitution changed nothing in $file (the test is stale)"
    failures=$((failures + 1))
  fi
  rm "$dir/$file.orig"
  names+=("$name") files+=("case$n/$file")
  local w joined=""
  for w in "$@"; do joined+="$w"$'\x1f'; done
  wants+=("$joined")
}

cfn=aws/hpctrain-cluster.yaml
brk "cfn short-form !Ref to no resource" $cfn 's/!Ref PrivateSubnet\]/!Ref PrivateSubnt]/' "'PrivateSubnt'" "names no parameter, resource"
brk "cfn !GetAtt of an attribute the type lacks" $cfn 's/!GetAtt Head.PublicIp/!GetAtt Head.PublicIP/' "Head.PublicIP" "has no attribute"
brk "cfn long-form Fn::GetAtt to no resource" $cfn 's/AllocationId: !GetAtt NatAddress.AllocationId/AllocationId: {"Fn::GetAtt": [NatAdress, AllocationId]}/' "NatAdress" "names no resource"
brk "cfn \${} in !Sub names an undeclared parameter" $cfn 's/\$\{KeyName\}\.pem/\${KeyNam}.pem/' "'KeyNam'" "Fn::Sub"
brk "cfn \${} in a multi-line !Sub user data" $cfn 's/-o \/tmp\/hpctrain.deb "\$\{PackageUrl\}"\n(\s+)apt-get install -y -q \/tmp\/hpctrain.deb\n(\s+)# One key/-o \/tmp\/hpctrain.deb "\${PackagURL}"\n$1apt-get install -y -q \/tmp\/hpctrain.deb\n$2# One key/' "'PackagURL'" "Resources.Head"
brk "cfn misspelt required property" $cfn 's/GroupDescription: hpctrain nodes/GroupDescripton: hpctrain nodes/' "requires property 'GroupDescription'"
brk "cfn misspelt nested property" $cfn 's/ImageId: !Ref ImageId\n(\s+)KeyName/ImageID: !Ref ImageId\n$1KeyName/' "LaunchTemplateData has no property 'ImageID'"
brk "cfn unused parameter" $cfn 's/^Parameters:\n/Parameters:\n  Unused:\n    Type: String\n/m' "'Unused' is never used"
brk "cfn !If naming no condition" $cfn 's/!If \[UseLustre, !Ref Lustre/!If [UseLustr, !Ref Lustre/' "'UseLustr'"
brk "cfn resource type outside the checked set" $cfn 's/Type: AWS::EC2::PlacementGroup/Type: AWS::EC2::PlacmentGroup/' "AWS::EC2::PlacmentGroup"
brk "cfn user data: a shell variable never set (shellcheck)" $cfn 's/case "\$key" in ssh-ed25519\*\) break/case "\$kye" in ssh-ed25519*) break/' "kye is referenced but not assigned" "NodeLaunchTemplate"
brk "yaml does not parse" $cfn 's/^Resources:\n/Resources:\n  Bad: [unclosed\n/m' "YAML does not parse"
brk "parallelcluster misspelt required key" aws/pcluster.yaml 's/SubnetId: subnet-PUBLIC/SubnetID: subnet-PUBLIC/' "'SubnetId' is a required property"

tf=gcp/main.tf
brk "terraform undeclared variable" $tf 's/var\.machine_type/var.machine_typ/' "'var.machine_typ'" "no declared variable"
brk "terraform reference to no resource" $tf 's/network\s*=\s*google_compute_network\.net\.id\n(\s+)region/network = google_compute_network.nett.id\n$1region/' "google_compute_network.nett.id" "no declared resource"
brk "terraform undeclared local" $tf 's/name\s+= local\.share_name/name = local.share_nam/' "'local.share_nam'"
brk "terraform misspelt required argument" $tf 's/machine_type(\s+)= var/machin_type$1= var/' "requires argument 'machine_type'"
brk "terraform does not parse" $tf 's/^resource "google_compute_router" "router" \{/resource "google_compute_router" "router" {{/m' "HCL does not parse"
brk "terraform startup script: a shell variable never set (shellcheck)" $tf 's/"root@\$host" true/"root@\$hots" true/' "hots is referenced but not assigned" "metadata_startup_script"
brk "terraform unused variable" gcp/variables.tf 's/^variable "project"/variable "unused_thing" {\n  type = string\n}\n\nvariable "project"/m' "'unused_thing' is never used"

brk "mpijob misspelt required key" k8s/mpijob.yaml 's/mpiReplicaSpecs:/mpiReplicaSpec:/' "'mpiReplicaSpecs' is a required property"
brk "mpijob value outside the schema's enum" k8s/mpijob.yaml 's/mpiImplementation: OpenMPI/mpiImplementation: OpenMpi/' "'OpenMpi' is not one of"
brk "mpijob \$(VAR) in args names no env variable" k8s/mpijob.yaml 's/"\$\(NP\)"/"\$(NPROC)"/' "\$(NPROC)"
brk "indexed job volumeMount names no volume" k8s/indexed-job.yaml 's/- name: job-secret\n(\s+)mountPath/- name: job-secrets\n$1mountPath/' "'job-secrets' names no volume"
brk "indexed job subdomain names no service" k8s/indexed-job.yaml 's/subdomain: hpctrain-cnn/subdomain: hpctrain-cn/' "'hpctrain-cn' names no Service"
brk "indexed job misspelt required key" k8s/indexed-job.yaml 's/restartPolicy: Never/restartPolcy: Never/' "'restartPolicy' is a required property"

brk "dockerfile COPY of a missing file" docker/Dockerfile 's/^COPY hpctrain_\*_amd64\.deb/COPY entrypoint.sh \/usr\/bin\/\nCOPY hpctrain_*_amd64.deb/m' "'entrypoint.sh' does not exist"
brk "dockerfile base image not Debian 12" docker/Dockerfile 's/^FROM debian:12/FROM ubuntu:22.04/m' "'ubuntu:22.04' is not Debian 12"

brk "sbatch unknown option" slurm/train.sbatch 's/#SBATCH --signal=/#SBATCH --signl=/' "'--signl'"
brk "sbatch undeclared shell variable (shellcheck)" slurm/train.sbatch 's/"\$ckpt_dir"/"\$ckpt_dirr"/' "ckpt_dirr is referenced but not assigned"

out="$("$check" "$tmp" 2>&1)"
rc=$?
if [ "$rc" -ne 1 ]; then
  echo "FAIL the broken copies: exit $rc, want 1"
  failures=$((failures + 1))
fi
for i in "${!names[@]}"; do
  line="$(echo "$out" | grep -F "$tmp/${files[$i]}:" || true)"
  IFS=$'\x1f' read -r -a ws <<< "${wants[$i]}"
  for w in "${ws[@]}"; do
    line="$(echo "$line" | grep -F -- "$w" || true)"
  done
  if [ -z "$line" ]; then
    echo "FAIL ${names[$i]}: no line names ${files[$i]} and [${ws[*]}]; its lines:"
    echo "$out" | grep -F "$tmp/${files[$i]}" | sed 's/^/    /'
    failures=$((failures + 1))
  else
    echo "ok   ${names[$i]}: ${line#"$tmp/"}" | head -1
  fi
done
echo "$(( ${#names[@]} + 1 - failures )) of $(( ${#names[@]} + 1 )) checks passed"
[ "$failures" -eq 0 ]

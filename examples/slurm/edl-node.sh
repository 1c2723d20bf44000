#!/bin/bash
# Runs edl-run on one node of an EDL allocation (started by edl-job.sbatch through srun): named
# after the Slurm node (--hostname = SLURMD_NODENAME, the name the discovery script prints), its
# workers listening on the node's Slurm address (EDL_BIND_ADDR = the node's NodeAddr unless set),
# its slots following the job's live nodes (--host-discovery-script edl-slurm-hosts). Every
# argument goes to edl-run.
set -euo pipefail
node=${SLURMD_NODENAME:?edl-node.sh runs under srun}
dir=$(cd "$(dirname "$0")" && pwd)
if [ -z "${EDL_BIND_ADDR:-}" ]; then
  addr=$(scontrol show node -o "$node" | tr ' ' '\n' | sed -n 's/^NodeAddr=//p')
  if ! [[ $addr =~ ^[0-9]+\.[0-9]+\.[0-9]+\.[0-9]+$ ]]; then
    addr=$(getent ahostsv4 "$addr" | awk 'NR == 1 { print $1 }')
  fi
  if [ -z "$addr" ]; then
    echo "edl-node.sh: cannot find the IPv4 address of node $node (set EDL_BIND_ADDR)" >&2
    exit 2
  fi
  export EDL_BIND_ADDR=$addr
fi
if [ -n "${EDL_JOB_SECRET_FILE:-}" ]; then
  EDL_JOB_SECRET=$(cat "$EDL_JOB_SECRET_FILE")
  export EDL_JOB_SECRET
fi
exec "${EDL_RUN:-edl-run}" --hostname "$node" --host-discovery-script "$dir/edl-slurm-hosts" "$@"
